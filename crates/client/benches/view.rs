//! Applying one update to a 10,000-endpoint view (SPEC C target: ≤ 5 µs, not O(n)), next to
//! the anchor of rebuilding the set from scratch per update.
//!
//! Run with `cargo bench -p muster-client --bench view`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use muster_client::view::{Next, View};
use muster_core::{Revision, ServiceSnapshot};
use muster_registry::Scope;

mod fixture;

/// The view size of the target.
const ENDPOINTS: u32 = 10_000;

fn apply_update(c: &mut Criterion) {
    let mut registry = fixture::registry(ENDPOINTS);
    let base = registry.revision();
    // One endpoint's weight changes: the update every iteration applies to a fresh copy of
    // the 10,000-endpoint view (a copy shares structure with `start`, as a view shares its
    // set with readers, so the apply pays the copy-on-write).
    registry
        .apply(&fixture::register(ENDPOINTS / 2, 101), &fixture::meta())
        .expect("accepted");
    let updates = registry
        .changes_since(&Scope::Service(fixture::key()), base)
        .expect("retained");
    let start = registry
        .snapshot_at(&fixture::key(), base)
        .expect("retained")
        .expect("known");
    let mut group = c.benchmark_group("view_10k");
    group.bench_function("apply_one_update", |b| {
        b.iter_batched(
            || {
                let mut view = View::new(fixture::key());
                view.install(ServiceSnapshot::clone(&start), base, 0);
                view
            },
            |mut view| {
                assert_eq!(view.on_update(&updates[0], 1), Next::Continue);
                view
            },
            criterion::BatchSize::SmallInput,
        );
    });
    group.bench_function("anchor_rebuild_set", |b| {
        b.iter(|| {
            black_box(ServiceSnapshot::from_endpoints(
                fixture::key(),
                Revision(1),
                start.iter().cloned(),
            ))
        });
    });
    group.finish();
}

criterion_group!(benches, apply_update);
criterion_main!(benches);
