//! A 3-node cluster on an in-memory network with drop rules (SPEC R), driven by a seeded
//! fault schedule: writes, crashes with restarts from disk, partitions of one node, heals.
//! After every step the invariants are checked on every running node; at the end, after
//! healing, every node must hold the same state.
//!
//! Invariants:
//! - no revision applied twice or out of order on any node (each node's revisions, as its
//!   observer sees them, rise by exactly one from the state it started or was reset to);
//! - no acknowledged write lost: after every step the current leader (once it confirmed its
//!   leadership and applied what it committed) holds every acknowledged write, and so does
//!   every node in the end;
//! - no endpoint resurrected by an older incarnation: each instance ends at the highest
//!   incarnation acknowledged for it (writes only ever raise an instance's incarnation);
//! - convergence: after healing, every node has the same revision and the same state.
//!
//! The schedule is seeded (the same seed, the same actions); the cluster's own timing is
//! tokio's real clock and openraft's election randomness, so runs are not bit-identical.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use muster_consensus::{ApplyObserver, ClusterConfig, Node, NodeConfig, Rpc, TypeConfig};
use muster_core::{Actor, AddressSpec, EndpointSpec, Incarnation, InstanceId, Principal, Revision, ServiceKey};
use muster_registry::{Applied, Command, CommandMeta, LeaseSpec, Register, Registry, Target};
use openraft::BasicNode;
use openraft::error::{InstallSnapshotError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

const SEED: u64 = 0x6d75_7374_6572;
const STEPS: usize = 40;

/// The in-memory network: who is up, and which links are cut.
#[derive(Default)]
struct Net {
    nodes: Mutex<BTreeMap<u64, Node>>,
    cut: Mutex<BTreeSet<(u64, u64)>>,
}

impl Net {
    fn reachable(&self, from: u64, to: u64) -> Option<Node> {
        if self.cut.lock().unwrap().contains(&(from, to)) {
            return None;
        }
        self.nodes.lock().unwrap().get(&to).cloned()
    }
}

struct Peers {
    net: Arc<Net>,
    me: u64,
}

struct Peer {
    net: Arc<Net>,
    from: u64,
    to: u64,
}

#[derive(Debug, thiserror::Error)]
#[error("link {0} → {1} is down")]
struct Down(u64, u64);

impl RaftNetworkFactory<TypeConfig> for Peers {
    type Network = Peer;

    async fn new_client(&mut self, target: u64, _node: &BasicNode) -> Peer {
        Peer {
            net: Arc::clone(&self.net),
            from: self.me,
            to: target,
        }
    }
}

impl Peer {
    async fn call<B: Serialize, R: DeserializeOwned, E: std::error::Error + DeserializeOwned>(
        &self,
        rpc: Rpc,
        body: &B,
    ) -> Result<R, RPCError<u64, BasicNode, RaftError<u64, E>>> {
        let down = || RPCError::Unreachable(Unreachable::new(&Down(self.from, self.to)));
        let node = self.net.reachable(self.from, self.to).ok_or_else(down)?;
        let reply = node
            .rpc(rpc, &serde_json::to_vec(body).unwrap())
            .await
            .map_err(|_| down())?;
        // The reply is lost if the link went down meanwhile.
        if self.net.reachable(self.to, self.from).is_none() {
            return Err(down());
        }
        let reply: Result<R, RaftError<u64, E>> = serde_json::from_slice(&reply).unwrap();
        reply.map_err(|e| RPCError::RemoteError(RemoteError::new(self.to, e)))
    }
}

impl RaftNetwork<TypeConfig> for Peer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        self.call(Rpc::Append, &rpc).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<InstallSnapshotResponse<u64>, RPCError<u64, BasicNode, RaftError<u64, InstallSnapshotError>>> {
        self.call(Rpc::Snapshot, &rpc).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        _option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        self.call(Rpc::Vote, &rpc).await
    }
}

/// Checks, as they are applied, that a node's revisions rise by exactly one (commands that
/// change nothing, such as the adoption of the first policy, keep the revision).
#[derive(Default)]
struct Order {
    last: Mutex<Option<Revision>>,
    violations: Mutex<Vec<String>>,
}

