//! The convergence ledger (SPEC O3): which revision every subscriber of a service applied,
//! counted per cohort and delivery path, and how long each change took from this node's
//! commit to each subscriber.
//!
//! ```text
//!  apply path ──changed(key, revision, now)──▶ ┌──────────────────────────────────────┐
//!                                              │ Ledger                               │
//!  POST /v1/convergence/report ──report()────▶ │  per service:                        │ ──summary()──▶ ConvergenceReply
//!  xDS ACKs, DNS zone swaps ─────report()────▶ │   subscribers: id → cohort, path,    │ ──totals()───▶ metrics (no ids)
//!                                              │                revision, last report │
//!  sweep timer ──────────────sweep(now)──────▶ │   last changes: revision, commit ms, │
//!                                              │                 latency samples      │
//!                                              └──────────────────────────────────────┘
//! ```
//!
//! Pure: every call takes the time (Unix ms of the server's clock) as an input; the server
//! holds the ledger behind a lock and feeds it. A report's latency is measured from the
//! node's commit (`changed`) to the client's `received_unix_ms`: the two clocks differ by
//! their skew, which is nil on one host and small under NTP; a negative latency counts as 0.
//!
//! # Correctness
//! - A subscriber contributes one latency sample per change it is first seen to have
//!   passed (its reported revision moved from below the change to at or past it): a
//!   keep-alive report of the same revision adds none, and a subscriber's first report adds
//!   none (it read the state, it was not sent the change).
//! - Bounded memory: at most `max_subscribers` subscribers in all and
//!   `max_subscribers_per_tenant` of one tenant's services, `max_cohorts` cohorts per service
//!   and `changes_kept` changes per service; a report past a bound is refused whole and
//!   changes nothing. Only services with subscribers are kept.
//! - One tenant cannot take the others' room: a report that would pass its tenant's bound
//!   is refused for that tenant alone, and nothing another tenant holds is forgotten to make
//!   room (SPEC O3, S3).
//! - A subscriber silent for `silent_after_ms` stops counting as live (it is listed as
//!   silent); after `forget_after_ms` it is forgotten. The DNS listener, inside the server,
//!   is never silent.

mod ledger;
mod summary;

pub use ledger::{
    Ledger, LedgerConfig, MAX_SAMPLES_PER_CHANGE, Query, ReportError, ReportOutcome, ServiceCopy, Totals,
};
pub use summary::{BUCKET_BOUNDS_MS, latency_summary, needed};
