//! Balancer picks from a 500-endpoint eligible set (SPEC C): round robin and P2C ≤ 50 ns
//! median, locality-aware and consistent hash ≤ 100 ns. Each group has an anchor: the naive
//! way to make the same choice, scanning the 500 endpoints on every call, so the figures can
//! be read against the machine they ran on. A last group times the O(n) rebuilds.
//!
//! Run: `cargo bench -p muster-client --bench balance`.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use muster_client::Member;
use muster_client::OutlierDetector;
use muster_client::balance::{
    Balancer, EligibleSet, HashRing, LeastRequest, LocalityAware, RoundRobin, SmoothWeighted,
};
use muster_client::{EligibilityConfig, HashRingConfig, LocalityConfig};
use muster_core::{
    Actor, Address, Endpoint, Incarnation, InstanceId, Label, Labels, Locality, NamedPort, Observation, Principal,
    Protocol, Provenance, Revision, ServingState,
};
use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

/// The set size the budgets are stated for.
const ENDPOINTS: u32 = 500;

fn label(text: &str) -> Label {
    Label::new("bench", text).expect("valid label")
}

/// Endpoint `n`: zones `eu-a`, `eu-b`, `eu-c` and `us-a` in turn, weights 50/100/200 in turn,
/// every 10th one not serving (so the eligible set is a real subset of the view).
fn endpoint(n: u32) -> Arc<Endpoint> {
    let (region, zone) = [("eu", "eu-a"), ("eu", "eu-b"), ("eu", "eu-c"), ("us", "us-a")][n as usize % 4];
    let principal = Principal::new("bench").expect("valid principal");
    Arc::new(Endpoint {
        instance: InstanceId::new(&format!("pod-{n:06}")).expect("valid instance"),
        incarnation: Incarnation(1),
        addresses: vec![Address {
            ip: IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + n)),
            scope: None,
        }]
        .into(),
        ports: vec![NamedPort {
            name: label("http"),
            port: 8080,
            protocol: Protocol::Http,
        }]
        .into(),
        locality: Locality {
            region: Some(label(region)),
            zone: Some(label(zone)),
            ..Locality::default()
        },
        serving: if n % 10 == 9 {
            ServingState::NotServing
        } else {
            ServingState::Ready
        },
        weight: [50, 100, 200][n as usize % 3],
        capacity: None,
        labels: Labels::default(),
        lease: None,
        revision: Revision(1),
        provenance: Provenance {
            registrar: principal.clone(),
            source_revision: None,
            policy_revision: Revision::ZERO,
        },
        observation: Observation {
            actor: Actor::App,
            principal,
            at_ms: 0,
            reason: "bench".into(),
        },
        checks: Box::default(),
    })
}

struct Bench {
    view: Vec<Arc<Member>>,
    config: EligibilityConfig,
    locality: LocalityConfig,
    set: EligibleSet,
}

fn bench_input() -> Bench {
    // The view holds compact records, as a resolver's does.
    let view: Vec<_> = (0..ENDPOINTS)
        .map(|n| Arc::new(Member::from_endpoint(&endpoint(n))))
        .collect();
    let config = EligibilityConfig::default();
    let set = EligibleSet::build(Revision(1), &view, &config, &OutlierDetector::default(), 0);
    let locality = LocalityConfig {
        region: Some(label("eu")),
        zone: Some(label("eu-a")),
        ..LocalityConfig::default()
    };
    Bench {
        view,
        config,
        locality,
        set,
    }
}

/// The anchor's eligibility test, run per endpoint per call.
fn naive_eligible(config: &EligibilityConfig, endpoint: &Member) -> bool {
    endpoint.serving.is_eligible(config.accept_degraded) && config.reachable_address(endpoint).is_some()
}

fn round_robin(c: &mut Criterion, b: &Bench) {
    let mut group = c.benchmark_group("pick_500/round_robin");
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(1);
    let mut balancer = RoundRobin::new(&b.set, &mut rng);
    group.bench_function("precomputed", |bench| bench.iter(|| black_box(balancer.pick(&mut rng))));
    let mut turn = 0_usize;
    group.bench_function("anchor_filter_per_call", |bench| {
        bench.iter(|| {
            let eligible = b.view.iter().filter(|e| naive_eligible(&b.config, e)).count();
            turn = turn.wrapping_add(1);
            let chosen = b
                .view
                .iter()
                .filter(|e| naive_eligible(&b.config, e))
                .nth(turn % eligible);
            black_box(chosen.cloned())
        })
    });
    group.finish();
}

