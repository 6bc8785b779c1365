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

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{FromRequestParts, MatchedPath, RawPathParams, State};
use axum::http::header;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use muster_auth::{Denial, Request, Scope, Token, Verb};
use muster_core::{ErrorCode, Label, Principal, ServiceKey};
use serde::{Deserialize, Serialize};

use crate::app::App;
use crate::audit::Denial as AuditDenial;
use muster_http::error::ApiError;
use muster_http::peer::Peer;

/// The `[auth]` section of the server's configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// Every route but `/v1/status`, `/v1/openapi.json` and `/v1/acl/bootstrap` needs a token
    /// (or a client certificate bound to one); non-loopback binds are allowed.
    pub enabled: bool,
}

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

/// Whose authority a request carries.
#[derive(Debug, Clone)]
enum Authority {
    /// Authentication is off: everything is allowed.
    Unrestricted,
    /// Authentication is on and the request carried no credentials (an open route).
    Nobody,
    /// A token, by its secret or a certificate bound to it.
    Token(Arc<Token>),
}

/// The caller of a request, as the handlers see it: its principal (recorded with what it
/// writes) and what it may do.
#[derive(Debug, Clone)]
pub(crate) struct Caller {
    principal: Principal,
    authority: Authority,
}

impl Caller {
    /// The caller when authentication is off.
    pub(crate) fn unrestricted(principal: Principal) -> Caller {
        Caller {
            principal,
            authority: Authority::Unrestricted,
        }
    }

    /// The caller of a request without credentials while authentication is on: every check
    /// is denied.
    pub(crate) fn nobody(principal: Principal) -> Caller {
        Caller {
            principal,
            authority: Authority::Nobody,
        }
    }

    /// Whether this is [`Caller::nobody`]: authentication is on and the request carried no
    /// credentials.
    pub(crate) fn is_nobody(&self) -> bool {
        matches!(self.authority, Authority::Nobody)
    }

    /// The caller holding `token`.
    pub(crate) fn token(token: Arc<Token>) -> Caller {
        Caller {
            principal: token.principal(),
            authority: Authority::Token(token),
        }
    }

    /// The principal its writes are recorded under.
    pub(crate) fn principal(&self) -> &Principal {
        &self.principal
    }

    /// Its token, when it has one.
    pub(crate) fn token_ref(&self) -> Option<&Arc<Token>> {
        match &self.authority {
            Authority::Token(token) => Some(token),
            _ => None,
        }
    }

    /// The verdict for `request`.
    pub(crate) fn check(&self, request: &Request<'_>) -> Result<(), Denial> {
        match &self.authority {
            Authority::Unrestricted => Ok(()),
            Authority::Nobody => Err(Denial::NoRule),
            Authority::Token(token) => token.authorize(request),
        }
    }

    /// Whether it may use `verb` on `key`: what filters lists and namespace watches.
    pub(crate) fn may(&self, key: &ServiceKey, verb: Verb) -> bool {
        self.check(&Request {
            tenant: Some(&key.tenant),
            scope: Scope::Service {
                namespace: key.namespace.as_str(),
                service: key.service.as_str(),
            },
            verb,
        })
        .is_ok()
    }

    /// Whether it may read all of `tenant`, what a tenant-wide figure (a metrics row by
    /// tenant, an xDS stream that names no service yet) needs (SPEC S3): an operator or
    /// unrestricted caller may; a tenant's token when a `*/*` rule allows read and no deny
    /// rule takes read back from any of the tenant's services.
    pub(crate) fn reads_tenant(&self, tenant: &Label) -> bool {
        match &self.authority {
            Authority::Unrestricted => true,
            Authority::Nobody => false,
            Authority::Token(token) if token.tenant().is_none() => true,
            Authority::Token(token) => {
                let whole = Request {
                    tenant: Some(tenant),
                    scope: Scope::Whole,
                    verb: Verb::Read,
                };
                token.authorize(&whole).is_ok()
                    && !token
                        .spec
                        .rules
                        .iter()
                        .any(|rule| rule.effect == muster_auth::Effect::Deny && rule.verbs.contains(Verb::Read))
            }
        }
    }

