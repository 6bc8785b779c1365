//! The audit trail (SPEC S4): every committed mutation and every denial, on record.
//!
//! ```text
//!  Raft log ──apply (every node, log order)──▶ ApplyObserver::judged ──▶ mutation::record ─┐
//!                                              (applied, unchanged, refused)               │
//!  auth layer / cluster listener ──AuditLog::denied(Denial)── (this node only) ────────────┤
//!                                                                                          ▼
//!                                        AuditLog: a ring of the newest `audit.retention` records
//!                                                                                          │
//!  GET /v1/audit?tenant&principal&key&outcome&since_ms&until_ms&limit&cursor ◀─ route ◀────┘
//! ```
//!
//! - Mutations derive from the replicated log, so every node records the same ones with the
//!   same fields (time, who, verb, key, instance, incarnation, revision, outcome, log index,
//!   proposing node); only `seq`, the node's own numbering, may differ, as denials interleave.
//! - Denials are seen by one node (the one the request reached) and recorded there only.
//!
//! # Retention
//! In memory only: the newest [`AuditConfig::retention`](crate::AuditConfig) records (10,000
//! by default), the oldest dropped first. What a restart keeps: the ring starts empty, and
//! openraft replays the log after the newest snapshot through the same apply path, so the
//! mutations of that suffix are recorded again (once each: the ring is empty, so nothing is
//! doubled) with new sequence numbers; mutations older than the snapshot and every denial
//! before the restart are gone. A node that catches up by installing a leader's snapshot has
//! no records of what the snapshot covers. Longer retention is a log shipper's job: poll
//! `GET /v1/audit` on every node (mutations are the same everywhere; denials are per node).
//!
//! # Layout
//! - `log`: [`AuditLog`], the ring, its pages and [`Denial`]; pure (time comes in with
//!   each record).
//! - `filter`: the query's filters and cursor, parsed and matched.
//! - `mutation`: a judged command as records; the one `match` over every command kind.
//! - `route`: `GET /v1/audit`.

mod filter;
mod log;
#[cfg(test)]
mod log_tests;
mod mutation;
mod route;

pub(crate) use log::{AuditLog, Denial};
pub(crate) use route::list;
