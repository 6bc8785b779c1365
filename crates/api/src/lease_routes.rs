//! Lease routes: grant and revoke are committed commands; renewal only moves the deadline in
//! the leader engine's memory (DESIGN "Leases off the log").
//!
//! A lease belongs to a service when its grant names one (SPEC L4): renewal, revocation and
//! attachment are judged on that service's rules. A lease of the whole tenant (granted
//! without a service, or before leases named one) any endpoint of the tenant may hold, so
//! only a token with the verb on every service of the tenant may keep or end it.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use muster_auth::{Scope, Verb};
use muster_core::api::{GrantLeaseRequest, LeaseReply, WriteReply};
use muster_core::{Actor, Label, LeaseId, Rejection, Revision, ServiceKey};
use muster_leader::RenewRefused;
use muster_registry::{GrantLease, RevokeLease};
use serde::Deserialize;

use crate::{Native, Renewal};
use muster_gate::Caller;
use muster_gate::forward::LeaderCall;
use muster_http::error::ApiError;
use muster_http::extract::{JsonBody, QueryParams, Segments};
use muster_http::peer::Peer;

/// The query of `DELETE /v1/leases/{tenant}/{id}`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct RevokeQuery {
    /// Compare-and-swap on the revision the lease was granted at.
    #[serde(default)]
    expected_revision: Option<Revision>,
}

/// `POST /v1/leases/{tenant}`: with `"service": "namespace/service"`, a lease of that service
/// (`register` on it); without, a lease of the whole tenant (`register` on every service).
pub async fn grant(
    State(app): State<Arc<Native>>,
    caller: Caller,
    peer: Option<axum::Extension<Peer>>,
    segments: Segments,
    headers: HeaderMap,
    JsonBody(request): JsonBody<GrantLeaseRequest>,
) -> Result<Json<WriteReply>, ApiError> {
    let tenant = segments.tenant()?;
    let service = request
        .service
        .as_deref()
        .map(|text| service_of(&tenant, text))
        .transpose()?;
    app.gate.require(
        &caller,
        peer.as_deref(),
        &lease_request(&tenant, service.as_ref(), Verb::Register),
    )?;
    if service.is_some() {
        app.gate.require_format(2, "a lease bound to a service")?;
    }
    let actor = app.speaking_as(&caller, peer.as_deref(), &headers, Actor::App, || {
        format!("POST /v1/leases/{tenant}")
    })?;
    let command = GrantLease {
        tenant,
        ttl_ms: request.ttl_ms,
        service,
    };
    let applied = app.gate.propose(command.into(), app.gate.meta(actor, &caller)).await?;
    Ok(Json(app.gate.write_reply(&applied)))
}

/// `service` of `"namespace/service"`, in `tenant`.
fn service_of(tenant: &Label, text: &str) -> Result<ServiceKey, ApiError> {
    let (namespace, service) = text.split_once('/').ok_or_else(|| {
        ApiError::from(Rejection::InvalidName {
            field: "service".into(),
            reason: format!("expected 'namespace/service', got '{}'", text.escape_debug()),
        })
    })?;
    ServiceKey::new(tenant.as_str(), namespace, service)
        .map_err(|rejection| ApiError::from(rejection.for_field("service")))
}

/// What `verb` on a lease of `service` (none: of the whole tenant) asks of the rules.
fn lease_request<'a>(tenant: &'a Label, service: Option<&'a ServiceKey>, verb: Verb) -> muster_auth::Request<'a> {
    muster_auth::Request {
        tenant: Some(tenant),
        scope: match service {
            Some(key) => Scope::Service {
                namespace: key.namespace.as_str(),
                service: key.service.as_str(),
            },
            None => Scope::EveryService,
        },
        verb,
    }
}

/// Whether the caller may `verb` lease `id` of `tenant`: judged on the lease's service, or
/// on every service for a lease of the whole tenant. A lease this node does not hold is
/// `lease_not_found`, judged before anything else is learnt of it.
fn judge_lease(
    app: &Native,
    caller: &Caller,
    peer: Option<&Peer>,
    tenant: &Label,
    id: LeaseId,
    verb: Verb,
) -> Result<(), ApiError> {
    if !app.gate.auth.enabled {
        return Ok(());
    }
    let service = app.gate.read(|registry| {
        registry
            .lease(id)
            .filter(|lease| lease.tenant == *tenant)
            .map(|lease| lease.service.clone())
    });
    let Some(service) = service else {
        return Err(ApiError::from(Rejection::LeaseNotFound { lease: id }));
    };
    app.gate
        .require(caller, peer, &lease_request(tenant, service.as_ref(), verb))
}

