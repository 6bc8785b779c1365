//! What applying a command yields, and what a read can refuse.

use std::sync::Arc;

use muster_core::{LeaseId, Revision, ServiceKey, ServiceUpdate};
use serde::{Deserialize, Serialize};

/// The result of an accepted command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    /// The committed revision that holds this command's effect: the new revision, or for a
    /// command that changed nothing, the revision the caller's intent was already committed at.
    pub revision: Revision,
    /// The per-service updates of the new revision, sorted by service; empty when nothing
    /// changed. The same values the change log holds.
    pub updates: Vec<Arc<ServiceUpdate>>,
    /// The lease the command granted or attached, for the renewal deadline in the reply.
    pub lease: Option<LeaseGrant>,
    /// Why nothing changed, when nothing did.
    pub unchanged: Option<Unchanged>,
    /// Services released by this revision: left empty for the whole history window, they
    /// hold no state from now on (their fences stay: known and empty while any holds); and
    /// released services whose last fence expired (unknown from now on). Derived views read
    /// them again; a watcher of one sees a new lineage (`prev_revision` 0) if it is
    /// registered again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub released: Vec<ServiceKey>,
    /// Services whose set mirrored from a peer region changed (SPEC G2): what a failover
    /// tier built from them is rebuilt for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mirrored: Vec<ServiceKey>,
}

/// A lease in a reply: the server turns the TTL into a deadline on its own clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseGrant {
    /// The lease.
    pub id: LeaseId,
    /// Its TTL.
    pub ttl_ms: u64,
}

/// Why an accepted command changed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unchanged {
    /// The same intent is already committed (a retry after a lost reply, SPEC L1).
    AlreadyCommitted,
    /// An app or checker reported readiness while the endpoint is draining: the drain holds
    /// until the owner lifts it (SPEC L5).
    DrainHeld,
    /// None of the leases to expire exists any more.
    NothingToExpire,
    /// The first committed policy was put in force; nothing the registry holds changed, so
    /// no revision was spent.
    PolicyAdopted,
    /// A mirror heard from its source region and no mirrored set changed (SPEC G2).
    MirrorCurrent,
    /// The registry's format was raised (architecture.md "Formats and versions"): nothing it holds
    /// changed, so no revision was spent.
    FormatRaised,
}

impl Unchanged {
    /// The stable code a reply (`unchanged`) and the audit trail (`unchanged:<code>`) use.
    pub fn code(self) -> &'static str {
        match self {
            Unchanged::AlreadyCommitted => "already_committed",
            Unchanged::DrainHeld => "drain_held",
            Unchanged::NothingToExpire => "nothing_to_expire",
            Unchanged::PolicyAdopted => "policy_adopted",
            Unchanged::MirrorCurrent => "mirror_current",
            Unchanged::FormatRaised => "format_raised",
        }
    }
}

/// Why a read could not be answered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// The requested revision is older than the retained history: take a fresh snapshot.
    #[error("compacted: history before revision {compacted} is gone; the current revision is {current}")]
    Compacted {
        /// Every revision up to and including this one is compacted.
        compacted: Revision,
        /// The current revision, to snapshot at.
        current: Revision,
    },
    /// The requested revision is not committed yet.
    #[error("revision {requested} is in the future; the current revision is {current}")]
    FutureRevision {
        /// What was asked for.
        requested: Revision,
        /// The current revision.
        current: Revision,
    },
}

impl ReadError {
    /// The stable, machine-readable code.
    pub fn code(&self) -> &'static str {
        self.error_code().as_str()
    }

    /// The code as the shared vocabulary.
    pub fn error_code(&self) -> muster_core::ErrorCode {
        match self {
            ReadError::Compacted { .. } => muster_core::ErrorCode::Compacted,
            ReadError::FutureRevision { .. } => muster_core::ErrorCode::FutureRevision,
        }
    }
}
