//! Writes the golden files of today's persisted and node-to-node formats (SPEC R1–R7: every
//! later build must read what this one wrote). Run through `tests/golden/generate.sh`, which
//! writes into a fresh directory; a version already checked in is never regenerated (a new
//! format gets a directory of its own beside it). `tests/golden/README.md` says what each file
//! is; `tests/golden.rs` reads them back.
//!
//! ```text
//!  part 1: one node on a real data directory ──workload──▶ OUT/data/   (redb log + snapshots)
//!                                             └─ its redb tables, entry by entry ──▶ OUT/log/
//!  part 2: three nodes on simulated disks, RPCs carried in memory as the HTTP transport
//!          carries them ──▶ the first exchange of each kind ──▶ OUT/wire/
//! ```
//!
//! Fixed inputs: node ids, proposal sessions, command times and every name; what openraft
//! decides by time (election timeouts, heartbeats) is not fixed, so two runs may differ in
//! which heartbeat was captured, never in the registry state they describe.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use muster_consensus::{
    ApplyObserver, CallError, ClusterConfig, Node, NodeConfig, PeerClient, PeerTransport, Rpc, SimDisk, TransportReply,
    TypeConfig,
};
use muster_registry::{Applied, Command, CommandMeta, Registry};
use openraft::BasicNode;
use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use redb::{ReadableDatabase, ReadableTable, TableDefinition};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

/// The proposal session of part 1's node (part 2's nodes add their id): fixed, so batch ids
/// are the same in every run. Any value would do; this one is "golden" in ASCII.
const SESSION: u64 = 0x676f_6c64_656e;
/// The first command's time: 2023-11-14T22:13:20Z, a fixed Unix time in milliseconds.
const T0_MS: u64 = 1_700_000_000_000;
/// The cluster secret of part 2.
const SECRET: &str = "golden-cluster-secret";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .ok_or("usage: golden OUT_DIR (a directory that does not exist yet)")?;
    if out.exists() {
        return Err(format!("{} exists: golden files are never overwritten", out.display()).into());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        data_directory(&out.join("data")).await?;
        dump_log(&out.join("data/raft-log.redb"), &out.join("log"))?;
        wire(&out.join("wire")).await
    })
}

/// Ignores every apply: the generator reads the registry directly.
struct Quiet;

impl ApplyObserver for Quiet {
    fn applied(&self, _registry: &Registry, _applied: &Applied) {}
    fn reset(&self, _registry: &Registry) {}
}

fn meta(step: u64, actor: &str) -> CommandMeta {
    serde_json::from_value(json!({"at_ms": T0_MS + step * 1_000, "principal": "golden", "actor": actor}))
        .expect("a command's metadata")
}

fn command(value: serde_json::Value) -> Command {
    serde_json::from_value(value).expect("a command in today's log spelling")
}

fn target(instance: &str, incarnation: u64) -> serde_json::Value {
    json!({"key": {"tenant": "acme", "namespace": "prod", "service": "api"}, "instance": instance, "incarnation": incarnation})
}

fn spec(ip: &str) -> serde_json::Value {
    json!({
        "addresses": [{"ip": ip}],
        "ports": [{"name": "http", "port": 8080, "protocol": "http"}],
        "locality": {"region": "eu-west", "zone": "eu-west-1a"},
        "labels": {"version": "1.4.2"}
    })
}

