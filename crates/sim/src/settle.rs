//! The end of a run: heal every fault, let the cluster converge, wait out every TTL and
//! grace with nobody renewing, converge again, and check the end state.

use std::sync::atomic::Ordering;
use std::time::Duration;

use muster_consensus::Node;
use muster_core::ServingState;

use crate::duties::{ELECTION_GRACE_MS, TICK};
use crate::net::Weather;
use crate::run::{Sim, lock};

/// How long the healed cluster may take to converge: many election timeouts.
const CONVERGE_WITHIN_MS: u64 = 30_000;
/// The longest a drain's grace can be (the workload draws 0.3–3 s).
const MAX_GRACE_MS: u64 = 3_000;

impl Sim {
    /// Heals everything, lets the cluster converge, waits out every TTL and grace with no
    /// renewal, converges again, and checks the end state.
    pub(crate) async fn finish(&mut self) {
        self.line("heal: every fault undone; no more client operations".into());
        self.pending.clear();
        // Disarmed before the heal: an armed trap would isolate the leader of the moment
        // again while the restarts below await, and no step is left to heal it.
        *lock(&self.duties.trap) = false;
        self.cluster.net.heal();
        self.cluster.net.set_weather(Weather::CALM);
        for id in std::mem::take(&mut self.failed_disks) {
            // The supervisor's restart of a node whose disk failed.
            self.cluster.crash(id).await;
            self.duties.forget(id);
        }
        for id in self.cluster.ids() {
            self.cluster.net.set_slow(id, 1);
            self.cluster.disks[&id].set_write_delay(Duration::ZERO);
            self.cluster.disks[&id].fail_next_writes(0);
            if !self.cluster.running().contains(&id) {
                self.start(id).await;
            }
        }
        if !self.converge("after healing").await {
            return;
        }
        // Every lease the registry holds, not only the workload's: one whose revoke had an
        // unknown outcome, or one a data directory came with, must be waited out too.
        let held = self
            .cluster
            .net
            .nodes()
            .values()
            .map(|node| node.read(|r| r.leases().map(|l| l.ttl_ms).max().unwrap_or(0)))
            .max()
            .unwrap_or(0);
        let max_ttl = lock(&self.workload)
            .leases
            .values()
            .copied()
            .max()
            .unwrap_or(0)
            .max(held)
            .max(5_000);
        let quiet = max_ttl + ELECTION_GRACE_MS + MAX_GRACE_MS + 10 * TICK.as_millis() as u64 + 2_000;
        lock(&self.workload).leases.clear();
        tokio::time::sleep(Duration::from_millis(quiet)).await;
        if !self.converge("after the quiet period").await {
            return;
        }
        self.final_checks();
    }

    /// Waits until every node holds the same state, unchanged between two polls.
    async fn converge(&mut self, when: &str) -> bool {
        let mut previous = Vec::new();
        for _ in 0..CONVERGE_WITHIN_MS / 100 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            self.supervise().await;
            if self.violated() {
                return false;
            }
            let cuts = self.cluster.net.cuts();
            if !cuts.is_empty() {
                // Nothing may cut a link after the heal; a cluster cut then cannot converge,
                // and the failure would read as the cluster's (seeds 121 and 454 did).
                lock(&self.checks).fail(
                    "convergence after healing",
                    Err(format!("the simulation cut links {cuts:?} after the heal")),
                );
                return false;
            }
            let states = self.sample(false);
            let settled = self.in_flight.load(Ordering::Relaxed) == 0;
            if settled
                && states.len() == self.options.nodes as usize
                && states.windows(2).all(|w| w[0] == w[1])
                && states == previous
            {
                self.line(format!("converged {when}"));
                return true;
            }
            previous = states;
        }
        lock(&self.checks).fail(
            "convergence after healing",
            Err(format!(
                "the nodes did not converge {when} within {CONVERGE_WITHIN_MS} ms"
            )),
        );
        false
    }

    fn final_checks(&mut self) {
        let nodes = self.cluster.net.nodes();
        let Some(node) = nodes.values().next() else { return };
        let lowest = nodes.values().map(|n| n.status().revision.0).min().unwrap_or(0);
        let now = self.clock.now_ms();
        let leases: Vec<u64> = node.read(|r| r.leases().map(|l| l.id.0).collect());
        let stuck = stuck_drains(node, now);
        let mut checks = lock(&self.checks);
        let acked = checks.acknowledged.check_final(&checks.history, lowest);
        checks.fail("every acknowledged write is present", acked);
        let expired = if leases.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "leases {leases:?} outlived every TTL with nobody renewing them"
            ))
        };
        checks.fail("a lease nobody renews expires", expired);
        let drained = match stuck.first() {
            None => Ok(()),
            Some(stuck) => Err(format!("{stuck} is still draining long after its grace")),
        };
        checks.fail("every drain's grace ends", drained);
        let oversized = self.cluster.net.stats().oversized;
        let fitted = match oversized {
            0 => Ok(()),
            n => Err(format!("{n} messages over the listener's limit were refused")),
        };
        checks.fail("every node-to-node message fits the listener's limit", fitted);
    }
}

/// Draining endpoints whose committed grace ended more than an election and a tick ago.
fn stuck_drains(node: &Node, now: u64) -> Vec<String> {
    node.read(|r| {
        let mut stuck = Vec::new();
        for service in r.all_services() {
            for endpoint in service.iter() {
                if endpoint.serving != ServingState::Draining {
                    continue;
                }
                let grace = crate::duties::drain_grace(endpoint);
                if let Some(grace) = grace
                    && endpoint.observation.at_ms + grace + ELECTION_GRACE_MS + 2_000 < now
                {
                    stuck.push(format!(
                        "{}/{}#{} (drained at {} ms, grace {grace} ms)",
                        service.key(),
                        endpoint.instance,
                        endpoint.incarnation.0,
                        endpoint.observation.at_ms
                    ));
                }
            }
        }
        stuck
    })
}
