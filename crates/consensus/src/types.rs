//! The Raft type configuration: what a log entry carries and what applying it returns.

use std::io::Cursor;

use muster_core::Rejection;
use muster_registry::{Applied, Command, CommandMeta};
use serde::{Deserialize, Serialize};

openraft::declare_raft_types!(
    /// Muster's Raft types: proposals in, registry verdicts out, node ids `u64`.
    pub TypeConfig:
        D = Batch,
        R = Outcome,
        AsyncRuntime = crate::runtime::MusterRuntime,
);

/// One log entry's payload: the proposals that arrived while the previous entry was being
/// made durable, applied in order, each at its own revision. Batching here is what turns
/// one fsync per write into one fsync per batch (group commit): openraft 0.9 flushes each
/// append before it takes the next.
///
/// A batch carries an [`BatchId`]: a retried batch (a lost reply, a leader that died after
/// committing it) is appended again, and the state machine recognises it and answers with
/// the first application's verdicts instead of applying it twice (SPEC R6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Batch {
    /// Who proposed it; `None` only for entries written before batches had ids.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<BatchId>,
    /// The proposals, in order.
    pub proposals: Vec<Proposal>,
}

/// A batch's identity: the proposing node, the process session it was proposed in (a node
/// numbers its batches from 1 again after a restart), and its number in that session.
///
/// A node's batcher has one batch in flight at a time, so within a session the numbers reach
/// the log in order, up to retries of the newest: that is all the state machine must
/// remember per session ([`crate::state_machine`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct BatchId {
    /// The proposing node's id.
    pub origin: u64,
    /// Distinct for every start of the proposing node.
    pub session: u64,
    /// The batch's number within the session, from 1.
    pub seq: u64,
}

/// A stored batch is today's shape (`{"id": .., "proposals": [..]}`) or the bare list of
/// proposals that log entries held before batches had ids (so an older data directory still
/// opens). The visitor tells them apart by the first token, so a batch is parsed once, in
/// place: serde's `untagged` would first copy every proposal into an intermediate tree, and
/// every replicated entry and every entry read back for replication is a batch.
impl<'de> Deserialize<'de> for Batch {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Batch, D::Error> {
        deserializer.deserialize_any(BatchVisitor)
    }
}

struct BatchVisitor;

impl<'de> serde::de::Visitor<'de> for BatchVisitor {
    type Value = Batch;

    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("a batch: {id, proposals} or a list of proposals")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Batch, A::Error> {
        let mut proposals = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(proposal) = seq.next_element()? {
            proposals.push(proposal);
        }
        Ok(Batch { id: None, proposals })
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Batch, A::Error> {
        use serde::de::Error;
        let (mut id, mut proposals) = (None, None);
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match key.as_ref() {
                "id" if id.is_some() => return Err(A::Error::duplicate_field("id")),
                "id" => id = Some(map.next_value::<Option<BatchId>>()?),
                "proposals" if proposals.is_some() => return Err(A::Error::duplicate_field("proposals")),
                "proposals" => proposals = Some(map.next_value::<Vec<Proposal>>()?),
                _ => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        Ok(Batch {
            id: id.flatten(),
            proposals: proposals.ok_or_else(|| A::Error::missing_field("proposals"))?,
        })
    }
}

/// A registry command with who sent it and when (the proposing node's clock, fixed at
/// proposal so replay sees the same time).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proposal {
    /// The command.
    pub command: Command,
    /// Caller and time.
    pub meta: CommandMeta,
}

/// What applying one log entry gave: the registry's verdict for each proposal of its batch,
/// in order; empty for Raft's own entries (blank leader entries, membership changes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome(pub Vec<Result<Applied, Rejection>>);

/// The log id type of this configuration.
pub(crate) type LogId = openraft::LogId<u64>;
/// A stored log entry.
pub(crate) type Entry = openraft::Entry<TypeConfig>;
/// Storage errors as openraft wants them.
pub(crate) type StorageError = openraft::StorageError<u64>;
