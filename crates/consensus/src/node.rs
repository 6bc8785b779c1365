//! The node: the one way into the registry. A Raft group on openraft — of one by default, or
//! a static cluster of 3 or 5 ([`ClusterConfig`]) — with the log on redb and snapshots in the
//! data directory.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use muster_core::{Rejection, Revision};
use muster_registry::{Applied, Command, CommandMeta, Registry, RegistryConfig, SetPolicy};
use openraft::network::RaftNetworkFactory;
use openraft::{BasicNode, Raft, ServerState, SnapshotPolicy};

use crate::batcher::Batcher;
use crate::log_store::LogStore;
use crate::network::{HttpPeers, NoPeers, PeerClient, Rpc};
use crate::sim_disk::{SimDisk, SimSnapshots};
use crate::sim_log_store::SimLogStore;
use crate::snapshot_store::SnapshotStore;
use crate::state_machine::{Opened, Shared, StateMachine};
use crate::types::{LogId, Proposal, TypeConfig};

/// The only member of a group of one.
const SINGLE_NODE_ID: u64 = 1;
/// How long `open` waits for the node to elect itself: an election takes one election timeout
/// (at most 600 ms here); ten seconds covers a slow disk replaying a long log.
const LEADERSHIP_WAIT: Duration = Duration::from_secs(10);

/// How long `snapshot` waits for a build before it triggers again: a snapshot of a large
/// registry takes a fraction of a second; a trigger openraft dropped costs at most this.
const SNAPSHOT_RETRIGGER: Duration = Duration::from_millis(500);

/// The bytes of snapshot in one `POST /raft/snapshot` (openraft's default, kept on
/// purpose). The chunk travels raw (`snapshot_frame`), so the body is this plus a head of a
/// few hundred bytes, well inside the cluster listener's body limit. Not raised: openraft
/// gives each chunk `install_snapshot_timeout` (its default, 200 ms) to cross, decode and be
/// written, so 3 MiB already asks for ~120 Mbit/s between members, while a larger chunk
/// would save only a round trip per 3 MiB.
pub const SNAPSHOT_CHUNK_BYTES: u64 = 3 * 1024 * 1024;

/// How long `shutdown` waits for the log writer's last commit: far beyond one fsync.
const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// How to open a node.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// Where the log, vote and snapshots live.
    pub data_dir: PathBuf,
    /// The registry's configuration (identical on every replica).
    pub registry: RegistryConfig,
    /// Log entries between state-machine snapshots; the log before a snapshot is purged.
    pub snapshot_every: u64,
    /// Log entries kept behind a snapshot, so a follower a little behind catches up from the
    /// log rather than a whole snapshot: 1,000.
    pub keep_after_snapshot: u64,
    /// The cluster this node belongs to; `None`: a group of one.
    pub cluster: Option<ClusterConfig>,
    /// Identifies this start of the node in the ids of the batches it proposes, so a retried
    /// batch is applied once (SPEC R6). It must differ from every earlier start's — of this
    /// node id, whatever happened to its data directory (wiped, restored from a backup,
    /// replaced, the id reused): the replicated table of applied batches outlives all of
    /// those. [`NodeConfig::new`] draws it at random (64 bits: a repeat is out of reach); a
    /// deterministic harness sets it from its seed.
    pub proposal_session: u64,
}

/// A static cluster: this node's id, every member's cluster address (this node's included),
/// the secret every node-to-node request carries, and the mutual TLS they travel over.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// This node's id, a key of `members`.
    pub node_id: u64,
    /// Every voter: id → `host:port` of its cluster listener.
    pub members: BTreeMap<u64, String>,
    /// The shared secret.
    pub secret: muster_core::Secret,
    /// Mutual TLS to the other members' cluster listeners (`https://`): verifies them
    /// against the cluster CA and presents this node's certificate. `None`: plain HTTP.
    pub tls: Option<std::sync::Arc<muster_tls::ClientConfig>>,
}

impl NodeConfig {
    /// A node in `data_dir` with default registry settings and a snapshot every 10,000
    /// entries: at ~1 KiB an entry that bounds the log replayed at restart to ~10 MiB.
    pub fn new(data_dir: impl Into<PathBuf>) -> NodeConfig {
        NodeConfig {
            data_dir: data_dir.into(),
            registry: RegistryConfig::default(),
            snapshot_every: 10_000,
            keep_after_snapshot: 1_000,
            cluster: None,
            proposal_session: random_session(),
        }
    }
}

/// 64 random bits from the standard library's per-process hash keys (drawn from the
/// operating system's generator), mixed with a per-call counter so two nodes opened by one
/// process differ too.
fn random_session() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    hasher.finish()
}

