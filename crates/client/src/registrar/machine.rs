//! [`RegistrarMachine`]: every decision of a registrar — when to renew, when to retry, what
//! each error code means — as a pure state machine. Time and randomness are inputs: the
//! caller passes `now`, the machine owns an injected RNG for jitter; it returns [`Action`]s
//! and is told their [`Outcome`]s. The task in [`crate::registrar::task`] only performs them.
//!
//! ```text
//!          ┌─────────── transient failure: back off, retry ───────────┐
//!          ▼                                                          │
//!  Registering ──Register ok──▶ Live ──every TTL/3 ±10%: Renew──▶ Live (deadline moved)
//!      ▲   │ stale_incarnation ──▶ Superseded     │ renew fails: RenewalFailing, retry every TTL/10
//!      │   └ invalid record ────▶ Refused         │ lease_not_found (or set-serving not_found)
//!      └────── incarnation + 1 ◀── LeaseLost ◀────┘
//!  shutdown: Live ──Drain──▶ Grace (keep renewing) ──Deregister──▶ RevokeLease ──▶ Stopped
//! ```
//!
//! The delays and their jitter are in [`crate::registrar::timing`]; the shutdown sequence
//! (drain, grace, deregister, revoke) is in the private `shutdown` submodule.
//!
//! The machine performs one action at a time: [`RegistrarMachine::poll`] hands out at most
//! one until [`RegistrarMachine::complete`] reports it. Renewal comes first whenever it is due:
//! it is what keeps the endpoint alive, and everything else can wait a round trip.

use std::time::Duration;

use muster_core::api::WriteReply;
use muster_core::{ErrorCode, Incarnation, LeaseId, ServingState};
use rand_core::RngCore;
use tokio::time::Instant;

use crate::http::ClientError;
use crate::registrar::config::{LeaseLossPolicy, RegistrarConfig};
use crate::registrar::incarnation::MAX_REREGISTRATIONS;
use crate::registrar::status::{LiveRegistration, RegistrarStatus};
use crate::registrar::timing::{self, RENEW_TIMEOUT_DIVISOR};

use crate::registrar::outcome::{Action, Outcome};

mod shutdown;

use shutdown::{Stage, stopped};

/// The registration the application wants to present.
#[derive(Debug, Clone)]
struct Desired {
    state: ServingState,
    reason: String,
    /// Bumped on every request, so that the same state asked twice is sent twice.
    generation: u64,
}

/// A run of failed renewals.
#[derive(Debug, Clone)]
struct Failing {
    since: Instant,
    attempts: u32,
    error: ClientError,
}

/// A registration being kept alive.
#[derive(Debug, Clone)]
struct Live {
    registration: LiveRegistration,
    renew_at: Instant,
    failing: Option<Failing>,
    /// The [`Desired::generation`] the registry last heard (by registration or set-serving).
    submitted: u64,
    /// When to retry a set-serving that failed transiently, and how many did in a row.
    serving_retry: Option<(Instant, u32)>,
}

#[derive(Debug, Clone)]
enum Phase {
    Registering {
        incarnation: Incarnation,
        due: Instant,
        failures: u32,
        last_error: Option<ClientError>,
        /// Set when registering again after a lost lease: the lost registration and when.
        lost: Option<(LiveRegistration, Instant)>,
    },
    Live(Live),
    ShuttingDown {
        live: Live,
        stage: Stage,
        /// When the current stage's next attempt is due, and how many failed.
        retry_at: Instant,
        failures: u32,
        deregistered: bool,
        last_error: Option<ClientError>,
    },
    Finished(RegistrarStatus),
}

/// The action handed out and not yet completed.
#[derive(Debug, Clone)]
struct InFlight {
    action: Action,
    sent_at: Instant,
    generation: u64,
}

/// The registrar's decisions; see the module docs.
#[derive(Debug)]
pub struct RegistrarMachine<R> {
    config: RegistrarConfig,
    rng: R,
    desired: Desired,
    phase: Phase,
    in_flight: Option<InFlight>,
    lease_losses: u32,
}

