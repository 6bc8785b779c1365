//! The API contract as an OpenAPI 3.1 document (SPEC S5), served at `GET /v1/openapi.json`.
//!
//! ```text
//!  muster_core wire types ──derive / schema.rs──▶ components.schemas
//!  the route table (routes::ROUTES): each route's operation below ──utoipa::path──▶ paths
//!                         └──with_errors──▶ every operation's error replies (ErrorBody)
//! ```
//!
//! Bodies and replies are the `muster_core::api` types themselves, so a field added there is
//! in the document at once. Each operation here names its method, path, parameters, body and
//! success reply, plus the error statuses particular to it; [`with_errors`] adds the ones every
//! route can answer (a bad path or query, authentication, timeouts, the node unable to serve)
//! and, for routes with a body, the body's. Every error reply is an [`ErrorBody`] whose
//! description lists the codes of [`ErrorCode`] with that status.
//!
//! # Correctness
//! The document is assembled from the route table: a route names its operation where it
//! names its handler and its need, so a route cannot be served undocumented, and only routed
//! operations are in the document. `each_route_documents_its_own_method_and_path` checks that
//! each route's operation is its own; the integration test
//! `openapi::every_route_is_documented_and_every_documented_route_is_routed` still compares
//! the router's routes with the document both ways, then asks a live server for every
//! documented operation and requires that none hits the router's `no such route` or
//! wrong-method fallback.

use std::sync::{Arc, OnceLock};

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use muster_core::api::{
    AddMemberRequest, CheckReportReply, CheckReportRequest, ClusterReply, DeregisterQuery, DrainRequest, ErrorBody,
    Frame, GrantLeaseRequest, InFlightRequest, LeaseReply, PolicySetReply, RegisterRequest, ServicesReply,
    SetServingRequest, SnapshotReply, StatusReply, TokenCreateRequest, TokenInfo, TokenListReply, TokenRevokeReply,
    TokenSecretReply, WriteReply,
};
use muster_core::{ErrorCode, InstanceId, Label, LeaseId};
use serde_json::{Map, Value, json};
use utoipa::{IntoParams, OpenApi};

use muster_api::lease_routes::RevokeQuery;
use muster_api::reads::{ServicesQuery, SnapshotQuery};
use muster_api::watch::WatchQuery;

use crate::auth::Need;

/// Where the document is served.
pub(crate) const PATH: &str = "/v1/openapi.json";

/// What each route needs (the route table's `need`): the document marks the operations that
/// need a token.
pub(crate) type Needs = fn(&axum::http::Method, &str) -> Option<Need>;

/// `GET /v1/openapi.json`'s reply, built once from the route table's `operations` and
/// `needs`.
pub(crate) fn document(operations: impl IntoIterator<Item = Operation>, needs: Needs) -> Response {
    static BYTES: OnceLock<Arc<[u8]>> = OnceLock::new();
    let bytes = BYTES.get_or_init(|| {
        serde_json::to_vec(&build(operations, needs))
            .expect("the document always serialises")
            .into()
    });
    let mut response = axum::body::Body::from(bytes::Bytes::from_owner(Arc::clone(bytes))).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// One route's part of the document (the route table's `operation`): its operation under its
/// path and method, and the schemas it names.
pub(crate) type Operation = fn(&mut utoipa::openapi::OpenApi);

/// The [`Operation`] of the route `P` documents (the `__path_<fn>` struct `#[utoipa::path]`
/// makes for a documented fn below). Its schemas are collected as `#[derive(OpenApi)]`'s
/// `paths(...)` collects them.
pub(crate) fn operation<P>(document: &mut utoipa::openapi::OpenApi)
where
    P: utoipa::Path + utoipa::__dev::SchemaReferences + for<'t> utoipa::__dev::Tags<'t>,
{
    let mut operation = P::operation();
    operation
        .tags
        .get_or_insert_with(Vec::new)
        .extend(P::tags().into_iter().map(str::to_owned));
    document.paths.add_path_operation(P::path(), P::methods(), operation);
    let mut schemas = Vec::new();
    P::schemas(&mut schemas);
    document
        .components
        .get_or_insert_with(utoipa::openapi::Components::new)
        .schemas
        .extend(schemas);
}

/// The whole document: every route's `operations`, and what each `needs`.
pub(crate) fn build(operations: impl IntoIterator<Item = Operation>, needs: Needs) -> Value {
    let mut api = ApiDoc::openapi();
    for operation in operations {
        operation(&mut api);
    }
    let mut document = serde_json::to_value(api).expect("the document always serialises");
    with_errors(&mut document);
    unsigned_bounds(&mut document);
    with_security(&mut document, needs);
    document
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Muster",
        description = "Muster's HTTP/JSON API: service registry, leases, watches, cluster. \
                       Requests refuse unknown fields; replies may grow fields.",
        version = "1"
    ),
    // The schemas the operations' parameters name (utoipa collects only bodies' schemas).
    components(schemas(
        ErrorBody,
        Frame,
        ErrorCode,
        Label,
        InstanceId,
        LeaseId,
        muster_core::Revision,
        muster_core::Actor,
        muster_gate::consistency::Consistency
    )),
    tags(
        (name = "registry", description = "Endpoint records (SPEC M, L)."),
        (name = "watch", description = "Streams of changes (SPEC W)."),
        (name = "leases", description = "Leases (SPEC L3, R4)."),
        (name = "node", description = "This node and its cluster."),
        (name = "acl", description = "Tokens and their rules (SPEC S1, S2)."),
        (name = "convergence", description = "Which revision every subscriber applied (SPEC O3)."),
        (name = "dashboard", description = "The web dashboard at /ui/ and the views it reads (SPEC U2)."),
    )
)]
struct ApiDoc;

