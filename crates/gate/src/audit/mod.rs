//! The audit trail (SPEC S4): every committed mutation and every denial, on record.
//!
//! ```text
//!  Raft log ──apply (every node, log order)──▶ ApplyObserver::judged ──▶ mutation::record ──┐
//!                                              (applied, unchanged, refused)                │
//!  auth layer, browser guard, cluster listener,                                             │
//!  streams ended by a revocation ──AuditLog::denied(Denial)── (this node only) ──┐          │
//!                                                                                ▼          ▼
//!                                   AuditLog: denials (counted per source, 10 s) │ mutations
//!                                             `audit.denial_retention`           │ `audit.retention`
//!                                                                                └────┬─────┘
//!  GET /v1/audit?tenant&principal&key&outcome&since_ms&until_ms&limit&cursor ◀─ route ◀┘
//!                                                     (merged by seq, newest first)
//! ```
//!
//! - Mutations derive from the replicated log, so every node records the same ones with the
//!   same fields (time, who, verb, key, instance, incarnation, revision, outcome, log index,
//!   proposing node); only `seq`, the node's own numbering, may differ, as denials interleave.
//! - Denials are seen by one node (the one the request reached) and recorded there only.
//!   They are kept apart from the mutations, so that no volume of them evicts a mutation
//!   (SPEC S8), and a flood from one source is one record with a `count` per 10 s
//!   (`aggregate`), so that it does not wash out the other denials either.
//!
//! # Retention
//! In memory only: the newest `AuditConfig::retention` (the server's `[audit]`) mutations and
//! the newest `denial_retention` denials (10,000 each by default), the oldest of each dropped
//! first. What a restart keeps: the rings start empty, and
//! openraft replays the log after the newest snapshot through the same apply path, so the
//! mutations of that suffix are recorded again (once each: the ring is empty, so nothing is
//! doubled) with new sequence numbers; mutations older than the snapshot and every denial
//! before the restart are gone. A node that catches up by installing a leader's snapshot has
//! no records of what the snapshot covers. Longer retention is a log shipper's job: poll
//! `GET /v1/audit` on every node (mutations are the same everywhere; denials are per node).
//!
//! # Layout
//! - `log`: [`AuditLog`], the two rings, their merged pages and [`Denial`]; pure (time comes
//!   in with each record).
//! - `aggregate`: which denials one record counts, and the bounded index of open records.
//! - `filter`: the query's filters and cursor, parsed and matched.
//! - `mutation`: a judged command as records; the one `match` over every command kind.

//!
//! The server serves the trail (`GET /v1/audit`) and feeds it the denials of every way in.

mod aggregate;
pub mod filter;
pub mod log;
#[cfg(test)]
mod log_tests;
mod mutation;

pub use log::{AuditLog, AuditView, Denial};
