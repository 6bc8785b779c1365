//! The route table (the contract is in [`muster_core::api`]) and the error safety net.
//!
//! Every error is JSON: handlers and extractors answer with [`ApiError`]; unknown routes and
//! wrong methods have JSON fallbacks; and a last layer turns any other error response (one
//! axum or hyper made on its own) into the same shape, so no client ever parses plain text.

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::Method;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, delete, get, post, put};
use muster_auth::Verb;

use crate::app::App;
use crate::auth::Need;
use crate::lab_run::{self, LabState};
use crate::{auth, membership, metrics, openapi};
use muster_api::{Native, acl, audit, convergence, lease_routes, policy, prometheus_sd, reads, status, watch, writes};
use muster_dashboard::{lease_deadlines, overview, ui};
use muster_http::error::{ApiError, code_for_status};
use muster_http::guard::{self, RequestGuard};

/// How much of a stray plain-text error body the safety net quotes in its message: error
/// texts from axum and hyper are one line; 1 KiB keeps a surprise from growing the reply.
const STRAY_ERROR_QUOTE_BYTES: usize = 1024;

/// The path of one instance; its sub-resources follow it.
const INSTANCE: &str = "/v1/registry/{tenant}/{namespace}/{service}/{instance}";

/// What handlers share besides the [`App`]: the state of the adapters split out of this
/// crate (the native API's, the gate, federation's), the dashboard's page and the lab runner.
pub(crate) struct Shared {
    gate: Arc<muster_gate::Gate>,
    native: Arc<Native>,
    federation: Arc<muster_federation::FederationRoutes>,
    page: Arc<ui::Page>,
    lab: Arc<LabState>,
}

impl Shared {
    /// A native API handler (`muster_api`), on its own state.
    fn native(&self, handler: MethodRouter<Arc<Native>>) -> MethodRouter<Arc<App>> {
        handler.with_state(Arc::clone(&self.native))
    }
}

/// One route, declared once: its method and path template, the right it needs (SPEC S1,
/// S2), its handler and its operation in the API document (`openapi`'s documented fn of the
/// same name). The router, the auth layer and the API document (`openapi::build`, given
/// [`operations`] and [`need`]) all read [`ROUTES`].
pub(crate) struct Route {
    pub(crate) method: Method,
    pub(crate) path: &'static str,
    pub(crate) need: Need,
    handler: fn(&Shared) -> MethodRouter<Arc<App>>,
    /// Its part of the API document.
    pub(crate) operation: openapi::Operation,
}

const fn route(
    method: Method,
    path: &'static str,
    need: Need,
    handler: fn(&Shared) -> MethodRouter<Arc<App>>,
    operation: openapi::Operation,
) -> Route {
    Route {
        method,
        path,
        need,
        handler,
        operation,
    }
}