/// The path parameters of a namespace.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code, reason = "read by the OpenAPI derive only")]
struct NamespacePath {
    /// The tenant.
    tenant: Label,
    /// The namespace within the tenant.
    namespace: Label,
}

/// The path parameters of a service.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code, reason = "read by the OpenAPI derive only")]
struct ServicePath {
    /// The tenant.
    tenant: Label,
    /// The namespace within the tenant.
    namespace: Label,
    /// The service.
    service: Label,
}

/// The path parameters of an instance.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code, reason = "read by the OpenAPI derive only")]
struct InstancePath {
    /// The tenant.
    tenant: Label,
    /// The namespace within the tenant.
    namespace: Label,
    /// The service.
    service: Label,
    /// The instance.
    instance: InstanceId,
}

/// The path parameters of a tenant.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code, reason = "read by the OpenAPI derive only")]
struct TenantPath {
    /// The tenant.
    tenant: Label,
}

/// The path parameters of a lease.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code, reason = "read by the OpenAPI derive only")]
struct LeasePath {
    /// The tenant.
    tenant: Label,
    /// The lease.
    id: LeaseId,
}

/// The path parameter of a cluster member.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code, reason = "read by the OpenAPI derive only")]
struct MemberPath {
    /// The member's node id.
    id: u64,
}

/// The authority a caller speaks with (SPEC L5); see `extract::ACTOR_HEADER`.
#[derive(IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code, reason = "read by the OpenAPI derive only")]
struct ActorHeader {
    /// `owner` (may lift a drain), `app` or `checker`.
    #[param(rename = "X-Muster-Actor", value_type = Option<muster_core::Actor>)]
    actor: Option<String>,
}

/// The bootstrap secret (`[auth] bootstrap_secret_file` on the server, SPEC S1).
#[derive(IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code, reason = "read by the OpenAPI derive only")]
struct BootstrapHeader {
    /// Required when the server has a bootstrap secret; without one, a bootstrap is
    /// accepted only from a loopback address.
    #[param(rename = "X-Muster-Bootstrap-Secret")]
    secret: Option<String>,
}

// The operations: one stub per route, named by the route table (`routes::ROUTES`) and never called.

/// Every namespace the caller may read, with its services: endpoints per serving state,
/// revision, watchers, protection. With `stream=true`, NDJSON: a line at once, then one
/// whenever the overview changed.
#[utoipa::path(get, path = "/v1/overview", tag = "dashboard",
    params(muster_dashboard::overview::OverviewQuery),
    responses((status = 200, description = "The overview (with `stream=true`, one per line as `application/x-ndjson`).",
        body = muster_dashboard::overview::OverviewReply)))]
#[allow(
    dead_code,
    reason = "documents a route: only its `#[utoipa::path]` struct is read, by the route table"
)]
fn overview() {}

/// When each of a service's leased endpoints expires unless renewed (known on the leader).
/// With `stream=true`, NDJSON: a line at once, then one whenever a deadline moved.
#[utoipa::path(get, path = "/v1/deadlines/{tenant}/{namespace}/{service}", tag = "dashboard",
    params(ServicePath, muster_dashboard::lease_deadlines::DeadlinesQuery),
    responses((status = 200, description = "The deadlines.", body = muster_dashboard::lease_deadlines::DeadlinesReply)))]
#[allow(
    dead_code,
    reason = "documents a route: only its `#[utoipa::path]` struct is read, by the route table"
)]
fn deadlines() {}

