//! Node-to-node transport (SPEC R): openraft's RPCs and forwarded writes as JSON over
//! HTTP/1.1 between the nodes' cluster listeners, authenticated with the shared cluster
//! secret — and, when the cluster is configured for it, over mutual TLS (SPEC S1): the
//! client verifies the listener against the cluster CA and presents its own certificate,
//! and never falls back to plain HTTP. A group of one has no peers ([`NoPeers`]).
//!
//! ```text
//!  openraft (sender) ──append / vote / snapshot──▶ HttpPeer ──POST /raft/{rpc}──▶ peer's cluster
//!  follower's batcher ──ForwardToLeader──▶ forward() ──POST /raft/propose──▶   listener ──▶ Node::rpc
//!  follower's consistent read ──▶ read_index ──POST /raft/read_index──▶
//!                                  header x-muster-cluster-secret: S (else 401, nothing done)
//! ```
//!
//! Requests are JSON, except a snapshot chunk: its bytes raw behind a small JSON head
//! ([`crate::snapshot_frame`]), since in JSON they would be an array of numbers four times
//! their size. A reply is `200` with the JSON of `Result<Response, Error>` (openraft's own error types);
//! any transport failure, timeout or non-200 is `Unreachable` to openraft, which retries it
//! like a down node.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use muster_tls::Connector;
use openraft::BasicNode;
use openraft::error::{InstallSnapshotError, PayloadTooLarge, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::append_pacer::{AppendPacer, Pace};
use crate::types::TypeConfig;

/// The header that carries the cluster secret on every node-to-node request.
pub const SECRET_HEADER: &str = "x-muster-cluster-secret";

/// The header naming the encoding of a node-to-node message, on every request and every
/// reply (SPEC R7). A message without it is version 1, as every build before it sent.
pub const WIRE_HEADER: &str = "x-muster-wire";

/// The node-to-node encoding this build writes, and the newest it reads. A build that changes
/// the encoding raises it, and must keep writing the older one until every member reads the
/// new (the registry format's raise, architecture.md "Formats and versions").
pub const WIRE_VERSION: u32 = 1;

/// Why a node-to-node message is refused by its [`WIRE_HEADER`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The header is not a version number.
    #[error("{WIRE_HEADER} is not a version number")]
    Unreadable,
    /// A newer encoding than this build reads.
    #[error("a node-to-node message of version {0}; this build reads versions up to {WIRE_VERSION}: upgrade this node")]
    Newer(u32),
}

/// The version a message's [`WIRE_HEADER`] names (`None`: absent, so version 1), if this
/// build reads it; else the refusal, naming both versions.
pub fn readable_wire(header: Option<&[u8]>) -> Result<u32, WireError> {
    let Some(value) = header else {
        return Ok(1);
    };
    let version = std::str::from_utf8(value)
        .ok()
        .and_then(|text| text.trim().parse::<u32>().ok())
        .ok_or(WireError::Unreadable)?;
    match version <= WIRE_VERSION {
        true => Ok(version),
        false => Err(WireError::Newer(version)),
    }
}

/// How long to wait for a peer's TCP connection: peers are on the local network, and
/// openraft retries an unreachable peer on its next heartbeat anyway.
const PEER_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// The RPCs a cluster listener serves, by path segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rpc {
    /// `POST /raft/append`: openraft `AppendEntries`.
    Append,
    /// `POST /raft/vote`: openraft `Vote`.
    Vote,
    /// `POST /raft/snapshot`: one chunk of `InstallSnapshot`, in its binary frame
    /// ([`crate::snapshot_frame`]).
    Snapshot,
    /// `POST /raft/propose`: a batch of proposals forwarded by a follower to the leader.
    Propose,
    /// `POST /raft/read_index`: a follower asks the leader for a read index (SPEC R3).
    ReadIndex,
    /// `POST /raft/format`: the registry format the node's build applies (DESIGN "Formats
    /// and versions"). A node of the second wave answers it `404`: format 1.
    Format,
}

