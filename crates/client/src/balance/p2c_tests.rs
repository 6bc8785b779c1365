use super::*;
use crate::balance::fixtures::{Fixture, ready, rng, set_of, tally};

#[test]
fn prefers_the_less_loaded_of_two() {
    let endpoints = ready(2);
    let mut balancer = LeastRequest::new(&set_of(endpoints.clone()));
    for _ in 0..5 {
        balancer.start(&endpoints[0]);
    }
    let mut rng = rng(5);
    for _ in 0..100 {
        assert_eq!(balancer.pick(&mut rng).unwrap().endpoint, endpoints[1]);
    }
    // Once the load evens out, both get picked again.
    for _ in 0..5 {
        balancer.end(&endpoints[0]);
    }
    let counts = tally((0..1_000).map(|_| balancer.pick(&mut rng).unwrap()));
    assert_eq!(counts.len(), 2, "{counts:?}");
}

#[test]
fn loaded_endpoints_get_less_traffic_when_requests_run_long() {
    // Ten endpoints, each pick starts a request that never ends: p2c keeps the in-flight
    // counts within a small spread, where random choice would drift apart by sqrt(n).
    let endpoints = ready(10);
    let mut balancer = LeastRequest::new(&set_of(endpoints.clone()));
    let mut rng = rng(9);
    for _ in 0..10_000 {
        let pick = balancer.pick(&mut rng).unwrap();
        balancer.start(&pick.endpoint);
    }
    let loads: Vec<u32> = endpoints.iter().map(|e| balancer.in_flight(e).unwrap()).collect();
    let (min, max) = (loads.iter().min().unwrap(), loads.iter().max().unwrap());
    assert!(max - min <= 4, "{loads:?}");
}

#[test]
fn counts_survive_a_rebuild_and_a_new_incarnation_starts_at_zero() {
    let endpoints = ready(3);
    let mut balancer = LeastRequest::new(&set_of(endpoints.clone()));
    balancer.start(&endpoints[0]);
    balancer.start(&endpoints[0]);
    balancer.start(&endpoints[1]);
    let restarted = Fixture::ready(1).incarnation(2).build();
    balancer.rebuild(&set_of([endpoints[0].clone(), restarted.clone(), endpoints[2].clone()]));
    assert_eq!(balancer.in_flight(&endpoints[0]), Some(2));
    assert_eq!(balancer.in_flight(&restarted), Some(0));
    // A late end for the old incarnation does not touch the new one.
    balancer.end(&endpoints[1]);
    balancer.end(&restarted);
    assert_eq!(balancer.in_flight(&restarted), Some(0));
    assert_eq!(balancer.in_flight(&endpoints[1]), None);
}

#[test]
fn weight_scales_the_load_compared() {
    // Weight 300 against 100: with 1 in flight on the heavy one and 0 on the light one,
    // (1+1)/300 < (0+1)/100, so the heavy one still wins; at 3 in flight it loses.
    let heavy = Fixture::ready(0).weight(300).build();
    let light = Fixture::ready(1).weight(100).build();
    let mut balancer = LeastRequest::new(&set_of([heavy.clone(), light]));
    balancer.start(&heavy);
    let mut rng = rng(2);
    assert!((0..50).all(|_| balancer.pick(&mut rng).unwrap().endpoint == heavy));
    balancer.start(&heavy);
    balancer.start(&heavy);
    assert!((0..50).all(|_| balancer.pick(&mut rng).unwrap().endpoint != heavy));
}
