//! Convergence telemetry (SPEC O3): the shell around [`muster_convergence::Ledger`].
//!
//! ```text
//!  apply path ─▶ Convergence::applied ─▶ ledger.changed(key, revision, now)
//!                                      └▶ the DNS listener applied it (it answers from the
//!                                         live zone at the next query: `muster_dns::LiveZone`)
//!  POST /v1/convergence/report ─▶ report ─▶ ledger.report(watch, …) ─▶ latency histogram
//!  xDS ACK of an endpoint resource ─▶ Convergence::xds_acked ─▶ ledger.report(xds, …)
//!  GET  /v1/convergence/{t}/{ns}/{svc} ─▶ summary ─▶ ledger.summary(current revision, query)
//!  sweep task ─▶ forget long-silent subscribers; open xDS streams count as reporting
//! ```
//!
//! # Why a small endpoint and not the watch connection
//! A watch is one HTTP response streaming server→client: the client has no way to speak on
//! it. A separate `POST` over the client's pooled keep-alive connection costs one small
//! request per change (batched: a namespace watch reports all its services at once), passes
//! through any HTTP proxy, and is authorised like the watch itself (the caller must be
//! allowed to watch each service it reports). A client reports at most once per change of
//! its applied revisions, no more often than `report_every_ms / 10`, and re-sends its state
//! every `report_every_ms` while nothing changes, so the server can tell silence from calm.
//!
//! State is per node: a client reports to the node it watches, and a node's summary counts
//! the subscribers that report to it.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::response::Response;
use muster_auth::Verb;
use muster_consensus::ApplyObserver;
use muster_convergence::{Ledger, LedgerConfig, Query, ReportError};
use muster_core::convergence::{
    AppliedRevision, ClientId, Cohort, ConvergenceReply, ConvergenceReport, DeliveryPath, ReportReply,
};
use muster_core::{ErrorCode, Label, Revision, ServiceKey};
use muster_registry::{Applied, Registry};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use serde::Deserialize;

use crate::app::App;
use muster_gate::Caller;
use muster_gate::clock::ServerClock;
use muster_http::error::ApiError;
use muster_http::extract::{JsonBody, QueryParams, Segments};

/// How often long-silent subscribers are forgotten: a sweep walks every subscriber under
/// the ledger's lock (which the apply path also takes), and forgetting is due only after
/// `forget_after_ms` (10 min), so every 10 s is plenty.
const SWEEP_EVERY: Duration = Duration::from_secs(10);

/// The `path` label of the latency histogram.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct PathLabel {
    path: &'static str,
}

/// The ledger, the clock it is read with, and the aggregate metrics.
pub(crate) struct Convergence {
    ledger: Mutex<Ledger>,
    clock: ServerClock,
    /// The DNS listener as a subscriber of its tenant's services, when DNS is on.
    dns: Option<(ClientId, Label)>,
    /// Commit→applied seconds by delivery path (SPEC O3), for `/v1/metrics`.
    pub(crate) latency: Family<PathLabel, Histogram>,
    /// Reports refused (bounds, permissions, revisions this node has not reached); a body
    /// that does not parse is refused before it reaches here.
    pub(crate) refused: Counter,
}

/// Latency buckets: 1 ms doubling to about 32 s (a loopback delivery to a subscriber that
/// took half a minute).
fn latency_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(0.001, 2.0, 16)
}

