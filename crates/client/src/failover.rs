//! Cross-region failover as a policy with capacity admission (SPEC G1, C4): pure.
//!
//! Callers use their own region's endpoints. When too few of them are eligible, a share of
//! traffic spills to the first failover region, in the policy's order, whose eligible
//! capacity can take it; never to one that cannot, never to one whose mirror is past its
//! stale budget, and never to "every region". Once spilling, traffic comes back only when
//! the local set is above its minimum by the recover margin (hysteresis), and a region
//! already taking the spill keeps it while it can (no flapping between regions).

use std::collections::HashSet;
use std::sync::Arc;

use muster_core::api::SnapshotReply;
use muster_core::federation::{
    Candidate, CandidateVerdict, FailoverDecision, FailoverPolicy, FailoverReason, MirrorState, SPILLED_FROM,
};
use muster_core::{Endpoint, InstanceId, Label};

/// What a set offers: counts and capacity (capacity hint, 1 when absent, × weight).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SetSummary {
    /// Endpoints that may get new work.
    pub eligible: u32,
    /// Endpoints in any state.
    pub total: u32,
    /// The capacity of the eligible ones.
    pub eligible_capacity: u64,
    /// The capacity of all of them: what the set offers when every endpoint serves.
    pub nominal_capacity: u64,
}

impl SetSummary {
    /// Sums a set; `ready` is eligible, `degraded` only when `accept_degraded`.
    pub fn of<'a>(endpoints: impl IntoIterator<Item = &'a Endpoint>, accept_degraded: bool) -> SetSummary {
        let mut summary = SetSummary::default();
        for endpoint in endpoints {
            // At most (2^32 − 1) × 65,535 each; sums saturate rather than wrap, since any
            // registrant picks these numbers.
            let capacity = u64::from(endpoint.capacity.unwrap_or(1)) * u64::from(endpoint.weight);
            summary.total = summary.total.saturating_add(1);
            summary.nominal_capacity = summary.nominal_capacity.saturating_add(capacity);
            if endpoint.serving.is_eligible(accept_degraded) {
                summary.eligible = summary.eligible.saturating_add(1);
                summary.eligible_capacity = summary.eligible_capacity.saturating_add(capacity);
            }
        }
        summary
    }
}

/// A failover region as the importing region holds it: `None` when nothing of the service
/// is mirrored from it.
pub type Mirrored = Option<(MirrorState, SetSummary)>;