    /// Whether it sees every tenant: an operator or unrestricted caller.
    pub(crate) fn sees_every_tenant(&self) -> bool {
        match &self.authority {
            Authority::Unrestricted => true,
            Authority::Nobody => false,
            Authority::Token(token) => token.tenant().is_none(),
        }
    }

    /// The tenant a tenant's token is confined to (`None`: every tenant).
    pub(crate) fn confined_to(&self) -> Option<&Label> {
        self.token_ref().and_then(|token| token.tenant())
    }

    /// Refuses with `permission_denied` unless `request` is allowed; the refusal is audited.
    pub(crate) fn require(&self, app: &App, peer: Option<&Peer>, request: &Request<'_>) -> Result<(), ApiError> {
        self.check(request)
            .map_err(|denial| app.denied(self, peer, request, &denial))
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    /// The caller the auth layer decided on; a request that did not pass it (none should)
    /// is nobody.
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Caller, ApiError> {
        Ok(parts
            .extensions
            .get::<Caller>()
            .cloned()
            .unwrap_or_else(|| Caller::nobody(Principal::new(crate::app::ANONYMOUS).expect("a valid principal"))))
    }
}

/// The auth layer of one route: decides the caller and judges the route's need before the
/// handler runs (and before any body is read).
pub(crate) async fn authenticate(
    State(RouteGate { app, need }): State<RouteGate>,
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|path| path.as_str().to_owned())
        .unwrap_or_default();
    let peer = request.extensions().get::<Peer>().cloned();
    let caller = match identify(&app, &request, peer.as_ref()) {
        Ok(caller) => caller,
        Err(error) => return error.into_response(),
    };
    if need != Need::Open {
        if let Authority::Nobody = caller.authority {
            return app
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
        if crate::admit::is_write(request.method()) {
            let tenant = route
                .contains("{tenant}")
                .then(|| params.first())
                .flatten()
                .and_then(|tenant| Label::new("tenant", tenant).ok());
            let method = request.method().clone();
            if let Err(limited) = app.throttle(&caller, tenant.as_ref(), peer.as_ref().map(|peer| peer.addr), || {
                format!("{method} {route}")
            }) {
                return limited.into_response();
            }
        }
    }
    request.extensions_mut().insert(caller);
    next.run(request).await
}

/// Who sent `request`: a bearer token, else a certificate bound to a token, else nobody
/// (authentication on) or the unrestricted anonymous caller (off). A token that is not (or
/// no longer) known is refused at once, on any route.
/// The secret of an `Authorization: Bearer <secret>` value; the scheme is case-insensitive
/// (RFC 9110 section 11.1), so `bearer` and `BEARER` are accepted too. `None`: another
/// scheme, or no secret.
pub(crate) fn bearer_secret(value: &str) -> Option<&str> {
    let (scheme, secret) = value.split_once(' ')?;
    let secret = secret.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !secret.is_empty()).then_some(secret)
}

fn identify(app: &App, request: &axum::extract::Request, peer: Option<&Peer>) -> Result<Caller, ApiError> {
    if !app.auth.enabled {
        return Ok(Caller::unrestricted(app.anonymous.clone()));
    }
    if let Some(value) = request.headers().get(header::AUTHORIZATION) {
        let secret = value.to_str().ok().and_then(bearer_secret);
        let Some(secret) = secret else {
            return Err(app.unauthenticated(peer, request.uri().path(), "Authorization: expected 'Bearer <secret>'"));
        };
        return match app.node.read(|registry| registry.acl().authenticate(secret)) {
            Some(token) => Ok(Caller::token(token)),
            None => Err(app.unauthenticated(peer, request.uri().path(), "unknown or revoked token")),
        };
    }
    Ok(match certificate_token(app, peer) {
        Some(token) => Caller::token(token),
        None => Caller::nobody(app.anonymous.clone()),
    })
}

