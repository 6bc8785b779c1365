//! The node-to-node listener (issue 7): openraft's RPCs and forwarded writes, on their own
//! address, each request authenticated with the cluster secret (SPEC R1).
//!
//! ```text
//!  peer ──POST /raft/{append|vote|snapshot|propose} + x-muster-cluster-secret──▶ Node::rpc
//!  follower ──POST /app/renew, /app/check──▶ renew or report here (only while leading;
//!                                             else no_quorum)
//!        wrong or missing secret: 401 unauthorized, nothing done
//! ```

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use std::sync::Arc;

use muster_consensus::{Node, Rpc, SECRET_HEADER};

use crate::app::App;
use crate::error::ApiError;
use crate::forward::{RenewForward, ReportForward};
use crate::lease_routes::renew_here;
use muster_health::checker::TtlReport;

/// The largest node-to-node request: an append of many batched entries, or a snapshot chunk
/// (3 MiB of bytes as a JSON array, about four times larger).
const MAX_RPC_BYTES: usize = 64 * 1024 * 1024;

/// The cluster listener's routes.
pub(crate) fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/raft/{rpc}", post(rpc))
        .route("/app/renew", post(renew))
        .route("/app/check", post(check_report))
        .layer(DefaultBodyLimit::max(MAX_RPC_BYTES))
        .with_state(app)
}

fn authenticate(node: &Node, headers: &HeaderMap) -> Result<(), ApiError> {
    let secret = headers
        .get(SECRET_HEADER)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    if node.accepts_secret(secret) {
        return Ok(());
    }
    Err(ApiError::new(
        muster_core::ErrorCode::Unauthorized,
        format!("node-to-node requests need the cluster secret in {SECRET_HEADER}"),
    ))
}

/// A renewal a follower forwarded: only the leader keeps deadlines.
async fn renew(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> Response {
    if let Err(refused) = authenticate(&app.node, &headers) {
        return refused.into_response();
    }
    let Ok(forward) = serde_json::from_slice::<RenewForward>(&body) else {
        return ApiError::bad_request("a renewal is {tenant, id}").into_response();
    };
    if !app.node.is_leader() {
        return ApiError::no_quorum("this node no longer leads; retry").into_response();
    }
    match renew_here(&app, &forward.tenant, forward.id) {
        Ok(reply) => axum::Json(reply).into_response(),
        Err(error) => error.into_response(),
    }
}

/// A TTL report a follower forwarded: only the leader's checker keeps TTL deadlines.
async fn check_report(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> Response {
    if let Err(refused) = authenticate(&app.node, &headers) {
        return refused.into_response();
    }
    let Ok(forward) = serde_json::from_slice::<ReportForward>(&body) else {
        return ApiError::bad_request("a report is {key, instance, request}").into_response();
    };
    if !app.node.is_leader() {
        return ApiError::no_quorum("this node no longer leads; retry").into_response();
    }
    let report = TtlReport {
        key: forward.key,
        instance: forward.instance,
        incarnation: forward.request.incarnation,
        status: forward.request.status,
    };
    match app.checker.report(report).await {
        Ok(reply) => axum::Json(reply).into_response(),
        Err(error) => error.into_response(),
    }
}

async fn rpc(State(app): State<Arc<App>>, Path(segment): Path<String>, headers: HeaderMap, body: Bytes) -> Response {
    let node = &app.node;
    if let Err(refused) = authenticate(node, &headers) {
        return refused.into_response();
    }
    let Some(rpc) = Rpc::from_segment(&segment) else {
        return ApiError::not_found(format!("no cluster RPC '{segment}'")).into_response();
    };
    match node.rpc(rpc, &body).await {
        Ok(reply) => ([(header::CONTENT_TYPE, "application/json")], reply).into_response(),
        Err(message) => ApiError::bad_request(message).into_response(),
    }
}
