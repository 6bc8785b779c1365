//! Each node's supervisor. The server exits when its Raft stops on an error
//! (`Node::failed`, SPEC R2: a node that cannot vouch for its state serves nothing), and
//! systemd or Kubernetes starts it again; the simulation does the same, so a node whose
//! Raft stopped is not left out of the cluster for the rest of the run.
//!
//! A failed disk write is such an error, but the schedule restarts those nodes itself (a
//! crash after the failure, `Fault::FailDisk`). What is left are errors Raft raises on its
//! own: openraft 0.9.25 stops a leader that asks a replication stream for a snapshot after
//! that stream ended on a higher vote ("replication channel closed", found by seed 421 once
//! appends were paced).

use crate::run::Sim;

impl Sim {
    /// Restarts every running node whose Raft stopped on an error (not a failed disk's,
    /// which the schedule restarts).
    pub(crate) async fn supervise(&mut self) {
        for (id, node) in self.cluster.net.nodes() {
            if self.failed_disks.contains(&id) {
                continue;
            }
            let Some(fatal) = node.fatal() else { continue };
            self.line(format!("supervisor: node {id} stopped ({fatal}); started again"));
            self.cluster.crash(id).await;
            self.duties.forget(id);
            self.start(id).await;
            self.faults.supervised += 1;
        }
    }
}