/// The workload of part 1, in order: (what it does, the command, its actor).
fn workload() -> Vec<(&'static str, Command, &'static str)> {
    vec![
        (
            "register api-0, granting a 30 s lease",
            command(
                json!({"register": {"target": target("api-0", 1), "spec": spec("10.0.0.1"), "lease": {"grant": {"ttl_ms": 30_000}}}}),
            ),
            "owner",
        ),
        (
            "register api-1 on api-0's lease",
            command(
                json!({"register": {"target": target("api-1", 1), "spec": spec("10.0.0.2"), "lease": {"attach": 1}}}),
            ),
            "owner",
        ),
        (
            "register api-2 without a lease",
            command(json!({"register": {"target": target("api-2", 1), "spec": spec("10.0.0.3")}})),
            "owner",
        ),
        (
            "grant a 60 s lease nothing attaches to",
            command(json!({"grant_lease": {"tenant": "acme", "ttl_ms": 60_000}})),
            "owner",
        ),
        (
            "bootstrap the first operator token",
            command(json!({"acl_bootstrap": {"token": {
                "accessor": "0123456789abcdef0123456789abcdef",
                // SHA-256 of the secret "000…001" (64 hex digits).
                "secret_hash": "c386d8e8d07342f2e39e189c8e6c57bb205bb373fe4e3a6f69404a8bb767b417",
                "rules": [{"namespace": "*", "service": "*", "verbs": ["read", "admin"], "effect": "allow"}],
                "description": "golden operator"
            }}})),
            "owner",
        ),
        (
            "drain api-1 with a 120 s grace",
            command(json!({"drain": {"target": target("api-1", 1), "reason": "rolling restart", "grace_ms": 120_000}})),
            "owner",
        ),
        (
            "api-2 reports not serving",
            command(
                json!({"set_serving": {"target": target("api-2", 1), "state": "not_serving", "reason": "warming caches"}}),
            ),
            "app",
        ),
        // Snapshot 1 here (it becomes snapshot.prev.json).
        (
            "set a new policy: shorter history, longer leases",
            command(json!({"set_policy": {"policy": {"history_revisions": 50_000, "max_lease_ttl_ms": 7_200_000}}})),
            "owner",
        ),
        // Snapshot 2 here (snapshot.json); the log after it holds the rest.
        (
            "deregister api-2",
            command(json!({"deregister": {"target": target("api-2", 1)}})),
            "owner",
        ),
        (
            "register api-3, granting a 10 s lease",
            command(
                json!({"register": {"target": target("api-3", 2), "spec": spec("10.0.0.4"), "lease": {"grant": {"ttl_ms": 10_000}}}}),
            ),
            "owner",
        ),
    ]
}

/// Part 1: the workload on one node over a real data directory, with two snapshots, so the
/// directory holds the log, the vote, a current and a previous snapshot and a purged prefix.
async fn data_directory(dir: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let config = NodeConfig {
        // Only the two explicit snapshots.
        snapshot_every: 10_000,
        // Keep 3 entries behind a snapshot: the log is purged (a `last_purged` record), but
        // not past the previous snapshot, so either snapshot file opens with the log.
        keep_after_snapshot: 3,
        proposal_session: SESSION,
        ..NodeConfig::new(dir)
    };
    let node = Node::open(config, Arc::new(Quiet)).await?;
    for (step, (what, command, actor)) in (0_u64..).zip(workload()) {
        let verdict = node.propose(command, meta(step, actor)).await?;
        let applied = verdict.map_err(|rejection| format!("{what}: refused: {rejection}"))?;
        eprintln!("{what}: revision {}", applied.revision.0);
        if step == 6 || step == 7 {
            node.snapshot().await?;
            // openraft purges after the snapshot is stored, in its own time.
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
    let status = node.status();
    eprintln!(
        "data directory: applied index {}, revision {}",
        status.applied_index, status.revision.0
    );
    node.shutdown().await?;
    Ok(())
}

const LOG: TableDefinition<'_, u64, &[u8]> = TableDefinition::new("log");
const META: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("meta");

/// The redb log's tables as plain files: `entries.jsonl` (each stored entry's exact bytes, one
/// a line, in index order) and `meta.<key>.json` (each metadata value's exact bytes).
fn dump_log(db: &Path, out: &Path) -> Result<(), Box<dyn std::error::Error>> {
    std::fs::create_dir_all(out)?;
    let db = redb::Database::open(db)?;
    let txn = db.begin_read()?;
    let mut entries = Vec::new();
    for item in txn.open_table(LOG)?.iter()? {
        let (_, bytes) = item?;
        entries.extend_from_slice(bytes.value());
        entries.push(b'\n');
    }
    std::fs::write(out.join("entries.jsonl"), entries)?;
    for item in txn.open_table(META)?.iter()? {
        let (key, bytes) = item?;
        std::fs::write(out.join(format!("meta.{}.json", key.value())), bytes.value())?;
    }
    Ok(())
}

/// One captured exchange: the request body as the sender put it on the wire, the reply body
/// as the receiver answered.
#[derive(Debug, Clone)]
struct Exchange {
    from: u64,
    to: u64,
    rpc: Rpc,
    request: Vec<u8>,
    reply: Result<Vec<u8>, String>,
}

/// Three nodes' in-memory network: delivers each request to the target's `Node::rpc`, as the
/// cluster listener does, and keeps a copy of every exchange.
#[derive(Default)]
struct Net {
    nodes: Mutex<BTreeMap<u64, Node>>,
    /// Nodes cut off from the others.
    cut: Mutex<std::collections::BTreeSet<u64>>,
    log: Mutex<Vec<Exchange>>,
}

impl Net {
    async fn deliver(&self, from: u64, to: u64, rpc: Rpc, request: Vec<u8>) -> Result<Vec<u8>, String> {
        let reachable = {
            let cut = self.cut.lock().expect("net lock");
            !cut.contains(&from) && !cut.contains(&to)
        };
        let node = self.nodes.lock().expect("net lock").get(&to).cloned();
        let Some(node) = node.filter(|_| reachable) else {
            return Err(format!("node {to} is unreachable from node {from}"));
        };
        let reply = node.rpc(rpc, &request).await;
        self.log.lock().expect("net lock").push(Exchange {
            from,
            to,
            rpc,
            request,
            reply: reply.clone(),
        });
        reply
    }
}

/// Raft's side of the network.
struct Peers {
    net: Arc<Net>,
    me: u64,
}

struct Peer {
    net: Arc<Net>,
    from: u64,
    to: u64,
}

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

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Lost(String);

impl Peer {
    /// Sends `bytes` (the body exactly as the HTTP transport encodes it) and decodes the reply
    /// as the HTTP transport does.
    async fn call<R: DeserializeOwned, E: std::error::Error + DeserializeOwned>(
        &self,
        rpc: Rpc,
        bytes: Vec<u8>,
    ) -> Result<R, RPCError<u64, BasicNode, RaftError<u64, E>>> {
        let reply = self
            .net
            .deliver(self.from, self.to, rpc, bytes)
            .await
            .map_err(|e| RPCError::Unreachable(Unreachable::new(&Lost(e))))?;
        let reply: Result<R, RaftError<u64, E>> =
            serde_json::from_slice(&reply).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        reply.map_err(|e| RPCError::RemoteError(RemoteError::new(self.to, e)))
    }
}

/// The JSON body the HTTP transport sends (`network.rs`: `serde_json::to_vec`).
fn json_body<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).expect("Raft messages serialise")
}

