//! Who an xDS stream speaks for (SPEC S1): a token in the `authorization` call metadata, else
//! a client certificate bound to a token (`Gate::certificate_token`), judged as the
//! HTTP API judges them; kept as a [`Credential`] so the stream can be checked again when the
//! token table changes.

use muster_auth::Token;
use tonic::{Request, Status};

use muster_gate::{Caller, Gate};
use muster_http::peer::Peer;

/// The method prefix the audit trail names for xDS refusals.
const METHOD: &str = "/envoy.service.discovery.v3.AggregatedDiscoveryService";

/// How a stream proved who it is.
#[derive(Debug, Clone)]
pub(crate) enum Credential {
    /// Authentication is off.
    Anonymous,
    /// A bearer secret.
    Secret(String),
    /// The connection's client certificate (or none: then nobody, refused).
    Certificate,
}

/// The caller of a stream opening with `request`, its credential and its connection.
pub(crate) fn identify<T>(gate: &Gate, request: &Request<T>) -> Result<(Caller, Credential, Option<Peer>), Status> {
    let peer = request.extensions().get::<Peer>().cloned();
    if !gate.auth.enabled {
        return Ok((
            Caller::unrestricted(gate.anonymous.clone()),
            Credential::Anonymous,
            peer,
        ));
    }
    let authorization = request.metadata().get("authorization");
    let secret = authorization
        .and_then(|value| value.to_str().ok())
        .and_then(muster_gate::caller::bearer_secret)
        .map(str::to_owned);
    if authorization.is_some() && secret.is_none() {
        // As the HTTP API does: a malformed header is refused, not ignored for the
        // certificate.
        let why = "authorization metadata: expected `Bearer <secret>`";
        let _ = gate.unauthenticated(peer.as_ref(), METHOD, why);
        return Err(Status::unauthenticated(why));
    }
    let credential = secret.map_or(Credential::Certificate, Credential::Secret);
    match resolve(gate, &credential, peer.as_ref()) {
        Some(caller) => Ok((caller, credential, peer)),
        None => {
            let why = match credential {
                Credential::Secret(_) => "unknown or revoked token",
                _ => "no credentials: send `authorization: Bearer <secret>` metadata",
            };
            let _ = gate.unauthenticated(peer.as_ref(), METHOD, why);
            Err(Status::unauthenticated(why))
        }
    }
}

/// The caller `credential` (on `peer`'s connection) stands for now; `None` when it no
/// longer does.
pub(crate) fn resolve(gate: &Gate, credential: &Credential, peer: Option<&Peer>) -> Option<Caller> {
    let token: Option<std::sync::Arc<Token>> = match credential {
        Credential::Anonymous => return Some(Caller::unrestricted(gate.anonymous.clone())),
        Credential::Secret(secret) => gate.read(|registry| registry.acl().authenticate(secret)),
        Credential::Certificate => gate.certificate_token(peer),
    };
    token.map(Caller::token)
}