/// Every route of the HTTP API. A handler serves `HEAD` as it serves `GET`, with the same
/// need. Services, namespaces and tenants are the path's `tenant`, `namespace` and `service`
/// segments.
pub(crate) static ROUTES: &[Route] = &[
    route(
        Method::PUT,
        INSTANCE,
        Need::Service(Verb::Register),
        |shared| shared.native(put(writes::register)),
        openapi::operation::<openapi::__path_register>,
    ),
    route(
        Method::DELETE,
        INSTANCE,
        Need::Service(Verb::Deregister),
        |shared| shared.native(delete(writes::deregister)),
        openapi::operation::<openapi::__path_deregister>,
    ),
    route(
        Method::PUT,
        "/v1/registry/{tenant}/{namespace}/{service}/{instance}/serving",
        Need::Service(Verb::SetState),
        |shared| shared.native(put(writes::set_serving)),
        openapi::operation::<openapi::__path_set_serving>,
    ),
    route(
        Method::POST,
        "/v1/registry/{tenant}/{namespace}/{service}/{instance}/drain",
        Need::Service(Verb::SetState),
        |shared| shared.native(post(writes::drain)),
        openapi::operation::<openapi::__path_drain>,
    ),
    route(
        Method::PUT,
        "/v1/registry/{tenant}/{namespace}/{service}/{instance}/check",
        Need::Service(Verb::Renew),
        |shared| shared.native(put(writes::check_report)),
        openapi::operation::<openapi::__path_check_report>,
    ),
    route(
        Method::PUT,
        "/v1/registry/{tenant}/{namespace}/{service}/{instance}/in-flight",
        Need::Service(Verb::Renew),
        |shared| shared.native(put(writes::in_flight)),
        openapi::operation::<openapi::__path_in_flight>,
    ),
    route(
        Method::GET,
        "/v1/registry/{tenant}/{namespace}/{service}",
        Need::Service(Verb::Read),
        |shared| shared.native(get(reads::snapshot)),
        openapi::operation::<openapi::__path_snapshot>,
    ),
    // A namespace listing shows only the services the token may read (the handler filters).
    route(
        Method::GET,
        "/v1/registry/{tenant}/{namespace}",
        Need::Namespace(Verb::Read),
        |shared| shared.native(get(reads::services)),
        openapi::operation::<openapi::__path_services>,
    ),
    route(
        Method::GET,
        "/v1/watch/{tenant}/{namespace}/{service}",
        Need::Service(Verb::Watch),
        |shared| shared.native(get(watch::watch_service)),
        openapi::operation::<openapi::__path_watch_service>,
    ),
    route(
        Method::GET,
        "/v1/watch/{tenant}/{namespace}",
        Need::Namespace(Verb::Watch),
        |shared| shared.native(get(watch::watch_namespace)),
        openapi::operation::<openapi::__path_watch_namespace>,
    ),
    route(
        Method::POST,
        "/v1/leases/{tenant}",
        Need::AnyService(Verb::Register),
        |shared| shared.native(post(lease_routes::grant)),
        openapi::operation::<openapi::__path_grant_lease>,
    ),
    route(
        Method::DELETE,
        "/v1/leases/{tenant}/{id}",
        Need::AnyService(Verb::Deregister),
        |shared| shared.native(delete(lease_routes::revoke)),
        openapi::operation::<openapi::__path_revoke_lease>,
    ),
    route(
        Method::PUT,
        "/v1/leases/{tenant}/{id}/renew",
        Need::AnyService(Verb::Renew),
        |shared| shared.native(put(lease_routes::renew)),
        openapi::operation::<openapi::__path_renew_lease>,
    ),
    route(
        Method::GET,
        "/v1/status",
        Need::Open,
        |shared| shared.native(get(status::status)),
        openapi::operation::<openapi::__path_status>,
    ),
    route(
        Method::GET,
        "/v1/policy",
        Need::Cluster(Verb::Read),
        |shared| shared.native(get(policy::get)),
        openapi::operation::<openapi::__path_get_policy>,
    ),
    route(
        Method::PUT,
        "/v1/policy",
        Need::Cluster(Verb::Admin),
        |shared| shared.native(put(policy::put)),
        openapi::operation::<openapi::__path_put_policy>,
    ),
    // `/v1/metrics` shows only the rows the token may read (SPEC S3).
    route(
        Method::GET,
        "/v1/metrics",
        Need::Authenticated,
        |_| get(metrics::metrics),
        openapi::operation::<openapi::__path_metrics>,
    ),
    // The path Prometheus scrapes by default (`metrics_path`), the same handler.
    route(
        Method::GET,
        "/metrics",
        Need::Authenticated,
        |_| get(metrics::metrics),
        openapi::operation::<openapi::__path_metrics_root>,
    ),
    // Lists only the services the token may read (the handler filters).
    route(
        Method::GET,
        prometheus_sd::PATH,
        Need::Authenticated,
        |shared| shared.native(get(prometheus_sd::targets)),
        openapi::operation::<openapi::__path_prometheus_sd>,
    ),
    route(
        Method::GET,
        "/v1/audit",
        Need::Authenticated,
        |shared| shared.native(get(audit::list)),
        openapi::operation::<openapi::__path_audit>,
    ),
    route(
        Method::GET,
        "/v1/cluster",
        Need::Cluster(Verb::Read),
        |_| get(membership::status),
        openapi::operation::<openapi::__path_cluster>,
    ),
    route(
        Method::GET,
        "/v1/federation/status",
        Need::Cluster(Verb::Read),
        |shared| get(muster_federation::status).with_state(Arc::clone(&shared.federation)),
        openapi::operation::<openapi::__path_federation_status>,
    ),
    route(
        Method::POST,
        "/v1/cluster/members",
        Need::Cluster(Verb::Admin),
        |_| post(membership::add),
        openapi::operation::<openapi::__path_add_member>,
    ),
    route(
        Method::DELETE,
        "/v1/cluster/members/{id}",
        Need::Cluster(Verb::Admin),
        |_| delete(membership::remove),
        openapi::operation::<openapi::__path_remove_member>,
    ),
    route(
        Method::GET,
        openapi::PATH,
        Need::Open,
        |_| get(async || openapi::document(operations(), need)),
        openapi::operation::<openapi::__path_openapi_document>,
    ),
    route(
        Method::POST,
        "/v1/acl/bootstrap",
        Need::Open,
        |shared| shared.native(post(acl::bootstrap)),
        openapi::operation::<openapi::__path_acl_bootstrap>,
    ),
    // Token management, the audit trail: the handler judges the rest.
    route(
        Method::GET,
        "/v1/acl/tokens",
        Need::Authenticated,
        |shared| shared.native(get(acl::list)),
        openapi::operation::<openapi::__path_acl_list>,
    ),
    route(
        Method::POST,
        "/v1/acl/tokens",
        Need::Authenticated,
        |shared| shared.native(post(acl::create)),
        openapi::operation::<openapi::__path_acl_create>,
    ),
    route(
        Method::DELETE,
        "/v1/acl/tokens/{accessor}",
        Need::Authenticated,
        |shared| shared.native(delete(acl::revoke)),
        openapi::operation::<openapi::__path_acl_revoke>,
    ),
    route(
        Method::GET,
        "/v1/acl/self",
        Need::Authenticated,
        |shared| shared.native(get(acl::whoami)),
        openapi::operation::<openapi::__path_acl_self>,
    ),
    // Convergence telemetry (SPEC O3).
    route(
        Method::POST,
        "/v1/convergence/report",
        Need::Authenticated,
        |shared| shared.native(post(convergence::report)),
        openapi::operation::<openapi::__path_convergence_report>,
    ),
    route(
        Method::GET,
        "/v1/convergence/{tenant}/{namespace}/{service}",
        Need::Service(Verb::Read),
        |shared| shared.native(get(convergence::summary)),
        openapi::operation::<openapi::__path_convergence_summary>,
    ),
    // The xDS control plane's clients and their acknowledged revisions (SPEC D5): only the
    // streams whose every name the token may read.
    route(
        Method::GET,
        "/v1/xds/clients",
        Need::Authenticated,
        |_| get(crate::xds::clients),
        openapi::operation::<openapi::__path_xds_clients>,
    ),
    // The web dashboard (SPEC U2): its views besides the API's. The overview lists only what
    // the token may read (the handler filters).
    route(
        Method::GET,
        "/v1/overview",
        Need::Authenticated,
        |shared| get(overview::overview).with_state(Arc::clone(&shared.gate)),
        openapi::operation::<openapi::__path_overview>,
    ),
    route(
        Method::GET,
        "/v1/deadlines/{tenant}/{namespace}/{service}",
        Need::Service(Verb::Read),
        |shared| get(lease_deadlines::deadlines).with_state(Arc::clone(&shared.gate)),
        openapi::operation::<openapi::__path_deadlines>,
    ),
    // The dashboard's files hold no data: its views read the API with the user's token.
    route(
        Method::GET,
        "/ui",
        Need::Open,
        |_| get(ui::redirect),
        openapi::operation::<openapi::__path_ui_redirect>,
    ),
    route(
        Method::GET,
        "/ui/",
        Need::Open,
        |shared| get(ui::index_page).with_state(Arc::clone(&shared.page)),
        openapi::operation::<openapi::__path_ui_index>,
    ),
    route(
        Method::GET,
        "/ui/{asset}",
        Need::Open,
        |shared| get(ui::asset).with_state(Arc::clone(&shared.page)),
        openapi::operation::<openapi::__path_ui_asset>,
    ),
    // A lab run reads no registry state, but costs CPU, so it needs a token.
    route(
        Method::GET,
        "/v1/lab/run",
        Need::Authenticated,
        |shared| get(lab_run::run).with_state(Arc::clone(&shared.lab)),
        openapi::operation::<openapi::__path_lab_run>,
    ),
];

