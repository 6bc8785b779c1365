//! The daemon (DESIGN "Crates": `muster-server`): HTTP API, watch hub, the leader task.
//! Wiring only; logic lives in the pure crates.
//!
//! ```text
//!  HTTP (hyper + axum) ──▶ routes ──▶ writes / lease_routes ──propose──▶ Node ──▶ Registry::apply
//!                    │                                            │ ApplyObserver
//!                    ├──▶ reads, status ──Node::read──────────────┤
//!                    └──▶ watch ──read + subscribe──▶ WatchHub ◀──┘ (encode once, bounded queues)
//!  leader (task) ──▶ LeaderEngine (muster-leader, pure: lease deadlines, committed drain
//!                    deadlines, Brakes, Checker) ──▶ propose ExpireLeases / Deregister (CAS) /
//!                    SetServing, run probes, answer renew / TTL / in-flight callers
//!  follower ──renew, TTL report, in-flight──▶ forward (one route) ──▶ the leader's handler
//!  DNS (UDP + TCP, muster-dns) ◀── LiveZone ◀── DnsFeed ◀── ApplyObserver (before the hub)
//! ```
//!
//! # Layout
//! - `server`: [`start`], [`run`], [`RunningServer`]; `accept`: the HTTP/1.1 accept loop
//!   (plain or TLS), within the connection budget of `descriptors`; `listener`: each
//!   listener's TLS and limits.
//! - `routes`: the route table and the JSON error safety net; `error`: codes and statuses.
//! - `extract`: body, query, path and header extraction with API errors; `guard`: the
//!   browser guard (Origin, Host, JSON-only bodies, the body read deadline; SPEC S6).
//! - `writes`, `lease_routes`, `reads`, `watch`, `status`, `policy`: the handlers (`policy`
//!   also compares the replicated registry policy with this node's config file).
//! - the watch fan-out is `muster-hub`; `admit`: every stream's
//!   and parked query's slot from the one admission table (`muster-gate`; SPEC W4, S6).
//! - `leader`: the task around the leader engine, and its feed from the apply path;
//!   `forward`: the one way to the leader for leader-only requests; `cluster`: the
//!   node-to-node listener; `join`: the proof a new member gives before the leader dials it;
//!   `observers`: the apply fan-out.
//! - `dns`: the DNS view's feed from the apply path.
//! - `consul`: the Consul-compatible API (SPEC E1) on a listener of its own.
//! - `metrics`: `/v1/metrics` (prometheus-client); `prometheus_sd`: Prometheus's `http_sd`.
//! - `audit`: the audit trail (SPEC S4): mutations from the apply path, denials from the
//!   handlers, `GET /v1/audit`.
//! - `ui`: the web dashboard's files at `/ui/` (SPEC U2); `overview`, `lease_deadlines`:
//!   the views it reads besides the API's; `live`: their NDJSON change streams; `lab_run`:
//!   lab runs through the binary's [`LabRunner`] hook ([`start_with`]).
//! - `clock`, `page_token`, `wait`: small pieces.
//!
//! # HTTP conventions
//! - Bodies and replies are the types of [`muster_core::api`]; every error is
//!   `{"error":{"code":...,"message":...}}` (status table in the `error` module: content
//!   refusals are 422, fencing and CAS 409, quotas 403, compacted history 410, malformed
//!   requests and bad path segments 400).
//! - `X-Muster-Actor: owner|app|checker` says whose authority a write speaks with (SPEC L5);
//!   drain defaults to `owner`, everything else to `app`.
//! - Reads reply with `X-Muster-Index: <revision read at>`; pass it back as `?index=` for a
//!   blocking query (`&wait=30s`, default 60 s, at most 5 min).

#![forbid(unsafe_code)]

mod acl;
mod admit;
mod app;
mod audit;
mod auth;
mod cluster;
mod config;
mod convergence;
mod dns;
mod endpoint_log;
mod federation;
mod join;
mod lab_run;
mod leader;
mod lease_routes;
mod membership;
mod metrics;
mod observers;
mod openapi;
mod page_token;
mod policy;
mod prometheus_sd;
mod read_cache;
mod reads;
mod routes;
mod server;
mod server_error;
mod status;
mod wait;
mod watch;
mod writes;
mod xds;

pub use config::{AuditConfig, ConvergenceConfig, HealthConfig, ServerConfig};
pub use federation::{FederationConfig, PeerConfig};
pub use lab_run::{Hooks, LabPlot, LabRequest, LabRun, LabRunner};
pub use muster_consul::config::ConsulConfig;
pub use muster_consul::stats::ConsulCounts;
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
