//! Hot-path benchmarks of the registry state machine, each next to an anchor that shows what
//! the naive design would cost.
//!
//! | group                    | what is timed                                                    | target    |
//! |--------------------------|------------------------------------------------------------------|-----------|
//! | `register_into_10k`      | `apply` of one `Register` into a service of 10,000 endpoints     | ≤ 5 µs    |
//! | `snapshot_500`           | `snapshot(&key)` of a 500-endpoint service                        | ≤ 200 ns  |
//! | `changes_since_1_in_10k` | `changes_since` returning the one update after a known revision  | ≤ 2 µs    |
//!
//! # `register_into_10k`
//! One service holds 10,000 endpoints (one IPv4 address, ports `http` and `grpc`, four labels,
//! no lease). Each timed `apply` re-registers an existing instance with its weight flipped
//! between 100 and 101, walking through the instances in turn, so every apply really commits
//! a new revision (validation, fencing, persistent-map insert, digest, history) while the set
//! keeps its size. The commands are built before timing; building one is the API edge's cost.
//!
//! - `plain`: nobody else holds the snapshot, so `Arc::make_mut` updates the map in place.
//! - `with_reader`: after each apply the bench keeps `registry.snapshot(&key)` alive, as a
//!   server publishing snapshots to watchers does, so the next apply must copy the snapshot
//!   (path copying in the persistent map) and the previous one is dropped inside the loop.
//! - `naive_rebuild_10k` (anchor): clones the 10,000 `Arc<Endpoint>` of the snapshot into a
//!   fresh `Vec`, the least an O(n) snapshot rebuild per write would cost.
//!
//! # `snapshot_500`
//! - `snapshot`: `registry.snapshot(&key)`, two map lookups and an `Arc` clone.
//! - `copy_500` (anchor): collecting the 500 `Arc<Endpoint>` into a `Vec`, what handing every
//!   reader its own copy would cost.
//!
//! # `changes_since_1_in_10k`
//! A 10,000-endpoint service (10,000 retained updates), then one more committed change;
//! `changes_since(&Scope::Service(key), revision_before_that_change)` must find the one update
//! by binary search in the retained history rather than by walking it.
//!
//! Run with
//! `cargo bench -p muster-registry --bench registry -- --warm-up-time 1 --measurement-time 3`.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use muster_core::{Endpoint, ServiceKey, ServiceSnapshot};
use muster_registry::{Command, LeaseSpec, Registry, RegistryConfig, Scope};

/// The set size of the write and change-log benches: the largest service the quotas are
/// sized around (`endpoints_per_service` is five times this).
const LARGE_SERVICE: u32 = 10_000;
/// A typical service behind a load balancer: the set a client snapshots on every resolve.
const TYPICAL_SERVICE: u32 = 500;
/// The default weight (what a spec without a weight gets), and the one it is flipped to.
const WEIGHT: u32 = 100;
const FLIPPED_WEIGHT: u32 = 101;

fn service_key(service: &str) -> ServiceKey {
    ServiceKey::new("acme", "prod", service).expect("valid names")
}

fn instance(n: u32) -> String {
    format!("pod-{n:05}")
}

fn register(key: &ServiceKey, n: u32, weight: u32) -> Command {
    muster_testkit::register(key, &instance(n), n, weight, LeaseSpec::None)
}

/// A registry with default configuration holding one service of `size` endpoints.
fn registry_with(key: &ServiceKey, size: u32) -> Registry {
    let mut registry = Registry::new(RegistryConfig::default());
    let meta = muster_testkit::meta();
    for n in 0..size {
        registry
            .apply(&register(key, n, WEIGHT), &meta)
            .expect("registration accepted");
    }
    assert_eq!(registry.snapshot(key).map(|s| s.len()), Some(size as usize));
    registry
}

/// Re-registrations that each commit: pass 1 flips every instance to 101, pass 2 back to 100.
struct Flips {
    commands: Vec<Command>,
    next: usize,
}

impl Flips {
    fn new(key: &ServiceKey, size: u32) -> Flips {
        let flipped = (0..size).map(|n| register(key, n, FLIPPED_WEIGHT));
        let restored = (0..size).map(|n| register(key, n, WEIGHT));
        Flips {
            commands: flipped.chain(restored).collect(),
            next: 0,
        }
    }

    fn next(&mut self) -> &Command {
        let command = &self.commands[self.next];
        self.next = (self.next + 1) % self.commands.len();
        command
    }
}

fn register_into_10k(c: &mut Criterion) {
    let key = service_key("api");
    let meta = muster_testkit::meta();
    let mut group = c.benchmark_group("register_into_10k");

    let mut registry = registry_with(&key, LARGE_SERVICE);
    let mut flips = Flips::new(&key, LARGE_SERVICE);
    group.bench_function("plain", |b| {
        b.iter(|| {
            let applied = registry.apply(flips.next(), &meta).expect("re-registration accepted");
            // One compare per iteration, so a bench that stopped committing cannot pass.
            assert!(applied.unchanged.is_none(), "every flip commits");
            applied
        });
    });

    let mut registry = registry_with(&key, LARGE_SERVICE);
    let mut flips = Flips::new(&key, LARGE_SERVICE);
    let mut published: Option<Arc<ServiceSnapshot>> = registry.snapshot(&key);
    group.bench_function("with_reader", |b| {
        b.iter(|| {
            let applied = registry.apply(flips.next(), &meta).expect("re-registration accepted");
            assert!(applied.unchanged.is_none(), "every flip commits");
            // Publish the new set; the previous one is dropped here, as a server's would be.
            published = registry.snapshot(&key);
            applied
        });
    });
    black_box(published);

    let snapshot = registry.snapshot(&key).expect("the service exists");
    group.bench_function("naive_rebuild_10k", |b| {
        b.iter(|| snapshot.iter().cloned().collect::<Vec<Arc<Endpoint>>>());
    });
    group.finish();
}

fn snapshot_500(c: &mut Criterion) {
    let key = service_key("api");
    let registry = registry_with(&key, TYPICAL_SERVICE);
    let mut group = c.benchmark_group("snapshot_500");
    group.bench_function("snapshot", |b| {
        b.iter(|| registry.snapshot(black_box(&key)));
    });
    let snapshot = registry.snapshot(&key).expect("the service exists");
    group.bench_function("copy_500", |b| {
        b.iter(|| black_box(&snapshot).iter().cloned().collect::<Vec<Arc<Endpoint>>>());
    });
    group.finish();
}

fn changes_since_1_in_10k(c: &mut Criterion) {
    let key = service_key("api");
    let mut registry = registry_with(&key, LARGE_SERVICE);
    let before = registry.revision();
    let applied = registry
        .apply(
            &register(&key, LARGE_SERVICE / 2, FLIPPED_WEIGHT),
            &muster_testkit::meta(),
        )
        .expect("re-registration accepted");
    assert!(applied.unchanged.is_none(), "the change commits");
    let scope = Scope::Service(key);
    let updates = registry.changes_since(&scope, before).expect("within retained history");
    assert_eq!(updates.len(), 1, "exactly the one change after {before}");
    assert_eq!(updates[0].revision, applied.revision);

    c.bench_function("changes_since_1_in_10k", |b| {
        b.iter(|| registry.changes_since(black_box(&scope), black_box(before)));
    });
}

criterion_group!(benches, register_into_10k, snapshot_500, changes_since_1_in_10k);
criterion_main!(benches);