/// Told about every applied command, in log order, while the registry is locked for the
/// apply: implementations must be quick and must not call back into the node.
///
/// # Correctness
/// - `applied` and `judged` see each proposal of a batch at most once per process: a retry of
///   a batch already applied, or a late copy of an older one ([`crate::types::BatchId`]), is
///   answered from the table of applied batches and reported to neither.
/// - Every replica reports the same proposals with the same verdicts, in the same order; a
///   replica that catches up by installing a snapshot reports only what it applies after it
///   (the snapshot's own history is not replayed, `reset` is called instead).
/// - After a restart the log after the newest snapshot is applied again through the same
///   path, so it is reported again: whatever an observer derives from it must be derived
///   state that starts empty at open, or recognise what it already holds by
///   [`Judged::log_index`] and [`Judged::position`].
pub trait ApplyObserver: Send + Sync + 'static {
    /// A command was applied (a refusal is not reported: it changed nothing).
    fn applied(&self, registry: &Registry, applied: &Applied);
    /// A committed proposal was judged, applied or refused (after `applied`, for an applied
    /// one): the audit trail's source (SPEC S4). Does nothing unless implemented.
    fn judged(&self, judged: &Judged<'_>) {
        let _ = judged;
    }
    /// The whole state was replaced (at open, or restored from a snapshot): everything
    /// derived from it must be rebuilt, and watchers resynchronised.
    fn reset(&self, registry: &Registry);
}

/// One committed proposal and the registry's verdict on it, as [`ApplyObserver::judged`]
/// sees it: the same on every replica.
#[derive(Debug, Clone, Copy)]
pub struct Judged<'a> {
    /// The log entry that carried it.
    pub log_index: u64,
    /// Its place in that entry's batch, from 0.
    pub position: usize,
    /// The node that proposed the batch (`None` for entries written before batches had ids).
    pub origin: Option<u64>,
    /// The command.
    pub command: &'a Command,
    /// Who sent it and when (fixed in the log).
    pub meta: &'a CommandMeta,
    /// The verdict.
    pub result: &'a Result<Applied, Rejection>,
    /// Applied again as the node starts: the entry is at or below the committed id the log
    /// held when it opened, so the process before this one most likely applied it already.
    /// Derived state rebuilt at open (the audit trail, the endpoint log) wants it; a count of
    /// what happened since the process started (metrics) does not (SPEC O1).
    pub replayed: bool,
}

/// A member of the group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Its node id.
    pub id: u64,
    /// Its cluster listener's address.
    pub addr: String,
    /// A voter (counts for quorum) or a learner (replicated to, does not vote).
    pub voter: bool,
}

fn membership_error(
    error: openraft::error::RaftError<u64, openraft::error::ClientWriteError<u64, BasicNode>>,
) -> ConsensusError {
    use openraft::error::{ClientWriteError, RaftError};
    match error {
        RaftError::APIError(ClientWriteError::ForwardToLeader(forward)) => ConsensusError::NotLeader(forward.leader_id),
        RaftError::APIError(ClientWriteError::ChangeMembershipError(e)) => ConsensusError::Membership(e.to_string()),
        other => ConsensusError::Storage(other.to_string()),
    }
}

/// What a node reports about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeStatus {
    /// This node's id.
    pub node_id: u64,
    /// The current leader, if one is known.
    pub leader: Option<u64>,
    /// The index of the last applied log entry.
    pub applied_index: u64,
    /// The registry's revision.
    pub revision: Revision,
    /// Why the node has stopped serving, when its storage failed (Raft stops on the first
    /// failed write: nothing after it is acknowledged).
    pub fatal: Option<String>,
}

/// Why a proposal or the node itself failed (not a registry refusal).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ConsensusError {
    /// The node is shutting down or has stopped.
    #[error("the node is shutting down")]
    ShuttingDown,
    /// No leader is known, so the write cannot be committed now.
    #[error("no leader: the write was not committed")]
    NoLeader,
    /// No quorum answered in time: the write may or may not commit later (retry: writes are
    /// idempotent).
    #[error("no quorum: the write was not acknowledged by a majority in time")]
    NoQuorum,
    /// A membership change was refused (e.g. removing the last voter, a change in progress).
    #[error("membership: {0}")]
    Membership(String),
    /// A membership change or a leader duty asked a node that does not lead (the leader, if
    /// known).
    #[error("this node does not lead{}: ask the leader", .0.map(|id| format!(" (node {id} does)")).unwrap_or_default())]
    NotLeader(Option<u64>),
    /// A proposal too large for one log entry, refused before it was queued: nothing changed.
    #[error("the write encodes to {bytes} bytes, more than the {limit} one log entry may hold")]
    TooLarge {
        /// Its encoded length.
        bytes: usize,
        /// [`crate::MAX_PROPOSAL_BYTES`].
        limit: usize,
    },
    /// Storage or the Raft core failed.
    #[error("storage: {0}")]
    Storage(String),
    /// This node's storage failed, so Raft stopped for good: nothing is acknowledged here
    /// any more (the message names the failure). The server exits; ask another node.
    #[error("this node stopped after a storage failure ({0}); the write was not acknowledged")]
    Failed(String),
}

/// Encoded bytes of a leader duty's one command at most ([`Node::propose_as_leader`]): half
/// the node-to-node listener's limit, so the entry, framed, is never refused by it.
const MAX_LEADER_ENTRY_BYTES: usize = crate::append_pacer::MAX_RPC_BYTES / 2;

/// The log store a node runs on.
enum Log {
    /// redb in the data directory.
    Disk(LogStore),
    /// A simulated disk.
    Sim(SimLogStore),
}

