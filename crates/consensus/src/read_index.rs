//! Linearizable reads on every node (SPEC R3): ReadIndex, as the Raft thesis (§6.4) and etcd
//! do it, so `consistency=consistent` scales out with the followers instead of landing on
//! the leader alone.
//!
//! ```text
//!  reader ──▶ follower: Node::linearizable
//!               │ POST /raft/read_index + x-muster-cluster-secret
//!               ▼
//!             leader: get_read_log_id ── one heartbeat round: a quorum still follows it
//!               │ Ok(index): its commit index (at least its own term's first entry)
//!               ▼
//!             follower: waits until it has applied `index` (bounded), then reads its own state
//! ```
//!
//! On the leader the same two steps run without the hop. The cost is one heartbeat round on
//! the leader plus one node-to-node round trip, and the follower's apply lag (usually the
//! next append, which the leader sends as soon as its commit index moves).
//!
//! # Correctness
//! - A write acknowledged before the read began was committed at some log index `c`. The
//!   leader's read index is at least its commit index, and a leader holds every committed
//!   entry (openraft: `max(committed, first entry of its term)`), so it is at least `c`. A
//!   node that has applied the read index therefore reflects the write; log indexes name the
//!   same entries on every replica, so the follower compares them with its own directly.
//! - The leader confirms its leadership after the request reached it: a deposed leader
//!   that has not noticed yet cannot gather a quorum for its old term and refuses
//!   (`no_quorum`) rather than hand out an index that misses a newer leader's commits.
//! - Every failure is fast, typed and never a stale answer ([`ReadIndexError`]): no leader
//!   known, the leader unreachable, the leader without quorum, this node not caught up within
//!   [`crate::batcher::WRITE_TIMEOUT`]. One attempt only: a reader that gets a transient code
//!   retries, here or on another node.

use openraft::error::{CheckIsLeaderError, Fatal, RaftError};
use openraft::{BasicNode, Raft};
use serde::{Deserialize, Serialize};

use crate::network::{CallError, PeerClient, Rpc};
use crate::node::ConsensusError;
use crate::types::TypeConfig;

/// Why a linearizable read could not be confirmed here now. Every one leaves this node's
/// state unread: the caller answers with an error, never with what it holds.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ReadIndexError {
    /// No leader is known (an election is under way, or this node is cut off from the rest).
    #[error("no leader is known to confirm a consistent read with (an election, or this node is cut off)")]
    NoLeader,
    /// The leader this node knows did not answer.
    #[error("the leader, node {leader}, is unreachable from this node: {reason}")]
    LeaderUnreachable {
        /// The leader's node id.
        leader: u64,
        /// What the transport said.
        reason: String,
    },
    /// The leader (this node, or the one asked) could not confirm with a quorum that it still
    /// leads, or no longer leads.
    #[error("node {leader} could not confirm with a quorum that it still leads")]
    NoQuorum {
        /// The node that was asked.
        leader: u64,
    },
    /// The leader gave the read index, but this node did not apply up to it in time.
    #[error("this node did not apply up to the read index {index} within {timeout:?}")]
    Behind {
        /// The leader's read index.
        index: u64,
        /// How long it waited.
        timeout: std::time::Duration,
    },
    /// The node is shutting down, or stopped on a storage failure.
    #[error(transparent)]
    Node(ConsensusError),
}

/// The leader's refusal of a read-index request, on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Refusal {
    /// The node asked does not lead (it has heard of a newer leader, or of none).
    NotLeader,
    /// It could not confirm its leadership with a quorum.
    NoQuorum,
    /// It is stopping, or stopped.
    Stopped,
}

/// Where the read index comes from: this node, or the leader it knows.
pub(crate) enum Source {
    /// This node leads and a quorum confirmed it: the read index.
    Here(u64),
    /// Another node leads, by this node's knowledge.
    Leader {
        /// Its node id.
        id: u64,
        /// Its membership address.
        addr: String,
    },
}

