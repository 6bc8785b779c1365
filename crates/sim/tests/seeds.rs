//! The simulation's own guarantees: a fixed range of seeds keeps every invariant while
//! faults of every kind happen in it (the report's counts), and one seed run twice is the
//! same run (the same trace hash).

use muster_sim::{FaultCounts, Options, Report, run_seed};

/// The seeds every test run plays: small enough for a debug build in CI.
const SEEDS: std::ops::RangeInclusive<u64> = 1..=20;

/// Asserts that `reports` injected every kind of fault: crashes, restarts from disk,
/// partitions and failed disk writes, and that each seed injected some. An invariant kept
/// by a run without faults proves nothing about faults.
fn assert_faults_happened(reports: &[Report]) {
    let mut total = FaultCounts::default();
    for report in reports {
        let f = report.faults;
        assert!(
            f.crashes + f.partitions + f.failed_disks > 0,
            "seed {} injected no fault: {f:?}",
            report.seed
        );
        total += f;
    }
    assert!(total.crashes > 0, "no crash across the seeds: {total:?}");
    assert!(total.restarts > 0, "no restart across the seeds: {total:?}");
    assert!(total.partitions > 0, "no partition across the seeds: {total:?}");
    assert!(
        total.failed_disks > 0,
        "no failed disk write across the seeds: {total:?}"
    );
    // The later faults (SPEC R5): a slow node, and a leadership lost and then won back in
    // a later term by the same node; appends paced by their size.
    assert!(total.slowed > 0, "no slow node across the seeds: {total:?}");
    assert!(total.deposed > 0, "no leader deposed across the seeds: {total:?}");
    assert!(
        total.regained > 0,
        "no deposed leader led again across the seeds: {total:?}"
    );
    let paced: u64 = reports.iter().map(|r| r.net.paced).sum();
    assert!(paced > 0, "no append was paced across the seeds");
}

#[test]
fn seeds_1_to_20_keep_every_invariant_through_crashes_partitions_and_failed_disks() {
    let options = Options::default();
    let reports: Vec<Report> = SEEDS.map(|seed| run_seed(seed, &options)).collect();
    assert_faults_happened(&reports);
    let failures: Vec<String> = reports
        .into_iter()
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
    let reports: Vec<Report> = (1..=3).map(|seed| run_seed(seed, &options)).collect();
    for report in &reports {
        assert!(
            report.violation.is_none(),
            "seed {} with 5 nodes: {:?}",
            report.seed,
            report.violation
        );
    }
    assert_faults_happened(&reports);
}
