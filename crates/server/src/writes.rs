//! Registry writes: register, set serving, drain, deregister. Each reply carries the revision
//! the write's effect is committed at (SPEC L3).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use muster_core::api::{DeregisterQuery, DrainRequest, LeaseRequest, RegisterRequest, SetServingRequest, WriteReply};
use muster_core::{Actor, InstanceId, ServiceKey};
use muster_registry::{Deregister, Drain, LeaseSpec, Register, SetServing, Target};

use crate::app::App;
use crate::error::ApiError;
use crate::extract::{JsonBody, QueryParams, Segments, actor};

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
    let command = Drain {
        target: target(key, instance, request.incarnation),
        reason: request.reason,
        expected_revision: request.expected_revision,
    };
    let applied = app.propose(command.into(), app.meta(actor)).await?;
    Ok(Json(app.write_reply(&applied)))
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