impl ApplyObserver for Order {
    fn applied(&self, _registry: &Registry, applied: &Applied) {
        if applied.unchanged.is_some() {
            return;
        }
        let mut last = self.last.lock().unwrap();
        if let Some(previous) = *last
            && applied.revision.0 != previous.0 + 1
        {
            self.violations
                .lock()
                .unwrap()
                .push(format!("revision {} applied after {}", applied.revision, previous));
        }
        *last = Some(applied.revision);
    }

    fn reset(&self, registry: &Registry) {
        *self.last.lock().unwrap() = Some(registry.revision());
    }
}

/// SplitMix64: the schedule's only randomness.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn key() -> ServiceKey {
    ServiceKey::new("acme", "prod", "api").unwrap()
}

fn register(instance: u64, incarnation: u64) -> (Command, CommandMeta) {
    let command = Register {
        target: Target {
            key: key(),
            instance: InstanceId::new(&format!("i-{instance}")).unwrap(),
            incarnation: Incarnation(incarnation),
        },
        spec: EndpointSpec {
            addresses: vec![AddressSpec {
                ip: format!("10.0.0.{}", instance + 1),
                scope: None,
            }],
            ..EndpointSpec::default()
        },
        lease: LeaseSpec::None,
        expected_revision: None,
    }
    .into();
    let meta = CommandMeta {
        at_ms: 1,
        principal: Principal::new("sim").unwrap(),
        actor: Actor::App,
    };
    (command, meta)
}

/// Each instance's incarnation in a node's state.
fn incarnations(node: &Node) -> BTreeMap<u64, u64> {
    node.read(|r| {
        r.snapshot(&key())
            .map(|s| {
                s.iter()
                    .map(|e| (e.instance.as_str()[2..].parse().unwrap(), e.incarnation.0))
                    .collect()
            })
            .unwrap_or_default()
    })
}

struct Sim {
    net: Arc<Net>,
    dir: tempfile::TempDir,
    members: BTreeMap<u64, String>,
    orders: BTreeMap<u64, Arc<Order>>,
}

impl Sim {
    async fn open(&mut self, id: u64) {
        let order = Arc::new(Order::default());
        let config = NodeConfig {
            cluster: Some(ClusterConfig {
                node_id: id,
                members: self.members.clone(),
                secret: "simulation-secret".into(),
            }),
            // Small snapshots, so restarts and lagging nodes go through snapshots too.
            snapshot_every: 20,
            ..NodeConfig::new(self.dir.path().join(format!("node-{id}")))
        };
        let peers = Peers {
            net: Arc::clone(&self.net),
            me: id,
        };
        let node = Node::open_with_network(config, Arc::clone(&order) as Arc<dyn ApplyObserver>, peers)
            .await
            .expect("the node opens");
        self.orders.insert(id, order);
        self.net.nodes.lock().unwrap().insert(id, node);
    }

    async fn crash(&mut self, id: u64) {
        let node = self.net.nodes.lock().unwrap().remove(&id);
        if let Some(node) = node {
            let _ = node.shutdown().await;
        }
    }

    fn isolate(&self, id: u64) {
        let mut cut = self.net.cut.lock().unwrap();
        for other in self.members.keys().filter(|other| **other != id) {
            cut.insert((id, *other));
            cut.insert((*other, id));
        }
    }

    fn heal(&self) {
        self.net.cut.lock().unwrap().clear();
    }

    /// A leader that a majority can reach, if there is one now.
    fn leader(&self) -> Option<Node> {
        let nodes = self.net.nodes.lock().unwrap().clone();
        let cut = self.net.cut.lock().unwrap().clone();
        nodes
            .values()
            .find(|node| {
                let id = node.status().node_id;
                let reachable = nodes
                    .keys()
                    .filter(|other| **other == id || !cut.contains(&(id, **other)))
                    .count();
                node.is_leader() && reachable * 2 > self.members.len()
            })
            .cloned()
    }