/// Decides where a service's traffic goes now. `previous` is the last decision for the same
/// service (hysteresis and stickiness); `regions` gives each of the policy's failover
/// regions in order, as [`Mirrored`].
pub fn decide(
    policy: &FailoverPolicy,
    previous: Option<&FailoverDecision>,
    local: SetSummary,
    regions: &[(Label, Mirrored)],
) -> FailoverDecision {
    let by_percent = (u64::from(local.total) * u64::from(policy.min_eligible_percent)).div_ceil(100);
    // At least one: a policy whose minimum is a percentage still spills when the local set
    // is gone altogether (its total, and so the percentage, then being 0).
    let required = policy
        .min_eligible
        .max(u32::try_from(by_percent).unwrap_or(u32::MAX))
        .max(1);
    let spilling = previous.is_some_and(|p| p.spill);
    // Coming home needs the margin above the minimum, but never more endpoints than the set
    // has: a one-endpoint service that blipped must be able to return.
    let home = if spilling {
        required
            .saturating_add(policy.recover_margin)
            .min(local.total.max(required))
    } else {
        required
    };
    let mut decision = FailoverDecision {
        spill: false,
        region: None,
        share_percent: 0,
        reason: FailoverReason::LocalSufficient,
        local_eligible: local.eligible,
        local_total: local.total,
        required,
        spill_capacity: 0,
        candidates: Vec::new(),
    };
    if local.eligible >= home {
        return decision;
    }
    let (reason, share) = if local.eligible >= required {
        // Back at the minimum, not yet above it by the margin: the spill holds as it was.
        (FailoverReason::Recovering, previous.map_or(0, |p| p.share_percent))
    } else {
        let missing = u64::from(required - local.eligible);
        let share = (100 * missing).div_ceil(u64::from(required.max(1)));
        (FailoverReason::LocalBelowMinimum, share.min(100) as u8)
    };
    let share = share.min(policy.max_spill_percent);
    // Nothing local at all: a region must at least have something eligible.
    let spill_capacity = u64::try_from((u128::from(local.nominal_capacity) * u128::from(share)).div_ceil(100))
        .unwrap_or(u64::MAX)
        .max(1);
    let sticky = previous.and_then(|p| p.region.as_ref());
    let admissible = |mirrored: &Mirrored| match mirrored {
        None => CandidateVerdict::NotMirrored,
        Some((MirrorState::Unavailable, _)) => CandidateVerdict::Unavailable,
        Some((MirrorState::Available, s)) if s.eligible == 0 || s.eligible_capacity < spill_capacity => {
            CandidateVerdict::InsufficientCapacity
        }
        Some((MirrorState::Available, _)) => CandidateVerdict::Admitted,
    };
    let chosen = sticky
        .filter(|r| {
            regions
                .iter()
                .any(|(name, m)| name == *r && admissible(m) == CandidateVerdict::Admitted)
        })
        .or_else(|| {
            regions
                .iter()
                .find(|(_, m)| admissible(m) == CandidateVerdict::Admitted)
                .map(|(name, _)| name)
        })
        .cloned();
    decision.candidates = regions
        .iter()
        .map(|(name, mirrored)| Candidate {
            region: name.clone(),
            verdict: match admissible(mirrored) {
                CandidateVerdict::Admitted if chosen.as_ref() != Some(name) => CandidateVerdict::NotConsidered,
                verdict => verdict,
            },
            capacity: mirrored.map_or(0, |(_, s)| s.eligible_capacity),
        })
        .collect();
    decision.spill_capacity = spill_capacity;
    match chosen {
        Some(region) if share > 0 => {
            decision.spill = true;
            decision.region = Some(region);
            decision.share_percent = share;
            decision.reason = reason;
        }
        // The policy lets nothing leave (`max_spill_percent` 0): below the minimum, staying.
        Some(_) => decision.reason = reason,
        None => decision.reason = FailoverReason::NoRegionAdmitted,
    }
    decision
}

/// What a caller uses under a failover decision: its own region's endpoints, and, while the
/// decision spills, the admitted region's eligible endpoints as the failover tier.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tiers {
    /// The local set, as registered.
    pub local: Vec<Arc<Endpoint>>,
    /// The failover tier, while the decision spills.
    pub spill: Option<Spill>,
}

/// The failover tier: the admitted region's eligible endpoints, re-weighted so that they
/// take `share_percent` of new work beside the local set's eligible endpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spill {
    /// The region the traffic spills to.
    pub region: Label,
    /// The share of new work it takes.
    pub share_percent: u8,
    /// Its endpoints, each named `<region>-<instance>` (instance names recur across regions),
    /// its locality's region the region's federation name, labelled
    /// [`SPILLED_FROM`], its weight scaled to the share.
    pub endpoints: Vec<Arc<Endpoint>>,
}