impl<R: RngCore> RegistrarMachine<R> {
    /// A machine that registers `incarnation` as soon as it is polled, drawing jitter from
    /// `rng`.
    pub fn new(config: RegistrarConfig, incarnation: Incarnation, now: Instant, rng: R) -> Self {
        let desired = Desired {
            state: config.initial_serving,
            reason: String::new(),
            generation: 0,
        };
        RegistrarMachine {
            config,
            rng,
            desired,
            phase: Phase::Registering {
                incarnation,
                due: now,
                failures: 0,
                last_error: None,
                lost: None,
            },
            in_flight: None,
            lease_losses: 0,
        }
    }

    /// The incarnation registered or being registered.
    pub fn incarnation(&self) -> Incarnation {
        match &self.phase {
            Phase::Registering { incarnation, .. } => *incarnation,
            Phase::Live(live) | Phase::ShuttingDown { live, .. } => live.registration.incarnation,
            Phase::Finished(RegistrarStatus::Superseded { incarnation, .. }) => *incarnation,
            Phase::Finished(RegistrarStatus::LeaseLost { lost, .. }) => lost.incarnation,
            // Stopped or refused: nothing is registered any more.
            Phase::Finished(_) => Incarnation(0),
        }
    }

    /// How long one renewal call may take (see [`RENEW_TIMEOUT_DIVISOR`]).
    pub fn renew_timeout(&self) -> Duration {
        self.config.ttl / RENEW_TIMEOUT_DIVISOR
    }

    /// Whether the machine has nothing more to do.
    pub fn is_finished(&self) -> bool {
        matches!(self.phase, Phase::Finished(_))
    }

    /// Whether a shutdown was asked for (or the machine finished).
    pub fn is_shutting_down(&self) -> bool {
        matches!(self.phase, Phase::ShuttingDown { .. } | Phase::Finished(_))
    }

    /// The status to publish.
    pub fn status(&self) -> RegistrarStatus {
        match &self.phase {
            Phase::Registering {
                incarnation,
                failures,
                last_error,
                lost: None,
                ..
            } => RegistrarStatus::Registering {
                incarnation: *incarnation,
                failed_attempts: *failures,
                last_error: last_error.clone(),
            },
            Phase::Registering {
                incarnation,
                failures,
                last_error,
                lost: Some((lost, at)),
                ..
            } => RegistrarStatus::LeaseLost {
                lost: lost.clone(),
                at: *at,
                reregistering_as: Some(*incarnation),
                failed_attempts: *failures,
                last_error: last_error.clone(),
            },
            Phase::Live(Live {
                registration,
                failing: None,
                ..
            }) => RegistrarStatus::Healthy(registration.clone()),
            Phase::Live(Live {
                registration,
                failing: Some(failing),
                ..
            }) => RegistrarStatus::RenewalFailing {
                registration: registration.clone(),
                since: failing.since,
                failed_attempts: failing.attempts,
                error: failing.error.clone(),
            },
            Phase::ShuttingDown { live, stage, .. } => RegistrarStatus::ShuttingDown {
                registration: live.registration.clone(),
                stage: stage.reported(),
            },
            Phase::Finished(status) => status.clone(),
        }
    }

    /// The application's readiness (SPEC L5: the app owns readiness; an owner's drain still
    /// wins in the registry). Sent once registered, and carried by any later registration.
    pub fn set_serving(&mut self, state: ServingState, reason: impl Into<String>) {
        self.desired = Desired {
            state,
            reason: reason.into(),
            generation: self.desired.generation + 1,
        };
    }

    /// The action to perform now, if any. At most one is outstanding: `None` until the last
    /// one is [`complete`](Self::complete)d.
    pub fn poll(&mut self, now: Instant) -> Option<Action> {
        if self.in_flight.is_some() {
            return None;
        }
        let action = self.next_action(now)?;
        self.in_flight = Some(InFlight {
            action: action.clone(),
            sent_at: now,
            generation: self.desired.generation,
        });
        Some(action)
    }