impl Rpc {
    /// The RPC named by a path segment.
    pub fn from_segment(segment: &str) -> Option<Rpc> {
        match segment {
            "append" => Some(Rpc::Append),
            "vote" => Some(Rpc::Vote),
            "snapshot" => Some(Rpc::Snapshot),
            "propose" => Some(Rpc::Propose),
            "read_index" => Some(Rpc::ReadIndex),
            "format" => Some(Rpc::Format),
            _ => None,
        }
    }

    fn segment(self) -> &'static str {
        match self {
            Rpc::Append => "append",
            Rpc::Vote => "vote",
            Rpc::Snapshot => "snapshot",
            Rpc::Propose => "propose",
            Rpc::ReadIndex => "read_index",
            Rpc::Format => "format",
        }
    }
}

/// An HTTP client of the members' cluster listeners: JSON bodies, the secret on every
/// request. Raft's RPCs and forwarded writes use it here; the server uses it for what it
/// hands to the leader (renewals, TTL reports).
#[derive(Clone)]
pub struct PeerClient {
    transport: Transport,
    /// `http` or, over mutual TLS, `https`.
    scheme: &'static str,
    secret: muster_core::Secret,
    /// Where this node dials each member: its own `--peers` (which may differ from the
    /// addresses in the membership, e.g. through a proxy); members added later are dialled
    /// at their membership address.
    dial: std::sync::Arc<std::collections::BTreeMap<u64, String>>,
}

/// How a [`PeerClient`]'s requests travel.
#[derive(Clone)]
enum Transport {
    /// HTTP/1.1 to the peer's cluster listener.
    Http(Box<Client<Connector, Full<Bytes>>>),
    /// Another carrier (the simulation's in-memory network).
    Custom(std::sync::Arc<dyn PeerTransport>),
}

/// The reply a [`PeerTransport`] delivers: its HTTP status and body.
pub type TransportReply = std::pin::Pin<Box<dyn std::future::Future<Output = Result<(u16, Bytes), CallError>> + Send>>;

/// A carrier for node-to-node requests other than HTTP, e.g. the deterministic simulation's
/// network (`muster-sim`), which decides per request whether it is delayed, lost,
/// duplicated, or answered into a cut link. The [`PeerClient`] around it keeps the secret,
/// the encoding and the timeout.
pub trait PeerTransport: Send + Sync + 'static {
    /// Carries `body` to `path` (`/raft/{rpc}`, or a server route) on the cluster listener
    /// at `addr`; the reply's status and body.
    fn post(&self, addr: &str, path: &str, body: Vec<u8>) -> TransportReply;
}

/// Why a call to a peer failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// Not sent, not answered in time, or the reply was not what was asked for.
    #[error("{0}")]
    Unreachable(String),
    /// Answered with an error status (and its body).
    #[error("HTTP {status}")]
    Refused {
        /// The status.
        status: u16,
        /// The body.
        body: Bytes,
    },
}

impl PeerClient {
    /// A client with the cluster `secret`, dialling member ids at the addresses of `dial`,
    /// over mutual TLS with `tls` (and then never in plain).
    pub fn new(
        secret: muster_core::Secret,
        dial: std::collections::BTreeMap<u64, String>,
        tls: Option<std::sync::Arc<muster_tls::ClientConfig>>,
    ) -> PeerClient {
        let scheme = if tls.is_some() { "https" } else { "http" };
        let mut connector = Connector::new(tls.clone(), PEER_CONNECT_TIMEOUT);
        if tls.is_some() {
            connector = connector.tls_only();
        }
        PeerClient {
            transport: Transport::Http(Box::new(Client::builder(TokioExecutor::new()).build(connector))),
            scheme,
            secret,
            dial: std::sync::Arc::new(dial),
        }
    }