impl Tiers {
    /// The tiers of `local` under `decision`: `mirrored` is the spill region's set (as its
    /// region holds it); ignored unless the decision spills.
    pub fn new<'a>(
        local: impl IntoIterator<Item = Arc<Endpoint>>,
        decision: Option<&FailoverDecision>,
        mirrored: impl IntoIterator<Item = &'a Endpoint>,
    ) -> Tiers {
        let local: Vec<Arc<Endpoint>> = local.into_iter().collect();
        let spill = decision
            .filter(|d| d.spill && d.share_percent > 0)
            .and_then(|d| Some((d.region.clone()?, d.share_percent)))
            .map(|(region, share_percent)| {
                let local_weight: u64 = local
                    .iter()
                    .filter(|e| e.serving.is_eligible(false))
                    .map(|e| u64::from(e.weight))
                    .sum();
                let eligible: Vec<&Endpoint> = mirrored.into_iter().filter(|e| e.serving.is_eligible(false)).collect();
                let remote_weight: u64 = eligible.iter().map(|e| u64::from(e.weight)).sum();
                let scale = spill_scale(local_weight, remote_weight, share_percent);
                // The tier stands at the local set's best failover tier (SRV priority, the
                // locality balancer's order): the decision already chose to use it.
                let priority = local
                    .iter()
                    .filter(|e| e.serving.is_eligible(false))
                    .map(|e| e.locality.priority)
                    .min()
                    .or_else(|| local.iter().map(|e| e.locality.priority).min())
                    .unwrap_or_default();
                let taken: HashSet<&InstanceId> = local.iter().map(|e| &e.instance).collect();
                let endpoints = eligible
                    .into_iter()
                    .map(|e| {
                        let mut endpoint = spilled(e, &region, scale, priority);
                        if taken.contains(&endpoint.instance) {
                            // A local instance already has the name: the hashed one.
                            endpoint.instance = hashed_name(&region, &e.instance);
                        }
                        Arc::new(endpoint)
                    })
                    .collect();
                Spill {
                    endpoints,
                    region,
                    share_percent,
                }
            });
        Tiers { local, spill }
    }

    /// The tiers of a federated read (`federation=true`): its endpoints, and the mirrored
    /// set its decision spills to.
    pub fn of(reply: &SnapshotReply) -> Tiers {
        let decision = reply.failover.as_ref();
        let mirrored = decision
            .and_then(|d| d.region.as_ref())
            .and_then(|region| reply.mirrors.iter().find(|m| m.source_region == *region))
            .map(|m| m.endpoints.as_slice())
            .unwrap_or_default();
        Tiers::new(reply.endpoints.iter().cloned().map(Arc::new), decision, mirrored)
    }

    /// Every endpoint of both tiers: what a balancer picks from.
    pub fn endpoints(&self) -> impl Iterator<Item = &Arc<Endpoint>> {
        self.local
            .iter()
            .chain(self.spill.iter().flat_map(|spill| &spill.endpoints))
    }
}

/// (The start of) the region and a hash of the instance: 46 + 1 + 16 characters at most.
fn hashed_name(region: &Label, instance: &InstanceId) -> InstanceId {
    let hash = xxhash_rust::xxh3::xxh3_64(instance.as_str().as_bytes());
    let region = &region.as_str()[..region.as_str().len().min(46)];
    InstanceId::new(&format!("{region}-{hash:016x}")).expect("at most 63 label characters")
}

/// The factor (numerator, denominator) that makes the spilled endpoints' weights take
/// `share` percent of all eligible weight: remote × f = local × share / (100 − share). The
/// remote weights stand as they are when nothing local is eligible (or all traffic leaves).
/// Weights are clamped to 1..=65535, so an extreme ratio is met only approximately.
fn spill_scale(local_weight: u64, remote_weight: u64, share: u8) -> (u64, u64) {
    if local_weight == 0 || remote_weight == 0 || share >= 100 {
        return (1, 1);
    }
    (
        local_weight.saturating_mul(u64::from(share)),
        remote_weight.saturating_mul(u64::from(100 - share)),
    )
}