    fn next_action(&mut self, now: Instant) -> Option<Action> {
        let desired = &self.desired;
        match &mut self.phase {
            Phase::Finished(_) => None,
            Phase::Registering { incarnation, due, .. } => (now >= *due).then(|| Action::Register {
                incarnation: *incarnation,
                serving: desired.state,
                ttl_ms: crate::http::millis(self.config.ttl),
            }),
            Phase::Live(live) => {
                if now >= live.renew_at {
                    return Some(Action::Renew {
                        lease: live.registration.lease,
                    });
                }
                let retry_due = live.serving_retry.is_none_or(|(at, _)| now >= at);
                (live.submitted != desired.generation && retry_due).then(|| Action::SetServing {
                    incarnation: live.registration.incarnation,
                    state: desired.state,
                    reason: desired.reason.clone(),
                })
            }
            Phase::ShuttingDown { live, .. } => {
                if now >= live.renew_at {
                    return Some(Action::Renew {
                        lease: live.registration.lease,
                    });
                }
                self.next_shutdown_action(now)
            }
        }
    }

    /// When the machine next wants to be polled, if it waits for time at all (it may also be
    /// waiting only for the application: readiness or shutdown).
    pub fn next_wake(&self) -> Option<Instant> {
        if self.in_flight.is_some() {
            return None;
        }
        match &self.phase {
            Phase::Finished(_) => None,
            Phase::Registering { due, .. } => Some(*due),
            Phase::Live(live) => {
                let serving = (live.submitted != self.desired.generation)
                    .then(|| live.serving_retry.map(|(at, _)| at))
                    .flatten();
                Some(serving.map_or(live.renew_at, |at| at.min(live.renew_at)))
            }
            Phase::ShuttingDown {
                live, stage, retry_at, ..
            } => Some(stage.wake(*retry_at).min(live.renew_at)),
        }
    }

    /// Reports the outcome of the action [`poll`](Self::poll) handed out, at `now`.
    pub fn complete(&mut self, now: Instant, outcome: Outcome) {
        let Some(InFlight {
            action,
            sent_at,
            generation,
        }) = self.in_flight.take()
        else {
            return;
        };
        match action {
            Action::Register {
                incarnation, serving, ..
            } => self.registered(now, sent_at, generation, incarnation, serving, outcome),
            Action::Renew { lease } => self.renewed(now, sent_at, lease, outcome),
            Action::SetServing { state, .. } => self.serving_set(now, generation, state, outcome),
            Action::Drain { .. } => self.drained(now, outcome),
            Action::Deregister { .. } => self.deregistered(now, outcome),
            Action::CheckConvergence { .. } => self.convergence_checked(now, outcome),
            Action::RevokeLease { .. } => self.revoked(outcome),
        }
    }

    fn registered(
        &mut self,
        now: Instant,
        sent_at: Instant,
        generation: u64,
        incarnation: Incarnation,
        serving: ServingState,
        outcome: Outcome,
    ) {
        let Phase::Registering {
            due,
            failures,
            last_error,
            ..
        } = &mut self.phase
        else {
            return;
        };
        let error = match outcome {
            Outcome::Written(WriteReply {
                revision,
                lease: Some(lease),
                ..
            }) => {
                let registration = LiveRegistration {
                    incarnation,
                    lease: lease.id,
                    ttl_ms: lease.ttl_ms,
                    revision,
                    lease_deadline: sent_at + timing::granted_ttl(lease.ttl_ms),
                    serving,
                    serving_error: None,
                    lease_losses: self.lease_losses,
                };
                let renew_at = now + timing::renew_interval(&mut self.rng, lease.ttl_ms);
                self.phase = Phase::Live(Live {
                    registration,
                    renew_at,
                    failing: None,
                    submitted: generation,
                    serving_retry: None,
                });
                return;
            }
            Outcome::Written(_) | Outcome::Renewed(_) | Outcome::Converged(_) => ClientError::BadReply {
                status: 200,
                reason: "the registration's reply names no lease".into(),
            },
            Outcome::Failed(error) => error,
        };
        if error.code() == ErrorCode::StaleIncarnation {
            self.supersede(incarnation, error);
        } else if error.is_transient() || error.code() == ErrorCode::QuotaExceeded {
            *failures += 1;
            *last_error = Some(error);
            *due = now + timing::backoff(&mut self.rng, *failures);
        } else {
            self.phase = Phase::Finished(RegistrarStatus::Refused { error });
        }
    }

