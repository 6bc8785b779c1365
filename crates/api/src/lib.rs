//! The native HTTP/JSON API's handlers (DESIGN "Crates": an adapter over the gate). Every
//! handler reaches the registry, the hub and the leader through [`muster_gate::Gate`]; the
//! route table that names each handler with the right it needs, and the API document, are
//! the server's (`muster-server`'s `routes` and `openapi`), which mounts these handlers with
//! [`Native`] as their state.
//!
//! ```text
//!  route (the server's table, auth judged) ──▶ writes / lease_routes ──Gate::propose──▶ log
//!                                          ├──▶ reads, status, policy, acl, audit,
//!                                          │    prometheus_sd ──Gate::read──▶ registry
//!                                          └──▶ watch ──Gate::read + Gate::subscribe──▶ hub
//! ```
//!
//! # Layout
//! - `writes`: register, deregister, serving state, drain, check reports, in-flight counts.
//! - `lease_routes`: grant, renew ([`renew_here`] also answers a follower's forwarded
//!   renewal), revoke.
//! - `reads` (with `read_cache`, `page_token`, `wait`): a service's set (paged, at a
//!   revision, blocking with `?index=`), a namespace's services.
//! - `watch`: the NDJSON watch streams.
//! - `convergence`: the convergence ledger's shell (SPEC O3): reports, summaries, the
//!   apply path's changes, the sweeper.
//! - `status`, `policy` (with the replicated policy's [`PolicyWatch`]), `acl` (tokens and
//!   bootstrap), `audit` (`GET /v1/audit`), `prometheus_sd` (Prometheus's `http_sd`).
//!
//! # What the wiring gives
//! A [`Meter`] (the server's metrics count renewals and watch streams), the native
//! blocking queries' counters, and a [`Federated`] view when the region is federated
//! (`?federation=true` reads): the adapter depends on no other adapter.

#![forbid(unsafe_code)]

pub mod acl;
pub mod audit;
pub mod convergence;
pub mod lease_routes;
mod page_token;
pub mod policy;
pub mod prometheus_sd;
mod read_cache;
pub mod reads;
mod state;
pub mod status;
mod wait;
pub mod watch;
pub mod writes;

pub use lease_routes::renew_here;
pub use policy::PolicyWatch;
pub use state::{Federated, Meter, Native, Renewal, WatchBegan};
