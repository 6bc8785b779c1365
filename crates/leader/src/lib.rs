//! The leader's duties (DESIGN "Leases off the log", SPEC R4, L6, H2–H5): one pure engine,
//! and the runner of the leader-only loops ([`duties`], the crate's one I/O part).
//!
//! Whichever node leads keeps lease deadlines, ends drains whose grace passed, brakes removals
//! when too many endpoints would leave at once, and decides what the health checks mean.
//! [`LeaderEngine`] holds all of it, the way openraft's engine does: events in, [`Output`]s
//! out, no clock, no sockets, no randomness of its own (the checker's jitter comes from the
//! `rng` it is given). The server's leader task and the lab drive the same engine; tests
//! assert on the exact outputs.
//!
//! ```text
//!                 became_leader(registry) / lost_leadership / reset(registry)
//!                                         │
//!  renew ─────────────────────────────▶ ┌─┴──────────────────────────────┐ ──▶ LeaseReply / refused
//!  in_flight(target, n, reply) ───────▶ │ LeaderEngine                   │
//!  ttl_report(report, reply) ─────────▶ │  LeaseDeadlines (monotonic ms) │ ──▶ Propose ExpireLeases
//!  probe_result(id, result) ──────────▶ │  drains: the registry's table  │ ──▶ Propose Deregister (CAS)
//!  applied(updates) ──────────────────▶ │  Brakes (self-preservation)    │ ──▶ Propose SetServing (checker)
//!  tick(now) ─────────────────────────▶ │  Checker (hysteresis, schedule)│ ──▶ Probe
//!  settled(tag, outcome) ─────────────▶ └────────────────────────────────┘ ──▶ Reply / Note
//!        ▲                                                                      │
//!        └────────── the shell proposes, probes, answers, and reports back ◀────┘
//! ```
//!
//! Every event reads the registry as it is now (`&Registry`: a read, never a write) and gets
//! the time as [`Now`]. Lease deadlines live only here, in memory (a renewal is no log
//! write); drain deadlines are committed state in the registry (`Drain` carries its grace),
//! so a new leader ends them on time and the engine keeps only which ends it has proposed.
//!
//! # Correctness
//! - Nothing is proposed unless the engine leads; a new leader gives every lease a whole TTL
//!   plus [`ELECTION_GRACE_MS`] before expiring anything.
//! - A drain's end is a `Deregister` with `expected_revision` = the record's revision, and
//!   only of a record still draining at the drained incarnation: a drain the owner lifted is
//!   never ended, whether the end came from the grace or from an in-flight report of 0.
//! - A proposal is made once until it settles ([`LeaderEngine::settled`]); a proposal that
//!   did not commit is made again at the next tick (leases, drains) or result (checks).
//! - Every removal (lease expiry, checker) asks the one [`Brakes`](muster_health::preservation::Brakes)
//!   first, counting removals proposed and not yet committed as gone.

#![forbid(unsafe_code)]

pub mod duties;
mod engine;
mod expiry;
mod io;

pub use engine::{ELECTION_GRACE_MS, LeaderEngine, MAX_EXPIRE_BATCH, RECONCILE_EVERY_MS, TICK_MS};
pub use io::{Duty, InFlightReply, Note, Now, Outcome, Output, Proposal, RenewRefused, Reply, ReplyTo, Tag};

#[cfg(test)]
mod engine_tests;