/// The token the connection's verified client certificate is bound to (by one of its SANs),
/// if any: the one rule of every listener that takes certificates (HTTP API, Consul, xDS).
pub(crate) fn certificate_token(app: &App, peer: Option<&Peer>) -> Option<Arc<Token>> {
    let certificate = peer?.certificate.as_ref()?;
    let sans = certificate
        .uris
        .iter()
        .chain(&certificate.dns_names)
        .map(String::as_str);
    app.node.read(|registry| registry.acl().by_certificate(sans))
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
    caller.require(
        app,
        peer,
        &Request {
            tenant: tenant.as_ref(),
            scope,
            verb,
        },
    )
}

/// Follows the token table: bumps a counter whenever it changes or is replaced (a snapshot
/// installed), so open watch streams re-check their tokens (SPEC S1: a revoked token is
/// refused on streams already open).
pub(crate) struct TokenWatch {
    changes: tokio::sync::watch::Sender<u64>,
    seen: std::sync::atomic::AtomicU64,
}

impl TokenWatch {
    pub(crate) fn new() -> (TokenWatch, tokio::sync::watch::Receiver<u64>) {
        let (changes, receiver) = tokio::sync::watch::channel(0);
        let watch = TokenWatch {
            changes,
            seen: std::sync::atomic::AtomicU64::new(0),
        };
        (watch, receiver)
    }

    fn bump(&self) {
        self.changes.send_modify(|n| *n += 1);
    }
}

impl muster_consensus::ApplyObserver for TokenWatch {
    fn applied(&self, registry: &muster_registry::Registry, _: &muster_registry::Applied) {
        let generation = registry.acl().generation();
        if self.seen.swap(generation, std::sync::atomic::Ordering::Relaxed) != generation {
            self.bump();
        }
    }

    fn reset(&self, registry: &muster_registry::Registry) {
        self.seen
            .store(registry.acl().generation(), std::sync::atomic::Ordering::Relaxed);
        self.bump();
    }
}

/// Resolves once `token` is no longer in force on this node (revoked, or gone with a
/// snapshot that does not hold it).
pub(crate) async fn revoked(app: Arc<App>, token: Arc<Token>) {
    let mut changes = app.acl_changes.clone();
    loop {
        changes.borrow_and_update();
        let present = app.node.read(|registry| registry.acl().get(token.accessor()).is_some());
        if !present {
            return;
        }
        if changes.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Why a stream ended by its token's revocation was refused: what its last frame says and
/// what the audit trail records.
pub(crate) const REVOKED: &str = "the token was revoked";

/// [`revoked`], then the stream it ends recorded as a denial ([`record_revoked`]).
pub(crate) async fn revoked_recorded(
    app: Arc<App>,
    token: Arc<Token>,
    verb: Verb,
    source: Option<SocketAddr>,
    resource: String,
) {
    revoked(Arc::clone(&app), Arc::clone(&token)).await;
    record_revoked(&app, &token, verb, source, resource);
}

/// Records a stream ended, or refused, because its token was revoked (SPEC S1, S4): a denial
/// `unauthenticated`, "the token was revoked", under the token's principal and tenant.
/// `resource` names the stream (`GET /v1/watch/acme/prod/api`); every kind of stream (watch,
/// dashboard live view, xDS) makes this one call where the revocation ends it.
pub(crate) fn record_revoked(app: &App, token: &Token, verb: Verb, source: Option<SocketAddr>, resource: String) {
    app.audit.denied(AuditDenial {
        principal: Some(token.principal()),
        tenant: token.tenant().cloned(),
        key: None,
        verb: verb.to_string(),
        resource,
        code: ErrorCode::Unauthenticated,
        reason: REVOKED.to_owned(),
        source,
        at_ms: app.clock.unix_now_ms(),
    });
}

#[cfg(test)]
mod tests {
    use super::bearer_secret;

    #[test]
    fn the_bearer_scheme_is_case_insensitive_and_needs_a_secret() {
        assert_eq!(bearer_secret("Bearer s3cret"), Some("s3cret"));
        assert_eq!(bearer_secret("bearer s3cret"), Some("s3cret"));
        assert_eq!(bearer_secret("BEARER  s3cret "), Some("s3cret"));
        for refused in ["Basic dXNlcjpwYXNz", "Bearer", "Bearer   ", "Bearers3cret", ""] {
            assert_eq!(bearer_secret(refused), None, "{refused:?}");
        }
    }
}
