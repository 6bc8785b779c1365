//! `GET /v1/audit`: pages of the trail, newest first (SPEC S4). Admin only; the auth layer
//! enforces that from the route table, and passes a tenant admin's tenant as the scope.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use muster_core::api::{AuditQuery, AuditReply};
use muster_core::{ErrorCode, Label};

use crate::app::App;
use crate::audit::filter::{Parsed, QueryError};
use crate::audit::log::AuditLog;
use crate::error::ApiError;
use crate::extract::QueryParams;

/// `GET /v1/audit`: everything, for an operator.
pub(crate) async fn list(
    State(app): State<Arc<App>>,
    QueryParams(query): QueryParams<AuditQuery>,
) -> Result<Json<AuditReply>, ApiError> {
    answer(&app.audit, None, &query).map(Json)
}

/// One page for a caller who may see `scope`'s records only (`None`: every record, tenants'
/// and the cluster's own). Errors: 400 `bad_request` for a malformed parameter or a cursor
/// this node did not issue since it started; 403 `permission_denied` for another tenant's.
pub(crate) fn answer(log: &AuditLog, scope: Option<&Label>, query: &AuditQuery) -> Result<AuditReply, ApiError> {
    let parsed = Parsed::new(query, scope).map_err(|error| match error {
        QueryError::Malformed(message) => ApiError::bad_request(message),
        QueryError::OtherTenant(message) => ApiError::new(ErrorCode::PermissionDenied, message),
    })?;
    log.page(&parsed.filter, parsed.cursor, parsed.limit).map_err(|_| {
        ApiError::bad_request(
            "cursor: issued by another node, or by this one before it restarted (its numbering \
             starts again); list again without a cursor",
        )
    })
}