/// Run a `muster lab` simulation (SPEC X1) and return its report and SVG plots; one run at a
/// time per server. A `GET` because it changes no registry state.
#[utoipa::path(get, path = "/v1/lab/run", tag = "dashboard",
    params(crate::lab_run::LabQuery),
    responses((status = 200, description = "The run.", body = crate::lab_run::LabRun),
              (status = 429, description = "`lab_busy`: a run is under way.", body = ErrorBody),
              (status = 503, description = "`lab_unavailable`: no lab runner in this server.", body = ErrorBody)))]
#[allow(
    dead_code,
    reason = "documents a route: only its `#[utoipa::path]` struct is read, by the route table"
)]
fn lab_run() {}

/// The dashboard, at `/ui/`.
#[utoipa::path(get, path = "/ui", tag = "dashboard",
    responses((status = 308, description = "To `/ui/`.")))]
#[allow(
    dead_code,
    reason = "documents a route: only its `#[utoipa::path]` struct is read, by the route table"
)]
fn ui_redirect() {}

/// The dashboard's page.
#[utoipa::path(get, path = "/ui/", tag = "dashboard",
    responses((status = 200, description = "The page.", content_type = "text/html", body = String)))]
#[allow(
    dead_code,
    reason = "documents a route: only its `#[utoipa::path]` struct is read, by the route table"
)]
fn ui_index() {}

/// One of the dashboard's files (`app.js`, `style.css`, `index.html`).
#[utoipa::path(get, path = "/ui/{asset}", tag = "dashboard",
    params(("asset" = String, Path, description = "The file's name.")),
    responses((status = 200, description = "The file.", content_type = "text/javascript", body = String),
              (status = 404, body = ErrorBody)))]
#[allow(
    dead_code,
    reason = "documents a route: only its `#[utoipa::path]` struct is read, by the route table"
)]
fn ui_asset() {}

/// Register or re-register an instance incarnation.
#[utoipa::path(put, path = "/v1/registry/{tenant}/{namespace}/{service}/{instance}", tag = "registry",
    params(InstancePath, ActorHeader), request_body = RegisterRequest,
    responses((status = 200, description = "Committed.", body = WriteReply),
              (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
#[allow(
    dead_code,
    reason = "documents a route: only its `#[utoipa::path]` struct is read, by the route table"
)]
fn register() {}

/// Deregister an instance, fenced by its incarnation.
#[utoipa::path(delete, path = "/v1/registry/{tenant}/{namespace}/{service}/{instance}", tag = "registry",
    params(InstancePath, DeregisterQuery, ActorHeader),
    responses((status = 200, description = "Committed.", body = WriteReply),
              (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
#[allow(
    dead_code,
    reason = "documents a route: only its `#[utoipa::path]` struct is read, by the route table"
)]
fn deregister() {}

/// Set an instance's serving state.
#[utoipa::path(put, path = "/v1/registry/{tenant}/{namespace}/{service}/{instance}/serving", tag = "registry",
    params(InstancePath, ActorHeader), request_body = SetServingRequest,
    responses((status = 200, description = "Committed.", body = WriteReply),
              (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
#[allow(
    dead_code,
    reason = "documents a route: only its `#[utoipa::path]` struct is read, by the route table"
)]
fn set_serving() {}

/// Drain an instance (SPEC L6), optionally deregistering it after a grace period.
#[utoipa::path(post, path = "/v1/registry/{tenant}/{namespace}/{service}/{instance}/drain", tag = "registry",
    params(InstancePath, ActorHeader), request_body = DrainRequest,
    responses((status = 200, description = "Committed.", body = WriteReply),
              (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
#[allow(
    dead_code,
    reason = "documents a route: only its `#[utoipa::path]` struct is read, by the route table"
)]
fn drain() {}

/// Report a TTL check's result.
#[utoipa::path(put, path = "/v1/registry/{tenant}/{namespace}/{service}/{instance}/check", tag = "registry",
    params(InstancePath), request_body = CheckReportRequest,
    responses((status = 200, description = "Recorded; any change it caused has committed.", body = CheckReportReply),
              (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
#[allow(
    dead_code,
    reason = "documents a route: only its `#[utoipa::path]` struct is read, by the route table"
)]
fn check_report() {}

/// Report how many requests a draining instance still serves.
#[utoipa::path(put, path = "/v1/registry/{tenant}/{namespace}/{service}/{instance}/in-flight", tag = "registry",
    params(InstancePath), request_body = InFlightRequest,
    responses((status = 200, description = "Recorded.", body = WriteReply),
              (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
#[allow(
    dead_code,
    reason = "documents a route: only its `#[utoipa::path]` struct is read, by the route table"
)]
fn in_flight() {}

