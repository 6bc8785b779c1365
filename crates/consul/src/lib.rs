//! The Consul-compatible HTTP API (SPEC E1): a listener of its own (`[consul]`, default
//! `127.0.0.1:8500`) where Consul's clients — the Go `api` package, py-consul, npm `consul`,
//! Prometheus `consul_sd`, consul-template, Traefik, Fabio — find a Consul agent and talk to
//! it unchanged. It is a view over the registry (STYLE rule 10): every answer is read from
//! the same snapshots the native API serves, every write is a native command.
//!
//! ```text
//!  Consul client ──▶ [consul] listener (accept loop, limits and TLS of the HTTP API)
//!      ──▶ guard (Origin, loopback Host) ──▶ token (X-Consul-Token | Bearer | ?token=) ─▶ Caller
//!      ├─▶ agent:   register / deregister / maintenance / check updates ──▶ native commands
//!      ├─▶ catalog, health: snapshots of the view's namespace ──▶ Go-shaped JSON (`shape`)
//!      │            blocking (`?index=&wait=`): wakes on that service's changes only (`waiters`)
//!      └─▶ status, kv: the leader, the peers; an empty key/value store
//! ```
//!
//! # The mapping
//! - One Consul datacenter (`[consul] datacenter`) with one node (`[consul] node`, default
//!   `muster-<node_id>`) holding every service; the node's address is the listener's.
//! - A Consul service name is a Muster service of the view's tenant and namespace
//!   (`[consul] tenant`, `namespace`); `?partition=` names another tenant, `?ns=` another
//!   namespace. Names must be Muster names (DNS labels: `a-z`, `0-9`, `-`): a name that is
//!   not one is no service of the registry (reads answer nothing, writes are refused).
//! - A service instance is an endpoint: `ID` is its instance id (or its label `consul.id`,
//!   see below), `Address` its first address, `Port` its port named `default` (a Consul
//!   registration's), else its first port, else 0. `CreateIndex` and `ModifyIndex` are the
//!   record's revision (Muster does not keep when an instance first appeared).
//! - Labels carry what a Muster endpoint has no field for, reversibly:
//!
//!   | Consul | Muster label |
//!   |---|---|
//!   | `Tags[n]` | `consul.tag.<n>` = the tag (`n` = 0, 1, ...; read back in numeric order) |
//!   | `Meta[k]` | `k` = the value (Consul meta keys hold no `.`, so they never meet `consul.*`) |
//!   | `ID`, when it is not the instance id | `consul.id` |
//!   | `Weights.Warning` | `consul.weight.warning` (default 1, as Consul's) |
//!   | `CheckID`, `Name`, `Notes` of check `n` | `consul.check.<n>.id`, `.name`, `.notes` (defaults: `service:<ID>[:<n+1>]`, `Service '<name>' check`, empty) |
//!   | `DeregisterCriticalServiceAfter` | `consul.deregister-critical-after-ms` |
//!
//!   `agent_map` writes and reads them; the read routes render through it.
//!
//!   Every label outside `consul.*` is Meta, so an endpoint registered through the native API
//!   shows its labels as Meta; `Weights.Passing` is the endpoint's `weight`.
//! - Checks and states are [`status`]'s table: `ready` → passing, `degraded` → warning,
//!   `draining` → a critical `_service_maintenance:<id>` check, everything else → critical,
//!   and a node check `serfHealth`, passing.
//!
//! # What is answered
//!
//! | route | answer |
//! |---|---|
//! | agent routes (`/v1/agent/...`) | see `agent` |
//! | `GET /v1/catalog/services` | name → tags of every service with endpoints (`catalog`) |
//! | `GET /v1/catalog/service/<name>[?tag=]` | `[CatalogService]` |
//! | `GET /v1/health/service/<name>[?passing][&tag=]...[&near=]` | `[ServiceEntry]` (`health`) |
//! | `GET /v1/health/checks/<name>` | `[HealthCheck]` of the service |
//! | `GET /v1/health/state/<any\|passing\|warning\|critical>` | `[HealthCheck]` of the namespace and the node |
//! | `GET /v1/status/leader`, `/v1/status/peers` | `"host:port"`, `["host:port", ...]` (`raft_status`) |
//! | `GET /v1/kv/<key>` | 404, blocking as asked (`kv`); `PUT`/`DELETE` 405 |
//!
//! Every read takes `index`, `wait`, `stale`, `consistent` (`blocking`), `ns`, `partition`,
//! `dc` (accepted; there is one datacenter), `node-meta` (against the node's one meta key)
//! and a token (`token`); `near` is ignored (one node). Not supported, and refused rather
//! than ignored: `filter` expressions (400). Not served (404): the catalog's node routes and
//! writes (`/v1/catalog/register`, `/v1/catalog/nodes`), prepared queries, sessions, events,
//! ACL management (tokens are managed through the native API), Connect, config entries,
//! the operator and snapshot routes, `/v1/health/node/<node>` and `/v1/health/connect`.
//!
//! Everything else is a 404 `404 page not found` in plain text, as Consul's own mux answers
//! (clients quote the text; none parses an error body). Errors are plain text too
//! ([`error`]).
//!
//! # Layout
//! - `config`: `[consul]`; `error`: plain-text errors; `token`: the caller; `status`: the
//!   state mapping; `stats`: blocking-query counters; `agent`: the agent routes (writes, and
//!   the server-assigned incarnations), `agent_read` (the agent's own view), `agent_body`
//!   (case-insensitive body decoding), `agent_duration` (Go duration strings), `agent_map`
//!   (a registration as an endpoint: the label convention, check ids), `agent_lookup`
//!   (service and check IDs to endpoints), `agent_reap` (`DeregisterCriticalServiceAfter`).
//! - `view`: [`ConsulView`], names and `ns`/`partition`; `blocking`: blocking queries and the
//!   `X-Consul-*` headers; `waiters`: who waits on which service; `shape`: the Go-shaped
//!   replies; `catalog`, `health`, `raft_status`, `kv`: the read routes.

