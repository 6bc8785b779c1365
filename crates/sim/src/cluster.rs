//! The simulated cluster: real [`Node`]s on simulated disks and the simulated network,
//! started, crashed and restarted by the schedule.
//!
//! A crash is a power cut: the disk refuses every write the dying process still has in
//! flight ([`SimDisk::power_cut`]), the network stops delivering to it, and its tasks are
//! stopped. A restart opens a new process on the same disk, which recovers from its
//! snapshot and log like a real restart.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use muster_consensus::{ApplyObserver, ClusterConfig, Node, NodeConfig, PeerClient, SimDisk};
use muster_registry::RegistryConfig;

use crate::clock::Clock;
use crate::invariants::Checks;
use crate::net::{ForwardTransport, Net, SimPeers, address};
use crate::observer::Recorder;

/// The cluster secret (the simulated transport does not check it; the node does not care).
const SECRET: &str = "simulation";

/// The simulated cluster.
pub struct Cluster {
    seed: u64,
    /// The network.
    pub net: Arc<Net>,
    /// The invariants.
    pub checks: Arc<Mutex<Checks>>,
    /// The clock.
    pub clock: Clock,
    /// Each node's disk, kept across restarts.
    pub disks: BTreeMap<u64, SimDisk>,
    members: BTreeMap<u64, String>,
    processes: BTreeMap<u64, u64>,
    registry: RegistryConfig,
    snapshot_every: u64,
    keep_after_snapshot: u64,
}

impl Cluster {
    /// A cluster of `size` nodes, none started.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        seed: u64,
        size: u64,
        net: Arc<Net>,
        checks: Arc<Mutex<Checks>>,
        clock: Clock,
        registry: RegistryConfig,
        snapshot_every: u64,
        keep_after_snapshot: u64,
    ) -> Cluster {
        let members: BTreeMap<u64, String> = (1..=size).map(|id| (id, address(id))).collect();
        Cluster {
            seed,
            net,
            checks,
            clock,
            disks: members.keys().map(|id| (*id, SimDisk::new())).collect(),
            members,
            processes: BTreeMap::new(),
            registry,
            snapshot_every,
            keep_after_snapshot,
        }
    }

    /// The member ids.
    pub fn ids(&self) -> Vec<u64> {
        self.members.keys().copied().collect()
    }

    /// How many members form a majority.
    pub fn majority(&self) -> usize {
        self.members.len() / 2 + 1
    }

    /// Which start of node `id` runs now (0: never started).
    pub fn process(&self, id: u64) -> u64 {
        self.processes.get(&id).copied().unwrap_or(0)
    }

    /// Starts a new process of node `id` on its disk.
    pub async fn start(&mut self, id: u64) -> Result<(), String> {
        let process = self.process(id) + 1;
        self.processes.insert(id, process);
        let observer = Arc::new(Recorder {
            node: id,
            process,
            checks: Arc::clone(&self.checks),
            clock: self.clock,
        });
        let config = NodeConfig {
            registry: self.registry.clone(),
            snapshot_every: self.snapshot_every,
            keep_after_snapshot: self.keep_after_snapshot,
            cluster: Some(ClusterConfig {
                node_id: id,
                members: self.members.clone(),
                secret: SECRET.into(),
                tls: None,
            }),
            // Distinct for every start of every node, and the same in every run of the seed.
            proposal_session: xxhash_rust::xxh3::xxh3_64(&[self.seed, id, process].map(u64::to_le_bytes).concat()),
            ..NodeConfig::new(format!("/nonexistent/muster-sim/node-{id}"))
        };
        let peers = SimPeers {
            net: Arc::clone(&self.net),
            me: id,
        };
        let forward = PeerClient::with_transport(
            SECRET.into(),
            self.members.clone(),
            Arc::new(ForwardTransport {
                net: Arc::clone(&self.net),
                me: id,
            }),
        );
        let disk = &self.disks[&id];
        let node = Node::open_simulated(config, observer as Arc<dyn ApplyObserver>, peers, forward, disk)
            .await
            .map_err(|e| format!("node {id} did not open: {e}; its disk: {}", disk.describe()))?;
        self.net.up(id, node);
        Ok(())
    }

    /// Crashes node `id` (a power cut); false if it was not running.
    pub async fn crash(&mut self, id: u64) -> bool {
        let Some(node) = self.net.down(id) else { return false };
        self.disks[&id].power_cut();
        let _ = node.shutdown().await;
        true
    }

    /// The running node ids.
    pub fn running(&self) -> Vec<u64> {
        self.net.nodes().keys().copied().collect()
    }
}
