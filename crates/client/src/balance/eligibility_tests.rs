use muster_core::ServingState::{Degraded, Draining, NotServing, Ready, Starting, Unknown};

use super::*;
use crate::balance::fixtures::{Fixture, REVISION, picks, ready, rng, set_of, set_with, tally};
use crate::balance::{Balancer, RoundRobin};
use crate::eject::{EjectionConfig, FailureOutcome};

fn scope(text: &str) -> Label {
    Label::new("scope", text).unwrap()
}

#[test]
fn only_ready_and_accepted_degraded_endpoints_are_eligible() {
    let strict = EligibilityConfig::default();
    let lenient = EligibilityConfig {
        accept_degraded: true,
        ..EligibilityConfig::default()
    };
    let unhealthy = |state| Standing::Unhealthy(Unhealthy::Serving(state));
    let excluded = |state| Standing::Excluded(Excluded::Serving(state));
    // (state, standing for a strict caller, standing for one that accepts degraded)
    let expected = [
        (Ready, Standing::Eligible, Standing::Eligible),
        (Degraded, unhealthy(Degraded), Standing::Eligible),
        (NotServing, unhealthy(NotServing), unhealthy(NotServing)),
        (Unknown, unhealthy(Unknown), unhealthy(Unknown)),
        (Starting, excluded(Starting), excluded(Starting)),
        (Draining, excluded(Draining), excluded(Draining)),
    ];
    for (state, when_strict, when_lenient) in expected {
        let endpoint = Fixture::ready(0).serving(state).build();
        assert_eq!(strict.standing(&endpoint, false), when_strict, "{state:?}");
        assert_eq!(
            lenient.standing(&endpoint, false),
            when_lenient,
            "{state:?}, degraded accepted"
        );
    }
}

#[test]
fn a_draining_endpoint_leaves_the_set_the_moment_the_view_says_so() {
    let mut endpoints = ready(4);
    assert_eq!(set_of(endpoints.clone()).eligible().len(), 4);
    endpoints[2] = Fixture::ready(2).serving(Draining).build();
    let set = set_of(endpoints);
    assert_eq!(set.eligible().len(), 3);
    assert_eq!(set.known().len(), 3, "draining is not even a panic candidate");
    assert!(set.known().iter().all(|e| e.instance.as_str() != "ep-0002"));
}

#[test]
fn scoped_addresses_are_reachable_only_from_listed_scopes_and_any_address_suffices() {
    let config = EligibilityConfig {
        reachable_scopes: vec![scope("vpc-7")],
        ..EligibilityConfig::default()
    };
    let unscoped = Fixture::ready(0).build();
    let listed = Fixture::ready(1).scopes(&[Some("vpc-7")]).build();
    let unlisted = Fixture::ready(2).scopes(&[Some("lan")]).build();
    let mixed = Fixture::ready(3).scopes(&[Some("lan"), Some("vpc-7"), None]).build();
    assert_eq!(config.standing(&unscoped, false), Standing::Eligible);
    assert_eq!(config.standing(&listed, false), Standing::Eligible);
    assert_eq!(
        config.standing(&unlisted, false),
        Standing::Excluded(Excluded::Unreachable)
    );
    assert_eq!(config.standing(&mixed, false), Standing::Eligible);
    // Dial the first address this caller can reach, never the unreachable `lan` one.
    assert_eq!(config.reachable_address(&mixed).unwrap().scope, Some(scope("vpc-7")));
    assert_eq!(config.reachable_address(&unlisted), None);
    // Unreachable endpoints are not known: they never count toward, or get picked in, a panic.
    let set = set_with([unscoped, unlisted], &config);
    assert_eq!(set.known().len(), 1);
}

#[test]
fn a_locally_ejected_endpoint_is_not_eligible_until_its_ejection_ends() {
    let endpoints = ready(4);
    let mut detector = OutlierDetector::new(EjectionConfig::default()).unwrap();
    let outcome = (0..5)
        .map(|_| detector.record_failure(&endpoints[1], endpoints.len(), 1_000))
        .last()
        .unwrap();
    let FailureOutcome::Ejected(ejection) = outcome else {
        panic!("not ejected: {outcome:?}");
    };
    let config = EligibilityConfig::default();
    let during = EligibleSet::build(REVISION, &endpoints, &config, &detector, 1_001);
    assert_eq!(during.eligible().len(), 3);
    assert!(!during.eligible().contains(&endpoints[1]));
    assert_eq!(during.known().len(), 4, "an ejected endpoint is still known");
    assert_eq!(
        config.standing(&endpoints[1], true),
        Standing::Unhealthy(Unhealthy::Ejected)
    );
    let after = EligibleSet::build(REVISION, &endpoints, &config, &detector, ejection.until_ms);
    assert_eq!(after.eligible().len(), 4);
}

#[test]
fn below_the_panic_threshold_picks_spread_over_all_known_and_say_panic() {
    // 4 of 10 eligible is below the default 50%.
    let endpoints: Vec<_> = (0..10)
        .map(|n| Fixture::ready(n).serving(if n < 4 { Ready } else { Unknown }).build())
        .collect();
    let set = set_of(endpoints.clone());
    assert_eq!(set.mode(), SetMode::Panic);
    assert_eq!(set.routable().len(), 10);
    let all = picks(&mut RoundRobin::new(&set, &mut rng(1)), 0, 1_000);
    assert!(all.iter().all(|pick| pick.reason == PickReason::Panic));
    let counts = tally(all);
    assert_eq!(counts.len(), 10, "{counts:?}");
    assert!(counts.values().all(|&count| count == 100));
    // Exactly at the threshold is not a panic: 5 of 10 still trust the evidence.
    let mut half = endpoints;
    half[4] = Fixture::ready(4).build();
    let set = set_of(half);
    assert_eq!(set.mode(), SetMode::Normal);
    assert_eq!(set.routable().len(), 5);
    assert!(
        picks(&mut RoundRobin::new(&set, &mut rng(1)), 0, 10)
            .iter()
            .all(|pick| pick.reason == PickReason::Normal && pick.endpoint.serving == Ready)
    );
}

#[test]
fn a_rolling_deploy_does_not_trip_the_panic_threshold() {
    // 3 ready, 6 draining, 6 starting: neither draining nor starting is health evidence.
    let endpoints = (0..15).map(|n| {
        let state = match n {
            0..3 => Ready,
            3..9 => Draining,
            _ => Starting,
        };
        Fixture::ready(n).serving(state).build()
    });
    let set = set_of(endpoints);
    assert_eq!(set.mode(), SetMode::Normal);
    assert_eq!(set.healthy_fraction(), 1.0);
}

#[test]
fn a_zero_panic_threshold_never_fails_open() {
    let config = EligibilityConfig {
        panic_threshold: Fraction::ZERO,
        ..EligibilityConfig::default()
    };
    let set = set_with((0..3).map(|n| Fixture::ready(n).serving(NotServing).build()), &config);
    assert_eq!(set.mode(), SetMode::Normal);
    assert!(RoundRobin::new(&set, &mut rng(0)).pick(&mut rng(0)).is_none());
}

#[test]
fn the_set_is_ordered_by_identity_whatever_order_the_view_lists() {
    let mut endpoints = ready(6);
    let forward = set_of(endpoints.clone());
    endpoints.reverse();
    let backward = set_of(endpoints);
    assert_eq!(forward.known(), backward.known());
    assert_eq!(forward.revision(), REVISION);
}