    /// A client whose requests travel over `transport` instead of HTTP.
    pub fn with_transport(
        secret: muster_core::Secret,
        dial: std::collections::BTreeMap<u64, String>,
        transport: std::sync::Arc<dyn PeerTransport>,
    ) -> PeerClient {
        PeerClient {
            transport: Transport::Custom(transport),
            scheme: "http",
            secret,
            dial: std::sync::Arc::new(dial),
        }
    }

    /// The address this node dials member `id` at, if its `--peers` name it.
    pub fn dial_address(&self, id: u64) -> Option<&str> {
        self.dial.get(&id).map(String::as_str)
    }

    /// The address to dial node `id` at, given its membership address.
    pub(crate) fn address_of(&self, id: u64, member_addr: &str) -> String {
        self.dial.get(&id).cloned().unwrap_or_else(|| member_addr.to_owned())
    }

    /// Posts `body` as JSON to `addr`'s `rpc` and decodes the reply, within `timeout`.
    pub(crate) async fn call<B: Serialize, R: DeserializeOwned>(
        &self,
        addr: &str,
        rpc: Rpc,
        body: &B,
        timeout: Duration,
    ) -> Result<R, CallError> {
        self.call_encoded(addr, rpc, Encoded::json(body)?, timeout).await
    }

    /// Posts an encoded `body` to `addr`'s `rpc` and decodes the reply, within `timeout`.
    async fn call_encoded<R: DeserializeOwned>(
        &self,
        addr: &str,
        rpc: Rpc,
        body: Encoded,
        timeout: Duration,
    ) -> Result<R, CallError> {
        self.post_encoded(addr, &format!("/raft/{}", rpc.segment()), body, timeout)
            .await
    }

    /// Posts `body` as JSON to `path` on `addr`'s cluster listener and decodes a `200` reply,
    /// within `timeout`.
    pub async fn post<B: Serialize, R: DeserializeOwned>(
        &self,
        addr: &str,
        path: &str,
        body: &B,
        timeout: Duration,
    ) -> Result<R, CallError> {
        self.post_encoded(addr, path, Encoded::json(body)?, timeout).await
    }

    /// Posts an encoded body and decodes a `200` reply's JSON, within `timeout`.
    async fn post_encoded<R: DeserializeOwned>(
        &self,
        addr: &str,
        path: &str,
        body: Encoded,
        timeout: Duration,
    ) -> Result<R, CallError> {
        let exchange = async {
            let (status, body) = match &self.transport {
                Transport::Http(client) => self.exchange(client, addr, path, body).await?,
                Transport::Custom(transport) => transport.post(addr, path, body.bytes).await?,
            };
            if status != StatusCode::OK.as_u16() {
                return Err(CallError::Refused { status, body });
            }
            serde_json::from_slice(&body).map_err(|e| CallError::Unreachable(format!("{addr}: decoding: {e}")))
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| CallError::Unreachable(format!("{addr}: no reply within {timeout:?}")))?
    }

    /// One HTTP request and its whole reply.
    async fn exchange(
        &self,
        client: &Client<Connector, Full<Bytes>>,
        addr: &str,
        path: &str,
        body: Encoded,
    ) -> Result<(u16, Bytes), CallError> {
        let request = Request::builder()
            .method(Method::POST)
            .uri(format!("{}://{addr}{path}", self.scheme))
            .header(hyper::header::CONTENT_TYPE, body.content_type)
            .header(SECRET_HEADER, self.secret.expose())
            .header(WIRE_HEADER, WIRE_VERSION)
            .body(Full::new(Bytes::from(body.bytes)))
            .map_err(|e| CallError::Unreachable(e.to_string()))?;
        let response = client
            .request(request)
            .await
            .map_err(|e| CallError::Unreachable(format!("{addr}: {e}")))?;
        let status = response.status();
        readable_wire(response.headers().get(WIRE_HEADER).map(|value| value.as_bytes()))
            .map_err(|refused| CallError::Unreachable(format!("{addr} answered with {refused}")))?;
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| CallError::Unreachable(format!("{addr}: reading the reply: {e}")))?
            .to_bytes();
        Ok((status.as_u16(), body))
    }
}