/// One page of a service's endpoint set at one revision; with `index`, a blocking query.
#[utoipa::path(get, path = "/v1/registry/{tenant}/{namespace}/{service}", tag = "registry",
    params(ServicePath, SnapshotQuery),
    responses((status = 200, description = "The page. `X-Muster-Index` carries the revision read at.", body = SnapshotReply),
              (status = 404, description = "With `revision`: the service did not exist then.", body = ErrorBody),
              (status = 410, body = ErrorBody)))]
#[allow(
    dead_code,
    reason = "documents a route: only its `#[utoipa::path]` struct is read, by the route table"
)]
fn snapshot() {}

/// The services of a namespace.
#[utoipa::path(get, path = "/v1/registry/{tenant}/{namespace}", tag = "registry",
    params(NamespacePath, ServicesQuery),
    responses((status = 200, description = "The listing.", body = ServicesReply)))]
#[allow(
    dead_code,
    reason = "documents a route: only its `#[utoipa::path]` struct is read, by the route table"
)]
fn services() {}

/// Watch one service: newline-delimited JSON frames until the server or the consumer stops.
#[utoipa::path(get, path = "/v1/watch/{tenant}/{namespace}/{service}", tag = "watch",
    params(ServicePath, WatchQuery),
    responses((status = 200, description = "A stream of frames, one JSON object a line.", content_type = "application/x-ndjson", body = Frame),
              (status = 429, body = ErrorBody)))]
#[allow(
    dead_code,
    reason = "documents a route: only its `#[utoipa::path]` struct is read, by the route table"
)]
fn watch_service() {}

/// Watch every service of a namespace.
#[utoipa::path(get, path = "/v1/watch/{tenant}/{namespace}", tag = "watch",
    params(NamespacePath, WatchQuery),
    responses((status = 200, description = "A stream of frames, one JSON object a line.", content_type = "application/x-ndjson", body = Frame),
              (status = 429, body = ErrorBody)))]
#[allow(
    dead_code,
    reason = "documents a route: only its `#[utoipa::path]` struct is read, by the route table"
)]
fn watch_namespace() {}

/// Grant a lease.
#[utoipa::path(post, path = "/v1/leases/{tenant}", tag = "leases",
    params(TenantPath, ActorHeader), request_body = GrantLeaseRequest,
    responses((status = 200, description = "Committed, with the lease.", body = WriteReply)))]
#[allow(
    dead_code,
    reason = "documents a route: only its `#[utoipa::path]` struct is read, by the route table"
)]
fn grant_lease() {}

/// Revoke a lease and every record attached to it.
#[utoipa::path(delete, path = "/v1/leases/{tenant}/{id}", tag = "leases",
    params(LeasePath, RevokeQuery, ActorHeader),
    responses((status = 200, description = "Committed.", body = WriteReply),
              (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
#[allow(
    dead_code,
    reason = "documents a route: only its `#[utoipa::path]` struct is read, by the route table"
)]
fn revoke_lease() {}

/// Renew a lease (no log write).
#[utoipa::path(put, path = "/v1/leases/{tenant}/{id}/renew", tag = "leases",
    params(LeasePath),
    responses((status = 200, description = "Renewed.", body = LeaseReply), (status = 404, body = ErrorBody)))]
#[allow(
    dead_code,
    reason = "documents a route: only its `#[utoipa::path]` struct is read, by the route table"
)]
fn renew_lease() {}

/// This node's status.
#[utoipa::path(get, path = "/v1/status", tag = "node",
    responses((status = 200, description = "The status.", body = StatusReply)))]
#[allow(
    dead_code,
    reason = "documents a route: only its `#[utoipa::path]` struct is read, by the route table"
)]
fn status() {}

/// The registry policy in force.
#[utoipa::path(get, path = "/v1/policy", tag = "node",
    responses((status = 200, description = "The policy and the revision it was committed at.", body = PolicyReplyDoc)))]
#[allow(
    dead_code,
    reason = "documents a route: only its `#[utoipa::path]` struct is read, by the route table"
)]
fn get_policy() {}

/// Replace the registry policy (the config file's `[registry]` section, as JSON).
#[utoipa::path(put, path = "/v1/policy", tag = "node",
    params(ActorHeader), request_body(content = Object, description = "The whole policy; omitted settings take their defaults, unknown ones are refused."),
    responses((status = 200, description = "Committed.", body = PolicySetReply)))]