/// `endpoint` of `region` as a member of the local region's failover tier, at `priority`.
fn spilled(endpoint: &Endpoint, region: &Label, (numerator, denominator): (u64, u64), priority: u8) -> Endpoint {
    let mut spilled = endpoint.clone();
    let name = format!("{region}-{}", endpoint.instance);
    // Past a DNS label's 63 characters: the hashed name.
    spilled.instance = InstanceId::new(&name).unwrap_or_else(|_| hashed_name(region, &endpoint.instance));
    spilled.locality.region = Some(region.clone());
    spilled.locality.priority = priority;
    spilled.labels = endpoint.labels.with(SPILLED_FROM, region.as_str());
    let weight = (u128::from(endpoint.weight) * u128::from(numerator)).div_ceil(u128::from(denominator.max(1)));
    spilled.weight = u16::try_from(weight.clamp(1, u128::from(u16::MAX))).unwrap_or(u16::MAX);
    spilled
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> FailoverPolicy {
        FailoverPolicy {
            service: "prod/api".into(),
            failover: vec![label("a"), label("c")],
            min_eligible: 2,
            min_eligible_percent: 0,
            max_spill_percent: 100,
            recover_margin: 1,
        }
    }

    fn label(name: &str) -> Label {
        Label::new("region", name).unwrap()
    }

    fn set(eligible: u32, total: u32, capacity_each: u64) -> SetSummary {
        SetSummary {
            eligible,
            total,
            eligible_capacity: u64::from(eligible) * capacity_each,
            nominal_capacity: u64::from(total) * capacity_each,
        }
    }

    fn available(summary: SetSummary) -> Mirrored {
        Some((MirrorState::Available, summary))
    }

    #[test]
    fn enough_local_endpoints_spill_nothing() {
        let d = decide(
            &policy(),
            None,
            set(3, 3, 100),
            &[(label("a"), available(set(9, 9, 100)))],
        );
        assert!(!d.spill);
        assert_eq!(d.reason, FailoverReason::LocalSufficient);
    }

    #[test]
    fn below_the_minimum_spills_to_the_first_region_with_capacity_not_to_one_without() {
        let regions = [
            (label("a"), available(set(1, 1, 100))),
            (label("c"), available(set(8, 8, 100))),
        ];
        // 1 of 4 eligible, 2 required: half the traffic (200 of 400 units) must go.
        let d = decide(&policy(), None, set(1, 4, 100), &regions);
        assert!(d.spill);
        assert_eq!(d.region, Some(label("c")));
        assert_eq!((d.share_percent, d.spill_capacity), (50, 200));
        assert_eq!(d.candidates[0].verdict, CandidateVerdict::InsufficientCapacity);
        assert_eq!(d.candidates[1].verdict, CandidateVerdict::Admitted);
    }

    #[test]
    fn an_unavailable_or_unmirrored_region_is_never_chosen() {
        let regions = [
            (label("a"), Some((MirrorState::Unavailable, set(9, 9, 100)))),
            (label("c"), None),
        ];
        let d = decide(&policy(), None, set(0, 4, 100), &regions);
        assert!(!d.spill);
        assert_eq!(d.reason, FailoverReason::NoRegionAdmitted);
        let verdicts: Vec<_> = d.candidates.iter().map(|c| c.verdict).collect();
        assert_eq!(verdicts, [CandidateVerdict::Unavailable, CandidateVerdict::NotMirrored]);
    }

    #[test]
    fn recovery_waits_for_the_margin_then_moves_traffic_back() {
        let regions = [(label("a"), available(set(9, 9, 100)))];
        let spilled = decide(&policy(), None, set(1, 4, 100), &regions);
        assert!(spilled.spill);
        // Back at the minimum of 2: held (hysteresis), not flapping back.
        let held = decide(&policy(), Some(&spilled), set(2, 4, 100), &regions);
        assert!(held.spill);
        assert_eq!(held.reason, FailoverReason::Recovering);
        assert_eq!(held.share_percent, spilled.share_percent);
        // Minimum plus the margin: traffic comes home.
        let home = decide(&policy(), Some(&held), set(3, 4, 100), &regions);
        assert!(!home.spill);
        assert_eq!(home.reason, FailoverReason::LocalSufficient);
        // Without a previous spill, 2 eligible was already enough.
        assert!(!decide(&policy(), None, set(2, 4, 100), &regions).spill);
    }

    #[test]
    fn a_region_taking_the_spill_keeps_it_while_it_can() {
        let both = [
            (label("a"), available(set(9, 9, 100))),
            (label("c"), available(set(9, 9, 100))),
        ];
        let only_c = [(label("a"), available(set(0, 9, 100))), both[1].clone()];
        let to_c = decide(&policy(), None, set(0, 4, 100), &only_c);
        assert_eq!(to_c.region, Some(label("c")));
        // `a` can take it again, but `c` already does: no move.
        let still_c = decide(&policy(), Some(&to_c), set(0, 4, 100), &both);
        assert_eq!(still_c.region, Some(label("c")));
    }

    #[test]
    fn a_one_endpoint_service_comes_home_once_its_endpoint_serves_again() {
        let mut single = policy();
        single.min_eligible = 1;
        let regions = [(label("a"), available(set(9, 9, 100)))];
        let spilled = decide(&single, None, set(0, 1, 100), &regions);
        assert!(spilled.spill);
        // Minimum 1 plus the margin would ask for 2 of a set of 1: capped at the set.
        let home = decide(&single, Some(&spilled), set(1, 1, 100), &regions);
        assert_eq!((home.spill, home.reason), (false, FailoverReason::LocalSufficient));
    }

    #[test]
    fn a_percentage_policy_spills_when_the_local_set_is_gone() {
        let mut by_percent = policy();
        (by_percent.min_eligible, by_percent.min_eligible_percent) = (0, 50);
        let d = decide(
            &by_percent,
            None,
            SetSummary::default(),
            &[(label("a"), available(set(1, 1, 1)))],
        );
        assert_eq!((d.spill, d.required, d.share_percent), (true, 1, 100));
    }

    #[test]
    fn a_policy_that_lets_nothing_leave_says_the_local_set_is_short_and_stays() {
        let mut none = policy();
        none.max_spill_percent = 0;
        let d = decide(&none, None, set(0, 4, 100), &[(label("a"), available(set(9, 9, 100)))]);
        assert_eq!((d.spill, d.reason), (false, FailoverReason::LocalBelowMinimum));
    }

    #[test]
    fn huge_capacities_saturate_instead_of_wrapping() {
        let big = SetSummary {
            eligible: 0,
            total: 1,
            eligible_capacity: 0,
            nominal_capacity: u64::MAX,
        };
        let d = decide(&policy(), None, big, &[(label("a"), available(set(9, 9, 100)))]);
        assert_eq!(d.spill_capacity, u64::MAX);
        assert_eq!(d.candidates[0].verdict, CandidateVerdict::InsufficientCapacity);
    }

    #[test]
    fn the_spill_is_capped_by_the_policy() {
        let mut capped = policy();
        capped.max_spill_percent = 30;
        let d = decide(
            &capped,
            None,
            set(0, 4, 100),
            &[(label("a"), available(set(9, 9, 100)))],
        );
        assert_eq!((d.spill, d.share_percent, d.spill_capacity), (true, 30, 120));
    }

    fn endpoint(instance: &str, serving: &str, weight: u16) -> Endpoint {
        serde_json::from_value(serde_json::json!({
            "instance": instance, "incarnation": 1, "addresses": [{"ip": "10.0.0.1"}], "ports": [],
            "locality": {}, "serving": serving, "weight": weight, "labels": {}, "revision": 1,
            "provenance": {"registrar": "anonymous", "policy_revision": 0},
            "observation": {"actor": "app", "principal": "anonymous", "at_ms": 0, "reason": ""}
        }))
        .unwrap()
    }

    fn spilling(share_percent: u8) -> FailoverDecision {
        FailoverDecision {
            spill: true,
            region: Some(label("a")),
            share_percent,
            reason: FailoverReason::LocalBelowMinimum,
            local_eligible: 1,
            local_total: 4,
            required: 2,
            spill_capacity: 0,
            candidates: Vec::new(),
        }
    }

    #[test]
    fn the_spill_tier_takes_its_share_of_the_weight_and_only_eligible_endpoints() {
        let local = [endpoint("api-0", "ready", 100), endpoint("api-1", "not_serving", 100)].map(Arc::new);
        let remote = [
            endpoint("api-0", "ready", 100),
            endpoint("api-1", "ready", 100),
            endpoint("api-2", "draining", 100),
        ];
        let tiers = Tiers::new(local.clone(), Some(&spilling(75)), &remote);
        let spill = tiers.spill.as_ref().unwrap();
        let names: Vec<&str> = spill.endpoints.iter().map(|e| e.instance.as_str()).collect();
        assert_eq!(names, ["a-api-0", "a-api-1"]);
        // 75% of the eligible weight: 300 of 400, beside the local 100.
        assert_eq!(spill.endpoints.iter().map(|e| e.weight).sum::<u16>(), 300);
        assert!(spill.endpoints.iter().all(|e| e.locality.region == Some(label("a"))));
        assert!(spill.endpoints.iter().all(|e| e.labels.get(SPILLED_FROM) == Some("a")));
        assert_eq!(tiers.endpoints().count(), 4);
        // Nothing local eligible: the remote weights stand as they are.
        let gone = Tiers::new([Arc::clone(&local[1])], Some(&spilling(100)), &remote);
        assert!(gone.spill.unwrap().endpoints.iter().all(|e| e.weight == 100));
    }

    #[test]
    fn without_a_spill_the_tiers_are_the_local_set() {
        let local = [endpoint("api-0", "ready", 100)].map(Arc::new);
        let remote = [endpoint("api-0", "ready", 100)];
        let mut staying = spilling(50);
        staying.spill = false;
        for decision in [None, Some(&staying)] {
            let tiers = Tiers::new(local.clone(), decision, &remote);
            assert_eq!((tiers.spill, tiers.local.len()), (None, 1));
        }
    }

    #[test]
    fn a_name_a_local_instance_holds_is_hashed_and_the_tier_takes_the_local_priority() {
        let mut local = endpoint("a-api-0", "ready", 100);
        local.locality.priority = 2;
        let mut remote = endpoint("api-0", "ready", 100);
        remote.locality.priority = 7;
        let tiers = Tiers::new([Arc::new(local)], Some(&spilling(50)), &[remote]);
        let spilled = &tiers.spill.unwrap().endpoints[0];
        assert_ne!(spilled.instance.as_str(), "a-api-0");
        assert_eq!(spilled.instance.as_str().len(), 18);
        assert_eq!(spilled.locality.priority, 2);
    }

    #[test]
    fn a_long_instance_name_is_hashed_into_one_label() {
        let long = "i".repeat(63);
        let tiers = Tiers::new([], Some(&spilling(100)), &[endpoint(&long, "ready", 1)]);
        let name = tiers.spill.unwrap().endpoints[0].instance.to_string();
        assert!(name.starts_with("a-") && name.len() == 18, "{name}");
    }

    #[test]
    fn a_federated_read_gives_its_tiers() {
        let reply: SnapshotReply = serde_json::from_value(serde_json::json!({
            "revision": 9, "service_revision": 9, "digest": "0000000000000000", "total": 1,
            "endpoints": [endpoint("api-0", "ready", 100)],
            "mirrors": [{
                "source_region": "a", "import": "prod/*", "source_revision": 4, "digest": "0000000000000000",
                "cursor": 4, "age_ms": 10, "state": "available", "total": 1, "eligible": 1, "capacity": 100,
                "endpoints": [endpoint("api-0", "ready", 100)]
            }],
            "failover": spilling(50),
        }))
        .unwrap();
        let tiers = Tiers::of(&reply);
        let spill = tiers.spill.unwrap();
        assert_eq!((spill.region, spill.share_percent), (label("a"), 50));
        assert_eq!(spill.endpoints[0].weight, 100);
    }
}
