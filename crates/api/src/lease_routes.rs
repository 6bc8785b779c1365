//! Lease routes: grant and revoke are committed commands; renewal only moves the deadline in
//! the leader engine's memory (DESIGN "Leases off the log").
//!
//! A lease belongs to a service when its grant names one (SPEC L4): renewal, revocation and
//! attachment are judged on that service's rules. A lease of the whole tenant (granted
//! without a service, or before leases named one) is judged on what hangs on it: a token
//! with the verb on every service of the tenant may, and otherwise one with the verb on
//! every service whose endpoints it holds; an empty one as before (some service's right).
//! A refusal never names the lease's services: lease ids are sequential, and a caller may
//! not be allowed to read them (the audit trail has them).

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
    match &service {
        Some(key) => {
            app.gate
                .require(&caller, peer.as_deref(), &service_request(key, Verb::Register))?;
            app.gate.require_format(2, "a lease bound to a service")?;
        }
        // Until the format is raised, as before: some service's right (the registry cannot
        // yet bind a lease to a service, so that is how a registrar gets one).
        None => {
            let scope = if app.gate.format() >= 2 {
                Scope::EveryService
            } else {
                Scope::AnyService
            };
            let asked = muster_auth::Request {
                tenant: Some(&tenant),
                scope,
                verb: Verb::Register,
            };
            app.gate.require(&caller, peer.as_deref(), &asked)?;
        }
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

/// What `verb` on `key` asks of the rules.
fn service_request(key: &ServiceKey, verb: Verb) -> muster_auth::Request<'_> {
    muster_auth::Request {
        tenant: Some(&key.tenant),
        scope: Scope::Service {
            namespace: key.namespace.as_str(),
            service: key.service.as_str(),
        },
        verb,
    }
}

/// What a lease is, as the rules judge it.
enum Held {
    /// A lease of one service.
    Service(ServiceKey),
    /// A lease of the whole tenant, and the services whose endpoints hang on it.
    Tenant(Vec<ServiceKey>),
}

/// Lease `id` of `tenant` as the rules judge it. A lease this node does not hold may have
/// been granted on the leader a moment ago: in a cluster the node first catches up with a
/// consistent read (SPEC R3), then it is `lease_not_found`.
async fn held(app: &Native, tenant: &Label, id: LeaseId) -> Result<Held, ApiError> {
    let look = || {
        app.gate.read(|registry| {
            let lease = registry.lease(id).filter(|lease| lease.tenant == *tenant)?;
            Some(match &lease.service {
                Some(key) => Held::Service(key.clone()),
                None => {
                    let mut attached: Vec<ServiceKey> =
                        registry.lease_endpoints(id).into_iter().map(|(key, _)| key).collect();
                    attached.dedup();
                    Held::Tenant(attached)
                }
            })
        })
    };
    if let Some(held) = look() {
        return Ok(held);
    }
    if app.gate.in_cluster() {
        app.gate
            .ready_for(muster_gate::consistency::Consistency::Consistent)
            .await?;
        if let Some(held) = look() {
            return Ok(held);
        }
    }
    Err(ApiError::from(Rejection::LeaseNotFound { lease: id }))
}

/// Whether the caller may `verb` lease `id`, held as `held` (see the module's documentation).
/// The refusal is on the audit trail in full; its message names none of the lease's services.
fn judge(
    app: &Native,
    caller: &Caller,
    peer: Option<&Peer>,
    tenant: &Label,
    id: LeaseId,
    held: &Held,
    verb: Verb,
) -> Result<(), ApiError> {
    let whole = |scope| muster_auth::Request {
        tenant: Some(tenant),
        scope,
        verb,
    };
    let verdict = match held {
        Held::Service(key) => app.gate.require(caller, peer, &service_request(key, verb)),
        Held::Tenant(attached) if attached.is_empty() => app.gate.require(caller, peer, &whole(Scope::AnyService)),
        Held::Tenant(_) if caller.check(&whole(Scope::EveryService)).is_ok() => Ok(()),
        Held::Tenant(attached) => attached
            .iter()
            .try_for_each(|key| app.gate.require(caller, peer, &service_request(key, verb))),
    };
    verdict.map_err(|_| {
        ApiError::new(
            muster_core::ErrorCode::PermissionDenied,
            format!(
                "{verb} on lease {id} of tenant '{tenant}': this token may not {verb} the service it is for \
                 (or, for a lease of the whole tenant, every service whose endpoints it holds)"
            ),
        )
    })
}

/// Whether the caller may `verb` lease `id` of `tenant` (authentication off: always).
async fn judge_lease(
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
    let held = held(app, tenant, id).await?;
    judge(app, caller, peer, tenant, id, &held, verb)
}

/// Whether the caller may attach an endpoint of `key` to lease `id`: a lease of a service
/// takes only that service's endpoints (the registry refuses others, `lease_scope_mismatch`);
/// a lease of the whole tenant, only with `register` on what already hangs on it (nothing:
/// the endpoint's own service's right, which the route checked). An unknown lease is the
/// registry's to refuse.
pub(crate) async fn judge_attach(
    app: &Native,
    caller: &Caller,
    peer: Option<&Peer>,
    key: &ServiceKey,
    id: LeaseId,
) -> Result<(), ApiError> {
    if !app.gate.auth.enabled {
        return Ok(());
    }
    match held(app, &key.tenant, id).await {
        Ok(held @ Held::Tenant(_)) => judge(app, caller, peer, &key.tenant, id, &held, Verb::Register),
        Ok(Held::Service(_)) | Err(_) => Ok(()),
    }
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
    judge_lease(&app, &caller, peer.as_deref(), &tenant, id, Verb::Renew).await?;
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
    judge_lease(&app, &caller, peer.as_deref(), &tenant, id, Verb::Deregister).await?;
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