impl Convergence {
    /// A ledger with `config`; `dns` names the DNS listener and its tenant when it runs.
    pub(crate) fn new(config: LedgerConfig, clock: ServerClock, dns: Option<(ClientId, Label)>) -> Convergence {
        Convergence {
            ledger: Mutex::new(Ledger::new(config)),
            clock,
            dns,
            latency: Family::new_with_constructor(|| Histogram::new(latency_buckets())),
            refused: Counter::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a report over `path`, and its latencies in the histogram.
    pub(crate) fn report(&self, path: DeliveryPath, report: &ConvergenceReport) -> Result<usize, ReportError> {
        let now = self.clock.unix_now_ms();
        let outcome = self.lock().report(path, report, now);
        let outcome = outcome.inspect_err(|_| {
            self.refused.inc();
        })?;
        let histogram = self.latency.get_or_create(&PathLabel { path: path.as_str() });
        for latency in outcome.latencies_ms {
            histogram.observe(latency as f64 / 1_000.0);
        }
        Ok(outcome.accepted)
    }

    /// An xDS client acknowledged `services`' endpoints at `revision` (SPEC D5): it applied
    /// them. `node` is its node id; `zone` its locality, counted as the cohort `zone=…`.
    #[cfg(feature = "xds")]
    pub(crate) fn xds_acked(&self, node: &str, zone: Option<&str>, services: Vec<ServiceKey>, revision: Revision) {
        let Ok(client_id) = ClientId::new(format!("xds:{node}")) else {
            return;
        };
        let cohort = zone.and_then(|zone| Cohort::new(format!("zone={zone}")).ok());
        let received_unix_ms = self.clock.unix_now_ms();
        let applied = services
            .into_iter()
            .map(|service| AppliedRevision {
                service,
                revision,
                received_unix_ms,
            })
            .collect();
        let report = ConvergenceReport {
            client_id,
            cohort,
            applied,
        };
        if let Err(error) = self.report(DeliveryPath::Xds, &report) {
            tracing::debug!(node, %error, "xDS acknowledgement not counted for convergence");
        }
    }

    /// The summary of `key` against `query`; `current` is its last change.
    /// The apply path takes the ledger's lock under the registry's write lock: only a copy
    /// is taken under it, the summary (sorting every sample) is built after.
    pub(crate) fn summary(&self, key: &ServiceKey, current: Revision, query: &Query) -> ConvergenceReply {
        let copy = self.lock().copy(key);
        copy.summary(current, query, self.clock.unix_now_ms())
    }

    /// Whether anything is known of `key`'s subscribers.
    fn knows(&self, key: &ServiceKey) -> bool {
        self.lock().tracks(key)
    }

    /// Aggregates for the metrics.
    pub(crate) fn totals(&self, current: impl Fn(&ServiceKey) -> Option<Revision>) -> muster_convergence::Totals {
        self.lock().totals(self.clock.unix_now_ms(), current)
    }

    /// How often a subscriber should report while calm, and when it counts as silent.
    pub(crate) fn reply_for(&self, accepted: usize) -> ReportReply {
        let config = *self.lock().config();
        ReportReply {
            accepted,
            report_every_ms: config.report_every_ms,
            silent_after_ms: config.silent_after_ms,
        }
    }

    /// xDS streams open now follow what they ACKed: calm, they are live (an ACK comes only
    /// after a change).
    #[cfg(feature = "xds")]
    fn xds_alive(&self, followed: Vec<(String, Vec<ServiceKey>)>) {
        let now = self.clock.unix_now_ms();
        let mut ledger = self.lock();
        for (node, services) in followed {
            if let Ok(client) = ClientId::new(format!("xds:{node}")) {
                ledger.touch(&client, &services, now);
            }
        }
    }
}

/// Forgets long-silent subscribers and keeps open xDS streams live, until the server stops.
/// Every `silent_after_ms / 3` (at most [`SWEEP_EVERY`]), so a calm xDS stream never looks
/// silent.
pub(crate) async fn run_sweeper(app: Arc<App>, mut stopping: tokio::sync::watch::Receiver<bool>) {
    let convergence = Arc::clone(&app.convergence);
    let silent_after = Duration::from_millis(convergence.lock().config().silent_after_ms);
    let mut ticker = tokio::time::interval(SWEEP_EVERY.min(silent_after / 3).max(Duration::from_millis(100)));
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stopping.wait_for(|stopping| *stopping) => return,
        }
        #[cfg(feature = "xds")]
        convergence.xds_alive(app.xds.followed());
        convergence.lock().sweep(convergence.clock.unix_now_ms());
    }
}

impl ApplyObserver for Convergence {
    fn applied(&self, _registry: &Registry, applied: &Applied) {
        if applied.updates.is_empty() && applied.released.is_empty() {
            return;
        }
        let now = self.clock.unix_now_ms();
        let mut ledger = self.lock();
        for update in &applied.updates {
            ledger.changed(&update.key, applied.revision, now);
        }
        for key in &applied.released {
            ledger.released(key);
        }
        // The DNS listener answers from the live zone, which folds this change in at its
        // next query: it has applied the revision now (SPEC O3 "commit→DNS").
        if let Some((dns, tenant)) = &self.dns {
            let applied_here: Vec<AppliedRevision> = applied
                .updates
                .iter()
                .filter(|update| update.key.tenant == *tenant)
                .map(|update| AppliedRevision {
                    service: update.key.clone(),
                    revision: applied.revision,
                    received_unix_ms: now,
                })
                .collect();
            if !applied_here.is_empty() {
                let report = ConvergenceReport {
                    client_id: dns.clone(),
                    cohort: None,
                    applied: applied_here,
                };
                // Past the bounds the DNS listener is simply not counted.
                let _ = ledger.report(DeliveryPath::Dns, &report, now);
            }
        }
    }

    fn reset(&self, _registry: &Registry) {}
}