/// A request body and its content type.
pub(crate) struct Encoded {
    bytes: Vec<u8>,
    content_type: &'static str,
}

impl Encoded {
    /// `body` as JSON.
    fn json<B: Serialize>(body: &B) -> Result<Encoded, CallError> {
        let bytes = serde_json::to_vec(body).map_err(|e| CallError::Unreachable(format!("encoding: {e}")))?;
        Ok(Encoded {
            bytes,
            content_type: "application/json",
        })
    }

    /// A snapshot chunk in its binary frame ([`crate::snapshot_frame`]).
    fn snapshot_chunk(chunk: &InstallSnapshotRequest<TypeConfig>) -> Encoded {
        Encoded {
            bytes: crate::snapshot_frame::encode(chunk),
            content_type: crate::snapshot_frame::CONTENT_TYPE,
        }
    }
}

/// Builds connections to peers over HTTP.
pub(crate) struct HttpPeers {
    pub(crate) client: PeerClient,
    pub(crate) reach: std::sync::Arc<Reachability>,
}

/// How each peer answers Raft's calls, so that a change is logged once (SPEC O2): openraft
/// reports every failed call (each half second while a peer is down) and its own lines are
/// held (the server's log filter).
///
/// | seen | logged |
/// |---|---|
/// | no answer from a peer never reached (a cluster starting node by node) | INFO once; WARN once it has lasted [`WAITING_WARN_MS`] |
/// | no answer for [`SILENT_WARN_MS`] from a peer that answered | WARN |
/// | a refusal (an HTTP error status: a wrong secret, a wrong address) | WARN, once per refusal text |
/// | an answer after either | INFO |
///
/// A call that openraft drops at its own timeout counts as no answer (a guard records it),
/// so a peer that swallows packets is found as one that refuses connections is.
#[derive(Debug)]
pub(crate) struct Reachability {
    peers: std::sync::Mutex<std::collections::HashMap<u64, PeerState>>,
    /// The clock's zero, for [`Reachability::now_ms`].
    epoch: tokio::time::Instant,
}

impl Default for Reachability {
    fn default() -> Reachability {
        Reachability {
            peers: std::sync::Mutex::default(),
            epoch: tokio::time::Instant::now(),
        }
    }
}

/// No answer for this long from a peer that answered before is worth a warning: a few
/// election timeouts, more than a peer's restart takes.
pub(crate) const SILENT_WARN_MS: u64 = 3_000;
/// No answer for this long from a peer never reached is worth a warning: longer than starting
/// a cluster's nodes by hand, one after the other, takes.
pub(crate) const WAITING_WARN_MS: u64 = 30_000;

/// What this node knows of one peer.
#[derive(Debug, Clone, Default)]
pub(crate) struct PeerState {
    /// When it last answered (ms on the node's clock); `None`: never.
    answered_ms: Option<u64>,
    /// Since when it has not answered, if it has not.
    silent_since_ms: Option<u64>,
    /// What is logged of its silence or refusal now: nothing, INFO or WARN.
    logged: Option<tracing::Level>,
    /// The refusal last logged.
    refused: Option<String>,
}