#![forbid(unsafe_code)]

mod agent;
mod agent_body;
mod agent_duration;
mod agent_lookup;
mod agent_map;
mod agent_read;
mod agent_reap;
mod app;
pub mod blocking;
mod catalog;
pub mod config;
pub mod error;
mod health;
mod kv;
mod params;
mod raft_status;
mod reads;
mod shape;
pub mod stats;
pub mod status;
pub mod token;
mod view;
pub mod waiters;

pub use agent_reap::reap;
pub use app::ConsulApp;
pub use view::{ConsulView, Jitter};

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Router};

use self::error::ConsulError;
use muster_http::guard::{BodyReadTimeout, RequestGuard};

/// The Consul-compatible API's routes over `app`, shown as `view`; `guard` is the native
/// API's (its Origin and Host checks apply, not its JSON-only bodies: Consul clients send
/// bodies without a content type).
pub fn router(app: Arc<ConsulApp>, view: Arc<ConsulView>, guard: RequestGuard, max_body_bytes: usize) -> Router {
    Router::new()
        .merge(agent::routes())
        .route("/v1/catalog/services", get(catalog::services))
        .route("/v1/catalog/service/{name}", get(catalog::service))
        .route("/v1/health/service/{name}", get(health::service))
        .route("/v1/health/checks/{name}", get(health::checks))
        .route("/v1/health/state/{state}", get(health::state))
        .route("/v1/status/leader", get(raft_status::leader))
        .route("/v1/status/peers", get(raft_status::peers))
        .route("/v1/kv/{*key}", get(kv::get).put(kv::write).delete(kv::write))
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(Extension(view))
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .layer(axum::middleware::from_fn_with_state(Arc::clone(&app), write_rate))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&app),
            refuse_when_failed,
        ))
        .layer(axum::middleware::from_fn_with_state(Arc::new(guard), consul_guard))
        .with_state(app)
}

/// The browser guard's Origin and Host checks (SPEC S6), answered as Consul errors (403), and
/// the body read deadline for the agent's bodies.
async fn consul_guard(State(guard): State<Arc<RequestGuard>>, mut request: Request, next: Next) -> Response {
    let authority = request.uri().authority().map(|a| a.as_str().to_owned());
    if let Err(refused) = guard.admit_caller(request.headers(), authority.as_deref()) {
        guard.record(&refused, &request);
        return ConsulError::new(StatusCode::FORBIDDEN, refused.message).into_response();
    }
    request
        .extensions_mut()
        .insert(BodyReadTimeout(guard.body_read_timeout()));
    next.run(request).await
}

/// Each principal's write rate (SPEC W4, S6), as on the native API: over it, `429` with
/// `Retry-After` and the reason as the body, as Consul's own rate limiter answers.
async fn write_rate(State(app): State<Arc<ConsulApp>>, request: Request, next: Next) -> Response {
    if !app.gate.auth.enabled || !muster_gate::is_write(request.method()) {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    if let Some(caller) = token::known_caller(&app, &parts) {
        let source = parts.extensions.get::<muster_http::peer::Peer>().map(|peer| peer.addr);
        let resource = || format!("{} {} (Consul)", parts.method, parts.uri.path());
        if let Err(limited) = app.gate.throttle(&caller, None, source, resource) {
            let retry_after = limited.retry_after();
            let mut response = ConsulError::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!("rate_limited: {}", limited.error.message),
            )
            .into_response();
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, retry_after);
            return response;
        }
    }
    next.run(Request::from_parts(parts, body)).await
}

/// A node whose storage failed answers nothing but `500`s: its registry is frozen at the
/// failure (as the native API's `refused_when_failed`).
async fn refuse_when_failed(State(app): State<Arc<ConsulApp>>, request: Request, next: Next) -> Response {
    if let Some(fatal) = app.gate.fatal() {
        return ConsulError::from(muster_http::error::ApiError::from(
            muster_consensus::ConsensusError::Failed(fatal),
        ))
        .into_response();
    }
    next.run(request).await
}

async fn no_route() -> ConsulError {
    // Go's `http.NotFound`, what Consul's mux answers for a path it does not serve.
    ConsulError::not_found("404 page not found")
}

async fn wrong_method(request: Request) -> ConsulError {
    // Consul's wording (`MethodNotAllowedError`).
    ConsulError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("method {} not allowed", request.method()),
    )
}
