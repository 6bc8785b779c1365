//! The daemon (DESIGN "Crates": `muster-server`): configuration, start-up and the wiring of
//! the crates below: which adapter is mounted where, and what one adapter needs of another.
//! Every adapter reaches the registry, the hub and the leader through the gate
//! (`muster_gate::Gate`, `app.gate`).
//!
//! ```text
//!  HTTP (muster-http: accept, guard) ──▶ routes ──▶ auth (the route's need: Gate::identify,
//!      Gate::require) ──▶ muster-api: writes / lease_routes ──Gate::propose──▶ Node ──▶ Registry::apply
//!                    ├──▶ reads, status ──Gate::read──────────────┐     │ Observers
//!                    └──▶ watch ──Gate::read + Gate::subscribe──▶ WatchHub (muster-hub)
//!  Consul (muster-consul), dashboard (muster-dashboard), xDS (muster-xds) ──▶ the same gate
//!  leader (task) ──▶ LeaderEngine (muster-leader, pure) ──▶ propose ExpireLeases /
//!                    Deregister (CAS) / SetServing, run probes, answer callers
//!  leader duties (muster_leader::duties): the Consul reaper, the federation mirrors
//!  follower ──renew, TTL report, in-flight──▶ Gate::on_leader ──▶ the leader's handler
//!  DNS (UDP + TCP, muster-dns) ◀── LiveZone ◀── DnsFeed ◀── Observers (before the hub)
//! ```
//!
//! # Layout
//! - `server`: [`start`], [`run`], [`RunningServer`]: the listeners, the apply observers'
//!   pipeline (`observers`), the leader task (`leader`), the duties runner; `config`: the
//!   configuration; `app`: the gate and the adapters' state.
//! - `routes`: the one route table (every adapter's HTTP handlers, the native API's from
//!   `muster_api`) and the JSON error safety net; `auth`: each route's need, judged through
//!   the gate before the handler; `admit`: the budgets a configuration sets; `openapi`: the
//!   API document from the same table; `audit_guard`: the browser guard's refusals.
//! - `bridges`: what one adapter needs of another (federated reads for the native API, the
//!   served set and the convergence ledger for xDS).
//! - `cluster`: the node-to-node listener (authenticated by the cluster secret, not the
//!   gate); `join`: the proof a new member gives before the leader dials it; `membership`:
//!   adding and removing members.
//! - `dns`: the DNS view's feed from the apply path; `xds`: the `[xds]` section and
//!   `GET /v1/xds/clients`.
//! - `metrics`: `/v1/metrics` (prometheus-client), every adapter's counters;
//!   `endpoint_log`: every endpoint's changes in the log; `lab_run`: lab runs through the
//!   binary's [`LabRunner`] hook ([`start_with`]).
//!
//! # HTTP conventions
//! - Bodies and replies are the types of [`muster_core::api`]; every error is
//!   `{"error":{"code":...,"message":...}}` (status table in `muster_http::error`: content
//!   refusals are 422, fencing and CAS 409, quotas 403, compacted history 410, malformed
//!   requests and bad path segments 400).
//! - `X-Muster-Actor: owner|app|checker` says whose authority a write speaks with (SPEC L5);
//!   drain defaults to `owner`, everything else to `app`.
//! - Reads reply with `X-Muster-Index: <revision read at>`; pass it back as `?index=` for a
//!   blocking query (`&wait=30s`, default 60 s, at most 5 min).

#![forbid(unsafe_code)]

mod admit;
mod app;
mod audit_guard;
mod auth;
mod bridges;
mod cluster;
mod config;
mod dns;
mod endpoint_log;
mod format;
mod join;
mod lab_run;
mod leader;
mod membership;
mod metrics;
mod observers;
mod openapi;
mod routes;
mod server;
mod server_error;
mod xds;

pub use config::{AuditConfig, ConvergenceConfig, HealthConfig, ServerConfig};
pub use lab_run::{Hooks, LabPlot, LabRequest, LabRun, LabRunner};
pub use muster_consul::config::ConsulConfig;
pub use muster_consul::stats::ConsulCounts;
pub use muster_federation::{FederationConfig, PeerConfig};
pub use muster_gate::AuthConfig;
pub use muster_http::listener::{ClientCertPolicy, ClusterTlsConfig, LimitsConfig, ListenerLimits, TlsConfig};
pub use muster_hub::WatchStats;
pub use server::{RunningServer, run, start, start_with};
pub use server_error::ServerError;
pub use xds::config::XdsConfig;

/// Every (method, path template) the HTTP API routes, from its one route table: what the
/// API document must describe (its drift test compares the two).
pub fn api_routes() -> Vec<(String, &'static str)> {
    routes::ROUTES
        .iter()
        .map(|route| (route.method.to_string(), route.path))
        .collect()
}
