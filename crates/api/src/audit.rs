//! `GET /v1/audit`: pages of the trail, newest first (SPEC S4). Admin only: the auth layer
//! authenticates the caller (the route table says `Authenticated`), and this handler asks for
//! `admin` on the whole of the caller's tenant, or an operator's `admin`. A record about one
//! service is then listed only if the caller's rules give it `admin` on that service too
//! (SPEC S3): a rule denying `admin` on `prod/payroll` hides payroll's records from a token
//! that is otherwise its tenant's admin.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Extension, State};
use muster_auth::{Request, Scope, Verb};
use muster_core::api::{AuditQuery, AuditRecord, AuditReply};
use muster_core::{ErrorCode, Label, ServiceKey};

use crate::Native;
use muster_gate::Caller;
use muster_gate::audit::filter::{Parsed, QueryError};
use muster_gate::audit::{AuditView, Denial};
use muster_http::error::ApiError;
use muster_http::extract::QueryParams;
use muster_http::peer::Peer;

/// `GET /v1/audit`: an operator (or, with auth off, anyone on loopback) sees every record; a
/// tenant's token with `admin` on the whole tenant sees that tenant's records only. Every
/// refusal is itself recorded.
pub async fn list(
    State(app): State<Arc<Native>>,
    caller: Caller,
    peer: Option<Extension<Peer>>,
    QueryParams(query): QueryParams<AuditQuery>,
) -> Result<Json<AuditReply>, ApiError> {
    let scope = caller.confined_to().cloned();
    let admin = Request {
        tenant: scope.as_ref(),
        scope: Scope::Whole,
        verb: Verb::Admin,
    };
    app.gate.require(&caller, peer.as_deref(), &admin)?;
    answer(app.gate.audit(), scope.as_ref(), &query, &|record| {
        may_read(&caller, record)
    })
    .inspect_err(|refusal| {
        if refusal.code == ErrorCode::PermissionDenied {
            app.gate.audit().denied(Denial {
                principal: Some(caller.principal().clone()),
                tenant: scope.clone(),
                key: None,
                verb: Verb::Admin.to_string(),
                resource: "GET /v1/audit".to_owned(),
                code: ErrorCode::PermissionDenied,
                reason: refusal.message.clone(),
                source: peer.as_ref().map(|p| p.addr),
                at_ms: app.gate.clock.unix_now_ms(),
            });
        }
    })
    .map(Json)
}

/// One page for a caller who may see `scope`'s records only (`None`: every record, tenants'
/// and the cluster's own). Errors: 400 `bad_request` for a malformed parameter or a cursor
/// this node did not issue since it started; 403 `permission_denied` for another tenant's.
pub fn answer(
    log: AuditView<'_>,
    scope: Option<&Label>,
    query: &AuditQuery,
    visible: &dyn Fn(&AuditRecord) -> bool,
) -> Result<AuditReply, ApiError> {
    let parsed = Parsed::new(query, scope).map_err(|error| match error {
        QueryError::Malformed(message) => ApiError::bad_request(message),
        QueryError::OtherTenant(message) => ApiError::new(ErrorCode::PermissionDenied, message),
    })?;
    log.page_visible(&parsed.filter, parsed.cursor, parsed.limit, visible)
        .map_err(|_| {
            ApiError::bad_request(
                "cursor: issued by another node, or by this one before it restarted (its numbering \
                 starts again); list again without a cursor",
            )
        })
}

/// Whether `caller`, already let in as an admin of the records' tenant (or an operator), may
/// read `record`: one about a service needs `admin` on that service as well.
fn may_read(caller: &Caller, record: &AuditRecord) -> bool {
    let Some(key) = record.key.as_deref() else {
        return true;
    };
    // Without a token: authentication is off (everything is allowed) or nobody (refused
    // before this, and still shown nothing).
    if caller.token_ref().is_none() {
        return !caller.is_nobody();
    }
    let mut parts = key.splitn(3, '/');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(tenant), Some(namespace), Some(service)) => {
            ServiceKey::new(tenant, namespace, service).is_ok_and(|key| caller.may(&key, Verb::Admin))
        }
        // Every record's key is a valid `tenant/namespace/service`; one that is not is shown
        // to no token rather than judged by a guess.
        _ => false,
    }
}
