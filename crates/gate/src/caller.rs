//! Who a caller is and what it may do (SPEC S1–S3): a token, a certificate bound to one,
//! nobody (authentication on, no credentials) or the unrestricted anonymous caller
//! (authentication off). The verdicts are `muster_auth`'s; this is how every way in asks.

use std::sync::Arc;

use muster_auth::{Denial, Request, Scope, Token, Verb};
use muster_core::{Actor, Label, Principal, Secret, ServiceKey};
use serde::{Deserialize, Serialize};

/// The principal of every request while authentication is off (SPEC S1).
pub const ANONYMOUS: &str = "anonymous";

/// The `[auth]` section of the server's configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// Every route but `/v1/status`, `/v1/openapi.json` and `/v1/acl/bootstrap` needs a token
    /// (or a client certificate bound to one); non-loopback binds are allowed.
    pub enabled: bool,
    /// A file holding the secret `POST /v1/acl/bootstrap` requires (header
    /// `X-Muster-Bootstrap-Secret`, `muster acl bootstrap --bootstrap-secret`), at least 16
    /// bytes, so that a stranger who reaches a fresh cluster first cannot make its operator
    /// token. Unset, the server takes the secret from `MUSTER_BOOTSTRAP_SECRET` when that is
    /// set; with neither, bootstrap is accepted only from a loopback address (SPEC S1), so
    /// behind a proxy on the same host (every caller then arrives from loopback) set one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bootstrap_secret_file: Option<std::path::PathBuf>,
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
pub struct Caller {
    principal: Principal,
    authority: Authority,
}

impl Caller {
    /// The caller when authentication is off.
    pub fn unrestricted(principal: Principal) -> Caller {
        Caller {
            principal,
            authority: Authority::Unrestricted,
        }
    }

    /// The caller of a request without credentials while authentication is on: every check
    /// is denied.
    pub fn nobody(principal: Principal) -> Caller {
        Caller {
            principal,
            authority: Authority::Nobody,
        }
    }

    /// Whether this is [`Caller::nobody`]: authentication is on and the request carried no
    /// credentials.
    pub fn is_nobody(&self) -> bool {
        matches!(self.authority, Authority::Nobody)
    }

    /// The caller holding `token`.
    pub fn token(token: Arc<Token>) -> Caller {
        Caller {
            principal: token.principal(),
            authority: Authority::Token(token),
        }
    }

    /// The principal its writes are recorded under.
    pub fn principal(&self) -> &Principal {
        &self.principal
    }

    /// The role it speaks with (SPEC L5): its token's; the application's for a caller
    /// without credentials while authentication is on; none (any role, as
    /// `X-Muster-Actor` says) while authentication is off.
    pub fn role(&self) -> Option<Actor> {
        match &self.authority {
            Authority::Unrestricted => None,
            Authority::Nobody => Some(Actor::App),
            Authority::Token(token) => Some(token.role()),
        }
    }

    /// Its token, when it has one.
    pub fn token_ref(&self) -> Option<&Arc<Token>> {
        match &self.authority {
            Authority::Token(token) => Some(token),
            _ => None,
        }
    }

    /// The verdict for `request`.
    pub fn check(&self, request: &Request<'_>) -> Result<(), Denial> {
        match &self.authority {
            Authority::Unrestricted => Ok(()),
            Authority::Nobody => Err(Denial::NoRule),
            Authority::Token(token) => token.authorize(request),
        }
    }

