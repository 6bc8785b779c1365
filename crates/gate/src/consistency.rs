//! Read consistency (SPEC R3): every read says how fresh it may be, and every reply says how
//! fresh it is.
//!
//! | `consistency=` | served when | cost |
//! |---|---|---|
//! | `stale` | always, from this node's applied state | none |
//! | `default` | this node leads, or heard from a leader within 5 s | none |
//! | `consistent` | on every node: the leader confirmed with a quorum (ReadIndex) and this node applied up to its read index | one heartbeat round; on a follower one node-to-node round trip more |
//!
//! A consistent read on a follower asks the leader for its read index over the cluster link
//! (`POST /raft/read_index`, with the cluster secret), then waits, at most the write timeout
//! (5 s), until it has applied up to it (`muster_consensus::Node::linearizable`). It never
//! falls back to this node's own state: no leader known or the leader without quorum answer
//! `503 no_quorum`; the leader known but unreachable `503 leader_unreachable`; this node not
//! caught up with the read index in time `503 not_caught_up`. All are transient: retry, here
//! or on another node.
//!
//! Replies carry `X-Muster-Index` (the revision read at) and `X-Muster-Last-Contact` (ms since
//! this node last heard from a leader's appends; for the leader, since a quorum acknowledged
//! it). A read index is not contact: it says the leader leads, not that it reaches this node.

use axum::http::HeaderValue;
use axum::response::Response;
use serde::Deserialize;

use muster_consensus::Node;
use muster_http::error::ApiError;

/// The header with the age of this node's last contact with a leader, in ms.
pub const LAST_CONTACT_HEADER: &str = "x-muster-last-contact";

/// How stale a `default` read on a follower may be: a leader sends heartbeats every 100 ms,
/// so 5 s of silence means this node is cut off, not merely behind.
const DEFAULT_MAX_STALENESS_MS: u64 = 5_000;

/// What a read asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Consistency {
    /// Whatever this node has applied.
    Stale,
    /// This node's state, if it is in touch with a leader.
    #[default]
    Default,
    /// Linearizable, on any node: the leader confirms its read index with a quorum and the
    /// node serving the read has applied up to it.
    Consistent,
}

/// Waits until a read of `consistency` may be served by `node`, or says why not.
pub async fn ready(node: &Node, consistency: Consistency) -> Result<(), ApiError> {
    match consistency {
        Consistency::Stale => Ok(()),
        Consistency::Consistent => node.linearizable().await.map(drop).map_err(ApiError::from),
        Consistency::Default => match node.leader_contact_age_ms() {
            Some(age) if age <= DEFAULT_MAX_STALENESS_MS => Ok(()),
            age => Err(ApiError::new(
                muster_core::ErrorCode::Stale,
                match age {
                    Some(age) => format!(
                        "this node last heard from a leader {age} ms ago (over {DEFAULT_MAX_STALENESS_MS} ms); \
                         read with consistency=stale to accept that, or ask another node"
                    ),
                    None => {
                        "this node has not heard from a leader; read with consistency=stale to accept that".to_owned()
                    }
                },
            )),
        },
    }
}

/// Adds `node`'s freshness header to a read's reply.
pub fn annotate(node: &Node, response: &mut Response) {
    if let Some(age) = node.leader_contact_age_ms() {
        response
            .headers_mut()
            .insert(LAST_CONTACT_HEADER, HeaderValue::from(age));
    }
}