/// The outcome of one call, as [`Reachability`] judges it.
#[derive(Debug)]
pub(crate) enum Heard<'a> {
    /// It answered (whatever the answer said).
    Answer,
    /// It answered with an error status.
    Refusal(&'a str),
    /// No answer: not sent, not answered in time, or dropped.
    Silence(&'a str),
}

impl Reachability {
    /// Milliseconds since this node started calling peers: the time [`Reachability::observe`]
    /// takes (the I/O shell reads the clock; the judgement is pure).
    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Records what a call to `target` at `addr` heard at `now_ms` and logs a change; returns
    /// the level it logged at, if it did.
    pub(crate) fn observe(&self, target: u64, addr: &str, heard: Heard<'_>, now_ms: u64) -> Option<tracing::Level> {
        use tracing::Level;
        let mut peers = self.peers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let peer = peers.entry(target).or_default();
        match heard {
            Heard::Answer => {
                peer.answered_ms = Some(now_ms);
                peer.silent_since_ms = None;
                peer.refused = None;
                let was = peer.logged.take();
                was.is_some().then(|| {
                    tracing::info!(peer = target, addr, "peer {target} at {addr} answers");
                    Level::INFO
                })
            }
            Heard::Refusal(why) => {
                peer.silent_since_ms = None;
                if peer.refused.as_deref() == Some(why) {
                    return None;
                }
                peer.refused = Some(why.to_owned());
                peer.logged = Some(Level::WARN);
                tracing::warn!(
                    peer = target,
                    addr,
                    "peer {target} at {addr} refuses this node's calls: {why}"
                );
                Some(Level::WARN)
            }
            Heard::Silence(why) => {
                let since = *peer.silent_since_ms.get_or_insert(now_ms);
                // A peer never reached may just not be started yet (a cluster started by hand).
                let bound = if peer.answered_ms.is_some() {
                    SILENT_WARN_MS
                } else {
                    WAITING_WARN_MS
                };
                let long = now_ms.saturating_sub(since) >= bound;
                match (peer.logged, peer.answered_ms, long) {
                    (Some(Level::WARN), ..) => None,
                    (_, _, true) => {
                        peer.logged = Some(Level::WARN);
                        let secs = (now_ms - since) / 1_000;
                        tracing::warn!(
                            peer = target,
                            addr,
                            "peer {target} at {addr} has not answered for {secs} s: {why}"
                        );
                        Some(Level::WARN)
                    }
                    (None, None, false) => {
                        peer.logged = Some(Level::INFO);
                        tracing::info!(peer = target, addr, "waiting for peer {target} at {addr}: {why}");
                        Some(Level::INFO)
                    }
                    _ => None,
                }
            }
        }
    }
}

/// Records a call that never finished (openraft dropped it at its timeout) as no answer.
struct Unanswered<'a> {
    peer: &'a HttpPeer,
    done: bool,
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if !self.done {
            let peer = self.peer;
            let now_ms = peer.reach.now_ms();
            peer.reach
                .observe(peer.target, &peer.addr, Heard::Silence("no answer in time"), now_ms);
        }
    }
}

/// A connection to one peer.
pub(crate) struct HttpPeer {
    client: PeerClient,
    reach: std::sync::Arc<Reachability>,
    target: u64,
    addr: String,
    /// How many entries an append to this peer may carry ([`crate::append_pacer`]).
    pacer: AppendPacer,
}

impl RaftNetworkFactory<TypeConfig> for HttpPeers {
    type Network = HttpPeer;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> HttpPeer {
        HttpPeer {
            addr: self.client.address_of(target, &node.addr),
            client: self.client.clone(),
            reach: std::sync::Arc::clone(&self.reach),
            target,
            pacer: AppendPacer::default(),
        }
    }
}

