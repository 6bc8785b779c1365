//! A cluster grown from a data directory an older build wrote (SPEC R1, R5; the golden
//! `v1/data` of `muster-consensus`): node 1 starts on that directory's log and snapshots, the
//! two others start empty and join it, and then the seed's usual schedule of writes and
//! faults plays, crashes and restarts of node 1 included.
//!
//! ```text
//!  older data dir ──SimDisk::from_data_dir──▶ node 1 (a group of one, as written)
//!                                              │ leads; adds node 2, then node 3
//!  every member holds the directory's state ◀──┘ (by snapshot and log)
//!  then: the seed's schedule, every invariant, the heal and the final checks
//! ```

use std::time::Duration;

use muster_consensus::SimDisk;

use crate::net::address;
use crate::run::{Options, Region, Report, Sim, lock, paused_runtime};

/// How long the joining may take: many election timeouts.
const JOIN_WITHIN: Duration = Duration::from_secs(30);

/// Runs one seed on a 3-node cluster whose node 1 starts from `disk` (a data directory an
/// older build wrote, [`SimDisk::from_data_dir`]).
pub fn run_seed_from(seed: u64, options: &Options, disk: SimDisk) -> Report {
    let options = Options {
        nodes: 3,
        regions: 1,
        ..options.clone()
    };
    paused_runtime().block_on(async {
        let mut sim = Sim::unstarted(seed, options, Region::Only);
        sim.cluster.disks.insert(1, disk);
        sim.line(format!("seed {seed}: node 1 starts on an older data directory"));
        if sim.grow_from_node_1().await {
            sim.play().await;
        }
        sim.report()
    })
}

impl Sim {
    /// Starts node 1 on its disk, then nodes 2 and 3, which it adds; true once every member
    /// holds node 1's state (a failed invariant otherwise).
    async fn grow_from_node_1(&mut self) -> bool {
        self.start(1).await;
        self.duties.spawn(1);
        let Some(first) = self.cluster.net.node(1) else {
            return false;
        };
        let revision = first.status().revision;
        let leases: Vec<_> = first.read(|r| r.leases().map(|l| (l.id, l.ttl_ms)).collect());
        let mut joined = Ok(());
        for id in [2, 3] {
            self.start(id).await;
            self.duties.spawn(id);
            if let Err(error) = first.add_member(id, &address(id)).await {
                joined = Err(format!("node 1 could not add node {id}: {error}"));
                break;
            }
        }
        let deadline = tokio::time::Instant::now() + JOIN_WITHIN;
        while joined.is_ok() && !self.every_member_holds(revision.0) {
            if tokio::time::Instant::now() >= deadline {
                joined = Err(format!(
                    "not every member reached revision {} within {JOIN_WITHIN:?}",
                    revision.0
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let held = joined.is_ok();
        self.line(format!(
            "grown from an older data directory at revision {}: {joined:?}",
            revision.0
        ));
        lock(&self.checks).fail("an older data directory's state reaches every member", joined);
        // The directory's leases are the workload's to renew (or let expire) like its own.
        lock(&self.workload).leases.extend(leases);
        held
    }

    fn every_member_holds(&mut self, revision: u64) -> bool {
        let states = self.sample(false);
        states.len() == 3 && states.iter().all(|(_, r, _)| *r >= revision)
    }
}
