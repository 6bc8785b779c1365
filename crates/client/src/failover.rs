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
#[path = "failover_tests.rs"]
mod tests;
