//! The simulation's own guarantees: a fixed range of seeds keeps every invariant, and one
//! seed run twice is the same run (the same trace hash).

use muster_sim::{Options, run_seed};

/// The seeds every test run plays: small enough for a debug build in CI.
const SEEDS: std::ops::RangeInclusive<u64> = 1..=20;

#[test]
fn seeds_1_to_20_keep_every_invariant() {
    let options = Options::default();
    let failures: Vec<String> = SEEDS
        .map(|seed| run_seed(seed, &options))
        .filter_map(|report| {
            report.violation.map(|v| {
                format!(
                    "seed {}: {}: {} (replay: cargo run --release -p muster-sim -- --seeds {} --verbose)",
                    report.seed, v.invariant, v.detail, report.seed
                )
            })
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_same_seed_gives_the_same_trace_bit_for_bit() {
    let options = Options::default();
    for seed in [3, 11] {
        let first = run_seed(seed, &options);
        let second = run_seed(seed, &options);
        assert_eq!(first.trace, second.trace, "seed {seed} ran differently the second time");
        assert!(
            first.steps > 0 && first.acknowledged > 0,
            "seed {seed} did nothing: {first:?}"
        );
    }
    assert_ne!(
        run_seed(3, &options).trace,
        run_seed(4, &options).trace,
        "different seeds must give different runs"
    );
}

#[test]
fn a_five_node_cluster_keeps_every_invariant_too() {
    let options = Options {
        nodes: 5,
        steps: 150,
        ..Options::default()
    };
    for seed in 1..=3 {
        let report = run_seed(seed, &options);
        assert!(
            report.violation.is_none(),
            "seed {seed} with 5 nodes: {:?}",
            report.violation
        );
    }
}