impl HttpPeer {
    async fn rpc<R, E>(
        &self,
        rpc: Rpc,
        body: Result<Encoded, CallError>,
        option: &RPCOption,
    ) -> Result<R, RPCError<u64, BasicNode, RaftError<u64, E>>>
    where
        R: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let unreachable = |e: CallError| RPCError::Unreachable(Unreachable::new(&e));
        let mut guard = Unanswered {
            peer: self,
            done: false,
        };
        let answered = self
            .client
            .call_encoded(&self.addr, rpc, body.map_err(unreachable)?, option.hard_ttl())
            .await;
        guard.done = true;
        let why = answered.as_ref().err().map(ToString::to_string).unwrap_or_default();
        let heard = match &answered {
            Ok(_) => Heard::Answer,
            Err(CallError::Refused { .. }) => Heard::Refusal(&why),
            Err(CallError::Unreachable(_)) => Heard::Silence(&why),
        };
        self.reach.observe(self.target, &self.addr, heard, self.reach.now_ms());
        let reply: Result<R, RaftError<u64, E>> = answered.map_err(unreachable)?;
        reply.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<TypeConfig> for HttpPeer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        let entries = rpc.entries.len() as u64;
        if let Pace::Shrink(hint) = self.pacer.admit(entries) {
            return Err(shrink(hint));
        }
        let body = Encoded::json(&rpc);
        if let Ok(encoded) = &body
            && let Pace::Shrink(hint) = self.pacer.fits(entries, encoded.bytes.len())
        {
            return Err(shrink(hint));
        }
        // Twice openraft's own timeout: openraft drops the call first, which is what tells
        // the pacer the follower needs smaller batches (an `Unreachable` would not).
        let option = RPCOption::new(option.hard_ttl() * 2);
        let reply = self.rpc(Rpc::Append, body, &option).await;
        self.pacer
            .answered(entries, !matches!(reply, Err(RPCError::Unreachable(_))));
        reply
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<u64>, RPCError<u64, BasicNode, RaftError<u64, InstallSnapshotError>>> {
        self.rpc(Rpc::Snapshot, Ok(Encoded::snapshot_chunk(&rpc)), &option)
            .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        self.rpc(Rpc::Vote, Encoded::json(&rpc), &option).await
    }
}

/// The answer that makes openraft send at most `hint` entries at once
/// ([`crate::append_pacer`]).
pub fn shrink<E: std::error::Error>(hint: u64) -> RPCError<u64, BasicNode, E> {
    RPCError::PayloadTooLarge(PayloadTooLarge::new_entries_hint(hint))
}

/// Builds connections to peers, of which a single node has none.
pub(crate) struct NoPeers;

/// A connection to a peer that cannot exist.
pub(crate) struct NoPeer {
    target: u64,
}

#[derive(Debug, thiserror::Error)]
#[error("node {0} is not reachable: this node runs as a group of one")]
struct NotInGroup(u64);

impl NoPeer {
    fn unreachable<E: std::error::Error>(&self) -> RPCError<u64, BasicNode, E> {
        RPCError::Unreachable(Unreachable::new(&NotInGroup(self.target)))
    }
}

impl RaftNetworkFactory<TypeConfig> for NoPeers {
    type Network = NoPeer;

    async fn new_client(&mut self, target: u64, _node: &BasicNode) -> NoPeer {
        NoPeer { target }
    }
}

impl RaftNetwork<TypeConfig> for NoPeer {
    async fn append_entries(
        &mut self,
        _rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        Err(self.unreachable())
    }

    async fn install_snapshot(
        &mut self,
        _rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<InstallSnapshotResponse<u64>, RPCError<u64, BasicNode, RaftError<u64, InstallSnapshotError>>> {
        Err(self.unreachable())
    }

    async fn vote(
        &mut self,
        _rpc: VoteRequest<u64>,
        _option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        Err(self.unreachable())
    }
}

#[cfg(test)]
mod wire_tests {
    use super::*;

    #[test]
    fn a_message_without_a_version_is_version_one_and_a_newer_one_is_refused_naming_both() {
        assert_eq!(readable_wire(None), Ok(1));
        assert_eq!(readable_wire(Some(b"1")), Ok(1));
        let newer = (WIRE_VERSION + 1).to_string();
        let refused = readable_wire(Some(newer.as_bytes())).unwrap_err().to_string();
        assert!(refused.contains(&format!("version {newer}")), "{refused}");
        assert!(refused.contains(&format!("up to {WIRE_VERSION}")), "{refused}");
        assert!(readable_wire(Some(b"two")).is_err());
    }
}