/// What opening the data directory (or a simulated disk) gives, before Raft starts.
struct Parts {
    log: Log,
    log_writer: Arc<std::sync::Mutex<Option<std::thread::JoinHandle<()>>>>,
    machine: StateMachine,
    shared: Arc<Shared>,
    raft_config: Arc<openraft::Config>,
}

impl Parts {
    /// Opens the data directory, or `disk` when given (and then no file is touched).
    fn open(
        config: &NodeConfig,
        observer: Arc<dyn ApplyObserver>,
        disk: Option<&SimDisk>,
    ) -> Result<Parts, ConsensusError> {
        let storage = |e: std::io::Error| ConsensusError::Storage(e.to_string());
        let log_path = config.data_dir.join("raft-log.redb");
        let log_name = match disk {
            None => log_path.display().to_string(),
            Some(_) => "the simulated log".to_owned(),
        };
        let named = |e: std::io::Error| ConsensusError::Storage(format!("{log_name}: {e}"));
        // A log created by this open, beside a snapshot, means the log was lost: its vote and
        // the entries after the snapshot with it.
        let log_was_there = disk.is_some() || log_path.exists();
        let (log, log_writer) = match disk {
            None => {
                std::fs::create_dir_all(&config.data_dir).map_err(storage)?;
                let log = LogStore::open(&log_path).map_err(named)?;
                let writer = log.take_writer_thread();
                (Log::Disk(log), writer)
            }
            Some(disk) => (Log::Sim(SimLogStore::open(disk).map_err(storage)?), None),
        };
        let opened = (|| {
            let (snapshots, last_purged, committed) = match (&log, disk) {
                (Log::Disk(log), _) => (
                    SnapshotStore::open_dir(&config.data_dir).map_err(storage)?,
                    log.last_purged_index(),
                    log.committed_index().map_err(named)?,
                ),
                (Log::Sim(log), Some(disk)) => (
                    SnapshotStore::Sim(SimSnapshots::new(disk)),
                    log.last_purged_index(),
                    log.committed_index(),
                ),
                (Log::Sim(_), None) => unreachable!("a simulated log is opened on a simulated disk"),
            };
            let mut machine = StateMachine::open_in(snapshots, config.registry.clone(), observer).map_err(storage)?;
            if !log_was_there && machine.snapshot_index() > 0 {
                return Err(ConsensusError::Storage(format!(
                    "cannot open without losing acknowledged writes: {log_name} is missing beside {} at index \
                     {}, so this node's vote and every entry after that snapshot are gone. Put the log back, or, \
                     on a member of a cluster, remove this data directory and add the node again",
                    machine.opened().loaded.unwrap_or("a snapshot"),
                    machine.snapshot_index()
                )));
            }
            reaches_back(machine.opened(), machine.snapshot_index(), last_purged, &log_name)
                .map_err(|behind| ConsensusError::Storage(behind.to_string()))?;
            machine.replays_until(committed);
            Ok(machine)
        })();
        let machine = match opened {
            Ok(machine) => machine,
            Err(error) => {
                // Closed before the error returns, so the data directory is free again.
                drop(log);
                if let Some(writer) = log_writer {
                    let _ = writer.join();
                }
                return Err(error);
            }
        };
        let log_writer = Arc::new(std::sync::Mutex::new(log_writer));
        let mut log = log;
        match &mut log {
            Log::Disk(log) => log.guard_purges(machine.durable_snapshot()),
            Log::Sim(log) => log.guard_purges(machine.durable_snapshot()),
        }
        let shared = machine.shared();
        let raft_config = openraft::Config {
            cluster_name: "muster".into(),
            // 100 ms heartbeats, elections after 300–600 ms of silence: a leader's loss is
            // noticed well inside a second, and a single node elects itself at start.
            heartbeat_interval: 100,
            election_timeout_min: 300,
            election_timeout_max: 600,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(config.snapshot_every),
            max_in_snapshot_log_to_keep: config.keep_after_snapshot,
            snapshot_max_chunk_size: SNAPSHOT_CHUNK_BYTES,
            max_payload_entries: crate::append_pacer::MAX_APPEND_ENTRIES,
            ..openraft::Config::default()
        }
        .validate()
        .map_err(|e| ConsensusError::Storage(e.to_string()))?;
        Ok(Parts {
            log,
            log_writer,
            machine,
            shared,
            raft_config: Arc::new(raft_config),
        })
    }

    /// Starts Raft on these parts.
    async fn start<N: RaftNetworkFactory<TypeConfig>>(self, id: u64, network: N) -> Result<Started, ConsensusError> {
        let raft = match self.log {
            Log::Disk(log) => Raft::new(id, self.raft_config, network, log, self.machine).await,
            Log::Sim(log) => Raft::new(id, self.raft_config, network, log, self.machine).await,
        }
        .map_err(fatal)?;
        Ok(Started {
            raft,
            shared: self.shared,
            log_writer: self.log_writer,
        })
    }
}

/// The term node `id` leads in: when it is the leader and has applied an entry of the
/// current term (see [`Node::leading_term`]).
fn leads_in(id: u64, leader: Option<u64>, term: u64, last_applied: Option<LogId>) -> Option<u64> {
    let applied_this_term = last_applied.is_some_and(|applied| applied.leader_id.term == term);
    (leader == Some(id) && applied_this_term).then_some(term)
}

