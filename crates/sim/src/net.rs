//! The simulated network: who runs, which directed links are cut, and the weather (loss,
//! duplication, delay) every message meets, all decided by the seeded network stream.
//!
//! ```text
//!  sender ──(cut? lost?)──delay──▶ receiver's Node::rpc ──reply──(cut? lost?)──delay──▶ sender
//!                  └─ duplicated: a second copy, delivered after its own delay
//! ```
//!
//! Delays are drawn per message, so two messages on one link overtake each other
//! (reordering). A lost message costs its sender the delay and then fails as a network
//! error, not `Unreachable`: openraft answers `Unreachable` with a backoff whose `select!`
//! is unbiased (random on a tie), which would put tokio's unseeded generator into the run.
//! Raft's RPCs ([`SimPeers`]) and forwarded writes ([`ForwardTransport`]) go through here;
//! so do the leader duties' requests ([`Net::call`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use muster_consensus::append_pacer::{AppendPacer, MAX_RPC_BYTES, Pace};
use muster_consensus::{CallError, Node, PeerTransport, Rpc, TransportReply, TypeConfig};
use openraft::BasicNode;
use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::rng::SimRng;

/// A reply body.
type Reply = Vec<u8>;

/// A second copy of a request, run against the receiving node.
type Duplicate = Box<dyn FnOnce(Node) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

/// What every message meets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Weather {
    /// Messages lost, per thousand (each way).
    pub loss: u64,
    /// Requests delivered twice, per thousand.
    pub duplicate: u64,
    /// Shortest and longest one-way delay, ms.
    pub delay_ms: (u64, u64),
}

impl Weather {
    /// A calm network: 1–5 ms, nothing lost.
    pub const CALM: Weather = Weather {
        loss: 0,
        duplicate: 0,
        delay_ms: (1, 5),
    };
}

/// Counts for the statistics line.
#[derive(Debug, Default, Clone, Copy)]
pub struct NetStats {
    /// Messages sent.
    pub sent: u64,
    /// Messages lost (weather or cut links).
    pub lost: u64,
    /// Requests duplicated.
    pub duplicated: u64,
    /// Appends the pacer sent back smaller ([`muster_consensus::append_pacer`]): after a
    /// follower too slow for openraft's timeout, or a request over the byte bound.
    pub paced: u64,
    /// Messages refused for their size, as the listener refuses a body over
    /// [`MAX_RPC_BYTES`]: none may be (a final check).
    pub oversized: u64,
}

/// The longest one-way delay of a slow node's message.
const SLOW_DELAY_MS: u64 = 2_000;

/// The byte bound of a simulated append of several entries: far below the real one
/// ([`muster_consensus::append_pacer::MAX_APPEND_BYTES`]), so that the simulation's small
/// entries reach it and every run paces appends by size as a large registry does.
pub const SIM_APPEND_BYTES: usize = 16 * 1024;

struct NetState {
    nodes: BTreeMap<u64, Node>,
    cut: BTreeSet<(u64, u64)>,
    /// Nodes whose messages are slower than the weather's, by a factor.
    slow: BTreeMap<u64, u64>,
    weather: Weather,
    rng: SimRng,
    stats: NetStats,
    /// The pacer's byte bound for an append of several entries.
    append_bytes: usize,
}

/// The network. Shared by every node's transports.
pub struct Net {
    state: Mutex<NetState>,
}

/// A message did not arrive, or its reply did not.
#[derive(Debug, thiserror::Error)]
#[error("simulated network: message {0} → {1} lost")]
pub struct Lost(pub u64, pub u64);

/// What the weather decided for one exchange.
struct Fate {
    there_ms: u64,
    back_ms: u64,
    request_lost: bool,
    reply_lost: bool,
    duplicate_after_ms: Option<u64>,
}

