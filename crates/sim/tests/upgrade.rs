//! A cluster grown from the data directory an older build wrote — the golden `v1/data` of
//! `muster-consensus`, checked in and never regenerated — keeps every invariant through the
//! seed's writes and faults (SPEC R1, R5: every later build reads what an older one wrote,
//! and a node restarted on it rejoins its cluster).

use std::path::{Path, PathBuf};

use muster_consensus::SimDisk;
use muster_sim::{Options, run_seed_from};

fn golden_data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../consensus/tests/golden/v1/data")
}

/// The golden directory, copied (opening the redb file may write to it) and read into a
/// simulated disk.
fn older_disk() -> SimDisk {
    let copy = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(golden_data()).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), copy.path().join(entry.file_name())).unwrap();
    }
    SimDisk::from_data_dir(copy.path()).expect("the golden data directory reads")
}

#[test]
fn the_golden_disk_holds_the_directorys_log_and_both_snapshots() {
    let described = older_disk().describe();
    // Entries 8–12 and the snapshots at 10 and 9 (tests/golden/README.md).
    assert!(
        described.starts_with("log Some(8)..=Some(12) (5 entries)"),
        "{described}"
    );
    assert!(described.ends_with("snapshots at [Some(10), Some(9)]"), "{described}");
}

#[test]
fn a_cluster_grown_from_an_older_data_directory_keeps_every_invariant_under_faults() {
    let options = Options::default();
    let mut faults = muster_sim::FaultCounts::default();
    for seed in 1..=4 {
        let report = run_seed_from(seed, &options, older_disk());
        assert!(report.violation.is_none(), "seed {seed}: {:?}", report.violation);
        faults += report.faults;
    }
    assert!(
        faults.crashes > 0 && faults.partitions > 0,
        "no fault was played: {faults:?}"
    );
}
