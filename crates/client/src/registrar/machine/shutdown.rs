//! The planned shutdown of a [`RegistrarMachine`] (SPEC L6): publish `draining`, wait the
//! grace, delete the record, revoke the now-empty lease — fenced by the incarnation, and
//! still renewing the lease until the record is gone (renewal stays in the parent module,
//! shared with the live phase).
//!
//! ```text
//!  Drain ──ok──▶ Grace ──(grace over, or converged)──▶ Deregister ──ok / already gone──▶ Revoke ──▶ Stopped
//!    │ fails past the grace: deregister anyway                     │ fails for a TTL: Stopped (expiry removes it)
//!    └ not_found: nothing to drain ────────────────────────────────┴──────────────────▶ Revoke
//! ```
//!
//! With `drain_until_converged`, the grace asks the server every [`CONVERGENCE_POLL`]
//! whether that fraction of the service's subscribers applied the drain (SPEC O3), and ends
//! early when they have: the measured grace of SPEC L6.

use std::time::Duration;

use muster_core::{ErrorCode, Revision, ServingState};
use rand_core::RngCore;
use tokio::time::Instant;

use crate::http::ClientError;
use crate::registrar::machine::{Phase, RegistrarMachine};
use crate::registrar::outcome::{Action, Outcome};
use crate::registrar::status::{RegistrarStatus, ShutdownStage};
use crate::registrar::timing;

/// How often the grace asks whether the subscribers converged: they report within a quarter
/// second of applying (`DEFAULT_REPORT_INTERVAL`), so the drain ends at most about this long
/// after they all have.
pub(crate) const CONVERGENCE_POLL: Duration = Duration::from_millis(250);

/// Where a shutdown is.
#[derive(Debug, Clone, Copy)]
pub(super) enum Stage {
    /// Publish `draining`; give up (and deregister anyway) at `until`.
    Drain { until: Instant },
    /// Wait until `until` (or until the subscribers applied the drain at `drained_at`).
    Grace { until: Instant, drained_at: Revision },
    /// Delete the record; give up (the lease's expiry removes it) at `until`.
    Deregister { until: Instant },
    /// Revoke the lease.
    Revoke,
}

impl Stage {
    /// The stage as the application sees it.
    pub(super) fn reported(self) -> ShutdownStage {
        match self {
            Stage::Drain { .. } => ShutdownStage::Draining,
            Stage::Grace { until, .. } => ShutdownStage::Grace { until },
            Stage::Deregister { .. } => ShutdownStage::Deregistering,
            Stage::Revoke => ShutdownStage::RevokingLease,
        }
    }

    /// When this stage next wants the machine polled, given its next attempt at `retry_at`.
    pub(super) fn wake(self, retry_at: Instant) -> Instant {
        match self {
            Stage::Grace { until, .. } => until.min(retry_at),
            Stage::Drain { .. } | Stage::Deregister { .. } | Stage::Revoke => retry_at,
        }
    }
}

/// The final status of a shutdown.
pub(super) fn stopped(deregistered: bool, error: Option<ClientError>) -> RegistrarStatus {
    RegistrarStatus::Stopped { deregistered, error }
}

impl<R: RngCore> RegistrarMachine<R> {
    /// Begins a planned shutdown: drain, grace, deregister. With nothing registered the
    /// machine simply stops.
    pub fn shutdown(&mut self, now: Instant) {
        let phase = std::mem::replace(&mut self.phase, Phase::Finished(stopped(false, None)));
        self.phase = match phase {
            Phase::Live(live) => Phase::ShuttingDown {
                live,
                stage: Stage::Drain {
                    until: now + self.config.drain_grace,
                },
                retry_at: now,
                failures: 0,
                deregistered: false,
                last_error: None,
            },
            Phase::Registering { .. } => Phase::Finished(stopped(false, None)),
            other @ (Phase::ShuttingDown { .. } | Phase::Finished(_)) => other,
        };
    }

    /// The shutdown's next call, once any due renewal has been handed out.
    pub(super) fn next_shutdown_action(&mut self, now: Instant) -> Option<Action> {
        let Phase::ShuttingDown {
            live,
            stage,
            retry_at,
            failures,
            ..
        } = &mut self.phase
        else {
            return None;
        };
        let incarnation = live.registration.incarnation;
        match *stage {
            Stage::Drain { .. } => (now >= *retry_at).then(|| Action::Drain {
                incarnation,
                reason: self.config.drain_reason.clone(),
            }),
            Stage::Grace { until, drained_at } => {
                if now < until {
                    if self.config.drain_until_converged.is_none() || now < *retry_at {
                        return None;
                    }
                    *retry_at = now + CONVERGENCE_POLL;
                    return Some(Action::CheckConvergence { revision: drained_at });
                }
                *stage = Stage::Deregister {
                    until: now + self.config.ttl,
                };
                *retry_at = now;
                *failures = 0;
                Some(Action::Deregister { incarnation })
            }
            Stage::Deregister { .. } => (now >= *retry_at).then_some(Action::Deregister { incarnation }),
            Stage::Revoke => Some(Action::RevokeLease {
                lease: live.registration.lease,
            }),
        }
    }