impl RaftNetwork<TypeConfig> for Peer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        self.call(Rpc::Append, json_body(&rpc)).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<InstallSnapshotResponse<u64>, RPCError<u64, BasicNode, RaftError<u64, InstallSnapshotError>>> {
        self.call(Rpc::Snapshot, muster_consensus::snapshot_frame::encode(&rpc))
            .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        _option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        self.call(Rpc::Vote, json_body(&rpc)).await
    }
}

/// The follower's side: forwarded writes and read-index requests, through the real
/// `PeerClient` (which encodes them), delivered like the Raft RPCs.
struct Forward {
    net: Arc<Net>,
    me: u64,
}

impl PeerTransport for Forward {
    fn post(&self, addr: &str, path: &str, body: Vec<u8>) -> TransportReply {
        let net = Arc::clone(&self.net);
        let from = self.me;
        let to = addr.strip_prefix("node-").and_then(|id| id.parse::<u64>().ok());
        let rpc = path.strip_prefix("/raft/").and_then(Rpc::from_segment);
        let path = path.to_owned();
        Box::pin(async move {
            let (Some(to), Some(rpc)) = (to, rpc) else {
                return Err(CallError::Unreachable(format!("no route to {path}")));
            };
            match net.deliver(from, to, rpc, body).await {
                Ok(reply) => Ok((200, reply.into())),
                Err(message) => Err(CallError::Unreachable(message)),
            }
        })
    }
}

