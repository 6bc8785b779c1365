//! The end of a run heals every fault for good (SPEC R5: convergence after healing).
//!
//! Trace (seeds 121 and 454 of 1–1,000): the last fault drawn armed the leader-isolation
//! trap (`LeaderChangeDuringExpiry`); the run ended, healed the network and then restarted
//! a node whose disk had failed. While that restart awaited, the leader's duty expired a
//! lease, took the still-armed trap and cut its links to the one other node running. No
//! step was left to heal them: that node stayed a candidate for 30 s (term 4 to 84) while
//! the leader's appends to it were all lost, and the run failed "convergence after healing"
//! although the cluster had done nothing wrong.

use muster_sim::{Options, run_seed};

/// The faults these traces were found with: the later ones (a slow node, a lost and
/// regained leadership) play other runs from the same seeds.
fn as_found() -> Options {
    Options {
        shallow: true,
        ..Options::default()
    }
}

#[test]
fn seeds_121_and_454_converge_after_healing_with_the_trap_armed_at_the_end() {
    let options = as_found();
    for seed in [121, 454] {
        let report = run_seed(seed, &options);
        assert!(
            report.violation.is_none(),
            "seed {seed}: {:?} (replay: cargo run --release -p muster-sim -- --seeds {seed} --shallow --verbose)",
            report.violation
        );
        assert!(
            report.faults.partitions > 0 && report.faults.crashes > 0,
            "seed {seed} no longer plays the partitions and crashes of its trace: {:?}",
            report.faults
        );
    }
}

/// Trace (seed 421 of 1–1,000, once appends were paced): a leader's replication stream to
/// one follower ended on a higher vote, the leader then asked that stream for a snapshot,
/// and openraft 0.9.25 stopped its Raft ("replication channel closed"). The server exits
/// then and its supervisor starts it again; a simulation without that supervisor left the
/// node stopped at applied index 18 while the others reached 80.
#[test]
fn seed_421_converges_because_a_node_whose_raft_stopped_is_started_again() {
    let report = run_seed(421, &as_found());
    assert!(report.violation.is_none(), "seed 421: {:?}", report.violation);
    assert!(
        report.faults.supervised > 0,
        "seed 421 no longer stops a node's Raft: {:?}",
        report.faults
    );
}
