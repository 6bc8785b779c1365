use std::sync::Arc;

use super::*;
use crate::balance::fixtures::{Fixture, picks, rng, set_of, tally};
use crate::member::Member;

fn weighted(weights: &[u16]) -> Vec<Arc<Member>> {
    weights
        .iter()
        .enumerate()
        .map(|(n, &weight)| Fixture::ready(n as u32).weight(weight).build())
        .collect()
}

/// nginx's `ngx_http_upstream_get_peer`, literally: O(n) per pick.
fn nginx_reference(weights: &[i64], picks: usize) -> Vec<usize> {
    let total: i64 = weights.iter().sum();
    let mut current = vec![0_i64; weights.len()];
    (0..picks)
        .map(|_| {
            let mut best = 0;
            for (i, weight) in weights.iter().enumerate() {
                current[i] += weight;
                if current[i] > current[best] {
                    best = i;
                }
            }
            current[best] -= total;
            best
        })
        .collect()
}

#[test]
fn weights_1_2_7_get_10_20_70_percent_of_100k_picks_within_1_point() {
    let set = set_of(weighted(&[1, 2, 7]));
    let counts = tally(picks(&mut SmoothWeighted::new(&set, &mut rng(3)), 0, 100_000));
    for (instance, expected) in [("ep-0000", 0.10), ("ep-0001", 0.20), ("ep-0002", 0.70)] {
        let share = counts[instance] as f64 / 100_000.0;
        assert!((share - expected).abs() <= 0.01, "{instance}: {share} vs {expected}");
    }
}

#[test]
fn heavy_endpoints_are_interleaved_not_bursted() {
    // nginx's documented example: weights 5:1:1 give a a b a c a a.
    let set = set_of(weighted(&[5, 1, 1]));
    let mut balancer = SmoothWeighted::with_rotation(&set, 0);
    let sequence: Vec<_> = picks(&mut balancer, 0, 14)
        .into_iter()
        .map(|pick| pick.endpoint.instance.to_string())
        .collect();
    let a_b_c = [
        "ep-0000", "ep-0000", "ep-0001", "ep-0000", "ep-0002", "ep-0000", "ep-0000",
    ];
    assert_eq!(sequence[..7], a_b_c);
    assert_eq!(sequence[7..], a_b_c, "the schedule repeats every total-weight picks");
}

#[test]
fn matches_the_literal_nginx_algorithm() {
    // Classes of equal weight must not change nginx's sequence: random weights drawn from a
    // few values (many ties) and from a wide range (few ties), checked pick by pick.
    let mut draw = rng(11);
    for (sets, max_weight) in [(20, 4_u64), (20, 1000)] {
        for _ in 0..sets {
            let len = 1 + crate::balance::draw::below(&mut draw, 30) as usize;
            let weights: Vec<u16> = (0..len)
                .map(|_| 1 + crate::balance::draw::below(&mut draw, max_weight) as u16)
                .collect();
            let set = set_of(weighted(&weights));
            let rotation = crate::balance::draw::below(&mut draw, len as u64) as usize;
            let mut balancer = SmoothWeighted::with_rotation(&set, rotation);
            let rotated: Vec<i64> = (0..len).map(|i| i64::from(weights[(rotation + i) % len])).collect();
            for (step, expected) in nginx_reference(&rotated, 3_000).into_iter().enumerate() {
                let got = balancer.pick(&mut rng(0)).unwrap();
                let expected_instance = format!("ep-{:04}", (rotation + expected) % len);
                assert_eq!(
                    got.endpoint.instance.as_str(),
                    expected_instance,
                    "{weights:?} step {step}"
                );
            }
        }
    }
}

#[test]
fn panic_mode_schedules_over_all_known_endpoints() {
    use muster_core::ServingState;

    let endpoints = (0..4)
        .map(|n| {
            let serving = if n == 0 {
                ServingState::Ready
            } else {
                ServingState::Unknown
            };
            Fixture::ready(n).serving(serving).build()
        })
        .collect::<Vec<_>>();
    let set = set_of(endpoints);
    let all = picks(&mut SmoothWeighted::new(&set, &mut rng(1)), 0, 400);
    assert!(all.iter().all(|pick| pick.reason == PickReason::Panic));
    assert_eq!(tally(all).values().copied().collect::<Vec<_>>(), [100, 100, 100, 100]);
}