/// A node whose log does not reach back to the snapshot it loaded ([`reaches_back`]).
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot open without losing acknowledged writes: {log} is purged up to index {last_purged}, but {loaded}\
     {passed_over}. Put back a good snapshot file, or, on a member of a cluster, remove this data directory and \
     add the node again so that it catches up from the leader"
)]
struct LogBehind {
    log: String,
    last_purged: u64,
    /// Which snapshot loaded, and where it ends.
    loaded: String,
    /// The snapshots passed over and why, in parentheses (empty: none).
    passed_over: String,
}

/// Refuses to open a node whose log does not reach back to the snapshot it loaded: the
/// entries in between were acknowledged and are in no file this node can read, so starting
/// would leave it silently behind (SPEC R6). Names each file and why.
fn reaches_back(opened: &Opened, snapshot_index: u64, last_purged: u64, log: &str) -> Result<(), LogBehind> {
    if last_purged <= snapshot_index {
        return Ok(());
    }
    let loaded = match opened.loaded {
        Some(name) => format!("the newest snapshot that loads, {name}, ends at index {snapshot_index}"),
        None => "no snapshot loads".to_owned(),
    };
    let passed_over = match opened.passed_over.is_empty() {
        true => String::new(),
        false => format!(" ({})", opened.passed_over.join("; ")),
    };
    Err(LogBehind {
        log: log.to_owned(),
        last_purged,
        loaded,
        passed_over,
    })
}

/// A started Raft and what the node keeps beside it.
struct Started {
    raft: Raft<TypeConfig>,
    shared: Arc<Shared>,
    log_writer: Arc<std::sync::Mutex<Option<std::thread::JoinHandle<()>>>>,
}

/// The error Raft stopped on, if it stopped on one (a clean shutdown is `Fatal::Stopped`).
fn fatal_of(metrics: &openraft::RaftMetrics<u64, BasicNode>) -> Option<String> {
    match &metrics.running_state {
        Ok(()) | Err(openraft::error::Fatal::Stopped) => None,
        Err(error) => Some(error.to_string()),
    }
}

fn fatal(e: openraft::error::Fatal<u64>) -> ConsensusError {
    ConsensusError::Storage(e.to_string())
}

/// A registry node. Cheap to clone.
#[derive(Clone)]
pub struct Node {
    id: u64,
    /// When the node opened, and (ms since then) when a leader last reached it.
    opened: tokio::time::Instant,
    last_contact_ms: Arc<std::sync::atomic::AtomicU64>,
    /// The cluster secret (none for a group of one: it serves no peers).
    secret: Option<muster_core::Secret>,
    raft: Raft<TypeConfig>,
    shared: Arc<Shared>,
    /// The log's writer thread, joined by `shutdown` so the database is closed when it returns.
    log_writer: Arc<std::sync::Mutex<Option<std::thread::JoinHandle<()>>>>,
    /// Group commit: concurrent proposals share one log entry.
    batcher: Batcher,
    /// The way to the other members (none for a group of one): a follower's consistent read
    /// asks the leader for its read index through it.
    peers: Option<PeerClient>,
    /// The config file's registry policy: committed before the first other command when the
    /// log holds no policy yet (see [`Node::propose`]).
    initial_policy: Arc<RegistryConfig>,
}

impl Node {
    /// Opens (or creates) the data directory and recovers the registry from the last snapshot
    /// plus the log after it. A group of one waits until it leads; a cluster member returns at
    /// once (writes fail with `no_quorum` until a leader is elected).
    pub async fn open(config: NodeConfig, observer: Arc<dyn ApplyObserver>) -> Result<Node, ConsensusError> {
        match config.cluster.clone() {
            None => Node::open_single(config, observer).await,
            Some(cluster) => {
                let client = PeerClient::new(cluster.secret.clone(), cluster.members.clone(), cluster.tls.clone());
                let network = HttpPeers {
                    client: client.clone(),
                    reach: Default::default(),
                };
                Node::open_member(config, cluster, observer, network, Some(client), None).await
            }
        }
    }

    /// Opens a cluster member of a deterministic simulation (`muster-sim`): its log, vote and
    /// snapshots on `disk` (kept by the caller across restarts; `data_dir` is not touched),
    /// Raft's RPCs through `network`, and a follower's writes forwarded to the leader through
    /// `forward` (a [`PeerClient::with_transport`]). Run it on a current-thread tokio runtime
    /// with a paused clock, after [`crate::seed_election_rng`], and the same schedule gives
    /// the same run.
    pub async fn open_simulated<N: RaftNetworkFactory<TypeConfig>>(
        config: NodeConfig,
        observer: Arc<dyn ApplyObserver>,
        network: N,
        forward: PeerClient,
        disk: &SimDisk,
    ) -> Result<Node, ConsensusError> {
        let cluster = config
            .cluster
            .clone()
            .ok_or_else(|| ConsensusError::Storage("open_simulated needs a cluster config".into()))?;
        Node::open_member(config, cluster, observer, network, Some(forward), Some(disk)).await
    }

