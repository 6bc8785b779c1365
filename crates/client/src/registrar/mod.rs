//! The registrar (SPEC C6, L1–L7): register an instance with a fencing incarnation and a
//! lease, renew the lease with jitter, report the application's readiness, and on shutdown
//! drain, wait a grace, deregister — every write fenced by the incarnation. Renewal failure
//! is reported on a status channel, never hidden.
//!
//! ```text
//!  app ──set_serving / shutdown──▶ Registrar (handle) ──watch──▶ task (thin shell)
//!                                        ▲                        │ poll(now) ─▶ Action ─▶ http::Client
//!                                        └──── status (watch) ◀───┤ complete(now, Outcome)
//!                                                                 └ RegistrarMachine (pure: time and RNG in)
//! ```
//! This module is public for the pure machine alone ([`RegistrarMachine`], [`Action`],
//! [`Outcome`], [`timing`]); what an application uses ([`Registrar`](crate::Registrar),
//! [`RegistrarConfig`](crate::RegistrarConfig), [`RegistrarStatus`](crate::RegistrarStatus),
//! the incarnation helpers) is at the crate root.
//! - `machine`: [`RegistrarMachine`], every decision, pure and unit-tested.
//! - `outcome`: [`Action`] and [`Outcome`], what the machine and its shell exchange.
//! - `status`: `RegistrarStatus`, what the application observes.
//! - `config`: `RegistrarConfig`: TTL, drain grace, first serving state, lease-loss policy.
//! - `incarnation`: how a new process gets a higher incarnation.
//! - [`timing`]: renewal interval, retries, backoff and their jitter.
//! - `task`: `Registrar`, `RegistrarBuilder` and the task that performs the actions.
//!
//! # Incarnations
//! The caller provides the first incarnation;
//! [`incarnation_at_start`](crate::incarnation_at_start) (start time in ms ×
//! [`INCARNATION_STRIDE`](crate::INCARNATION_STRIDE)) or
//! [`incarnation_from_counter`](crate::incarnation_from_counter) (a persisted start counter ×
//! the stride) give every new process a higher one than the last. See `incarnation.rs`.
//!
//! # Losing the lease
//! When a renewal answers `lease_not_found` the registry has expired (or someone revoked)
//! the lease and removed the endpoint, leaving a tombstone at its incarnation that refuses a
//! second registration of that incarnation. The registrar reports
//! [`RegistrarStatus::LeaseLost`](crate::RegistrarStatus::LeaseLost) and, by default
//! ([`LeaseLossPolicy::Reregister`](crate::LeaseLossPolicy::Reregister)), registers again
//! with the *next* incarnation and a fresh lease, in the serving state the application last
//! asked for. If a newer process already took the instance over, that registration is
//! refused with `stale_incarnation` and the registrar stops as
//! [`RegistrarStatus::Superseded`](crate::RegistrarStatus::Superseded). A set-serving
//! answered `not_found` (the record was evicted while the lease lived) is handled the same
//! way.
//!
//! # Authority
//! Readiness is sent as the application (SPEC L5: it never overrides an owner's drain; a
//! `drain_held` reply is reported in
//! [`LiveRegistration::serving`](crate::LiveRegistration::serving)); the shutdown drain is
//! sent as the lifecycle owner of this registration, the drain route's default.
//!
//! # Known limits
//! A record evicted while its lease lives is only noticed at the next set-serving; the
//! registrar does not watch its own record. Dropping a [`Registrar`](crate::Registrar)
//! without [`Registrar::shutdown`](crate::Registrar::shutdown) stops renewing, as a crash
//! would: the record leaves when its lease expires.

pub(crate) mod config;
pub(crate) mod incarnation;
mod machine;
mod outcome;
pub(crate) mod status;
pub(crate) mod task;
pub mod timing;

#[cfg(test)]
mod machine_tests;

// The pure machine and its vocabulary: for a shell of your own (the lab drives it on virtual
// time). Everything an application uses is at the crate root instead.
pub use machine::RegistrarMachine;
pub use outcome::{Action, Outcome};
