//! Two regions (`--regions 2`, SPEC G2). The trace this defends is the reference's
//! "Multi-Region and Failure Domains" (reference/control-plane-state.txt): a region cut off
//! from its peer keeps its last-known-good view of the peer's services and keeps committing
//! its own endpoint changes; when the regions heal, reconciliation preserves incarnations
//! and source revisions (no last-write-wins, nothing resurrected, nothing lost).

use muster_sim::{Options, run_seed};

/// The seeds every test run plays: small enough for a debug build in CI.
const SEEDS: std::ops::RangeInclusive<u64> = 1..=8;

fn two_regions() -> Options {
    Options {
        regions: 2,
        ..Options::default()
    }
}

#[test]
fn regions_partition_and_heal_and_b_mirrors_a_exactly_with_every_invariant_kept() {
    let options = two_regions();
    let (mut failures, mut partitions, mut judged, mut trespasses, mut changes) = (Vec::new(), 0, 0, 0, 0);
    for seed in SEEDS {
        let report = run_seed(seed, &options);
        if let Some(v) = &report.violation {
            failures.push(format!(
                "seed {seed}: {}: {} (replay: cargo run --release -p muster-sim -- --seeds {seed} --regions 2 --verbose)",
                v.invariant, v.detail
            ));
        }
        let federation = report.federation.expect("a two-region run reports its federation");
        assert!(
            federation.mirrored_sets > 0,
            "seed {seed}: b mirrored nothing of a: {federation:?}"
        );
        partitions += federation.partitions;
        judged += federation.judged;
        trespasses += federation.trespasses;
        changes += federation.mirror.changes;
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The seeds must have exercised what the invariants are about.
    assert!(partitions > 0, "no region partition in seeds {SEEDS:?}");
    assert!(judged > 0, "no partition judged on local commits in seeds {SEEDS:?}");
    assert!(
        trespasses > 0,
        "no local write to a mirrored instance in seeds {SEEDS:?}"
    );
    assert!(changes > 0, "the mirror committed no change in seeds {SEEDS:?}");
}

#[test]
fn the_same_seed_with_two_regions_gives_the_same_trace_bit_for_bit() {
    let options = two_regions();
    let first = run_seed(5, &options);
    let second = run_seed(5, &options);
    assert_eq!(first.trace, second.trace, "seed 5 ran differently the second time");
    assert_eq!(first.federation, second.federation);
    assert_ne!(
        first.trace,
        run_seed(5, &Options::default()).trace,
        "two regions must not play the single-region run"
    );
}