    async fn open_single(config: NodeConfig, observer: Arc<dyn ApplyObserver>) -> Result<Node, ConsensusError> {
        let Started {
            raft,
            shared,
            log_writer,
        } = Parts::open(&config, observer, None)?
            .start(SINGLE_NODE_ID, NoPeers)
            .await?;
        if !raft.is_initialized().await.map_err(fatal)? {
            let members = BTreeMap::from([(SINGLE_NODE_ID, BasicNode::default())]);
            raft.initialize(members)
                .await
                .map_err(|e| ConsensusError::Storage(e.to_string()))?;
        }
        raft.wait(Some(LEADERSHIP_WAIT))
            .state(ServerState::Leader, "single node elects itself")
            .await
            .map_err(|_| ConsensusError::NoLeader)?;
        let batcher = Batcher::spawn(raft.clone(), None, SINGLE_NODE_ID, config.proposal_session);
        Ok(Node {
            opened: tokio::time::Instant::now(),
            last_contact_ms: Arc::new(std::sync::atomic::AtomicU64::new(u64::MAX)),
            id: SINGLE_NODE_ID,
            secret: None,
            raft,
            shared,
            log_writer,
            batcher,
            peers: None,
            initial_policy: Arc::new(config.registry.clone()),
        })
    }

    async fn open_member<N: RaftNetworkFactory<TypeConfig>>(
        config: NodeConfig,
        cluster: ClusterConfig,
        observer: Arc<dyn ApplyObserver>,
        network: N,
        forward: Option<PeerClient>,
        disk: Option<&SimDisk>,
    ) -> Result<Node, ConsensusError> {
        if !cluster.members.contains_key(&cluster.node_id) {
            return Err(ConsensusError::Storage(format!(
                "node {} is not among the members {:?}",
                cluster.node_id,
                cluster.members.keys().collect::<Vec<_>>()
            )));
        }
        let Started {
            raft,
            shared,
            log_writer,
        } = Parts::open(&config, observer, disk)?
            .start(cluster.node_id, network)
            .await?;
        // A static cluster forms once: the member with the lowest id proposes the membership
        // (an initialised node ignores it); the others wait to hear from it.
        let first = cluster.members.keys().next().copied();
        if first == Some(cluster.node_id) && !raft.is_initialized().await.map_err(fatal)? {
            let members: BTreeMap<u64, BasicNode> = cluster
                .members
                .iter()
                .map(|(id, addr)| (*id, BasicNode::new(addr)))
                .collect();
            if let Err(error) = raft.initialize(members).await {
                tracing::info!(%error, "cluster membership already initialised");
            }
        }
        let batcher = Batcher::spawn(raft.clone(), forward.clone(), cluster.node_id, config.proposal_session);
        Ok(Node {
            opened: tokio::time::Instant::now(),
            last_contact_ms: Arc::new(std::sync::atomic::AtomicU64::new(u64::MAX)),
            id: cluster.node_id,
            secret: Some(cluster.secret.clone()),
            raft,
            shared,
            log_writer,
            batcher,
            peers: forward,
            initial_policy: Arc::new(config.registry.clone()),
        })
    }

    /// Proposes a command; returns once it is durable (fsynced) and applied, with the
    /// registry's verdict. Concurrent proposals share one log entry and one fsync
    /// (group commit).
    ///
    /// While no policy is committed (a new group, or state from before the policy was
    /// replicated), the config file's policy is committed first: the registry adopts it
    /// without a revision, and from then on the log itself says which policy judges each
    /// entry, so a replica replaying it under another config file reaches the same state
    /// (SPEC L2). It is marked `initial`: concurrent first proposals, or a node whose view
    /// lags the log, change nothing once any policy is committed.
    pub async fn propose(
        &self,
        command: Command,
        meta: CommandMeta,
    ) -> Result<Result<Applied, Rejection>, ConsensusError> {
        if let Some(fatal) = self.fatal() {
            return Err(ConsensusError::Failed(fatal));
        }
        let failed = |error: ConsensusError| self.fatal().map_or(error, ConsensusError::Failed);
        if !matches!(command, Command::SetPolicy(_)) && !self.read(Registry::policy_committed) {
            let policy = SetPolicy {
                policy: RegistryConfig::clone(&self.initial_policy),
                initial: true,
            };
            let first = Proposal {
                command: policy.into(),
                meta: meta.clone(),
            };
            if let Err(rejection) = self.batcher.propose(first).await.map_err(failed)? {
                return Ok(Err(rejection));
            }
        }
        self.batcher.propose(Proposal { command, meta }).await.map_err(failed)
    }

    /// Why Raft stopped, when it stopped on an error (a storage failure) rather than on
    /// [`Node::shutdown`]: the node then serves nothing it could vouch for.
    pub fn fatal(&self) -> Option<String> {
        fatal_of(&self.raft.metrics().borrow())
    }

    /// Resolves when Raft stops on an error, with the error; never after a clean shutdown.
    /// The server waits on this to stop itself (SPEC R2: a node that cannot persist must not
    /// go on answering as if it could).
    pub async fn failed(&self) -> ConsensusError {
        let mut metrics = self.raft.metrics();
        loop {
            if let Some(fatal) = fatal_of(&metrics.borrow_and_update()) {
                return ConsensusError::Failed(fatal);
            }
            if metrics.changed().await.is_err() {
                // The core has ended: an error is in the last metrics, or it stopped cleanly.
                if let Some(fatal) = fatal_of(&metrics.borrow()) {
                    return ConsensusError::Failed(fatal);
                }
                return std::future::pending().await;
            }
        }
    }

