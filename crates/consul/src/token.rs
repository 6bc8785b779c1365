//! Who a Consul request speaks for: its token, resolved to the same [`Caller`] and judged by
//! the same policies as the native API (SPEC S1, S2).
//!
//! ```text
//!  X-Consul-Token: <secret>  ─┐
//!  Authorization: Bearer <s> ─┼─▶ the registry's tokens ─┬─ known ───▶ Caller (its token's rules)
//!  ?token=<secret>           ─┘   (first one present)    └─ unknown ─▶ 403 "ACL not found"
//!  none: a client certificate bound to a token (mutual TLS), else nobody (every check denied)
//! ```
//!
//! Consul's rules map onto Muster verbs: `service:write` is register, renew (TTL check
//! updates), set_state (maintenance) and deregister; `service:read` is read and watch
//! (blocking queries). A denial is a 403 with Consul's own text, `Permission denied`, which
//! py-consul raises as `ACLPermissionDenied` and the Go `api` package returns as a
//! `StatusError` with code 403; it is recorded in the audit trail like a native denial
//! (SPEC S4). Reads filter what the caller may not read, as Consul's ACL filtering does, and
//! say so with `X-Consul-Results-Filtered-By-ACL: true`.
//!
//! Every route authenticates and authorises before it looks anything up that could reveal a
//! name (SPEC S1, S2): an agent write without credentials is refused before its body is read
//! or its ID looked up ([`ConsulCaller::authenticated`]); one naming an ID is refused unless
//! some rule lets the caller act in the namespace ([`ConsulCaller::require_in`]), and then
//! looks only among the services it may act on (`agent_lookup`). Reads filter.
//!
//! With `[auth] enabled = false` every request is the unrestricted anonymous caller, and a
//! token sent anyway is ignored, as a Consul agent with ACLs off ignores it.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use muster_auth::{Request, Scope, Verb};
use muster_core::{NamespaceKey, ServiceKey};

use super::agent_map::Placement;
use super::error::ConsulError;
use crate::app::ConsulApp;
use muster_gate::Caller;
use muster_http::peer::Peer;

/// The header Consul clients send their token in.
pub(crate) const TOKEN_HEADER: &str = "x-consul-token";

/// The header saying a read left out what the caller may not read.
pub(crate) const FILTERED_HEADER: &str = "x-consul-results-filtered-by-acl";

/// The token's secret a request carries: `X-Consul-Token`, else `Authorization: Bearer`, else
/// `?token=` (the order Consul's agent looks in). An empty value counts as none.
pub(crate) fn secret<'a>(headers: &'a HeaderMap, query: &'a [(String, String)]) -> Option<&'a str> {
    let header_value = |name: header::HeaderName| {
        headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::trim)
            .filter(|value| !value.is_empty())
    };
    header_value(header::HeaderName::from_static(TOKEN_HEADER))
        .or_else(|| header_value(header::AUTHORIZATION).and_then(muster_gate::caller::bearer_secret))
        .or_else(|| {
            query
                .iter()
                .find(|(name, value)| name == "token" && !value.is_empty())
                .map(|(_, value)| value.as_str())
        })
}

/// The caller of a Consul request, with the connection it came on (for the audit trail).
#[derive(Debug, Clone)]
pub(crate) struct ConsulCaller {
    caller: Caller,
    peer: Option<Peer>,
}

impl ConsulCaller {
    /// The native caller (principal, token).
    pub(crate) fn caller(&self) -> &Caller {
        &self.caller
    }

    /// Where the request came from.
    pub(crate) fn source(&self) -> Option<std::net::SocketAddr> {
        self.peer.as_ref().map(|peer| peer.addr)
    }

    /// Refuses with `403 Permission denied` unless the caller may use `verb` on `key`; the
    /// refusal is audited.
    pub(crate) fn require(&self, app: &ConsulApp, key: &ServiceKey, verb: Verb) -> Result<(), ConsulError> {
        let request = Request {
            tenant: Some(&key.tenant),
            scope: Scope::Service {
                namespace: key.namespace.as_str(),
                service: key.service.as_str(),
            },
            verb,
        };
        app.gate
            .require(&self.caller, self.peer.as_ref(), &request)
            .map_err(|_| ConsulError::permission_denied())
    }

    /// Refuses a request without credentials while authentication is on (to `path`), before
    /// anything is read or looked up: `403 Permission denied`, what Consul answers its
    /// anonymous token, audited as unauthenticated (SPEC S1, S4).
    pub(crate) fn authenticated(&self, app: &ConsulApp, path: &str) -> Result<(), ConsulError> {
        if !self.caller.is_nobody() {
            return Ok(());
        }
        let _ = app.gate.unauthenticated(
            self.peer.as_ref(),
            path,
            "no credentials: send X-Consul-Token or Authorization: Bearer <secret>",
        );
        Err(ConsulError::permission_denied())
    }

