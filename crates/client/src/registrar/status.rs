//! [`RegistrarStatus`]: what a registrar tells the application about its registration, so
//! that a failing renewal is reported, never hidden (SPEC C6).

use muster_core::{Incarnation, LeaseId, Revision, ServingState};
use tokio::time::Instant;

use crate::http::ClientError;

/// A live registration as the registrar knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveRegistration {
    /// The incarnation registered (the fencing token of every later call).
    pub incarnation: Incarnation,
    /// The lease the record is attached to.
    pub lease: LeaseId,
    /// The TTL the registry granted.
    pub ttl_ms: u64,
    /// The revision of the last write this registrar committed for the record.
    pub revision: Revision,
    /// When the lease runs out unless renewed, by this process's clock: the time the last
    /// successful renewal (or the registration) was *sent*, plus the TTL. The server's own
    /// deadline is at least as late, so this estimate errs on the early side.
    pub lease_deadline: Instant,
    /// The serving state the registry holds, as far as this registrar's writes tell.
    pub serving: ServingState,
    /// The last set-serving the registry refused outright (not retried), if any.
    pub serving_error: Option<ClientError>,
    /// How many times the lease was lost and the instance registered again.
    pub lease_losses: u32,
}

/// Where a planned shutdown is (SPEC L6: drain, wait, deregister).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShutdownStage {
    /// Publishing `draining`.
    Draining,
    /// `draining` is published (or could not be); waiting for the grace to pass.
    Grace {
        /// When the grace ends.
        until: Instant,
    },
    /// Deleting the record.
    Deregistering,
    /// Revoking the now-empty lease.
    RevokingLease,
}

/// The state of a registrar, published on a [`tokio::sync::watch`] channel.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RegistrarStatus {
    /// The first registration is being attempted.
    Registering {
        /// The incarnation registering.
        incarnation: Incarnation,
        /// Attempts that failed so far.
        failed_attempts: u32,
        /// Why the last one failed.
        last_error: Option<ClientError>,
    },
    /// Registered, and the lease renewed in time.
    Healthy(LiveRegistration),
    /// Renewals fail. The lease (and the endpoint) may live until `registration.lease_deadline`;
    /// the registrar keeps trying more often than usual.
    RenewalFailing {
        /// The registration being renewed.
        registration: LiveRegistration,
        /// When the first renewal of this run of failures failed.
        since: Instant,
        /// How many renewals failed in a row.
        failed_attempts: u32,
        /// The last failure.
        error: ClientError,
    },
    /// The registry no longer knows the lease (`lease_not_found`): it expired, or was revoked,
    /// and the endpoint went with it.
    LeaseLost {
        /// The registration that was lost.
        lost: LiveRegistration,
        /// When the registrar learned of it.
        at: Instant,
        /// The incarnation being registered in its place, or `None` when the registrar does
        /// not re-register (see [`LeaseLossPolicy`](crate::LeaseLossPolicy)) and
        /// has stopped.
        reregistering_as: Option<Incarnation>,
        /// Failed attempts to register again.
        failed_attempts: u32,
        /// Why the last one failed.
        last_error: Option<ClientError>,
    },
    /// A planned shutdown is in progress.
    ShuttingDown {
        /// The registration being taken down.
        registration: LiveRegistration,
        /// How far it got.
        stage: ShutdownStage,
    },
    /// Finished: the shutdown ran to its end.
    Stopped {
        /// Whether the record was deleted by this registrar (false: it was never registered,
        /// was already gone, or the deregistration kept failing and the lease's expiry will
        /// remove it within a TTL).
        deregistered: bool,
        /// The last failure of the shutdown, if any.
        error: Option<ClientError>,
    },
    /// Finished: a higher incarnation owns the instance (`stale_incarnation`), so a newer
    /// process replaced this one. The registrar stopped renewing and writes nothing more.
    Superseded {
        /// The incarnation this registrar held.
        incarnation: Incarnation,
        /// The refusal that said so.
        error: ClientError,
    },
    /// Finished: the registry refused the registration itself (an invalid record, an
    /// address out of scope ...); no retry can help.
    Refused {
        /// The refusal.
        error: ClientError,
    },
}

impl RegistrarStatus {
    /// The live registration, if the instance is registered (healthy, failing to renew, or
    /// shutting down).
    pub fn registration(&self) -> Option<&LiveRegistration> {
        match self {
            RegistrarStatus::Healthy(registration)
            | RegistrarStatus::RenewalFailing { registration, .. }
            | RegistrarStatus::ShuttingDown { registration, .. } => Some(registration),
            _ => None,
        }
    }

    /// Whether the registrar has nothing more to do: its task has ended or is ending.
    pub fn is_finished(&self) -> bool {
        match self {
            RegistrarStatus::Stopped { .. } | RegistrarStatus::Superseded { .. } | RegistrarStatus::Refused { .. } => {
                true
            }
            RegistrarStatus::LeaseLost { reregistering_as, .. } => reregistering_as.is_none(),
            _ => false,
        }
    }
}