impl Net {
    /// A network with no node running yet, whose appends are paced to `append_bytes`.
    pub fn new(rng: SimRng, append_bytes: usize) -> Net {
        Net {
            state: Mutex::new(NetState {
                nodes: BTreeMap::new(),
                cut: BTreeSet::new(),
                slow: BTreeMap::new(),
                weather: Weather::CALM,
                rng,
                stats: NetStats::default(),
                append_bytes,
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, NetState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Node `id` runs `node` now.
    pub fn up(&self, id: u64, node: Node) {
        self.state().nodes.insert(id, node);
    }

    /// Node `id` stopped; the process it ran, if any.
    pub fn down(&self, id: u64) -> Option<Node> {
        self.state().nodes.remove(&id)
    }

    /// The running node `id`.
    pub fn node(&self, id: u64) -> Option<Node> {
        self.state().nodes.get(&id).cloned()
    }

    /// Every running node, by id.
    pub fn nodes(&self) -> BTreeMap<u64, Node> {
        self.state().nodes.clone()
    }

    /// Cuts the link `from → to` (one way).
    pub fn cut(&self, from: u64, to: u64) {
        self.state().cut.insert((from, to));
    }

    /// Restores every link.
    pub fn heal(&self) {
        self.state().cut.clear();
    }

    /// The cut links.
    pub fn cuts(&self) -> BTreeSet<(u64, u64)> {
        self.state().cut.clone()
    }

    /// Whether `from → to` carries messages now.
    pub fn link(&self, from: u64, to: u64) -> bool {
        from == to || !self.state().cut.contains(&(from, to))
    }

    /// Every message to or from `id` takes `factor` times the weather's delay (1: normal).
    pub fn set_slow(&self, id: u64, factor: u64) {
        let mut state = self.state();
        match factor {
            0 | 1 => state.slow.remove(&id),
            _ => state.slow.insert(id, factor),
        };
    }

    /// The slow nodes and their factors.
    pub fn slow(&self) -> BTreeMap<u64, u64> {
        self.state().slow.clone()
    }

    /// Sets the weather.
    pub fn set_weather(&self, weather: Weather) {
        self.state().weather = weather;
    }

    /// The weather.
    pub fn weather(&self) -> Weather {
        self.state().weather
    }

    /// The counts so far.
    pub fn stats(&self) -> NetStats {
        self.state().stats
    }

    fn fate(&self, from: u64, to: u64, duplicable: bool) -> Fate {
        let mut state = self.state();
        let weather = state.weather;
        let (low, high) = weather.delay_ms;
        let slow = [from, to]
            .map(|id| state.slow.get(&id).copied().unwrap_or(1))
            .into_iter()
            .max()
            .unwrap_or(1);
        let rng = &mut state.rng;
        // A slow node's messages take `slow` times the weather's delay, at most
        // SLOW_DELAY_MS each way: slow, not lost (a storm's 250 ms would be 25 s).
        let slowed = |ms: u64| if slow > 1 { (ms * slow).min(SLOW_DELAY_MS) } else { ms };
        let fate = Fate {
            there_ms: slowed(rng.between(low, high)),
            back_ms: slowed(rng.between(low, high)),
            request_lost: rng.chance(weather.loss),
            reply_lost: rng.chance(weather.loss),
            duplicate_after_ms: (duplicable && rng.chance(weather.duplicate)).then(|| rng.between(low, high * 4)),
        };
        state.stats.sent += 1;
        state.stats.duplicated += u64::from(fate.duplicate_after_ms.is_some());
        fate
    }

    fn paced(&self) {
        self.state().stats.paced += 1;
    }

    fn lost(&self, from: u64, to: u64) -> Lost {
        self.state().stats.lost += 1;
        Lost(from, to)
    }

    /// Carries one request `from → to` to whatever `handle` does on the receiving node, and
    /// its reply back. `duplicate`, when given, is run with the same node for a second copy
    /// of the request (its reply is dropped).
    pub async fn exchange<T, F, Fut>(
        self: &Arc<Self>,
        from: u64,
        to: u64,
        handle: F,
        duplicate: Option<Duplicate>,
    ) -> Result<T, Lost>
    where
        F: FnOnce(Node) -> Fut,
        Fut: Future<Output = T>,
    {
        let fate = self.fate(from, to, duplicate.is_some());
        tokio::time::sleep(Duration::from_millis(fate.there_ms)).await;
        if fate.request_lost || !self.link(from, to) {
            return Err(self.lost(from, to));
        }
        let Some(node) = self.node(to) else {
            return Err(self.lost(from, to));
        };
        if let (Some(after), Some(duplicate)) = (fate.duplicate_after_ms, duplicate) {
            let net = Arc::clone(self);
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(after)).await;
                if net.link(from, to)
                    && let Some(node) = net.node(to)
                {
                    duplicate(node).await;
                }
            });
        }
        let reply = handle(node).await;
        tokio::time::sleep(Duration::from_millis(fate.back_ms)).await;
        if fate.reply_lost || !self.link(to, from) || self.node(from).is_none() {
            return Err(self.lost(to, from));
        }
        Ok(reply)
    }

    /// Delivers one node-to-node RPC (JSON in and out; a snapshot chunk in as its binary
    /// frame, `snapshot_frame`), duplicable.
    pub async fn rpc(
        self: &Arc<Self>,
        from: u64,
        to: u64,
        rpc: Rpc,
        body: Vec<u8>,
    ) -> Result<Result<Reply, String>, Lost> {
        if body.len() > MAX_RPC_BYTES {
            // The listener's answer to a body over its limit, before anything is read.
            self.state().stats.oversized += 1;
            return Ok(Err(format!(
                "payload_too_large: {} bytes over the {MAX_RPC_BYTES} limit",
                body.len()
            )));
        }
        let copy = body.clone();
        let duplicate: Duplicate = Box::new(move |node: Node| {
            Box::pin(async move {
                let _ = node.rpc(rpc, &copy).await;
            })
        });
        self.exchange(
            from,
            to,
            |node| async move { node.rpc(rpc, &body).await },
            Some(duplicate),
        )
        .await
    }
}

/// Builds each node's connections to its peers over the simulated network.
pub struct SimPeers {
    /// The network.
    pub net: Arc<Net>,
    /// This node.
    pub me: u64,
}

/// A connection to one peer.
pub struct SimPeer {
    net: Arc<Net>,
    from: u64,
    to: u64,
    /// Paces appends as the HTTP transport does ([`muster_consensus::append_pacer`]).
    pacer: AppendPacer,
}

impl RaftNetworkFactory<TypeConfig> for SimPeers {
    type Network = SimPeer;

