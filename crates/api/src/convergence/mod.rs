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
//!
//! # Layout
//! - `ledger`: [`Convergence`], the ledger's shell, and the sweeper.
//! - here: `POST /v1/convergence/report` and `GET /v1/convergence/{t}/{ns}/{svc}`.

mod ledger;

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::response::Response;
use muster_auth::Verb;
use muster_convergence::{Query, ReportError};
use muster_core::convergence::{Cohort, ConvergenceReport, DeliveryPath, ReportReply};
use muster_core::{ErrorCode, Revision, ServiceKey};
use serde::Deserialize;

pub use ledger::{Convergence, PathLabel, run_sweeper};

use crate::Native;
use muster_gate::Caller;
use muster_http::error::ApiError;
use muster_http::extract::{JsonBody, QueryParams, Segments};

/// `POST /v1/convergence/report`: the caller must be allowed to watch every service it
/// reports; otherwise nothing is recorded.
pub async fn report(
    State(app): State<Arc<Native>>,
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
pub struct SummaryQuery {
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
pub async fn summary(
    State(app): State<Arc<Native>>,
    caller: Caller,
    segments: Segments,
    QueryParams(params): QueryParams<SummaryQuery>,
) -> Result<Response, ApiError> {
    let key = segments.service()?;
    let query = params.parse()?;
    let current =
        |app: &Native, key: &ServiceKey| app.gate.read(|registry| registry.snapshot(key).map(|s| s.revision()));
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
    Ok(muster_gate::live::once_or_stream(
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
