//! The registrar machine's vocabulary with its shell: [`Action`]s out, [`Outcome`]s in. Every
//! action that touches the record carries the incarnation it is fenced by (SPEC L2).

use muster_core::api::{LeaseReply, WriteReply};
use muster_core::{Incarnation, LeaseId, Revision, ServingState};

use crate::http::ClientError;

/// A call the shell must make (and report with [`Outcome`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// `PUT .../{instance}` with a new lease of `ttl_ms`, starting in `serving`.
    Register {
        /// The incarnation registering.
        incarnation: Incarnation,
        /// The serving state of the new record.
        serving: ServingState,
        /// The lease TTL asked for.
        ttl_ms: u64,
    },
    /// `PUT /v1/leases/{tenant}/{lease}/renew`, bounded by the machine's renew timeout.
    Renew {
        /// The lease.
        lease: LeaseId,
    },
    /// `PUT .../{instance}/serving`, as the application.
    SetServing {
        /// The fencing incarnation.
        incarnation: Incarnation,
        /// The state.
        state: ServingState,
        /// Why.
        reason: String,
    },
    /// `POST .../{instance}/drain`, as the lifecycle owner of this registration.
    Drain {
        /// The fencing incarnation.
        incarnation: Incarnation,
        /// Why.
        reason: String,
    },
    /// `DELETE .../{instance}?incarnation=N`.
    Deregister {
        /// The fencing incarnation.
        incarnation: Incarnation,
    },
    /// `GET /v1/convergence/...?revision=R&fraction=F` during the grace: have enough of the
    /// service's subscribers applied the drain at `revision`?
    CheckConvergence {
        /// The drain's revision.
        revision: Revision,
    },
    /// `DELETE /v1/leases/{tenant}/{lease}`: the lease has no endpoint left.
    RevokeLease {
        /// The lease.
        lease: LeaseId,
    },
}

/// What came of an [`Action`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A write's reply (every action but renewal).
    Written(WriteReply),
    /// A renewal's reply.
    Renewed(LeaseReply),
    /// A convergence check's answer: enough live subscribers (at least one) applied it.
    Converged(bool),
    /// The call failed.
    Failed(ClientError),
}
