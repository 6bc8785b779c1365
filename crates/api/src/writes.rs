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
use muster_registry::{Deregister, Drain, LeaseSpec, Register, SetServing, Target};

use crate::Native;
use muster_gate::Caller;
use muster_gate::forward::LeaderCall;
use muster_http::error::ApiError;
use muster_http::extract::{JsonBody, QueryParams, Segments};
use muster_http::peer::Peer;

fn target(key: ServiceKey, instance: InstanceId, incarnation: muster_core::Incarnation) -> Target {
    Target {
        key,
        instance,
        incarnation,
    }
}

/// `PUT /v1/registry/{tenant}/{namespace}/{service}/{instance}`.
pub async fn register(
    State(app): State<Arc<Native>>,
    caller: Caller,
    peer: Option<axum::Extension<Peer>>,
    segments: Segments,
    headers: HeaderMap,
    JsonBody(request): JsonBody<RegisterRequest>,
) -> Result<Json<WriteReply>, ApiError> {
    let (key, instance) = segments.instance()?;
    let actor = app.speaking_as(&caller, peer.as_deref(), &headers, Actor::App, || {
        format!("PUT /v1/registry/{key}/{instance}")
    })?;
    let lease = match request.lease {
        None => LeaseSpec::None,
        Some(LeaseRequest::Grant { ttl_ms }) => LeaseSpec::Grant { ttl_ms },
        Some(LeaseRequest::Attach { id }) => {
            crate::lease_routes::judge_attach(&app, &caller, peer.as_deref(), &key, id).await?;
            LeaseSpec::Attach(id)
        }
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
pub async fn set_serving(
    State(app): State<Arc<Native>>,
    caller: Caller,
    peer: Option<axum::Extension<Peer>>,
    segments: Segments,
    headers: HeaderMap,
    JsonBody(request): JsonBody<SetServingRequest>,
) -> Result<Json<WriteReply>, ApiError> {
    let (key, instance) = segments.instance()?;
    let actor = app.speaking_as(&caller, peer.as_deref(), &headers, Actor::App, || {
        format!("PUT /v1/registry/{key}/{instance}/serving")
    })?;
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
pub async fn drain(
    State(app): State<Arc<Native>>,
    caller: Caller,
    peer: Option<axum::Extension<Peer>>,
    segments: Segments,
    headers: HeaderMap,
    JsonBody(request): JsonBody<DrainRequest>,
) -> Result<Json<WriteReply>, ApiError> {
    let (key, instance) = segments.instance()?;
    let actor = app.speaking_as(&caller, peer.as_deref(), &headers, Actor::Owner, || {
        format!("POST /v1/registry/{key}/{instance}/drain")
    })?;
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
pub async fn check_report(
    State(app): State<Arc<Native>>,
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
        .on_leader(call, app.gate.ttl_report(key, instance, request))
        .await
        .map(Json)
}

/// `PUT .../{instance}/in-flight`: zero requests in flight ends a pending drain grace now.
pub async fn in_flight(
    State(app): State<Arc<Native>>,
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
        .on_leader(call, app.gate.in_flight(key, instance, request))
        .await
        .map(Json)
}

/// `DELETE .../{instance}?incarnation=N[&expected_revision=R]`.
pub async fn deregister(
    State(app): State<Arc<Native>>,
    caller: Caller,
    peer: Option<axum::Extension<Peer>>,
    segments: Segments,
    headers: HeaderMap,
    QueryParams(query): QueryParams<DeregisterQuery>,
) -> Result<Json<WriteReply>, ApiError> {
    let (key, instance) = segments.instance()?;
    let actor = app.speaking_as(&caller, peer.as_deref(), &headers, Actor::App, || {
        format!("DELETE /v1/registry/{key}/{instance}")
    })?;
    let command = Deregister {
        target: target(key, instance, query.incarnation),
        expected_revision: query.expected_revision,
    };
    let applied = app.gate.propose(command.into(), app.gate.meta(actor, &caller)).await?;
    Ok(Json(app.gate.write_reply(&applied)))
}
