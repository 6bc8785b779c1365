//! `GET /v1/metrics`: a Prometheus text exposition of what an operator watches first — the
//! revision, watchers, the checker's work, and which services self-preservation protects
//! (SPEC H5 says protection is visible "in API and metrics").

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

use crate::app::App;
use crate::auth::Caller;

/// The checker's counters (kept by the leader task), shared with the metrics handler.
#[derive(Debug, Default)]
pub(crate) struct CheckerStats {
    /// Endpoints with checks.
    pub(crate) endpoints: AtomicU64,
    /// Probes started since the server started.
    pub(crate) probes: AtomicU64,
    /// Probes running now.
    pub(crate) in_flight: AtomicU64,
    /// Serving states proposed (threshold crossings).
    pub(crate) proposals: AtomicU64,
    /// Removals held by self-preservation.
    pub(crate) held: AtomicU64,
}

/// `GET /v1/metrics`.
pub(crate) async fn metrics(State(app): State<Arc<App>>, caller: Caller) -> impl IntoResponse {
    let node = app.node.status();
    let watch = app.hub.stats();
    let checker = &app.checker_stats;
    let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, value: u64| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}");
    };
    metric("muster_revision", "gauge", "The registry's revision.", node.revision.0);
    metric("muster_watchers", "gauge", "Watch streams open.", watch.watchers as u64);
    metric(
        "muster_watch_resyncs_total",
        "counter",
        "Watchers told to resync.",
        watch.resyncs,
    );
    metric(
        "muster_checker_endpoints",
        "gauge",
        "Endpoints with health checks.",
        load(&checker.endpoints),
    );
    metric(
        "muster_checker_probes_total",
        "counter",
        "Health probes started.",
        load(&checker.probes),
    );
    metric(
        "muster_checker_in_flight",
        "gauge",
        "Health probes running.",
        load(&checker.in_flight),
    );
    metric(
        "muster_checker_proposals_total",
        "counter",
        "Serving states the checker proposed (threshold crossings only).",
        load(&checker.proposals),
    );
    metric(
        "muster_checker_held_total",
        "counter",
        "Removals held by self-preservation.",
        load(&checker.held),
    );
    let _ = writeln!(
        out,
        "# HELP muster_protection_active Self-preservation holds removals from this service.\n\
         # TYPE muster_protection_active gauge"
    );
    // Service names only of the tenants the caller may see (SPEC S3).
    for key in app
        .protected()
        .into_iter()
        .filter(|key| caller.sees_tenant(&key.tenant))
    {
        let _ = writeln!(out, "muster_protection_active{{service=\"{key}\"}} 1");
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out)
}
