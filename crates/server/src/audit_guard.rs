//! The browser guard's refusals as denials (SPEC S4, S6): nobody was authenticated yet, so no
//! principal; the resource is the method and path.

use std::sync::Arc;

use axum::extract::Request;
use muster_http::error::ApiError;
use muster_http::guard::Refusals;
use muster_http::peer::Peer;

use muster_gate::audit::{AuditLog, Denial};
use muster_gate::clock::ServerClock;

/// The audit trail the guard records its refusals in, and the clock that times them.
pub(crate) struct GuardRefusals {
    pub(crate) log: Arc<AuditLog>,
    pub(crate) clock: ServerClock,
}

impl Refusals for GuardRefusals {
    fn refused(&self, refused: &ApiError, request: &Request) {
        self.log.denied(Denial {
            principal: None,
            tenant: None,
            key: None,
            verb: "guard".to_owned(),
            resource: format!("{} {}", request.method(), request.uri().path()),
            code: refused.code,
            reason: refused.message.clone(),
            source: request.extensions().get::<Peer>().map(|peer| peer.addr),
            at_ms: self.clock.unix_now_ms(),
        });
    }
}
