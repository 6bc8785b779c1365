//! `GET /v1/metrics` (and `/metrics`): the Prometheus text exposition (format 0.0.4, the one
//! `promtool check metrics` lints and every Prometheus scrapes) of what an operator watches
//! (SPEC O1, E2), encoded by the `prometheus-client` crate.
//!
//! ```text
//!  apply path ──judged──▶ MetricsObserver ──▶ registrations, fenced, expiries   (by tenant)
//!  the native API (muster_api::Meter) ──▶ renewals, watch connects/resumes/compactions;
//!               blocking queries (shared BlockingStats)
//!  the gate (muster_gate::Meter) ──▶ denials, commit latency
//!  leader task ──▶ health transitions, held expiries, checker load (CheckerStats)
//!  scrape ──▶ a Registry built for this scrape: the live counters above, gauges read now
//!             (revision, apply lag, leader, watch backlog, DNS answers), and only the
//!             tenants the caller may see (SPEC S3) ──▶ prometheus_text::encode
//! ```
//!
//! # Why a registry per scrape
//! The counters live in `counters`, as plain handles (`Counter`, `Histogram`: an `Arc` around
//! atomics) or as `TenantCounters`; a scrape registers clones of them in a fresh
//! `Registry` (no global state: several servers in one process, as in the tests and the
//! simulation, never mix). Building it costs a few dozen small allocations per scrape; what
//! it buys is that the rows by tenant and by service are filtered to what the caller may see,
//! which a shared registry could not do.
//!
//! # Labels (SPEC O1)
//! Only bounded ones: `tenant` (bounded by [`tenants::MAX_TENANTS`]), `outcome` / `command`
//! (fixed lists), `from` / `to` (serving states), `rcode`, `api`, and `service` on
//! `muster_protection_active` (only services self-preservation protects now). Never an
//! endpoint, instance, address or revision.
//!
//! Counters are registered without the `_total` suffix (the encoder appends it) and help texts
//! without their final period (the registry, and [`sorted::Sorted`], append it).

mod counters;
mod observer;
mod render;
mod sorted;
mod tenants;

use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::prometheus_text;

pub(crate) use counters::{Metrics, expiry};
pub(crate) use observer::MetricsObserver;
use render::render;

use crate::app::App;
use muster_gate::Caller;

/// `GET /v1/metrics` and `GET /metrics`: an operator's token sees every series; a tenant's
/// needs a `metrics` right and sees that tenant's series only (its rows by tenant with
/// `*/*=metrics` and no deny, a service's rows where the right covers the service); any
/// other token is refused `403`, on the audit trail.
pub(crate) async fn metrics(
    State(app): State<Arc<App>>,
    caller: Caller,
    peer: Option<axum::Extension<muster_http::peer::Peer>>,
) -> Response {
    if !caller.sees_every_tenant() {
        let asked = muster_auth::Request {
            tenant: caller.confined_to(),
            scope: muster_auth::Scope::AnyService,
            verb: muster_auth::Verb::Metrics,
        };
        if let Err(denied) = app.gate.require(&caller, peer.as_deref(), &asked) {
            return denied.into_response();
        }
    }
    let out = render(&app, &caller);
    ([(header::CONTENT_TYPE, prometheus_text::CONTENT_TYPE)], out).into_response()
}

/// Counts leader changes until the node stops (a task of its own, started with the server).
pub(crate) async fn follow_leader(app: Arc<App>) {
    let mut known = app.gate.status().leader;
    let mut stopping = app.gate.stopping();
    loop {
        tokio::select! {
            changed = app.node.leader_change(known) => match changed {
                Ok(leader) => {
                    app.metrics.leader_changes.inc();
                    known = leader;
                }
                Err(_) => return,
            },
            _ = stopping.wait_for(|stopping| *stopping) => return,
        }
    }
}

#[cfg(test)]
#[path = "exposition_tests.rs"]
mod exposition_tests;