/// Asks this node's Raft for a read index: leaders confirm with a quorum, others name the
/// leader they know.
pub(crate) async fn here(raft: &Raft<TypeConfig>, id: u64) -> Result<Source, ReadIndexError> {
    match raft.get_read_log_id().await {
        Ok((read, _applied)) => Ok(Source::Here(read.map_or(0, |log_id| log_id.index))),
        Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(forward))) => match forward.leader_id {
            Some(leader) if leader == id => Err(ReadIndexError::NoQuorum { leader }),
            Some(leader) => Ok(Source::Leader {
                id: leader,
                addr: forward.leader_node.map(|node: BasicNode| node.addr).unwrap_or_default(),
            }),
            None => Err(ReadIndexError::NoLeader),
        },
        Err(RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(_))) => {
            Err(ReadIndexError::NoQuorum { leader: id })
        }
        Err(RaftError::Fatal(Fatal::Stopped)) => Err(ReadIndexError::Node(ConsensusError::ShuttingDown)),
        Err(RaftError::Fatal(fatal)) => Err(ReadIndexError::Node(ConsensusError::Failed(fatal.to_string()))),
    }
}

/// Asks the leader `leader` at `addr` for its read index, within `timeout`.
pub(crate) async fn from_leader(
    peers: &PeerClient,
    leader: u64,
    addr: &str,
    timeout: std::time::Duration,
) -> Result<u64, ReadIndexError> {
    let unreachable = |reason: String| ReadIndexError::LeaderUnreachable { leader, reason };
    let addr = peers.address_of(leader, addr);
    if addr.is_empty() {
        return Err(unreachable("no address is known for it".to_owned()));
    }
    match peers
        .call::<_, Result<u64, Refusal>>(&addr, Rpc::ReadIndex, &(), timeout)
        .await
    {
        Ok(Ok(index)) => Ok(index),
        Ok(Err(Refusal::NotLeader | Refusal::NoQuorum)) => Err(ReadIndexError::NoQuorum { leader }),
        Ok(Err(Refusal::Stopped)) => Err(unreachable("it is stopping".to_owned())),
        Err(CallError::Unreachable(reason)) => Err(unreachable(reason)),
        Err(CallError::Refused { status, .. }) => Err(unreachable(format!("it answered HTTP {status}"))),
    }
}

/// The leader's side of `POST /raft/read_index`: its read index once a quorum confirmed it
/// still leads, within `timeout`.
pub(crate) async fn serve(raft: &Raft<TypeConfig>, timeout: std::time::Duration) -> Result<u64, Refusal> {
    match tokio::time::timeout(timeout, raft.get_read_log_id()).await {
        Err(_) => Err(Refusal::NoQuorum),
        Ok(Ok((read, _applied))) => Ok(read.map_or(0, |log_id| log_id.index)),
        Ok(Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(_)))) => Err(Refusal::NotLeader),
        Ok(Err(RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(_)))) => Err(Refusal::NoQuorum),
        Ok(Err(RaftError::Fatal(_))) => Err(Refusal::Stopped),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_and_a_read_index_keep_their_wire_spelling() {
        // The follower and the leader may run different builds during an upgrade: the
        // spelling of the reply is the contract between them.
        let refused: Result<u64, Refusal> = Err(Refusal::NoQuorum);
        assert_eq!(serde_json::to_string(&refused).unwrap(), r#"{"Err":"no_quorum"}"#);
        let index: Result<u64, Refusal> = Ok(42);
        assert_eq!(serde_json::to_string(&index).unwrap(), r#"{"Ok":42}"#);
        for refusal in [Refusal::NotLeader, Refusal::NoQuorum, Refusal::Stopped] {
            let json = serde_json::to_string(&refusal).unwrap();
            assert_eq!(serde_json::from_str::<Refusal>(&json).unwrap(), refusal);
        }
    }
}
