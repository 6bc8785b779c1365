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
use muster_leader::{InFlightReply, Reply};
use muster_registry::{Deregister, Drain, LeaseSpec, Register, SetServing, Target};

use crate::app::App;
use crate::leader::ask;
use muster_gate::Caller;
use muster_gate::forward::LeaderCall;
use muster_http::error::ApiError;
use muster_http::extract::{JsonBody, QueryParams, Segments, actor};

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
    caller: Caller,
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
    let applied = app.gate.propose(command.into(), app.gate.meta(actor, &caller)).await?;
    Ok(Json(app.gate.write_reply(&applied)))
}

/// `PUT .../{instance}/serving`.
pub(crate) async fn set_serving(
    State(app): State<Arc<App>>,
    caller: Caller,
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
    let applied = app.gate.propose(command.into(), app.gate.meta(actor, &caller)).await?;
    Ok(Json(app.gate.write_reply(&applied)))
}

/// `POST .../{instance}/drain`: speaks as the owner unless the caller says otherwise. A grace
/// is committed with the drain (the registry records its deadline), so whichever node leads
/// when it ends deregisters the instance (SPEC L6).
pub(crate) async fn drain(
    State(app): State<Arc<App>>,
    caller: Caller,
    segments: Segments,
    headers: HeaderMap,
    JsonBody(request): JsonBody<DrainRequest>,
) -> Result<Json<WriteReply>, ApiError> {
    let (key, instance) = segments.instance()?;
    let actor = actor(&headers, Actor::Owner)?;
    let command = Drain {
        target: target(key, instance, request.incarnation),
        reason: request.reason,
        grace_ms: request.grace_ms,
        expected_revision: request.expected_revision,
    };
    let applied = app.gate.propose(command.into(), app.gate.meta(actor, &caller)).await?;
    Ok(Json(app.gate.write_reply(&applied)))
}

/// `PUT .../{instance}/check`: a TTL check's report, answered after any change it caused.
pub(crate) async fn check_report(
    State(app): State<Arc<App>>,
    segments: Segments,
    JsonBody(request): JsonBody<CheckReportRequest>,
) -> Result<Json<CheckReportReply>, ApiError> {
    let (key, instance) = segments.instance()?;
    let call = LeaderCall::Report {
        key: key.clone(),
        instance: instance.clone(),
        request: request.clone(),
    };
    app.gate
        .on_leader(call, report_here(&app, key, instance, request))
        .await
        .map(Json)
}

/// A TTL report on this node, which leads: the engine's checker holds the TTL deadlines.
pub(crate) async fn report_here(
    app: &Arc<App>,
    key: ServiceKey,
    instance: InstanceId,
    request: CheckReportRequest,
) -> Result<CheckReportReply, ApiError> {
    let report = TtlReport {
        key,
        instance,
        incarnation: request.incarnation,
        status: request.status,
    };
    match ask(app, |engine, registry, now, to| {
        engine.ttl_report(registry, &report, to, now)
    })
    .await?
    {
        Reply::Report(Ok(reply)) => Ok(reply),
        Reply::Report(Err(refused)) => Err(ApiError::new(refused.error_code(), refused.to_string())),
        other => Err(not_answered(other)),
    }
}

/// `PUT .../{instance}/in-flight`: zero requests in flight ends a pending drain grace now.
pub(crate) async fn in_flight(
    State(app): State<Arc<App>>,
    segments: Segments,
    JsonBody(request): JsonBody<InFlightRequest>,
) -> Result<Json<WriteReply>, ApiError> {
    let (key, instance) = segments.instance()?;
    let call = LeaderCall::InFlight {
        key: key.clone(),
        instance: instance.clone(),
        request: request.clone(),
    };
    app.gate
        .on_leader(call, in_flight_here(&app, key, instance, request))
        .await
        .map(Json)
}

/// An in-flight report on this node, which leads: the engine ends the drain with a
/// deregistration fenced by the record's revision, so a lifted drain stays lifted.
pub(crate) async fn in_flight_here(
    app: &Arc<App>,
    key: ServiceKey,
    instance: InstanceId,
    request: InFlightRequest,
) -> Result<WriteReply, ApiError> {
    let target = target(key, instance, request.incarnation);
    let reply = ask(app, |engine, registry, _, to| {
        engine.in_flight(registry, target, request.in_flight, to)
    })
    .await?;
    match reply {
        Reply::InFlight(InFlightReply::Ended { revision }) => Ok(WriteReply {
            revision,
            lease: None,
            unchanged: None,
        }),
        Reply::InFlight(InFlightReply::NothingEnded { revision }) => Ok(WriteReply {
            revision,
            lease: None,
            unchanged: Some("no_drain_ended".into()),
        }),
        other => Err(not_answered(other)),
    }
}

/// A reply that is no answer: this node stopped leading, or the change did not commit.
fn not_answered(reply: Reply) -> ApiError {
    match reply {
        Reply::NotLeading => ApiError::no_quorum("this node no longer leads; retry"),
        _ => ApiError::no_quorum("the change this report caused did not commit; retry"),
    }
}

/// `DELETE .../{instance}?incarnation=N[&expected_revision=R]`.
pub(crate) async fn deregister(
    State(app): State<Arc<App>>,
    caller: Caller,
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
    let applied = app.gate.propose(command.into(), app.gate.meta(actor, &caller)).await?;
    Ok(Json(app.gate.write_reply(&applied)))
}