#[allow(
    dead_code,
    reason = "documents a route: only its `#[utoipa::path]` struct is read, by the route table"
)]
fn put_policy() {}

/// Prometheus metrics.
#[utoipa::path(get, path = "/v1/metrics", tag = "node",
    responses((status = 200, description = "Prometheus text exposition.", content_type = "text/plain", body = String)))]
#[allow(
    dead_code,
    reason = "documents a route: only its `#[utoipa::path]` struct is read, by the route table"
)]
fn metrics() {}

/// Prometheus metrics at the path Prometheus scrapes by default (the same as `/v1/metrics`).
#[utoipa::path(get, path = "/metrics", tag = "node",
    responses((status = 200, description = "Prometheus text exposition.", content_type = "text/plain", body = String)))]
#[allow(
    dead_code,
    reason = "documents a route: only its `#[utoipa::path]` struct is read, by the route table"
)]
fn metrics_root() {}

/// Prometheus HTTP service discovery (`http_sd_configs`): the target groups of the services the
/// caller may read; by default only `ready` endpoints, one group per named port.
#[utoipa::path(get, path = "/v1/prometheus/sd", tag = "node",
    params(muster_api::prometheus_sd::SdQuery),
    responses((status = 200, description = "Every matching target group, in a stable order.",
        body = Vec<muster_api::prometheus_sd::TargetGroup>)))]
#[allow(
    dead_code,
    reason = "documents a route: only its `#[utoipa::path]` struct is read, by the route table"
)]
fn prometheus_sd() {}

/// The xDS control plane's open streams (SPEC D5): per client and resource, the revision sent
/// and acknowledged, and the last refusal. Empty when xDS is off.
#[utoipa::path(get, path = "/v1/xds/clients", tag = "node",
    responses((status = 200, description = "The streams of the tenants the caller sees.",
        body = muster_core::xds_view::ClientsPage)))]
#[allow(
    dead_code,
    reason = "documents a route: only its `#[utoipa::path]` struct is read, by the route table"
)]
fn xds_clients() {}

/// A subscriber reports the revision it applied for each service it follows (SPEC O3); the
/// caller must be allowed to watch each one. The reply says how often to report while calm.
#[utoipa::path(post, path = "/v1/convergence/report", tag = "convergence",
    request_body = muster_core::convergence::ConvergenceReport,
    responses((status = 200, description = "Recorded.", body = muster_core::convergence::ReportReply),
        (status = 403, body = ErrorBody), (status = 429, body = ErrorBody)))]
#[allow(
    dead_code,
    reason = "documents a route: only its `#[utoipa::path]` struct is read, by the route table"
)]
fn convergence_report() {}

/// A service's subscribers by applied revision, cohort and delivery path, its stragglers and
/// silent clients, and the commit→applied latency of its last changes (SPEC O3).
#[utoipa::path(get, path = "/v1/convergence/{tenant}/{namespace}/{service}", tag = "convergence",
    params(ServicePath, muster_api::convergence::SummaryQuery),
    responses((status = 200, description = "This node's subscribers of the service.",
        body = muster_core::convergence::ConvergenceReply), (status = 404, body = ErrorBody)))]
#[allow(
    dead_code,
    reason = "documents a route: only its `#[utoipa::path]` struct is read, by the route table"
)]
fn convergence_summary() {}

/// The Raft group as this node knows it; with `stream=true`, NDJSON lines of the reply plus
/// `revision`, `applied_index` and `last_leader_contact_ms`, on change.
#[utoipa::path(get, path = "/v1/cluster", tag = "node",
    params(crate::membership::ClusterQuery),
    responses((status = 200, description = "The members.", body = ClusterReply)))]
#[allow(
    dead_code,
    reason = "documents a route: only its `#[utoipa::path]` struct is read, by the route table"
)]
fn cluster() {}

/// This region's mirrors of its peer regions and its failover decisions (SPEC G2);
/// `not_found` on a node without `[federation] region`.
#[utoipa::path(get, path = "/v1/federation/status", tag = "node",
    responses((status = 200, description = "Peers, imports, lag and decisions.",
        body = muster_core::federation::FederationStatusReply), (status = 404, body = ErrorBody)))]
#[allow(
    dead_code,
    reason = "documents a route: only its `#[utoipa::path]` struct is read, by the route table"
)]
fn federation_status() {}

/// Add a node (leader only).
#[utoipa::path(post, path = "/v1/cluster/members", tag = "node",
    request_body = AddMemberRequest,
    responses((status = 200, description = "Added.", body = ClusterReply), (status = 409, body = ErrorBody)))]
