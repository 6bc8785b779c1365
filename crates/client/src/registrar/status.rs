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

impl RegistrarStatus {
    /// A stable machine-readable code: `registering`, `healthy`, `renewal_failing`,
    /// `lease_lost`, `shutting_down`, `stopped`, `superseded`, `refused`. `Display` starts
    /// with it, once.
    pub fn code(&self) -> &'static str {
        match self {
            RegistrarStatus::Registering { .. } => "registering",
            RegistrarStatus::Healthy(_) => "healthy",
            RegistrarStatus::RenewalFailing { .. } => "renewal_failing",
            RegistrarStatus::LeaseLost { .. } => "lease_lost",
            RegistrarStatus::ShuttingDown { .. } => "shutting_down",
            RegistrarStatus::Stopped { .. } => "stopped",
            RegistrarStatus::Superseded { .. } => "superseded",
            RegistrarStatus::Refused { .. } => "refused",
        }
    }

    /// The failure this status carries, if any.
    pub fn error(&self) -> Option<&ClientError> {
        match self {
            RegistrarStatus::Registering { last_error, .. } | RegistrarStatus::LeaseLost { last_error, .. } => {
                last_error.as_ref()
            }
            RegistrarStatus::RenewalFailing { error, .. }
            | RegistrarStatus::Superseded { error, .. }
            | RegistrarStatus::Refused { error } => Some(error),
            RegistrarStatus::Stopped { error, .. } => error.as_ref(),
            RegistrarStatus::Healthy(_) | RegistrarStatus::ShuttingDown { .. } => None,
        }
    }
}

/// One line: the code, what the registrar is doing, and its last failure, e.g.
/// `superseded: incarnation 3 replaced by a newer process: stale_incarnation: ...`.
impl std::fmt::Display for RegistrarStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: ", self.code())?;
        match self {
            RegistrarStatus::Registering {
                incarnation,
                failed_attempts,
                ..
            } => write!(
                f,
                "registering incarnation {incarnation}, {failed_attempts} failed attempts"
            )?,
            RegistrarStatus::Healthy(live) | RegistrarStatus::ShuttingDown { registration: live, .. } => write!(
                f,
                "incarnation {} registered on lease {} at revision {}",
                live.incarnation, live.lease, live.revision
            )?,
            RegistrarStatus::RenewalFailing {
                registration,
                failed_attempts,
                ..
            } => write!(
                f,
                "{failed_attempts} renewals of lease {} failed in a row",
                registration.lease
            )?,
            RegistrarStatus::LeaseLost {
                lost, reregistering_as, ..
            } => match reregistering_as {
                Some(next) => write!(f, "lease {} lost; registering again as incarnation {next}", lost.lease)?,
                None => write!(f, "lease {} lost; not registering again", lost.lease)?,
            },
            RegistrarStatus::Stopped { deregistered, .. } => f.write_str(if *deregistered {
                "deregistered"
            } else {
                "stopped without deregistering"
            })?,
            RegistrarStatus::Superseded { incarnation, .. } => {
                write!(f, "incarnation {incarnation} was replaced by a newer process")?
            }
            RegistrarStatus::Refused { .. } => f.write_str("the registry refused the registration")?,
        }
        match self.error() {
            Some(error) => write!(f, ": {error}"),
            None => Ok(()),
        }
    }
}

/// A status is an error when a caller waiting for registration gets one that is not healthy
/// (`r.registered().await?`); its source is the [`ClientError`] it carries.
impl std::error::Error for RegistrarStatus {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error().map(|error| error as &(dyn std::error::Error + 'static))
    }
}