    /// Refuses with `403 Permission denied` unless some allow rule lets the caller use `verb`
    /// in `place`'s namespace: checked before an ID is looked up there, so a caller with no
    /// right there learns nothing of what it holds (SPEC S2). A placement that names no
    /// Muster namespace holds nothing, and passes (the lookup then finds nothing).
    pub(crate) fn require_in(&self, app: &ConsulApp, place: &Placement, verb: Verb) -> Result<(), ConsulError> {
        let Ok(namespace) = NamespaceKey::new(&place.tenant, &place.namespace) else {
            return Ok(());
        };
        let request = Request {
            tenant: Some(&namespace.tenant),
            scope: Scope::Namespace(namespace.namespace.as_str()),
            verb,
        };
        app.gate
            .require(&self.caller, self.peer.as_ref(), &request)
            .map_err(|_| ConsulError::permission_denied())
    }

    /// Whether the caller may use `verb` on `key` (what filters reads); not audited.
    pub(crate) fn may(&self, key: &ServiceKey, verb: Verb) -> bool {
        self.caller.may(key, verb)
    }
}

/// Resolves the caller of a request to `app`'s Consul listener.
pub(crate) fn identify(app: &ConsulApp, parts: &Parts) -> Result<ConsulCaller, ConsulError> {
    let peer = parts.extensions.get::<Peer>().cloned();
    if !app.gate.auth.enabled {
        return Ok(ConsulCaller {
            caller: Caller::unrestricted(app.gate.anonymous.clone()),
            peer,
        });
    }
    let query = query_pairs(parts.uri.query());
    if let Some(secret) = secret(&parts.headers, &query) {
        return match app.gate.read(|registry| registry.acl().authenticate(secret)) {
            Some(token) => Ok(ConsulCaller {
                caller: Caller::token(token),
                peer,
            }),
            None => {
                // Recorded as the native API records an unknown token (SPEC S4).
                let _ = app
                    .gate
                    .unauthenticated(peer.as_ref(), parts.uri.path(), "unknown or revoked token");
                Err(ConsulError::acl_not_found())
            }
        };
    }
    let caller = match app.gate.certificate_token(peer.as_ref()) {
        Some(token) => Caller::token(token),
        None => Caller::nobody(app.gate.anonymous.clone()),
    };
    Ok(ConsulCaller { caller, peer })
}

/// The caller of a request whose credentials are known, recording nothing (an unknown token
/// is refused and recorded by the handler's [`identify`]); `None` without credentials, with
/// unknown ones, or with authentication off.
pub(crate) fn known_caller(app: &ConsulApp, parts: &Parts) -> Option<Caller> {
    if !app.gate.auth.enabled {
        return None;
    }
    let peer = parts.extensions.get::<Peer>();
    let query = query_pairs(parts.uri.query());
    match secret(&parts.headers, &query) {
        Some(secret) => app
            .gate
            .read(|registry| registry.acl().authenticate(secret))
            .map(Caller::token),
        None => app.gate.certificate_token(peer).map(Caller::token),
    }
}

/// A query string's pairs, percent-decoded, in order (`tag` may repeat; a bare `stale` is
/// `("stale", "")`).
pub(crate) fn query_pairs(query: Option<&str>) -> Vec<(String, String)> {
    query.map_or_else(Vec::new, |query| {
        form_urlencoded::parse(query.as_bytes()).into_owned().collect()
    })
}

impl FromRequestParts<Arc<ConsulApp>> for ConsulCaller {
    type Rejection = ConsulError;

    async fn from_request_parts(parts: &mut Parts, app: &Arc<ConsulApp>) -> Result<ConsulCaller, ConsulError> {
        identify(app, parts)
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.insert(*name, HeaderValue::from_static(value));
        }
        headers
    }

    #[test]
    fn the_consul_header_comes_first_then_the_bearer_token_then_the_query() {
        let query = vec![("token".to_owned(), "from-query".to_owned())];
        let both = headers(&[
            ("x-consul-token", "from-header"),
            ("authorization", "Bearer from-bearer"),
        ]);
        assert_eq!(secret(&both, &query), Some("from-header"));
        let bearer = headers(&[("authorization", "Bearer from-bearer")]);
        assert_eq!(secret(&bearer, &query), Some("from-bearer"));
        assert_eq!(secret(&HeaderMap::new(), &query), Some("from-query"));
        assert_eq!(secret(&HeaderMap::new(), &[]), None);
    }

    #[test]
    fn empty_values_and_other_schemes_are_no_token() {
        let query = vec![("token".to_owned(), String::new())];
        let empty = headers(&[("x-consul-token", " "), ("authorization", "Basic abc")]);
        assert_eq!(secret(&empty, &query), None);
    }

    #[test]
    fn query_pairs_decode_repeats_and_bare_flags() {
        assert_eq!(
            query_pairs(Some("tag=a&tag=b%20c&stale&token=x")),
            vec![
                ("tag".to_owned(), "a".to_owned()),
                ("tag".to_owned(), "b c".to_owned()),
                ("stale".to_owned(), String::new()),
                ("token".to_owned(), "x".to_owned()),
            ]
        );
        assert!(query_pairs(None).is_empty());
    }
}