fn weighted(c: &mut Criterion, b: &Bench) {
    let mut group = c.benchmark_group("pick_500/smooth_weighted");
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(2);
    let mut balancer = SmoothWeighted::new(&b.set, &mut rng);
    group.bench_function("weight_classes", |bench| {
        bench.iter(|| black_box(balancer.pick(&mut rng)))
    });
    let eligible = b.set.eligible();
    let total: i64 = eligible.iter().map(|e| i64::from(e.weight)).sum();
    let mut current = vec![0_i64; eligible.len()];
    group.bench_function("anchor_literal_nginx", |bench| {
        bench.iter(|| {
            let mut best = 0;
            for (i, endpoint) in eligible.iter().enumerate() {
                current[i] += i64::from(endpoint.weight);
                if current[i] > current[best] {
                    best = i;
                }
            }
            current[best] -= total;
            black_box(Arc::clone(&eligible[best]))
        })
    });
    group.finish();
}

fn p2c(c: &mut Criterion, b: &Bench) {
    let mut group = c.benchmark_group("pick_500/p2c");
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(3);
    let mut balancer = LeastRequest::new(&b.set);
    for endpoint in b.set.eligible().iter().step_by(3) {
        balancer.start(endpoint);
    }
    group.bench_function("two_choices", |bench| bench.iter(|| black_box(balancer.pick(&mut rng))));
    let loads: Vec<u32> = (0..b.view.len() as u32).map(|n| n % 3).collect();
    group.bench_function("anchor_least_loaded_scan", |bench| {
        bench.iter(|| {
            let chosen = b
                .view
                .iter()
                .zip(&loads)
                .filter(|(e, _)| naive_eligible(&b.config, e))
                .min_by_key(|(_, load)| **load)
                .map(|(e, _)| Arc::clone(e));
            black_box(chosen)
        })
    });
    group.finish();
}

fn locality(c: &mut Criterion, b: &Bench) {
    let mut group = c.benchmark_group("pick_500/locality");
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(4);
    let balancer = LocalityAware::new(&b.set, &b.locality);
    group.bench_function("tiers_precomputed", |bench| {
        bench.iter(|| black_box(balancer.pick(&mut rng)))
    });
    group.bench_function("anchor_filter_zone_per_call", |bench| {
        bench.iter(|| {
            let local = |e: &&Arc<Member>| naive_eligible(&b.config, e) && e.locality.zone == b.locality.zone;
            let count = b.view.iter().filter(local).count() as u64;
            let index = rng.next_u64() % count;
            black_box(b.view.iter().filter(local).nth(index as usize).cloned())
        })
    });
    group.finish();
}

fn hash(c: &mut Criterion, b: &Bench) {
    let mut group = c.benchmark_group("pick_500/consistent_hash");
    let ring = HashRing::new(&b.set, &HashRingConfig::default()).expect("valid config");
    let mut key = 0_u64;
    group.bench_function("ring_u64_key", |bench| {
        bench.iter(|| {
            key = key.wrapping_add(0x9e37_79b9_7f4a_7c15);
            black_box(ring.pick_u64(key))
        })
    });
    group.bench_function("anchor_rendezvous_scan", |bench| {
        bench.iter(|| {
            key = key.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let chosen = b
                .view
                .iter()
                .filter(|e| naive_eligible(&b.config, e))
                .max_by_key(|e| xxhash_rust::xxh3::xxh3_64_with_seed(e.instance.as_str().as_bytes(), key));
            black_box(chosen.cloned())
        })
    });
    group.finish();
}

fn rebuild(c: &mut Criterion, b: &Bench) {
    let mut group = c.benchmark_group("rebuild_500");
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(5);
    let detector = OutlierDetector::default();
    group.bench_function("eligible_set", |bench| {
        bench.iter(|| black_box(EligibleSet::build(Revision(1), &b.view, &b.config, &detector, 0)))
    });
    group.bench_function("round_robin", |bench| {
        bench.iter(|| black_box(RoundRobin::new(&b.set, &mut rng)))
    });
    group.bench_function("smooth_weighted", |bench| {
        bench.iter(|| black_box(SmoothWeighted::new(&b.set, &mut rng)))
    });
    group.bench_function("p2c", |bench| bench.iter(|| black_box(LeastRequest::new(&b.set))));
    group.bench_function("locality", |bench| {
        bench.iter(|| black_box(LocalityAware::new(&b.set, &b.locality)))
    });
    group.bench_function("hash_ring", |bench| {
        bench.iter(|| black_box(HashRing::new(&b.set, &HashRingConfig::default())))
    });
    group.finish();
}

fn benches(c: &mut Criterion) {
    let input = bench_input();
    round_robin(c, &input);
    weighted(c, &input);
    p2c(c, &input);
    locality(c, &input);
    hash(c, &input);
    rebuild(c, &input);
}

criterion_group! {
    name = balance;
    // Short runs: picks are nanoseconds and stable; the machine is shared.
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    targets = benches
}
criterion_main!(balance);
