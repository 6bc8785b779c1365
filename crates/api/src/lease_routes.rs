//! Lease routes: grant and revoke are committed commands; renewal only moves the deadline in
//! the leader engine's memory (DESIGN "Leases off the log").

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use muster_core::api::{GrantLeaseRequest, LeaseReply, WriteReply};
use muster_core::{Actor, LeaseId, Rejection, Revision};
use muster_leader::RenewRefused;
use muster_registry::{GrantLease, RevokeLease};
use serde::Deserialize;

use crate::{Native, Renewal};
use muster_gate::Caller;
use muster_gate::forward::LeaderCall;
use muster_http::error::ApiError;
use muster_http::extract::{JsonBody, QueryParams, Segments, actor};
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

/// `POST /v1/leases/{tenant}`.
pub async fn grant(
    State(app): State<Arc<Native>>,
    caller: Caller,
    segments: Segments,
    headers: HeaderMap,
    JsonBody(request): JsonBody<GrantLeaseRequest>,
) -> Result<Json<WriteReply>, ApiError> {
    let tenant = segments.tenant()?;
    let actor = actor(&headers, Actor::App)?;
    let command = GrantLease {
        tenant,
        ttl_ms: request.ttl_ms,
    };
    let applied = app.gate.propose(command.into(), app.gate.meta(actor, &caller)).await?;
    Ok(Json(app.gate.write_reply(&applied)))
}

/// `PUT /v1/leases/{tenant}/{id}/renew`: no log write. In a cluster the deadline lives on the
/// leader: a follower forwards the renewal there (SPEC R4).
pub async fn renew(State(app): State<Arc<Native>>, segments: Segments) -> Result<Json<LeaseReply>, ApiError> {
    let tenant = segments.tenant()?;
    let id = segments.lease()?;
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
/// `deregister` on every service the lease holds endpoints of (SPEC S2).
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
    let attached = app.gate.read(|registry| {
        let mut keys: Vec<_> = registry.lease_endpoints(id).into_iter().map(|(key, _)| key).collect();
        keys.sort();
        keys.dedup();
        keys
    });
    for key in attached.iter().filter(|key| key.tenant == tenant) {
        app.gate.require(
            &caller,
            peer.as_deref(),
            &muster_auth::Request {
                tenant: Some(&key.tenant),
                scope: muster_auth::Scope::Service {
                    namespace: key.namespace.as_str(),
                    service: key.service.as_str(),
                },
                verb: muster_auth::Verb::Deregister,
            },
        )?;
    }
    let actor = actor(&headers, Actor::App)?;
    let command = RevokeLease {
        tenant,
        lease: id,
        expected_revision: query.expected_revision,
    };
    let applied = app.gate.propose(command.into(), app.gate.meta(actor, &caller)).await?;
    Ok(Json(app.gate.write_reply(&applied)))
}