    /// Whether it may use `verb` on `key`: what filters lists and namespace watches.
    pub fn may(&self, key: &ServiceKey, verb: Verb) -> bool {
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

    /// Whether it may read all of `tenant`, what a tenant-wide figure (an xDS stream that
    /// names no service yet) needs (SPEC S3): an operator or unrestricted caller may; a
    /// tenant's token when it may read every service of it ([`Scope::EveryService`]: a `*/*`
    /// rule allows read and no deny rule takes read back from any service).
    pub fn reads_tenant(&self, tenant: &Label) -> bool {
        self.check(&Request {
            tenant: Some(tenant),
            scope: Scope::EveryService,
            verb: Verb::Read,
        })
        .is_ok()
    }

    /// Whether it sees every tenant: an operator or unrestricted caller.
    pub fn sees_every_tenant(&self) -> bool {
        match &self.authority {
            Authority::Unrestricted => true,
            Authority::Nobody => false,
            Authority::Token(token) => token.tenant().is_none(),
        }
    }

    /// The tenant a tenant's token is confined to (`None`: every tenant).
    pub fn confined_to(&self) -> Option<&Label> {
        self.token_ref().and_then(|token| token.tenant())
    }
}

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Caller {
    type Rejection = muster_http::error::ApiError;

    /// The caller the auth layer decided on; a request that did not pass it (none should)
    /// is nobody.
    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Caller, muster_http::error::ApiError> {
        Ok(parts
            .extensions
            .get::<Caller>()
            .cloned()
            .unwrap_or_else(|| Caller::nobody(Principal::new(ANONYMOUS).expect("a valid principal"))))
    }
}

/// The secret of an `Authorization: Bearer <secret>` value; the scheme is case-insensitive
/// (RFC 9110 section 11.1), so `bearer` and `BEARER` are accepted too. `None`: another
/// scheme, or no secret.
pub fn bearer_secret(value: &str) -> Option<&str> {
    let (scheme, secret) = value.split_once(' ')?;
    let secret = secret.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !secret.is_empty()).then_some(secret)
}

/// The verdict on a bootstrap (`POST /v1/acl/bootstrap`, SPEC S1), pure: with a bootstrap
/// `secret` configured, only a request presenting it may make the first operator token,
/// from anywhere; without one, only a request from a loopback `source` (the operator on the
/// node itself), so that a stranger who reaches a fresh cluster first cannot win it. `Err`
/// says why, for the refusal and the audit trail.
pub fn bootstrap_verdict(
    secret: Option<&Secret>,
    source: Option<std::net::IpAddr>,
    presented: Option<&str>,
) -> Result<(), &'static str> {
    match (secret, presented) {
        (Some(secret), Some(presented)) if secret.matches(presented) => Ok(()),
        (Some(_), Some(_)) => Err("the bootstrap secret (X-Muster-Bootstrap-Secret) is not this cluster's"),
        (Some(_), None) => Err("bootstrap needs the bootstrap secret in X-Muster-Bootstrap-Secret \
             (muster acl bootstrap --bootstrap-secret)"),
        (None, _) if source.is_some_and(|ip| ip.is_loopback()) => Ok(()),
        (None, _) => Err(
            "bootstrap is accepted only from a loopback address when no bootstrap secret is set \
             ([auth] bootstrap_secret_file or MUSTER_BOOTSTRAP_SECRET on the server)",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::{Secret, bearer_secret, bootstrap_verdict};

    /// Trace (who may do what): with auth on and a network bind, the first caller to reach a
    /// fresh cluster won `POST /v1/acl/bootstrap` and with it the operator token.
    #[test]
    fn a_bootstrap_needs_the_secret_or_a_loopback_source() {
        use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
        let secret = Secret::new("bootstrap-secret-0123456789");
        let remote = Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 7)));
        let local = Some(IpAddr::V4(Ipv4Addr::LOCALHOST));
        let local6 = Some(IpAddr::V6(Ipv6Addr::LOCALHOST));
        // No secret set: loopback only.
        assert!(bootstrap_verdict(None, local, None).is_ok());
        assert!(bootstrap_verdict(None, local6, None).is_ok());
        assert!(bootstrap_verdict(None, remote, None).is_err());
        assert!(bootstrap_verdict(None, None, None).is_err());
        // An IPv4-mapped address is judged as the gate canonicalises it.
        let mapped = IpAddr::V6(Ipv4Addr::LOCALHOST.to_ipv6_mapped()).to_canonical();
        assert!(bootstrap_verdict(None, Some(mapped), None).is_ok());
        // A secret set: only with it, from anywhere; loopback alone is not enough.
        assert!(bootstrap_verdict(Some(&secret), remote, Some("bootstrap-secret-0123456789")).is_ok());
        assert!(bootstrap_verdict(Some(&secret), local, None).is_err());
        assert!(bootstrap_verdict(Some(&secret), remote, Some("bootstrap-secret-012345678")).is_err());
        assert!(bootstrap_verdict(Some(&secret), remote, None).is_err());
    }

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
