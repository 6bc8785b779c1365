//! The route table (the contract is in [`muster_core::api`]) and the error safety net.
//!
//! Every error is JSON: handlers and extractors answer with [`ApiError`]; unknown routes and
//! wrong methods have JSON fallbacks; and a last layer turns any other error response (one
//! axum or hyper made on its own) into the same shape, so no client ever parses plain text.

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};

use crate::app::App;
use crate::error::{ApiError, code_for_status};
use crate::guard::{self, RequestGuard};
use crate::lab_run::{self, LabState};
use crate::{
    acl, audit, auth, lease_deadlines, lease_routes, membership, metrics, openapi, overview, policy, prometheus_sd,
    reads, status, ui, watch, writes,
};

/// How much of a stray plain-text error body the safety net quotes in its message: error
/// texts from axum and hyper are one line; 1 KiB keeps a surprise from growing the reply.
const STRAY_ERROR_QUOTE_BYTES: usize = 1024;

/// The API's routes.
pub(crate) fn router(app: Arc<App>, max_body_bytes: usize, guard: RequestGuard, lab: Arc<LabState>) -> Router {
    const INSTANCE: &str = "/v1/registry/{tenant}/{namespace}/{service}/{instance}";
    Router::new()
        .route(INSTANCE, put(writes::register).delete(writes::deregister))
        .route(&format!("{INSTANCE}/serving"), put(writes::set_serving))
        .route(&format!("{INSTANCE}/drain"), post(writes::drain))
        .route(&format!("{INSTANCE}/check"), put(writes::check_report))
        .route(&format!("{INSTANCE}/in-flight"), put(writes::in_flight))
        .route("/v1/registry/{tenant}/{namespace}/{service}", get(reads::snapshot))
        .route("/v1/registry/{tenant}/{namespace}", get(reads::services))
        .route("/v1/watch/{tenant}/{namespace}/{service}", get(watch::watch_service))
        .route("/v1/watch/{tenant}/{namespace}", get(watch::watch_namespace))
        .route("/v1/leases/{tenant}", post(lease_routes::grant))
        .route("/v1/leases/{tenant}/{id}", delete(lease_routes::revoke))
        .route("/v1/leases/{tenant}/{id}/renew", put(lease_routes::renew))
        .route("/v1/status", get(status::status))
        .route("/v1/policy", get(policy::get).put(policy::put))
        .route("/v1/metrics", get(metrics::metrics))
        // The path Prometheus scrapes by default (`metrics_path`), the same handler.
        .route("/metrics", get(metrics::metrics))
        .route(prometheus_sd::PATH, get(prometheus_sd::targets))
        .route("/v1/audit", get(audit::list))
        .route("/v1/cluster", get(membership::status))
        .route("/v1/federation/status", get(crate::federation::status))
        .route("/v1/cluster/members", post(membership::add))
        .route("/v1/cluster/members/{id}", delete(membership::remove))
        .route(openapi::PATH, get(openapi::document))
        .route("/v1/acl/bootstrap", post(acl::bootstrap))
        .route("/v1/acl/tokens", get(acl::list).post(acl::create))
        .route("/v1/acl/tokens/{accessor}", delete(acl::revoke))
        .route("/v1/acl/self", get(acl::whoami))
        // Convergence telemetry (SPEC O3).
        .route("/v1/convergence/report", post(crate::convergence::report))
        .route(
            "/v1/convergence/{tenant}/{namespace}/{service}",
            get(crate::convergence::summary),
        )
        // The xDS control plane's clients and their acknowledged revisions (SPEC D5).
        .route("/v1/xds/clients", get(crate::xds::clients))
        // The web dashboard (SPEC U2): its files, and the views it reads besides the API's.
        .route("/v1/overview", get(overview::overview))
        .route(
            "/v1/deadlines/{tenant}/{namespace}/{service}",
            get(lease_deadlines::deadlines),
        )
        .merge(ui::router(app.auth.enabled))
        .merge(lab_run::router(lab))
        // Every matched route passes the auth layer first (SPEC S1, S2): `auth::need` says
        // what each one needs.
        .route_layer(axum::middleware::from_fn_with_state(
            Arc::clone(&app),
            auth::authenticate,
        ))
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&app),
            refuse_when_failed,
        ))
        // The browser guard (SPEC S6): Origin, Host, JSON-only bodies, the body deadline.
        .layer(axum::middleware::from_fn_with_state(Arc::new(guard), guard::guard))
        .layer(axum::middleware::map_response(json_errors))
        .with_state(app)
}

/// A node whose storage failed answers only its status and metrics: its registry is frozen
/// at the failure, so a read would pass stale state off as current, and nothing can be
/// acknowledged any more (SPEC R2). Everything else gets `storage_failed` (503: ask another
/// node) until the server has stopped.
async fn refuse_when_failed(
    State(app): State<Arc<App>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let path = request.uri().path();
    if path != "/v1/status"
        && path != "/v1/metrics"
        && path != "/metrics"
        && let Some(fatal) = app.node.fatal()
    {
        return ApiError::from(muster_consensus::ConsensusError::Failed(fatal)).into_response();
    }
    next.run(request).await
}

async fn no_route() -> ApiError {
    ApiError::not_found("no such route; the API is under /v1 (see muster_core::api)")
}

async fn wrong_method(request: axum::extract::Request) -> ApiError {
    ApiError::new(
        muster_core::ErrorCode::MethodNotAllowed,
        format!("{} is not allowed on {}", request.method(), request.uri().path()),
    )
}

/// Rewrites an error response that is not JSON into an [`ApiError`] body.
async fn json_errors(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v == HeaderValue::from_static("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, STRAY_ERROR_QUOTE_BYTES)
        .await
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_default();
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_owned()
    } else {
        text
    };
    let mut fixed = ApiError::with_status(status, code_for_status(status), message).into_response();
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            fixed.headers_mut().insert(name.clone(), value.clone());
        }
    }
    fixed
}