/// Every route's part of the API document.
pub(crate) fn operations() -> impl Iterator<Item = openapi::Operation> {
    ROUTES.iter().map(|route| route.operation)
}

/// The need of `method` on the route template `path` (`HEAD` needs what `GET` needs);
/// `None`: no such route.
pub(crate) fn need(method: &Method, path: &str) -> Option<Need> {
    let method = if method == Method::HEAD { &Method::GET } else { method };
    ROUTES
        .iter()
        .find(|route| route.method == method && route.path == path)
        .map(|route| route.need)
}

/// The API's router: [`ROUTES`], each behind the auth layer with its own need, then the
/// fallbacks and the layers every request passes. A route added any other way (a `merge`,
/// a `nest`) would pass neither the auth layer nor [`auth::refused_when_failed`]: add it to the
/// table.
pub(crate) fn router(app: Arc<App>, max_body_bytes: usize, guard: RequestGuard, lab: Arc<LabState>) -> Router {
    let shared = Shared {
        gate: Arc::clone(&app.gate),
        native: Arc::clone(&app.native),
        federation: Arc::new(muster_federation::FederationRoutes {
            gate: Arc::clone(&app.gate),
            federation: app.federation.clone(),
        }),
        page: ui::Page::new(app.gate.auth.enabled),
        lab,
    };
    let mut router = Router::new();
    for route in ROUTES {
        // The auth layer runs before the handler and before any body is read (SPEC S1, S2).
        let gate = auth::RouteGate {
            app: Arc::clone(&app),
            need: route.need,
        };
        let handler =
            (route.handler)(&shared).route_layer(axum::middleware::from_fn_with_state(gate, auth::authenticate));
        router = router.route(route.path, handler);
    }
    router
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(DefaultBodyLimit::max(max_body_bytes))
        // The browser guard (SPEC S6): Origin, Host, JSON-only bodies, the body deadline.
        .layer(axum::middleware::from_fn_with_state(Arc::new(guard), guard::guard))
        .layer(axum::middleware::map_response(json_errors))
        .with_state(app)
}

async fn no_route(State(app): State<Arc<App>>, uri: axum::http::Uri) -> ApiError {
    auth::refused_when_failed(&app, uri.path())
        .unwrap_or_else(|| ApiError::not_found("no such route; the API is under /v1 (see muster_core::api)"))
}

async fn wrong_method(State(app): State<Arc<App>>, request: axum::extract::Request) -> ApiError {
    auth::refused_when_failed(&app, request.uri().path()).unwrap_or_else(|| {
        ApiError::new(
            muster_core::ErrorCode::MethodNotAllowed,
            format!("{} is not allowed on {}", request.method(), request.uri().path()),
        )
    })
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
