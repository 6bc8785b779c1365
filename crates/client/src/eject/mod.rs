//! Local outlier ejection (SPEC C5, H6): this client stops sending new work to an endpoint that
//! failed it several times in a row, for a bounded and growing time, without telling anyone.
//!
//! # Rules
//!
//! ```text
//!   failure ──▶ consecutive += 1 ── consecutive ≥ N? ──▶ cap allows? ──▶ ejected until
//!   success ──▶ consecutive = 0                                        now + duration
//!
//!   duration      = min(base_ejection_ms × times_ejected, max_ejection_ms)
//!   times_ejected : +1 per ejection; −1 per base_ejection_ms spent back in service
//!   cap           : at most ⌊known × max_ejected⌋ endpoints ejected at once
//! ```
//!
//! These are Envoy's consecutive-5xx outlier detector semantics, including the decay of the
//! multiplier, so an endpoint that failed once last week does not start at the maximum.
//! When an ejection ends the endpoint is back in the set with a clean failure count: the next
//! requests are its probe, and N more failures eject it again, for longer.
//!
//! # Keys: instance and incarnation
//!
//! Records are keyed by instance and hold the incarnation they are about. A higher incarnation
//! is a new process (SPEC L2): its predecessor's failures say nothing about it, so it starts
//! clean. Reports about a lower incarnation than the recorded one (requests to the old process
//! finishing late) are ignored. Keying by more than the endpoint's identity (its addresses,
//! its record revision) would let every view refresh wipe ejections; keying by less (the
//! instance alone) would punish a fixed restart for its predecessor.
//!
//! # Local only
//!
//! Nothing here talks to the registry (SPEC H6): one client's failures are evidence about
//! that client's path to the endpoint, not global truth. The caller rebuilds its
//! [`EligibleSet`](crate::balance::EligibleSet) when an ejection starts
//! ([`FailureOutcome::Ejected`]) and at [`OutlierDetector::next_return_ms`].
//!
//! Ejections survive view refreshes until they time out, even for an endpoint that leaves the
//! view and comes back. [`OutlierDetector::forget_departed`] drops only the counters of
//! endpoints that left and are not ejected, so the table stays as large as the view.

mod config;
mod detector;

pub use config::EjectionConfig;
pub use detector::{Ejection, FailureOutcome, OutlierDetector};