/// `POST /v1/convergence/report`: the caller must be allowed to watch every service it
/// reports; otherwise nothing is recorded.
pub(crate) async fn report(
    State(app): State<Arc<App>>,
    caller: Caller,
    JsonBody(report): JsonBody<ConvergenceReport>,
) -> Result<Json<ReportReply>, ApiError> {
    let current = app.gate.revision();
    if let Some(ahead) = report.applied.iter().find(|entry| entry.revision > current) {
        app.convergence.refused.inc();
        return Err(ApiError::new(
            ErrorCode::FutureRevision,
            format!(
                "{} at revision {}: this node is at revision {current} (report to the node you watch)",
                ahead.service, ahead.revision
            ),
        ));
    }
    if let Some(denied) = report
        .applied
        .iter()
        .find(|entry| !caller.may(&entry.service, Verb::Watch))
    {
        app.convergence.refused.inc();
        return Err(ApiError::new(
            ErrorCode::PermissionDenied,
            format!("this token may not watch {}, so it may not report it", denied.service),
        ));
    }
    let accepted = app.convergence.report(DeliveryPath::Watch, &report).map_err(|error| {
        let code = match error {
            ReportError::TooManyServices { .. } => ErrorCode::InvalidReport,
            ReportError::TooManySubscribers { .. }
            | ReportError::TooManySubscribersInTenant { .. }
            | ReportError::TooManyCohorts { .. } => ErrorCode::TooManySubscribers,
        };
        ApiError::new(code, error.to_string())
    })?;
    Ok(Json(app.convergence.reply_for(accepted)))
}

/// The query of `GET /v1/convergence/{tenant}/{namespace}/{service}`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct SummaryQuery {
    /// The revision subscribers should have applied (default: the service's last change).
    #[serde(default)]
    revision: Option<Revision>,
    /// Only subscribers of this cohort (`key=value`).
    #[serde(default)]
    cohort: Option<String>,
    /// The fraction of live subscribers that must have applied it, in (0, 1] (default 1).
    #[serde(default)]
    fraction: Option<f64>,
    /// Stream the summary as NDJSON: at once, then whenever its counts change (checked every
    /// 500 ms); while only its ages move, at most every 5 s.
    #[serde(default)]
    stream: bool,
}

impl SummaryQuery {
    fn parse(&self) -> Result<Query, ApiError> {
        let cohort = self
            .cohort
            .clone()
            .map(Cohort::new)
            .transpose()
            .map_err(|error| ApiError::bad_request(format!("cohort: {error}")))?;
        if let Some(fraction) = self.fraction
            && !(fraction > 0.0 && fraction <= 1.0)
        {
            return Err(ApiError::bad_request(format!("fraction: {fraction} is not in (0, 1]")));
        }
        Ok(Query {
            target: self.revision,
            cohort,
            fraction: self.fraction,
        })
    }
}

/// `GET /v1/convergence/{tenant}/{namespace}/{service}[?stream=true]`.
pub(crate) async fn summary(
    State(app): State<Arc<App>>,
    caller: Caller,
    segments: Segments,
    QueryParams(params): QueryParams<SummaryQuery>,
) -> Result<Response, ApiError> {
    let key = segments.service()?;
    let query = params.parse()?;
    let current = |app: &App, key: &ServiceKey| app.gate.read(|registry| registry.snapshot(key).map(|s| s.revision()));
    if current(&app, &key).is_none() && !app.convergence.knows(&key) {
        return Err(ApiError::not_found(format!(
            "service {key} is not registered and no subscriber reported it"
        )));
    }
    let read = Arc::clone(&app);
    let summarise = move || {
        let revision = current(&read, &key).unwrap_or(Revision::ZERO);
        serde_json::to_value(read.convergence.summary(&key, revision, &query))
            .map_err(|error| ApiError::new(ErrorCode::Internal, format!("cannot encode the summary: {error}")))
    };
    Ok(muster_dashboard::live::once_or_stream(
        &app.gate,
        &caller,
        params.stream,
        summarise,
        Some(without_ages),
    ))
}

/// A summary without what only the clock changes (`unix_ms` and every `*_ms` age): what
/// makes a new line of its stream.
fn without_ages(summary: &serde_json::Value) -> serde_json::Value {
    fn strip(value: &mut serde_json::Value) {
        match value {
            serde_json::Value::Object(fields) => {
                fields.retain(|name, _| {
                    !matches!(name.as_str(), "unix_ms" | "behind_ms" | "last_report_ms" | "silent_ms")
                });
                fields.values_mut().for_each(strip);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut essence = summary.clone();
    strip(&mut essence);
    essence
}
