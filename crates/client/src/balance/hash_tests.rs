use std::collections::BTreeMap;

use muster_core::ServingState;

use super::*;
use crate::balance::fixtures::{Fixture, ready, rng, set_of};

fn ring(endpoints: impl IntoIterator<Item = Arc<Member>>) -> HashRing {
    HashRing::new(&set_of(endpoints), &HashRingConfig::default()).unwrap()
}

fn owners(ring: &HashRing, keys: std::ops::Range<u64>) -> Vec<String> {
    keys.map(|key| ring.pick_u64(key).unwrap().endpoint.instance.to_string())
        .collect()
}

#[test]
fn removing_one_of_100_endpoints_moves_only_its_own_keys_about_1_percent() {
    let endpoints = ready(100);
    let before = owners(&ring(endpoints.clone()), 0..10_000);
    let removed = endpoints[37].instance.to_string();
    let without: Vec<_> = endpoints
        .iter()
        .filter(|e| e.instance.as_str() != removed)
        .cloned()
        .collect();
    let after = owners(&ring(without), 0..10_000);
    let moved: Vec<usize> = (0..10_000).filter(|&key| before[key] != after[key]).collect();
    assert!(!moved.is_empty(), "the removed endpoint owned no keys at all");
    assert!(moved.len() <= 200, "{} of 10,000 keys moved (limit 2%)", moved.len());
    for key in moved {
        assert_eq!(
            before[key], removed,
            "key {key} moved but was not on the removed endpoint"
        );
    }
}

#[test]
fn an_endpoint_that_comes_back_gets_exactly_its_keys_back() {
    let endpoints = ready(20);
    let before = owners(&ring(endpoints.clone()), 0..5_000);
    // Unhealthy for a while: its keys move to their next owners.
    let mut degraded = endpoints.clone();
    degraded[4] = Fixture::ready(4).serving(ServingState::NotServing).build();
    assert_ne!(owners(&ring(degraded), 0..5_000), before);
    // Back, even as a new incarnation of the same instance: the same keys as before.
    let mut restarted = endpoints;
    restarted[4] = Fixture::ready(4).incarnation(2).build();
    assert_eq!(owners(&ring(restarted), 0..5_000), before);
}

#[test]
fn keys_spread_evenly_and_in_proportion_to_weight() {
    let mut endpoints = ready(10);
    endpoints[0] = Fixture::ready(0).weight(200).build();
    let ring = ring(endpoints);
    assert_eq!(
        ring.points(),
        9 * 50 + 100,
        "the heaviest gets 100 points, weight 100 gets 50"
    );
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for key in 0..110_000 {
        *counts
            .entry(ring.pick_u64(key).unwrap().endpoint.instance.to_string())
            .or_default() += 1;
    }
    // Fair shares: 20,000 for the weight-200 endpoint, 10,000 for each other. With 50 points
    // each, a share varies by about 1/sqrt(50) = 14%; allow 40%.
    for (instance, count) in counts {
        let fair = if instance == "ep-0000" { 20_000.0 } else { 10_000.0 };
        let ratio = count as f64 / fair;
        assert!(
            (0.6..=1.4).contains(&ratio),
            "{instance}: {count} keys, {ratio:.2} of fair"
        );
    }
}

#[test]
fn numeric_keys_hash_as_their_little_endian_bytes() {
    let ring = ring(ready(30));
    for key in [0_u64, 1, 42, u64::MAX, 0xdead_beef] {
        assert_eq!(ring.pick_u64(key), ring.pick_bytes(&key.to_le_bytes()));
    }
}

#[test]
fn the_directory_finds_the_same_owner_as_a_search_of_the_whole_ring() {
    let ring = ring(ready(50));
    let naive = |hash: u64| {
        let point = ring.positions.partition_point(|&position| position < hash);
        ring.owners[if point == ring.positions.len() { 0 } else { point }] as usize
    };
    let mut draw = rng(4);
    let edges = [
        0,
        1,
        u64::MAX,
        u64::MAX - 1,
        ring.positions[0],
        *ring.positions.last().unwrap(),
    ];
    let random = (0..20_000).map(|_| rand_core::RngCore::next_u64(&mut draw));
    for hash in edges.into_iter().chain(random) {
        assert_eq!(ring.owner_of(hash), Some(naive(hash)), "hash {hash:#x}");
    }
}

#[test]
fn an_empty_ring_picks_nothing_and_zero_vnodes_is_refused() {
    assert!(ring([]).pick_u64(7).is_none());
    let err = HashRing::new(&set_of(ready(3)), &HashRingConfig { vnodes_per_endpoint: 0 }).unwrap_err();
    assert_eq!(err.code(), "zero_not_allowed");
}