    fn renewed(&mut self, now: Instant, sent_at: Instant, lease: LeaseId, outcome: Outcome) {
        let shutting_down = matches!(self.phase, Phase::ShuttingDown { .. });
        let (Phase::Live(live) | Phase::ShuttingDown { live, .. }) = &mut self.phase else {
            return;
        };
        if live.registration.lease != lease {
            return;
        }
        match outcome {
            Outcome::Renewed(reply) => {
                live.registration.ttl_ms = reply.ttl_ms;
                live.registration.lease_deadline = sent_at + timing::granted_ttl(reply.ttl_ms);
                live.failing = None;
                live.renew_at = now + timing::renew_interval(&mut self.rng, reply.ttl_ms);
            }
            Outcome::Failed(error) if error.code() == ErrorCode::LeaseNotFound => {
                if shutting_down {
                    self.phase = Phase::Finished(stopped(false, Some(error)));
                } else {
                    let lost = live.registration.clone();
                    self.lose(now, lost, error);
                }
            }
            Outcome::Failed(error) => {
                let failing = live.failing.get_or_insert(Failing {
                    since: now,
                    attempts: 0,
                    error: error.clone(),
                });
                failing.attempts += 1;
                failing.error = error;
                live.renew_at = now + timing::renew_retry(&mut self.rng, live.registration.ttl_ms);
            }
            Outcome::Written(_) | Outcome::Converged(_) => {}
        }
    }

    fn serving_set(&mut self, now: Instant, generation: u64, state: ServingState, outcome: Outcome) {
        let Phase::Live(live) = &mut self.phase else {
            return;
        };
        match outcome {
            Outcome::Written(reply) => {
                live.submitted = generation;
                live.serving_retry = None;
                live.registration.revision = live.registration.revision.max(reply.revision);
                live.registration.serving_error = None;
                // The owner's drain holds against the app's readiness (SPEC L5): the registry
                // kept `draining`, and asking again would not change that.
                live.registration.serving = if reply.unchanged.as_deref() == Some("drain_held") {
                    ServingState::Draining
                } else {
                    state
                };
            }
            Outcome::Failed(error) if error.code() == ErrorCode::StaleIncarnation => {
                let incarnation = live.registration.incarnation;
                self.supersede(incarnation, error);
            }
            Outcome::Failed(error) if error.code() == ErrorCode::NotFound => {
                // The record is gone while the lease lives: evicted, or expired a moment ago.
                let lost = live.registration.clone();
                self.lose(now, lost, error);
            }
            Outcome::Failed(error) if error.is_transient() => {
                let failures = live.serving_retry.map_or(0, |(_, n)| n) + 1;
                live.serving_retry = Some((now + timing::backoff(&mut self.rng, failures), failures));
            }
            Outcome::Failed(error) => {
                live.submitted = generation;
                live.serving_retry = None;
                live.registration.serving_error = Some(error);
            }
            Outcome::Renewed(_) | Outcome::Converged(_) => {}
        }
    }

    /// A newer process owns the instance (`stale_incarnation`): stop, writing nothing more.
    fn supersede(&mut self, incarnation: Incarnation, error: ClientError) {
        self.phase = Phase::Finished(RegistrarStatus::Superseded { incarnation, error });
    }

    /// The lease (or the record) is gone: register again with the next incarnation, or stop.
    fn lose(&mut self, now: Instant, lost: LiveRegistration, error: ClientError) {
        self.lease_losses += 1;
        let next = Incarnation(lost.incarnation.0 + 1);
        self.phase =
            if self.config.lease_loss == LeaseLossPolicy::Reregister && self.lease_losses <= MAX_REREGISTRATIONS {
                Phase::Registering {
                    incarnation: next,
                    due: now,
                    failures: 0,
                    last_error: None,
                    lost: Some((lost, now)),
                }
            } else {
                Phase::Finished(RegistrarStatus::LeaseLost {
                    lost,
                    at: now,
                    reregistering_as: None,
                    failed_attempts: 0,
                    last_error: Some(error),
                })
            };
    }
}