    async fn new_client(&mut self, target: u64, _node: &BasicNode) -> SimPeer {
        SimPeer {
            net: Arc::clone(&self.net),
            from: self.me,
            to: target,
            pacer: AppendPacer::new(self.net.state().append_bytes),
        }
    }
}

impl SimPeer {
    /// Sends `body` as JSON, as the HTTP transport does.
    async fn call<B: Serialize, R: DeserializeOwned, E: std::error::Error + DeserializeOwned>(
        &self,
        rpc: Rpc,
        body: &B,
    ) -> Result<R, RPCError<u64, BasicNode, RaftError<u64, E>>> {
        let bytes = serde_json::to_vec(body).expect("Raft messages serialise");
        self.call_encoded(rpc, bytes).await
    }

    /// Sends `bytes`, the body as the HTTP transport would carry it.
    async fn call_encoded<R: DeserializeOwned, E: std::error::Error + DeserializeOwned>(
        &self,
        rpc: Rpc,
        bytes: Vec<u8>,
    ) -> Result<R, RPCError<u64, BasicNode, RaftError<u64, E>>> {
        let reply = self
            .net
            .rpc(self.from, self.to, rpc, bytes)
            .await
            .map_err(|lost| RPCError::Network(NetworkError::new(&lost)))?
            .map_err(|message| RPCError::Network(NetworkError::new(&std::io::Error::other(message))))?;
        let reply: Result<R, RaftError<u64, E>> =
            serde_json::from_slice(&reply).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        reply.map_err(|e| RPCError::RemoteError(RemoteError::new(self.to, e)))
    }
}

impl RaftNetwork<TypeConfig> for SimPeer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        let entries = rpc.entries.len() as u64;
        if let Pace::Shrink(hint) = self.pacer.admit(entries) {
            self.net.paced();
            return Err(muster_consensus::shrink(hint));
        }
        let bytes = serde_json::to_vec(&rpc).expect("Raft messages serialise");
        if let Pace::Shrink(hint) = self.pacer.fits(entries, bytes.len()) {
            self.net.paced();
            return Err(muster_consensus::shrink(hint));
        }
        let reply = self.call_encoded(Rpc::Append, bytes).await;
        self.pacer
            .answered(entries, !matches!(reply, Err(RPCError::Network(_))));
        reply
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<InstallSnapshotResponse<u64>, RPCError<u64, BasicNode, RaftError<u64, InstallSnapshotError>>> {
        // The binary frame the HTTP transport sends, decoded by the same `Node::rpc`.
        self.call_encoded(Rpc::Snapshot, muster_consensus::snapshot_frame::encode(&rpc))
            .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        _option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        self.call(Rpc::Vote, &rpc).await
    }
}

/// Carries a follower's forwarded writes (`POST /raft/propose`) to the leader over the
/// simulated network: lost requests, lost replies and duplicates included, which is what
/// makes the batcher retry a batch the leader already committed.
pub struct ForwardTransport {
    /// The network.
    pub net: Arc<Net>,
    /// The forwarding node.
    pub me: u64,
}

/// The member address of node `id` in the simulation, and back.
pub fn address(id: u64) -> String {
    format!("node-{id}")
}

fn node_of(addr: &str) -> Option<u64> {
    addr.strip_prefix("node-")?.parse().ok()
}

impl PeerTransport for ForwardTransport {
    fn post(&self, addr: &str, path: &str, body: Vec<u8>) -> TransportReply {
        let net = Arc::clone(&self.net);
        let from = self.me;
        let target = node_of(addr);
        let rpc = path.strip_prefix("/raft/").and_then(Rpc::from_segment);
        Box::pin(async move {
            let (Some(to), Some(rpc)) = (target, rpc) else {
                return Err(CallError::Unreachable("no such simulated route".into()));
            };
            match net.rpc(from, to, rpc, body).await {
                Ok(Ok(reply)) => Ok((200, reply.into())),
                Ok(Err(message)) => Ok((400, message.into_bytes().into())),
                Err(lost) => Err(CallError::Unreachable(lost.to_string())),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_message_over_the_listeners_limit_is_refused_and_counted_as_the_listener_would() {
        let net = Arc::new(Net::new(SimRng::new(1, 2), SIM_APPEND_BYTES));
        let refused = net.rpc(1, 2, Rpc::Append, vec![b' '; MAX_RPC_BYTES + 1]).await;
        let message = refused.expect("answered, not lost").expect_err("refused");
        assert!(message.starts_with("payload_too_large"), "{message}");
        assert_eq!(net.stats().oversized, 1);
        assert_eq!(net.stats().sent, 0, "nothing was delivered");
    }
}