    /// Proposes a leader duty's command (lease expiry, the end of a drain) on this node only,
    /// and only while it leads: never queued behind other writes, never forwarded. A duty
    /// decided on a leader's deadlines is valid in that leader's term only: relayed to the
    /// next leader (as [`Node::propose`] does when leadership moves while it waits), an
    /// expiry would land after renewals the new leader accepted. Proposed here, it commits
    /// in this term or not at all, and a successor that commits it does so before any
    /// renewal it accepts (its read index covers it). Fails with
    /// [`ConsensusError::NotLeader`] on a follower.
    pub async fn propose_as_leader(
        &self,
        command: Command,
        meta: CommandMeta,
    ) -> Result<Result<Applied, Rejection>, ConsensusError> {
        use openraft::error::{ClientWriteError, RaftError};
        let proposal = Proposal { command, meta };
        // A duty's command (a federation import replaces a whole mirrored set) is not bounded
        // by the batcher's size: it is refused here before it could become an entry the
        // node-to-node listener refuses on every resend (SPEC R5).
        let bytes = crate::batcher::encoded_len(&proposal);
        if bytes > MAX_LEADER_ENTRY_BYTES {
            return Err(ConsensusError::TooLarge {
                bytes,
                limit: MAX_LEADER_ENTRY_BYTES,
            });
        }
        let batch = crate::types::Batch {
            id: None,
            proposals: vec![proposal],
        };
        match tokio::time::timeout(crate::batcher::WRITE_TIMEOUT, self.raft.client_write(batch)).await {
            Err(_) => Err(ConsensusError::NoQuorum),
            Ok(Ok(response)) => response
                .data
                .0
                .into_iter()
                .next()
                .ok_or_else(|| ConsensusError::Storage("an entry applied no proposal".into())),
            Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(forward)))) => {
                Err(ConsensusError::NotLeader(forward.leader_id))
            }
            Ok(Err(RaftError::Fatal(openraft::error::Fatal::Stopped))) => Err(ConsensusError::ShuttingDown),
            Ok(Err(error)) => Err(ConsensusError::Storage(error.to_string())),
        }
    }

    /// Reads the registry. Keep `f` short: clone the `Arc`s you need and return.
    pub fn read<R>(&self, f: impl FnOnce(&Registry) -> R) -> R {
        f(&self.shared.read())
    }

    /// The node's status.
    pub fn status(&self) -> NodeStatus {
        let metrics = self.raft.metrics().borrow().clone();
        NodeStatus {
            node_id: self.id,
            leader: metrics.current_leader,
            applied_index: self.shared.applied_index.load(std::sync::atomic::Ordering::Acquire),
            revision: self.read(Registry::revision),
            fatal: fatal_of(&metrics),
        }
    }

    /// The index of the last entry in this node's log (0: none yet). Minus
    /// [`NodeStatus::applied_index`] it is the apply lag: entries held but not yet applied
    /// (an upper bound on committed − applied, as openraft 0.9 publishes no commit index).
    pub fn log_index(&self) -> u64 {
        self.raft.metrics().borrow().last_log_index.unwrap_or(0)
    }

    /// The index of the last entry purged from this node's log, behind a snapshot (0: none).
    pub fn purged_index(&self) -> u64 {
        self.raft.metrics().borrow().purged.map_or(0, |id| id.index)
    }

    /// Waits until the leader this node knows differs from `known`, and returns the new one
    /// (`None`: no leader known now). Changes that come and go between two looks are seen as
    /// one. Fails with [`ConsensusError::ShuttingDown`] once Raft has stopped.
    pub async fn leader_change(&self, known: Option<u64>) -> Result<Option<u64>, ConsensusError> {
        let mut metrics = self.raft.metrics();
        loop {
            let leader = metrics.borrow_and_update().current_leader;
            if leader != known {
                return Ok(leader);
            }
            if metrics.changed().await.is_err() {
                return Err(ConsensusError::ShuttingDown);
            }
        }
    }

    /// Whether this node leads its group now (lease expiry and health checks run only there).
    pub fn is_leader(&self) -> bool {
        self.raft.metrics().borrow().current_leader == Some(self.id)
    }

    /// The term this node leads in, if it leads now and has applied an entry of that term. A
    /// node that lost and regained leadership between two looks leads in a new term: what it
    /// knew as the old leader (deadlines of renewals an interim leader took) is stale.
    ///
    /// A new leader commits a blank entry of its term first; until it has applied it, the
    /// previous term's tail may not be applied yet, and a lease granted there would be
    /// answered `lease_not_found` (SPEC R4). So leader duties start from a registry that
    /// holds everything committed before the term.
    pub fn leading_term(&self) -> Option<u64> {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow();
        leads_in(
            self.id,
            metrics.current_leader,
            metrics.current_term,
            metrics.last_applied,
        )
    }

    /// How long ago this node last heard from a leader, in ms: for the leader, since a
    /// quorum last acknowledged it; for a follower, since the leader's last append or
    /// heartbeat; `None` when it never has (a stale read reports this, SPEC R3).
    pub fn leader_contact_age_ms(&self) -> Option<u64> {
        if self.is_leader() {
            if self.secret.is_none() {
                return Some(0);
            }
            return self.raft.metrics().borrow().millis_since_quorum_ack;
        }
        let at = self.last_contact_ms.load(std::sync::atomic::Ordering::Relaxed);
        let now = u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX);
        (at != u64::MAX).then(|| now.saturating_sub(at))
    }

    /// Waits until a read of this node is linearizable (ReadIndex, SPEC R3; the design and
    /// its proof are in the `read_index` module): the leader confirms with a quorum that it still leads and names
    /// its commit index — this node itself when it leads, else the leader it knows, asked
    /// over the cluster link — and this node then waits until it has applied up to that
    /// index. Every node can; bounded by the write timeout. Returns the read index.
    pub async fn linearizable(&self) -> Result<u64, crate::ReadIndexError> {
        use crate::ReadIndexError;
        use crate::read_index::{Source, from_leader, here};
        let timeout = crate::batcher::WRITE_TIMEOUT;
        let deadline = tokio::time::Instant::now() + timeout;
        let source = tokio::time::timeout(timeout, here(&self.raft, self.id))
            .await
            .map_err(|_| ReadIndexError::NoQuorum { leader: self.id })??;
        let index = match source {
            Source::Here(index) => index,
            Source::Leader { id, addr } => {
                let Some(peers) = &self.peers else {
                    return Err(ReadIndexError::NoLeader);
                };
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                // Not leader contact: the read index says the leader leads, not that its
                // appends reach this node, which is what `default` reads and
                // `X-Muster-Last-Contact` vouch for.
                from_leader(peers, id, &addr, left).await?
            }
        };
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match self
            .raft
            .wait(Some(left))
            .applied_index_at_least(Some(index), "applied up to the read index")
            .await
        {
            Ok(_) => Ok(index),
            Err(openraft::metrics::WaitError::Timeout(..)) => Err(ReadIndexError::Behind { index, timeout }),
            Err(openraft::metrics::WaitError::ShuttingDown) => Err(ReadIndexError::Node(
                self.fatal()
                    .map_or(ConsensusError::ShuttingDown, ConsensusError::Failed),
            )),
        }
    }

    /// Notes that a leader reached this node now ([`Node::leader_contact_age_ms`]).
    fn touch_leader_contact(&self) {
        let now = u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX - 1);
        self.last_contact_ms.store(now, std::sync::atomic::Ordering::Relaxed);
    }

    /// The group's members as this node knows them: id, cluster address, voter or learner.
    pub fn members(&self) -> Vec<Member> {
        let metrics = self.raft.metrics().borrow().clone();
        let membership = metrics.membership_config.membership();
        let voters: std::collections::BTreeSet<u64> = membership.voter_ids().collect();
        membership
            .nodes()
            .map(|(id, node)| Member {
                id: *id,
                addr: node.addr.clone(),
                voter: voters.contains(id),
            })
            .collect()
    }

    /// Adds a node: as a learner first (returns once it has caught up with the log), then as
    /// a voter. Only the leader can.
    pub async fn add_member(&self, id: u64, addr: &str) -> Result<(), ConsensusError> {
        self.raft
            .add_learner(id, BasicNode::new(addr), true)
            .await
            .map_err(membership_error)?;
        let voters = std::collections::BTreeSet::from([id]);
        self.raft
            .change_membership(openraft::ChangeMembers::AddVoterIds(voters), false)
            .await
            .map_err(membership_error)?;
        Ok(())
    }

    /// Removes a node from the group (voter or learner). Only the leader can.
    pub async fn remove_member(&self, id: u64) -> Result<(), ConsensusError> {
        let ids = std::collections::BTreeSet::from([id]);
        if self.members().iter().any(|m| m.id == id && m.voter) {
            self.raft
                .change_membership(openraft::ChangeMembers::RemoveVoters(ids.clone()), false)
                .await
                .map_err(membership_error)?;
        }
        if self.members().iter().any(|m| m.id == id) {
            self.raft
                .change_membership(openraft::ChangeMembers::RemoveNodes(ids), false)
                .await
                .map_err(membership_error)?;
        }
        Ok(())
    }

    /// Whether `secret` is this cluster's secret (constant time in its length). A group of
    /// one has no secret and accepts no node-to-node request.
    pub fn accepts_secret(&self, secret: &str) -> bool {
        self.secret.as_ref().is_some_and(|expected| expected.matches(secret))
    }

    /// Serves one node-to-node request (the body of `POST /raft/{rpc}`: JSON, or for
    /// [`Rpc::Snapshot`] a [`crate::snapshot_frame`]): the reply's JSON.
    /// Call it only after [`Node::accepts_secret`].
    pub async fn rpc(&self, rpc: Rpc, body: &[u8]) -> Result<Vec<u8>, String> {
        fn decode<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, String> {
            serde_json::from_slice(body).map_err(|e| format!("undecodable request: {e}"))
        }
        fn encode<T: serde::Serialize>(reply: &T) -> Result<Vec<u8>, String> {
            serde_json::to_vec(reply).map_err(|e| format!("unencodable reply: {e}"))
        }
        match rpc {
            Rpc::Append => {
                let reply = self.raft.append_entries(decode(body)?).await;
                if reply.is_ok() {
                    self.touch_leader_contact();
                }
                encode(&reply)
            }
            Rpc::Vote => encode(&self.raft.vote(decode(body)?).await),
            Rpc::Snapshot => {
                // Binary, not JSON (`snapshot_frame`): refused whole before Raft sees it.
                let chunk = crate::snapshot_frame::decode(body).map_err(|e| format!("undecodable request: {e}"))?;
                encode(&self.raft.install_snapshot(chunk).await)
            }
            Rpc::Propose => encode(&crate::batcher::commit_forwarded(&self.raft, decode(body)?).await),
            Rpc::ReadIndex => {
                decode::<()>(body)?;
                encode(&crate::read_index::serve(&self.raft, crate::batcher::WRITE_TIMEOUT).await)
            }
            Rpc::Format => {
                decode::<()>(body)?;
                encode(&muster_core::FORMAT)
            }
        }
    }

    /// The registry format each member's build applies, by id (DESIGN "Formats and
    /// versions"): this node's own; a member that answers `404` runs the second wave
    /// (format 1); one that does not answer within `timeout`, `None`.
    pub async fn member_formats(&self, timeout: std::time::Duration) -> Vec<(u64, Option<u32>)> {
        let mut formats = Vec::new();
        // One member at a time: a group has 3 or 5, and this runs every few seconds at most.
        for member in self.members() {
            let format = if member.id == self.id {
                Some(muster_core::FORMAT)
            } else {
                self.format_of(member.id, &member.addr, timeout).await
            };
            formats.push((member.id, format));
        }
        formats
    }

    /// The registry format the build of node `id` (at cluster address `addr`) applies:
    /// `404` is a build of the second wave (format 1); no answer within `timeout`, `None`.
    pub async fn format_of(&self, id: u64, addr: &str, timeout: std::time::Duration) -> Option<u32> {
        let peers = self.peers.as_ref()?;
        let addr = peers.address_of(id, addr);
        match peers.call::<_, u32>(&addr, Rpc::Format, &(), timeout).await {
            Ok(format) => Some(format),
            Err(crate::network::CallError::Refused { status: 404, .. }) => Some(muster_core::FIRST_FORMAT),
            Err(_) => None,
        }
    }

    /// Writes a snapshot now and purges the log it covers; returns when it is on disk.
    pub async fn snapshot(&self) -> Result<(), ConsensusError> {
        // openraft ignores a trigger while a build is already running (an automatic one, at
        // an older index), so trigger again until a snapshot covers what was applied.
        let applied = self.raft.metrics().borrow().last_applied;
        let deadline = tokio::time::Instant::now() + LEADERSHIP_WAIT;
        loop {
            if applied.is_none() || self.raft.metrics().borrow().snapshot >= applied {
                return Ok(());
            }
            self.raft
                .trigger()
                .snapshot()
                .await
                .map_err(|e| ConsensusError::Storage(e.to_string()))?;
            let waited = self
                .raft
                .wait(Some(SNAPSHOT_RETRIGGER))
                .metrics(|m| m.snapshot >= applied, "snapshot written")
                .await;
            if waited.is_ok() {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(ConsensusError::Storage(format!(
                    "no snapshot covering log index {} within {LEADERSHIP_WAIT:?}",
                    applied.map_or(0, |id| id.index)
                )));
            }
        }
    }

    /// Stops the node: in-flight proposals finish or fail with `ShuttingDown`. Returns once
    /// the log database is closed, so the data directory can be opened again at once.
    pub async fn shutdown(&self) -> Result<(), ConsensusError> {
        self.raft
            .shutdown()
            .await
            .map_err(|e| ConsensusError::Storage(e.to_string()))?;
        let writer = self
            .log_writer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        let Some(writer) = writer else { return Ok(()) };
        let joined = tokio::time::timeout(CLOSE_WAIT, tokio::task::spawn_blocking(move || writer.join())).await;
        match joined {
            Ok(Ok(Ok(()))) => Ok(()),
            _ => Err(ConsensusError::Storage("the log writer did not stop".into())),
        }
    }
}

#[cfg(test)]
mod leading_tests {
    use openraft::CommittedLeaderId;

    use super::*;

    fn applied(term: u64, index: u64) -> Option<LogId> {
        Some(LogId::new(CommittedLeaderId::new(term, 1), index))
    }

    #[test]
    fn a_new_leader_leads_only_once_it_applied_an_entry_of_its_own_term() {
        // Trace: node 2 is elected in term 3 while the tail of term 2 (a lease grant) is
        // committed but not yet applied here; a renewal of that lease got lease_not_found.
        assert_eq!(
            leads_in(2, Some(2), 3, applied(2, 40)),
            None,
            "the old term's tail may be unapplied"
        );
        assert_eq!(leads_in(2, Some(2), 3, None), None);
        assert_eq!(
            leads_in(2, Some(2), 3, applied(3, 41)),
            Some(3),
            "its blank entry is applied"
        );
        assert_eq!(leads_in(2, Some(1), 3, applied(3, 41)), None, "another node leads");
    }
}