    fn check_order(&self) {
        for (id, order) in &self.orders {
            let violations = order.violations.lock().unwrap();
            assert!(violations.is_empty(), "node {id}: {violations:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seeded_schedule_of_crashes_partitions_and_writes_keeps_every_invariant() {
    let members: BTreeMap<u64, String> = (1..=3).map(|id| (id, format!("node-{id}"))).collect();
    let mut sim = Sim {
        net: Arc::new(Net::default()),
        dir: tempfile::tempdir().unwrap(),
        members,
        orders: BTreeMap::new(),
    };
    for id in 1..=3 {
        sim.open(id).await;
    }
    let mut rng = Rng(SEED);
    // The highest incarnation acknowledged per instance, and the next one to write.
    let mut acknowledged: BTreeMap<u64, u64> = BTreeMap::new();
    let mut next_incarnation: BTreeMap<u64, u64> = BTreeMap::new();
    let mut writes = 0;
    for _ in 0..STEPS {
        match rng.below(10) {
            0 => {
                let id = rng.below(3) + 1;
                sim.crash(id).await;
                tokio::time::sleep(Duration::from_millis(200)).await;
                sim.open(id).await;
            }
            1 => sim.isolate(rng.below(3) + 1),
            2 => sim.heal(),
            _ => {
                let instance = rng.below(8);
                let incarnation = next_incarnation.entry(instance).or_insert(0);
                *incarnation += 1;
                let incarnation = *incarnation;
                // Wait (bounded) for a leader a majority can reach; a write without one is
                // simply not acknowledged.
                let mut leader = None;
                for _ in 0..50 {
                    leader = sim.leader();
                    if leader.is_some() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                if let Some(leader) = leader {
                    let (command, meta) = register(instance, incarnation);
                    let written = tokio::time::timeout(Duration::from_secs(3), leader.propose(command, meta)).await;
                    if let Ok(Ok(Ok(_))) = written {
                        acknowledged.insert(instance, incarnation);
                        writes += 1;
                    }
                }
            }
        }
        sim.check_order();
        // A leader holds every committed entry (Raft's leader completeness): once it has
        // applied what it committed, every acknowledged write is in its state.
        if let Some(leader) = sim.leader() {
            let settled = tokio::time::timeout(Duration::from_secs(3), leader.linearizable()).await;
            if let Ok(Ok(())) = settled {
                let held = incarnations(&leader);
                for (instance, incarnation) in &acknowledged {
                    assert!(
                        held.get(instance).is_some_and(|now| now >= incarnation),
                        "the leader lost i-{instance} at incarnation {incarnation}: {held:?}"
                    );
                }
            }
        }
    }
    assert!(writes >= STEPS / 2, "the schedule acknowledged {writes} writes");

    sim.heal();
    let mut states = Vec::new();
    for _ in 0..200 {
        let nodes = sim.net.nodes.lock().unwrap().clone();
        states = nodes
            .values()
            .map(|node| node.read(|r| (r.revision(), serde_json::to_vec(&r.export()).unwrap())))
            .collect();
        if states.len() == 3 && states.windows(2).all(|w| w[0] == w[1]) && states[0].0.0 > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(states.windows(2).all(|w| w[0] == w[1]), "the nodes did not converge");
    sim.check_order();

    let node = sim.net.nodes.lock().unwrap().values().next().cloned().unwrap();
    let held = incarnations(&node);
    for (instance, incarnation) in &acknowledged {
        let now = held.get(instance).copied();
        assert!(
            now.is_some_and(|now| now >= *incarnation),
            "i-{instance}: acknowledged incarnation {incarnation}, the state holds {now:?}"
        );
    }
    for (instance, incarnation) in &held {
        assert!(
            *incarnation <= next_incarnation[instance],
            "i-{instance} at incarnation {incarnation}, never written"
        );
        assert!(
            acknowledged.get(instance).is_none_or(|acked| incarnation >= acked),
            "i-{instance} went back to an older incarnation"
        );
    }
    for id in 1..=3 {
        sim.crash(id).await;
    }
}