#[allow(
    dead_code,
    reason = "documents a route: only its `#[utoipa::path]` struct is read, by the route table"
)]
fn add_member() {}

/// Remove a node (leader only).
#[utoipa::path(delete, path = "/v1/cluster/members/{id}", tag = "node",
    params(MemberPath),
    responses((status = 200, description = "Removed.", body = ClusterReply), (status = 409, body = ErrorBody)))]
#[allow(
    dead_code,
    reason = "documents a route: only its `#[utoipa::path]` struct is read, by the route table"
)]
fn remove_member() {}

/// This document.
#[utoipa::path(get, path = "/v1/openapi.json", tag = "node",
    responses((status = 200, description = "The OpenAPI document.", body = Object)))]
#[allow(
    dead_code,
    reason = "documents a route: only its `#[utoipa::path]` struct is read, by the route table"
)]
fn openapi_document() {}

/// Make the first operator token; works once per cluster.
#[utoipa::path(post, path = "/v1/acl/bootstrap", tag = "acl", params(BootstrapHeader),
    responses((status = 201, description = "The token; its secret is shown only now.", body = TokenSecretReply),
              (status = 401, body = ErrorBody),
              (status = 409, body = ErrorBody)))]
#[allow(
    dead_code,
    reason = "documents a route: only its `#[utoipa::path]` struct is read, by the route table"
)]
fn acl_bootstrap() {}

/// The tokens the caller may see.
#[utoipa::path(get, path = "/v1/acl/tokens", tag = "acl",
    responses((status = 200, description = "The tokens, by accessor.", body = TokenListReply)))]
#[allow(
    dead_code,
    reason = "documents a route: only its `#[utoipa::path]` struct is read, by the route table"
)]
fn acl_list() {}

/// Make a token.
#[utoipa::path(post, path = "/v1/acl/tokens", tag = "acl", request_body = TokenCreateRequest,
    responses((status = 201, description = "The token; its secret is shown only now.", body = TokenSecretReply)))]
#[allow(
    dead_code,
    reason = "documents a route: only its `#[utoipa::path]` struct is read, by the route table"
)]
fn acl_create() {}

/// Revoke a token: from the revision it commits at, every node refuses it.
#[utoipa::path(delete, path = "/v1/acl/tokens/{accessor}", tag = "acl",
    params(("accessor" = String, Path, description = "The token's accessor.")),
    responses((status = 200, description = "Committed.", body = TokenRevokeReply), (status = 404, body = ErrorBody)))]
#[allow(
    dead_code,
    reason = "documents a route: only its `#[utoipa::path]` struct is read, by the route table"
)]
fn acl_revoke() {}

/// The audit trail (SPEC S4): committed mutations and denials, newest first; an operator
/// sees every tenant, a tenant's `*/*=admin` token only its own.
#[utoipa::path(get, path = "/v1/audit", tag = "audit",
    params(muster_core::api::AuditQuery),
    responses((status = 200, description = "One page of records.", body = muster_core::api::AuditReply)))]
#[allow(
    dead_code,
    reason = "documents a route: only its `#[utoipa::path]` struct is read, by the route table"
)]
fn audit() {}

/// The caller's own token.
#[utoipa::path(get, path = "/v1/acl/self", tag = "acl",
    responses((status = 200, description = "The token the request carried.", body = TokenInfo), (status = 404, body = ErrorBody)))]
#[allow(
    dead_code,
    reason = "documents a route: only its `#[utoipa::path]` struct is read, by the route table"
)]
fn acl_self() {}

/// `GET /v1/policy`'s reply: `muster_core::api::PolicyReply` with the policy as an object
/// (its type lives in muster-registry, which the document does not describe field by field).
#[derive(utoipa::ToSchema)]
#[schema(as = PolicyReply)]
#[allow(dead_code, reason = "read by the OpenAPI derive only")]
struct PolicyReplyDoc {
    /// The revision it was committed at (0: the initial policy).
    revision: muster_core::Revision,
    /// The policy, in the shape of the config file's `[registry]` section.
    #[schema(value_type = Object)]
    policy: (),
}

/// Statuses every route may answer: a bad path or query (400); authentication and
/// authorisation, a refused `Origin` or `Host`, a full quota (401, 403); a slow client (408);
/// the node unable to serve now (500, 503).
const EVERY_ROUTE: &[u16] = &[400, 401, 403, 408, 500, 503];

/// Statuses a route with a body adds: too large (413), not JSON (415), refused fields (422).
const WITH_BODY: &[u16] = &[413, 415, 422];

