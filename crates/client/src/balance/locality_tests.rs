use muster_core::ServingState::{NotServing, Ready};

use super::*;
use crate::balance::EligibilityConfig;
use crate::balance::fixtures::{Fixture, picks, rng, set_of};

fn label(text: &str) -> Label {
    Label::new("locality", text).unwrap()
}

/// A caller in region `eu`, zone `eu-a`, spilling below `threshold`.
fn caller(threshold: f64) -> LocalityConfig {
    LocalityConfig {
        region: Some(label("eu")),
        zone: Some(label("eu-a")),
        spillover_threshold: Fraction::new(threshold).unwrap(),
        ..LocalityConfig::default()
    }
}

/// `ready` eligible and `down` not-serving endpoints in `region`/`zone` at `priority`,
/// numbered from `first`.
fn group(first: u32, region: &str, zone: &str, priority: u8, ready: u32, down: u32) -> Vec<Arc<Member>> {
    (first..first + ready + down)
        .map(|n| {
            let state = if n < first + ready { Ready } else { NotServing };
            Fixture::ready(n)
                .zone(region, zone)
                .priority(priority)
                .serving(state)
                .build()
        })
        .collect()
}

fn tier(priority: u8, proximity: Proximity) -> Tier {
    Tier { priority, proximity }
}

/// The share of `count` picks whose endpoint is in `zone`.
fn share_in_zone(picks: &[Pick], zone: &str) -> f64 {
    let hits = picks
        .iter()
        .filter(|pick| pick.endpoint.locality.zone.as_ref().map(Label::as_str) == Some(zone))
        .count();
    hits as f64 / picks.len() as f64
}

#[test]
fn a_healthy_local_zone_takes_all_the_traffic() {
    let endpoints = [group(0, "eu", "eu-a", 0, 5, 0), group(100, "eu", "eu-b", 0, 5, 0)].concat();
    let mut balancer = LocalityAware::new(&set_of(endpoints), &caller(0.7));
    let all = picks(&mut balancer, 1, 10_000);
    assert_eq!(share_in_zone(&all, "eu-a"), 1.0);
    assert!(all.iter().all(|pick| pick.reason == PickReason::Normal));
    // Within the zone, every endpoint gets its share of the weight.
    let counts = crate::balance::fixtures::tally(all);
    assert_eq!(counts.len(), 5);
    assert!(counts.values().all(|&n| (1_700..=2_300).contains(&n)), "{counts:?}");
}

#[test]
fn below_the_threshold_the_stated_fraction_spills_to_the_region() {
    // Threshold 0.8, local zone 4 of 10 eligible: health 0.4 keeps 0.4 / 0.8 = 50% local.
    let endpoints = [group(0, "eu", "eu-a", 0, 4, 6), group(100, "eu", "eu-b", 0, 10, 0)].concat();
    let mut balancer = LocalityAware::new(&set_of(endpoints), &caller(0.8));
    let all = picks(&mut balancer, 2, 100_000);
    let local = share_in_zone(&all, "eu-a");
    assert!((local - 0.5).abs() <= 0.01, "local share {local}");
    for pick in &all {
        assert_eq!(pick.endpoint.serving, Ready, "only eligible endpoints outside a panic");
        let expected = if pick.endpoint.locality.zone == Some(label("eu-a")) {
            PickReason::Normal
        } else {
            PickReason::Spillover(tier(0, Proximity::SameRegion))
        };
        assert_eq!(pick.reason, expected);
    }
}

