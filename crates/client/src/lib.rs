//! Muster's client library (SPEC section 7): resolve a service to an eligible endpoint from a
//! local view that is provably complete and current, keep working through registry outages
//! within a stated budget, route around failing endpoints locally, and register with correct
//! fencing and draining.
//!
//! # Layout
//! - [`view`]: the view state machine (pure, C1) and the stale budget (C2).
//! - [`http`]: the HTTP client of the whole `/v1` API.
//! - [`resolver`]: the I/O shell that keeps one service's view current over a watch and
//!   publishes it (reconnects, backoff, last-known-good saves).
//! - [`resolver_set`]: resolvers of many services sharing one namespace watch.
//! - [`lkg`]: the last-known-good set on disk.
//! - [`member`]: the compact endpoint record and set a view keeps (routing fields and
//!   fingerprints).
//! - [`balance`]: eligibility (C3) and the balancers (C4), all over one eligible set.
//! - [`eject`]: local outlier ejection (C5, H6).
//! - [`registrar`]: register, renew with jitter, report readiness, drain on shutdown (C6).
//! - [`picker`]: resolve and pick in one call, traced, with local ejection.
//! - [`discover`]: a `tower::discover::Discover` source (C7).

#![forbid(unsafe_code)]

pub mod balance;
pub mod discover;
pub mod eject;
pub mod http;
pub mod lkg;
pub mod member;
pub mod picker;
pub mod registrar;
pub mod resolver;
pub mod resolver_set;
mod seed;
pub mod view;