/// Adds the error replies of [`EVERY_ROUTE`] and [`WITH_BODY`] to every operation, and gives
/// every error reply (these and the ones the operations name) the [`ErrorBody`] schema and a
/// description listing its codes.
fn with_errors(document: &mut Value) {
    let Some(paths) = document.get_mut("paths").and_then(Value::as_object_mut) else {
        return;
    };
    for item in paths.values_mut() {
        let Some(item) = item.as_object_mut() else { continue };
        for operation in item.values_mut() {
            let Some(operation) = operation.as_object_mut() else {
                continue;
            };
            let has_body = operation.contains_key("requestBody");
            let responses = operation
                .entry("responses")
                .or_insert_with(|| Value::Object(Map::new()))
                .as_object_mut()
                .expect("responses is an object");
            let extra = EVERY_ROUTE.iter().chain(if has_body { WITH_BODY } else { &[] });
            for status in extra {
                responses.entry(status.to_string()).or_insert(Value::Null);
            }
            for (status, response) in responses.iter_mut() {
                let Ok(status) = status.parse::<u16>() else { continue };
                if status >= 400 {
                    *response = error_response(status);
                }
            }
        }
    }
}

/// Declares the bearer token (SPEC S1) and, from the auth layer's own table (`needs`: the
/// route table's `need`), which operations need one: all but the open ones. A route that
/// table does not know is refused by the server, and is marked as needing a token here.
fn with_security(document: &mut Value, needs: Needs) {
    document["components"]["securitySchemes"] = json!({
        "bearer": {"type": "http", "scheme": "bearer", "description": "A token's secret: `Authorization: Bearer <secret>`."}
    });
    let Some(paths) = document.get_mut("paths").and_then(Value::as_object_mut) else {
        return;
    };
    for (path, item) in paths.iter_mut() {
        let Some(item) = item.as_object_mut() else { continue };
        for (method, operation) in item.iter_mut() {
            let Ok(method) = method.to_uppercase().parse::<axum::http::Method>() else {
                continue;
            };
            let open = matches!(needs(&method, path), Some(Need::Open));
            if !open {
                operation["security"] = json!([{"bearer": []}]);
            }
        }
    }
}

/// Gives every unsigned integer its real range. With `non_strict_integers` utoipa names each
/// unsigned width (spelt `u-int64`: its format enum is kebab-cased) but states no maximum,
/// so a reader, and a fuzzer, cannot tell the largest value the server accepts; without the
/// feature it says `int64` for a `u64`, which puts 2^63 out of range although the server
/// takes it. Here each gets the usual spelling and its maximum.
fn unsigned_bounds(value: &mut Value) {
    match value {
        Value::Object(map) => {
            let bound = match map.get("format").and_then(Value::as_str) {
                Some("u-int8" | "uint8") => Some(("uint8", u64::from(u8::MAX))),
                Some("u-int16" | "uint16") => Some(("uint16", u64::from(u16::MAX))),
                Some("u-int32" | "uint32") => Some(("uint32", u64::from(u32::MAX))),
                Some("u-int64" | "uint64") => Some(("uint64", u64::MAX)),
                _ => None,
            };
            if let Some((format, max)) = bound {
                map.insert("format".to_owned(), json!(format));
                map.entry("maximum").or_insert(json!(max));
            }
            map.values_mut().for_each(unsigned_bounds);
        }
        Value::Array(items) => items.iter_mut().for_each(unsigned_bounds),
        _ => {}
    }
}

