//! Registry writes: register, set serving, drain (with a grace), deregister, and the
//! instance's own reports: TTL check results and requests in flight. Each write's reply
//! carries the revision its effect is committed at (SPEC L3).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use muster_core::api::{
    CheckReportReply, CheckReportRequest, DeregisterQuery, DrainRequest, InFlightRequest, LeaseRequest,
    RegisterRequest, SetServingRequest, WriteReply,
};
use muster_core::{Actor, InstanceId, ServiceKey};
use muster_health::checker::TtlReport;
use muster_registry::{Deregister, Drain, LeaseSpec, Register, SetServing, Target};

use crate::app::App;
use crate::drains::MAX_GRACE_MS;
use crate::error::ApiError;
use crate::extract::{JsonBody, QueryParams, Segments, actor};
use crate::forward::ReportForward;

fn target(key: ServiceKey, instance: InstanceId, incarnation: muster_core::Incarnation) -> Target {
    Target {
        key,
        instance,
        incarnation,
    }
}

/// `PUT /v1/registry/{tenant}/{namespace}/{service}/{instance}`.
pub(crate) async fn register(
    State(app): State<Arc<App>>,
    segments: Segments,
    headers: HeaderMap,
    JsonBody(request): JsonBody<RegisterRequest>,
) -> Result<Json<WriteReply>, ApiError> {
    let (key, instance) = segments.instance()?;
    let actor = actor(&headers, Actor::App)?;
    let lease = match request.lease {
        None => LeaseSpec::None,
        Some(LeaseRequest::Grant { ttl_ms }) => LeaseSpec::Grant { ttl_ms },
        Some(LeaseRequest::Attach { id }) => LeaseSpec::Attach(id),
    };
    let command = Register {
        target: target(key, instance, request.incarnation),
        spec: request.endpoint,
        lease,
        expected_revision: request.expected_revision,
    };
    let applied = app.propose(command.into(), app.meta(actor)).await?;
    Ok(Json(app.write_reply(&applied)))
}

/// `PUT .../{instance}/serving`.
pub(crate) async fn set_serving(
    State(app): State<Arc<App>>,
    segments: Segments,
    headers: HeaderMap,
    JsonBody(request): JsonBody<SetServingRequest>,
) -> Result<Json<WriteReply>, ApiError> {
    let (key, instance) = segments.instance()?;
    let actor = actor(&headers, Actor::App)?;
    let command = SetServing {
        target: target(key, instance, request.incarnation),
        state: request.state,
        reason: request.reason,
        expected_revision: request.expected_revision,
    };
    let applied = app.propose(command.into(), app.meta(actor)).await?;
    Ok(Json(app.write_reply(&applied)))
}

/// `POST .../{instance}/drain`: speaks as the owner unless the caller says otherwise.
pub(crate) async fn drain(
    State(app): State<Arc<App>>,
    segments: Segments,
    headers: HeaderMap,
    JsonBody(request): JsonBody<DrainRequest>,
) -> Result<Json<WriteReply>, ApiError> {
    let (key, instance) = segments.instance()?;
    let actor = actor(&headers, Actor::Owner)?;
    if let Some(grace) = request.grace_ms
        && grace > MAX_GRACE_MS
    {
        return Err(ApiError::new(
            muster_core::ErrorCode::InvalidField,
            format!("grace_ms: must be at most {MAX_GRACE_MS} (one hour), got {grace}"),
        ));
    }
    let target = target(key, instance, request.incarnation);
    let command = Drain {
        target: target.clone(),
        reason: request.reason,
        expected_revision: request.expected_revision,
    };
    let applied = app.propose(command.into(), app.meta(actor)).await?;
    if let Some(grace) = request.grace_ms {
        app.drains().add(target, app.clock.now_ms() + grace);
    }
    Ok(Json(app.write_reply(&applied)))
}

/// `PUT .../{instance}/check`: a TTL check's report, answered after any change it caused.
pub(crate) async fn check_report(
    State(app): State<Arc<App>>,
    segments: Segments,
    JsonBody(request): JsonBody<CheckReportRequest>,
) -> Result<Json<CheckReportReply>, ApiError> {
    let (key, instance) = segments.instance()?;
    if let Some(link) = &app.cluster
        && !app.node.is_leader()
    {
        let forward = ReportForward { key, instance, request };
        return Ok(Json(link.report(app.node.status().leader, &forward).await?));
    }
    let report = TtlReport {
        key,
        instance,
        incarnation: request.incarnation,
        status: request.status,
    };
    Ok(Json(app.checker.report(report).await?))
}

/// `PUT .../{instance}/in-flight`: zero requests in flight ends a pending drain grace now.
pub(crate) async fn in_flight(
    State(app): State<Arc<App>>,
    segments: Segments,
    JsonBody(request): JsonBody<InFlightRequest>,
) -> Result<Json<WriteReply>, ApiError> {
    let (key, instance) = segments.instance()?;
    let drained = (request.in_flight == 0)
        .then(|| app.drains().take(&key, &instance, Some(request.incarnation)))
        .flatten();
    let Some(target) = drained else {
        return Ok(Json(WriteReply {
            revision: app.node.status().revision,
            lease: None,
            unchanged: Some("no_drain_ended".into()),
        }));
    };
    let command = Deregister {
        target: target.clone(),
        expected_revision: None,
    };
    match app.propose(command.into(), app.meta(Actor::Owner)).await {
        Ok(applied) => Ok(Json(app.write_reply(&applied))),
        Err(error) => {
            // Not deregistered: the grace still ends it later.
            app.drains().restore(target);
            Err(error)
        }
    }
}

/// `DELETE .../{instance}?incarnation=N[&expected_revision=R]`.
pub(crate) async fn deregister(
    State(app): State<Arc<App>>,
    segments: Segments,
    headers: HeaderMap,
    QueryParams(query): QueryParams<DeregisterQuery>,
) -> Result<Json<WriteReply>, ApiError> {
    let (key, instance) = segments.instance()?;
    let actor = actor(&headers, Actor::App)?;
    let command = Deregister {
        target: target(key, instance, query.incarnation),
        expected_revision: query.expected_revision,
    };
    let applied = app.propose(command.into(), app.meta(actor)).await?;
    Ok(Json(app.write_reply(&applied)))
}