/// Part 2: a cluster of three, node 3 cut off at first; a write on the leader, a write on a
/// follower (forwarded), a consistent read on a follower (read index), a snapshot with the
/// log purged behind it, then node 3 let in, which must install the snapshot.
async fn wire(out: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let members: BTreeMap<u64, String> = (1..=3).map(|id| (id, format!("node-{id}"))).collect();
    let net = Arc::new(Net::default());
    net.cut.lock().expect("net lock").insert(3);
    let mut disks = Vec::new();
    for id in 1..=3_u64 {
        let config = NodeConfig {
            snapshot_every: 10_000,
            // Nothing kept behind a snapshot: node 3 can only catch up by installing it.
            keep_after_snapshot: 0,
            cluster: Some(ClusterConfig {
                node_id: id,
                members: members.clone(),
                secret: SECRET.into(),
                tls: None,
            }),
            proposal_session: SESSION + id,
            ..NodeConfig::new(format!("/nonexistent/golden/node-{id}"))
        };
        let forward = PeerClient::with_transport(
            SECRET.into(),
            members.clone(),
            Arc::new(Forward {
                net: Arc::clone(&net),
                me: id,
            }),
        );
        let disk = SimDisk::new();
        let peers = Peers {
            net: Arc::clone(&net),
            me: id,
        };
        let node = Node::open_simulated(config, Arc::new(Quiet), peers, forward, &disk).await?;
        net.nodes.lock().expect("net lock").insert(id, node);
        disks.push(disk);
    }
    let node = |id: u64| net.nodes.lock().expect("net lock")[&id].clone();
    wait_until("node 1 leads", || node(1).is_leader()).await?;

    let step = workload();
    let leader_write = node(1).propose(step[0].1.clone(), meta(0, "owner")).await??;
    eprintln!("write on the leader: revision {}", leader_write.revision.0);
    let forwarded = node(2).propose(step[2].1.clone(), meta(2, "owner")).await??;
    eprintln!("write forwarded by node 2: revision {}", forwarded.revision.0);
    let read_index = node(2).linearizable().await?;
    eprintln!("read index through node 2: {read_index}");
    node(1).snapshot().await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    net.cut.lock().expect("net lock").clear();
    let target = node(1).status().applied_index;
    wait_until("node 3 catches up", || node(3).status().applied_index >= target).await?;

    let exchanges = net.log.lock().expect("net lock").clone();
    std::fs::create_dir_all(out)?;
    let holds = |e: &Exchange, text: &str| String::from_utf8_lossy(&e.request).contains(text);
    let append = |e: &Exchange| e.rpc == Rpc::Append && e.from == 1 && e.to == 2;
    let picks: [(&str, Pick); 7] = [
        ("vote", Box::new(|e| e.rpc == Rpc::Vote && e.from == 1 && e.to == 2)),
        // Raft's own entries: the membership the cluster formed with, the leader's blank.
        (
            "append-membership",
            Box::new(move |e| append(e) && holds(e, "\"Membership\"")),
        ),
        // A proposal batch.
        ("append", Box::new(move |e| append(e) && holds(e, "\"Normal\""))),
        // A heartbeat: no entries.
        (
            "append-heartbeat",
            Box::new(move |e| append(e) && holds(e, "\"entries\":[]")),
        ),
        ("snapshot", Box::new(|e| e.rpc == Rpc::Snapshot && e.to == 3)),
        ("propose", Box::new(|e| e.rpc == Rpc::Propose && e.from == 2)),
        ("read_index", Box::new(|e| e.rpc == Rpc::ReadIndex && e.from == 2)),
    ];
    for (name, pick) in picks {
        let exchange = exchanges
            .iter()
            .find(|e| pick(e))
            .ok_or_else(|| format!("no {name} exchange was captured"))?;
        let reply = exchange
            .reply
            .clone()
            .map_err(|e| format!("the {name} exchange failed: {e}"))?;
        let extension = if exchange.rpc == Rpc::Snapshot { "bin" } else { "json" };
        std::fs::write(out.join(format!("{name}.request.{extension}")), &exchange.request)?;
        std::fs::write(out.join(format!("{name}.reply.json")), reply)?;
    }
    for id in 1..=3 {
        node(id).shutdown().await?;
    }
    Ok(())
}

/// Which captured exchange a golden file is made of.
type Pick = Box<dyn Fn(&Exchange) -> bool>;

/// Polls `done` every 10 ms for up to 10 s.
async fn wait_until(what: &str, done: impl Fn() -> bool) -> Result<(), String> {
    for _ in 0..1_000 {
        if done() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Err(format!("timed out waiting until {what}"))
}