#[test]
fn spillover_cascades_and_scales_up_when_every_tier_is_short() {
    // Threshold 0.5. Zone: 1 of 4 (capacity 0.5). Region: 1 of 4 (capacity 0.5, takes the
    // remaining 0.5). Other region unused.
    let cascade = [
        group(0, "eu", "eu-a", 0, 1, 3),
        group(100, "eu", "eu-b", 0, 1, 3),
        group(200, "us", "us-a", 0, 8, 0),
    ]
    .concat();
    let shares: Vec<_> = LocalityAware::new(&set_of(cascade), &caller(0.5)).shares().collect();
    assert_eq!(
        shares,
        [
            (Some(tier(0, Proximity::SameZone)), 0.5),
            (Some(tier(0, Proximity::SameRegion)), 0.5)
        ]
    );
    // Every tier short (zone 1 of 4 → 0.25, region 1 of 4 → 0.25): the 0.5 there is, scaled
    // to 1 in the same proportions.
    let short = [group(0, "eu", "eu-a", 0, 1, 3), group(100, "eu", "eu-b", 0, 1, 3)].concat();
    let config = EligibilityConfig {
        panic_threshold: Fraction::ZERO,
        ..EligibilityConfig::default()
    };
    let set = crate::balance::fixtures::set_with(short, &config);
    let shares: Vec<_> = LocalityAware::new(&set, &caller(1.0)).shares().collect();
    assert_eq!(
        shares,
        [
            (Some(tier(0, Proximity::SameZone)), 0.5),
            (Some(tier(0, Proximity::SameRegion)), 0.5)
        ]
    );
}

#[test]
fn failover_priority_outranks_nearness() {
    // A healthy priority-0 tier in another region beats a priority-1 backup in the local zone;
    // the backup takes over only when priority 0 cannot serve.
    let primary = group(0, "us", "us-a", 0, 4, 0);
    let backup = group(100, "eu", "eu-a", 1, 4, 0);
    let mut balancer = LocalityAware::new(&set_of([primary.clone(), backup.clone()].concat()), &caller(0.7));
    assert_eq!(share_in_zone(&picks(&mut balancer, 3, 1_000), "us-a"), 1.0);
    // Priority 0 half down: 0.5 / 0.7 of the traffic stays, the rest fails over.
    let half_down = group(0, "us", "us-a", 0, 2, 2);
    let mut balancer = LocalityAware::new(&set_of([half_down, backup].concat()), &caller(0.7));
    let all = picks(&mut balancer, 4, 100_000);
    let primary_share = share_in_zone(&all, "us-a");
    assert!(
        (primary_share - 0.5 / 0.7).abs() <= 0.01,
        "primary share {primary_share}"
    );
    assert!(
        all.iter()
            .any(|p| p.reason == PickReason::Spillover(tier(1, Proximity::SameZone)))
    );
}

#[test]
fn a_same_region_policy_never_fails_over_across_regions() {
    // Local region all down, other region healthy (so the set as a whole is not in panic).
    let endpoints = [group(0, "eu", "eu-a", 0, 0, 2), group(100, "us", "us-a", 0, 8, 0)].concat();
    let config = LocalityConfig {
        farthest: Proximity::SameRegion,
        ..caller(0.7)
    };
    let balancer = LocalityAware::new(&set_of(endpoints.clone()), &config);
    assert!(balancer.pick(&mut rng(5)).is_none());
    // With cross-region failover allowed, the other region takes it all.
    let balancer = LocalityAware::new(&set_of(endpoints), &caller(0.7));
    let pick = balancer.pick(&mut rng(5)).unwrap();
    assert_eq!(pick.reason, PickReason::Spillover(tier(0, Proximity::OtherRegion)));
}

#[test]
fn in_a_panic_picks_ignore_tiers_and_spread_over_all_known() {
    // 3 of 10 eligible, below the default 50% panic threshold.
    let endpoints = [group(0, "eu", "eu-a", 0, 3, 2), group(100, "eu", "eu-b", 0, 0, 5)].concat();
    let mut balancer = LocalityAware::new(&set_of(endpoints), &caller(0.7));
    let all = picks(&mut balancer, 6, 100_000);
    assert!(all.iter().all(|pick| pick.reason == PickReason::Panic));
    let remote = share_in_zone(&all, "eu-b");
    assert!((remote - 0.5).abs() <= 0.01, "remote share {remote}");
    let not_serving = all.iter().filter(|p| p.endpoint.serving == NotServing).count() as f64 / 100_000.0;
    assert!((not_serving - 0.7).abs() <= 0.01, "not-serving share {not_serving}");
}

#[test]
fn a_caller_and_endpoints_without_locality_share_one_tier() {
    let endpoints = crate::balance::fixtures::ready(4);
    let balancer = LocalityAware::new(&set_of(endpoints), &LocalityConfig::default());
    assert_eq!(
        balancer.shares().collect::<Vec<_>>(),
        [(Some(tier(0, Proximity::SameZone)), 1.0)]
    );
}