fn error_response(status: u16) -> Value {
    let codes: Vec<&str> = ErrorCode::ALL
        .iter()
        .filter(|code| code.http_status() == status)
        .map(|code| code.as_str())
        .collect();
    let description = if codes.is_empty() {
        "An error.".to_owned()
    } else {
        format!("An error: {}.", codes.join(", "))
    };
    json!({
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each route's operation documents that route: its own method under its own path, and
    /// nothing else (declared once, in the route table).
    #[test]
    fn each_route_documents_its_own_method_and_path() {
        for route in crate::routes::ROUTES {
            let mut api = utoipa::openapi::OpenApi::default();
            (route.operation)(&mut api);
            let paths: Vec<&String> = api.paths.paths.keys().collect();
            assert_eq!(paths, [route.path], "{} {}", route.method, route.path);
            let item = serde_json::to_value(&api.paths.paths[route.path]).unwrap();
            let methods: Vec<String> = item
                .as_object()
                .unwrap()
                .keys()
                .filter(|key| !matches!(key.as_str(), "parameters" | "summary" | "description" | "servers"))
                .cloned()
                .collect();
            assert_eq!(methods, [route.method.as_str().to_lowercase()], "{}", route.path);
        }
    }

    /// The content type a watch stream is sent with (`watch.rs`).
    const NDJSON: &str = "application/x-ndjson";

    #[test]
    fn every_operation_answers_errors_with_the_error_body() {
        let document = build(crate::routes::operations(), crate::routes::need);
        let mut operations = 0;
        for (path, item) in document["paths"].as_object().unwrap() {
            for (method, operation) in item.as_object().unwrap() {
                operations += 1;
                let responses = operation["responses"].as_object().unwrap();
                for status in EVERY_ROUTE {
                    let response = &responses[&status.to_string()];
                    assert_eq!(
                        response["content"]["application/json"]["schema"]["$ref"], "#/components/schemas/ErrorBody",
                        "{method} {path} {status}"
                    );
                }
                // A success is a 2xx, or for the dashboard's `/ui` a redirect to `/ui/`.
                assert!(
                    responses.keys().any(|s| s.starts_with('2') || s.starts_with('3')),
                    "{method} {path} has no success reply"
                );
            }
        }
        assert!(operations >= 21, "{operations} operations");
    }

    #[test]
    fn watches_are_described_as_ndjson_frames() {
        let document = build(crate::routes::operations(), crate::routes::need);
        let reply = &document["paths"]["/v1/watch/{tenant}/{namespace}"]["get"]["responses"]["200"];
        assert_eq!(reply["content"][NDJSON]["schema"]["$ref"], "#/components/schemas/Frame");
    }

    #[test]
    fn every_reference_resolves() {
        fn walk(value: &Value, document: &Value, missing: &mut Vec<String>) {
            match value {
                Value::Object(map) => {
                    if let Some(Value::String(target)) = map.get("$ref") {
                        let pointer = target.trim_start_matches('#');
                        if document.pointer(pointer).is_none() {
                            missing.push(target.clone());
                        }
                    }
                    map.values().for_each(|v| walk(v, document, missing));
                }
                Value::Array(items) => items.iter().for_each(|v| walk(v, document, missing)),
                _ => {}
            }
        }
        let document = build(crate::routes::operations(), crate::routes::need);
        let mut missing = Vec::new();
        walk(&document, &document, &mut missing);
        assert!(missing.is_empty(), "unresolved references: {missing:?}");
    }

    #[test]
    fn unsigned_integers_state_their_real_range() {
        // Found by schemathesis: `in_flight` is a u64, which utoipa spells `int64`, so
        // 2^63 looked out of range although the server rightly accepts it.
        let document = build(crate::routes::operations(), crate::routes::need);
        let schemas = &document["components"]["schemas"];
        let in_flight = &schemas["InFlightRequest"]["properties"]["in_flight"];
        assert_eq!(in_flight["format"], "uint64");
        assert_eq!(in_flight["maximum"], u64::MAX);
        let port = &schemas["PortSpec"]["properties"]["port"];
        assert_eq!(
            (port["minimum"].as_u64(), port["maximum"].as_u64()),
            (Some(1), Some(65535))
        );
        let weight = &schemas["EndpointSpec"]["properties"]["weight"];
        assert_eq!(weight["maximum"], u32::MAX);
        let node_id = &schemas["StatusReply"]["properties"]["node_id"];
        assert_eq!(node_id["maximum"], u64::MAX);
    }

    #[test]
    fn only_the_open_routes_go_without_a_token() {
        let document = build(crate::routes::operations(), crate::routes::need);
        let paths = &document["paths"];
        assert!(paths["/v1/status"]["get"].get("security").is_none());
        assert!(paths["/v1/openapi.json"]["get"].get("security").is_none());
        assert!(paths["/v1/acl/bootstrap"]["post"].get("security").is_none());
        let register = &paths["/v1/registry/{tenant}/{namespace}/{service}/{instance}"]["put"];
        assert_eq!(register["security"], json!([{"bearer": []}]));
        assert_eq!(document["components"]["securitySchemes"]["bearer"]["scheme"], "bearer");
    }

    #[test]
    fn names_carry_the_label_rules() {
        let document = build(crate::routes::operations(), crate::routes::need);
        let label = &document["components"]["schemas"]["Label"];
        assert_eq!(label["pattern"], muster_core::schema::LABEL_PATTERN);
        assert_eq!(label["maxLength"], 63);
        let code = &document["components"]["schemas"]["ErrorCode"]["enum"];
        assert_eq!(code.as_array().unwrap().len(), ErrorCode::ALL.len());
    }
}
