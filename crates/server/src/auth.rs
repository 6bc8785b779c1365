//! Authentication and authorisation of every API request (SPEC S1–S3).
//!
//! ```text
//!  request ─▶ route matched ─▶ the route's need ─┬─ open ───────────────────────▶ handler
//!                                                   └─ else: who? ─┬─ none ─▶ 401 unauthenticated
//!     Authorization: Bearer <secret>  ─┐                           │
//!     client certificate SAN (mTLS)  ──┴─▶ the registry's tokens ──┴─ token ─▶ verdict(tenant, scope, verb)
//!                                                                        ├─ deny ─▶ 403 permission_denied
//!                                                                        └─ allow ─▶ handler (with its Caller)
//! ```
//!
//! Every route is declared once, with its need, in the route table (`routes::ROUTES`): a
//! route cannot be added without saying what it needs, and its auth layer carries that
//! need. Tokens live in the replicated registry, so every node gives the same verdict from
//! the same log position, and a revocation holds on a node from the moment it applies there. Every refusal is recorded
//! in the audit trail with the caller's address (SPEC S4).
//!
//! With `[auth] enabled = false` (the default) every caller is the unrestricted `anonymous`
//! principal, and the server binds loopback only (SPEC S1).

use std::sync::Arc;

use axum::extract::{FromRequestParts, MatchedPath, RawPathParams, State};
use axum::response::{IntoResponse, Response};
use muster_auth::{Request, Scope, Verb};
use muster_core::Label;
use muster_gate::Caller;
use muster_http::error::ApiError;
use muster_http::peer::Peer;

use crate::app::App;

/// What a route needs from its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Need {
    /// Nothing: status, the API document, the one-time bootstrap.
    Open,
    /// Any valid token; the handler judges the rest (token management, audit, metrics).
    Authenticated,
    /// A verb on one service: path segments tenant, namespace, service.
    Service(Verb),
    /// A verb somewhere in a namespace (tenant, namespace); results filtered per service.
    Namespace(Verb),
    /// A verb somewhere in a tenant (leases: tenant).
    AnyService(Verb),
    /// An operator token with this verb (policy, membership).
    Cluster(Verb),
}

/// What the auth layer of one route judges with: the app, and the route's need (from the
/// route table, `routes::ROUTES`).
#[derive(Clone)]
pub(crate) struct RouteGate {
    pub(crate) app: Arc<App>,
    pub(crate) need: Need,
}

/// The auth layer of one route: decides the caller and judges the route's need before the
/// handler runs (and before any body is read).
pub(crate) async fn authenticate(
    State(RouteGate { app, need }): State<RouteGate>,
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if let Some(refused) = refused_when_failed(&app, request.uri().path()) {
        return refused.into_response();
    }
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|path| path.as_str().to_owned())
        .unwrap_or_default();
    let peer = request.extensions().get::<Peer>().cloned();
    let caller = match app
        .gate
        .identify(request.headers(), peer.as_ref(), request.uri().path())
    {
        Ok(caller) => caller,
        Err(error) => return error.into_response(),
    };
    if need != Need::Open {
        if caller.is_nobody() {
            return app
                .gate
                .unauthenticated(
                    peer.as_ref(),
                    &route,
                    "no credentials: send Authorization: Bearer <secret>",
                )
                .into_response();
        }
        let (mut parts, body) = request.into_parts();
        let params = match RawPathParams::from_request_parts(&mut parts, &()).await {
            Ok(params) => params.iter().map(|(_, value)| value.to_owned()).collect::<Vec<_>>(),
            Err(rejection) => return ApiError::bad_request(format!("path: {}", rejection.body_text())).into_response(),
        };
        request = axum::extract::Request::from_parts(parts, body);
        if let Err(error) = judge(&app, &caller, peer.as_ref(), need, &params) {
            return error.into_response();
        }
        if muster_gate::is_write(request.method()) {
            let tenant = route
                .contains("{tenant}")
                .then(|| params.first())
                .flatten()
                .and_then(|tenant| Label::new("tenant", tenant).ok());
            let method = request.method().clone();
            if let Err(limited) =
                app.gate
                    .throttle(&caller, tenant.as_ref(), peer.as_ref().map(|peer| peer.addr), || {
                        format!("{method} {route}")
                    })
            {
                return limited.into_response();
            }
        }
    }
    request.extensions_mut().insert(caller);
    next.run(request).await
}

/// A node whose storage failed answers only its status and metrics: its registry is frozen
/// at the failure, so a read would pass stale state off as current, and nothing can be
/// acknowledged any more (SPEC R2). Everything else gets `storage_failed` (503: ask another
/// node) until the server has stopped. Asked first by every route's auth layer and by the
/// fallbacks (`routes`), not by a layer of its own: each layer costs every request (SPEC K2).
pub(crate) fn refused_when_failed(app: &App, path: &str) -> Option<ApiError> {
    if path == "/v1/status" || path == "/v1/metrics" || path == "/metrics" {
        return None;
    }
    let fatal = app.gate.fatal()?;
    Some(ApiError::from(muster_consensus::ConsensusError::Failed(fatal)))
}

/// The verdict for a route's need, from its path parameters (tenant, namespace, service).
fn judge(app: &App, caller: &Caller, peer: Option<&Peer>, need: Need, params: &[String]) -> Result<(), ApiError> {
    let segment = |i: usize| params.get(i).map_or("", String::as_str);
    let (scope, verb) = match need {
        Need::Open | Need::Authenticated => return Ok(()),
        Need::Service(verb) => (
            Scope::Service {
                namespace: segment(1),
                service: segment(2),
            },
            verb,
        ),
        Need::Namespace(verb) => (Scope::Namespace(segment(1)), verb),
        Need::AnyService(verb) => (Scope::AnyService, verb),
        Need::Cluster(verb) => (Scope::Whole, verb),
    };
    let tenant = match need {
        Need::Cluster(_) => None,
        // A malformed tenant is a 400, as the handler would answer.
        _ => Some(Label::new("tenant", segment(0)).map_err(|r| ApiError::path(&r))?),
    };
    app.gate.require(
        caller,
        peer,
        &Request {
            tenant: tenant.as_ref(),
            scope,
            verb,
        },
    )
}
