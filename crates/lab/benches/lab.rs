//! The three reference setups, simulated end to end (SPEC X asks for ≤ 1 s in release).

use criterion::{Criterion, criterion_group, criterion_main};
use muster_lab::{Scenario, Setup, simulate_all};

fn reference(c: &mut Criterion) {
    let scenario = Scenario::reference();
    let setups = Setup::reference(&scenario);
    let mut group = c.benchmark_group("lab");
    group.sample_size(10);
    group.bench_function("reference_three_setups", |b| {
        b.iter(|| simulate_all(&scenario, &setups, &mut |_, _, _| {}))
    });
    group.finish();
}

criterion_group!(benches, reference);
criterion_main!(benches);
