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
