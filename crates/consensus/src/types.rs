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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Batch(pub Vec<Proposal>);

/// A registry command with who sent it and when (the leader's clock, fixed at proposal so
/// replay sees the same time).
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