    pub(super) fn drained(&mut self, now: Instant, outcome: Outcome) {
        let grace = self.config.drain_grace;
        let checks = self.config.drain_until_converged.is_some();
        let ttl = self.config.ttl;
        let Phase::ShuttingDown {
            live,
            stage,
            retry_at,
            failures,
            last_error,
            ..
        } = &mut self.phase
        else {
            return;
        };
        let Stage::Drain { until } = *stage else { return };
        match outcome {
            Outcome::Written(reply) => {
                live.registration.serving = ServingState::Draining;
                live.registration.revision = live.registration.revision.max(reply.revision);
                *stage = Stage::Grace {
                    until: now + grace,
                    drained_at: reply.revision,
                };
                *failures = 0;
                // The first convergence check, once subscribers had a moment to hear of the
                // drain; without checks, nothing before the grace's end.
                *retry_at = now + if checks { CONVERGENCE_POLL } else { grace };
            }
            Outcome::Failed(error) if error.code() == ErrorCode::StaleIncarnation => {
                let incarnation = live.registration.incarnation;
                self.supersede(incarnation, error);
            }
            Outcome::Failed(error) if error.code() == ErrorCode::NotFound => {
                // Nothing left to drain or delete; the lease is still ours to revoke.
                *last_error = Some(error);
                *stage = Stage::Revoke;
                *retry_at = now;
            }
            Outcome::Failed(error) => {
                *failures += 1;
                let delay = timing::backoff(&mut self.rng, *failures);
                if error.is_transient() && now + delay < until {
                    *retry_at = now + delay;
                } else {
                    // Draining could not be published in the grace: deregister anyway, so the
                    // endpoint still leaves by a fenced delete rather than by expiry. The
                    // deregistration's own retries start from the shortest backoff.
                    *stage = Stage::Deregister { until: now + ttl };
                    *retry_at = now;
                    *failures = 0;
                }
                *last_error = Some(error);
            }
            Outcome::Renewed(_) | Outcome::Converged(_) => {}
        }
    }

    /// A convergence check came back: converged ends the grace now; anything else (not yet,
    /// or the check failed) waits for the next check or the grace's end.
    pub(super) fn convergence_checked(&mut self, now: Instant, outcome: Outcome) {
        let ttl = self.config.ttl;
        let Phase::ShuttingDown {
            stage,
            retry_at,
            failures,
            ..
        } = &mut self.phase
        else {
            return;
        };
        if matches!(stage, Stage::Grace { .. }) && outcome == Outcome::Converged(true) {
            *stage = Stage::Deregister { until: now + ttl };
            *retry_at = now;
            *failures = 0;
        }
    }

    pub(super) fn deregistered(&mut self, now: Instant, outcome: Outcome) {
        let Phase::ShuttingDown {
            stage,
            retry_at,
            failures,
            deregistered,
            last_error,
            ..
        } = &mut self.phase
        else {
            return;
        };
        let Stage::Deregister { until } = *stage else { return };
        match outcome {
            Outcome::Written(_) => {
                *deregistered = true;
                *stage = Stage::Revoke;
            }
            Outcome::Failed(error)
                if matches!(
                    error.code().api(),
                    Some(ErrorCode::StaleIncarnation | ErrorCode::NotFound)
                ) =>
            {
                // Already gone (expired, evicted, or replaced by a newer incarnation): the
                // lease is still ours to revoke.
                *last_error = Some(error);
                *stage = Stage::Revoke;
            }
            Outcome::Failed(error) => {
                *failures += 1;
                let delay = timing::backoff(&mut self.rng, *failures);
                if error.is_transient() && now + delay < until {
                    *retry_at = now + delay;
                    *last_error = Some(error);
                } else {
                    // Past a TTL of trying, stopping renewal lets expiry remove the record
                    // just as surely (with reason `lease_expired`).
                    self.phase = Phase::Finished(stopped(false, Some(error)));
                }
            }
            Outcome::Renewed(_) | Outcome::Converged(_) => {}
        }
    }

    pub(super) fn revoked(&mut self, outcome: Outcome) {
        let Phase::ShuttingDown {
            deregistered,
            last_error,
            ..
        } = &mut self.phase
        else {
            return;
        };
        let error = match outcome {
            Outcome::Failed(error) if error.code() != ErrorCode::LeaseNotFound => last_error.take().or(Some(error)),
            _ => last_error.take(),
        };
        self.phase = Phase::Finished(stopped(*deregistered, error));
    }
}