/// Whether the caller may attach an endpoint of `key` to lease `id`: to a lease of the
/// whole tenant only with `register` on every service (its holder's token can end every
/// endpoint on it). A lease of a service takes only that service's endpoints, which the
/// registry checks (`lease_scope_mismatch`); an unknown lease is the registry's to refuse.
pub(crate) fn judge_attach(
    app: &Native,
    caller: &Caller,
    peer: Option<&Peer>,
    key: &ServiceKey,
    id: LeaseId,
) -> Result<(), ApiError> {
    if !app.gate.auth.enabled {
        return Ok(());
    }
    let tenant_wide = app.gate.read(|registry| {
        registry
            .lease(id)
            .is_some_and(|lease| lease.tenant == key.tenant && lease.service.is_none())
    });
    if !tenant_wide {
        return Ok(());
    }
    app.gate
        .require(caller, peer, &lease_request(&key.tenant, None, Verb::Register))
}

/// `PUT /v1/leases/{tenant}/{id}/renew`: no log write. In a cluster the deadline lives on the
/// leader: a follower forwards the renewal there (SPEC R4). Needs `renew` on the lease's
/// service (on every service, for a lease of the whole tenant).
pub async fn renew(
    State(app): State<Arc<Native>>,
    caller: Caller,
    peer: Option<axum::Extension<Peer>>,
    segments: Segments,
) -> Result<Json<LeaseReply>, ApiError> {
    let tenant = segments.tenant()?;
    let id = segments.lease()?;
    judge_lease(&app, &caller, peer.as_deref(), &tenant, id, Verb::Renew)?;
    let call = LeaderCall::Renew {
        tenant: tenant.clone(),
        id,
    };
    app.gate
        .on_leader(call, async { renew_here(&app, &tenant, id) })
        .await
        .map(Json)
}

/// How recently a quorum must have acknowledged a cluster's leader for it to extend a lease:
/// an election timeout (600 ms at most) plus margin. A leader cut off from its followers
/// stops extending within this, before the majority side could have elected another
/// (SPEC R4: a minority never extends a lease).
const RENEW_QUORUM_MS: u64 = 1_000;

/// Renews on this node, which leads (or is the only node).
pub fn renew_here(app: &Native, tenant: &muster_core::Label, id: LeaseId) -> Result<LeaseReply, ApiError> {
    if app.gate.in_cluster() && app.gate.leader_contact_age_ms().is_none_or(|age| age > RENEW_QUORUM_MS) {
        app.meter.renewed(tenant, Renewal::NoQuorum);
        return Err(ApiError::no_quorum(
            "this node cannot confirm it still leads a quorum; the lease was not extended: retry",
        ));
    }
    let renewed = app.gate.renew(tenant, id);
    let outcome = match &renewed {
        Ok(_) => Renewal::Ok,
        Err(RenewRefused::NotFound) => Renewal::LeaseNotFound,
        Err(RenewRefused::NotLeading) => Renewal::NoQuorum,
    };
    app.meter.renewed(tenant, outcome);
    renewed.map_err(|refused| match refused {
        RenewRefused::NotFound => ApiError::from(Rejection::LeaseNotFound { lease: id }),
        RenewRefused::NotLeading => ApiError::no_quorum("this node no longer leads; retry"),
    })
}

/// `DELETE /v1/leases/{tenant}/{id}[?expected_revision=R]`: the lease's endpoints leave with
/// reason `deregistered`. Revoking removes what is attached, so the caller needs
/// `deregister` on the lease's service, or on every service for a lease of the whole tenant
/// (SPEC S2, L4).
pub async fn revoke(
    State(app): State<Arc<Native>>,
    caller: Caller,
    peer: Option<axum::Extension<Peer>>,
    segments: Segments,
    headers: HeaderMap,
    QueryParams(query): QueryParams<RevokeQuery>,
) -> Result<Json<WriteReply>, ApiError> {
    let tenant = segments.tenant()?;
    let id = segments.lease()?;
    judge_lease(&app, &caller, peer.as_deref(), &tenant, id, Verb::Deregister)?;
    let actor = app.speaking_as(&caller, peer.as_deref(), &headers, Actor::App, || {
        format!("DELETE /v1/leases/{tenant}/{id}")
    })?;
    let command = RevokeLease {
        tenant,
        lease: id,
        expected_revision: query.expected_revision,
    };
    let applied = app.gate.propose(command.into(), app.gate.meta(actor, &caller)).await?;
    Ok(Json(app.gate.write_reply(&applied)))
}
