//! Who speaks with which authority (SPEC L5), and which registry format the cluster runs
//! (architecture.md "Formats and versions").
//!
//! A caller's role is its token's (`owner`, `app` or `checker`), never its word: the
//! `X-Muster-Actor` header may narrow it (an owner speaks as the app), and a route's default
//! authority (a drain's is the owner's) is capped at it, so an application draining itself
//! makes an app drain it may lift, and only an owner's drain holds against the app.
//!
//! ```text
//!  role (token) ──┐
//!  asked (header) ├─▶ speaking_as ──▶ Ok(actor) │ Err(Widening) ──▶ 403 permission_denied, audited
//!  route default ─┘
//! ```

use muster_core::{Actor, ErrorCode, Rejection};
use muster_http::error::ApiError;
use muster_http::peer::Peer;

use crate::audit::Denial as AuditDenial;
use crate::{Caller, Gate};

/// A header asked for more authority than the caller's role holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Widening {
    /// The caller's role.
    pub role: Actor,
    /// What the header asked for.
    pub asked: Actor,
}

/// Whether `role` may speak as `actor`: the owner as anyone, the app and the checker only
/// as themselves.
pub fn may_speak_as(role: Actor, actor: Actor) -> bool {
    role == actor || role == Actor::Owner
}

/// The authority a request speaks with: `asked` (the header) when `role` may speak as it;
/// else the route's `default` capped at the role. `role` none (authentication off): as
/// asked, or the default.
pub fn speaking_as(role: Option<Actor>, asked: Option<Actor>, default: Actor) -> Result<Actor, Widening> {
    match (role, asked) {
        (Some(role), Some(asked)) if !may_speak_as(role, asked) => Err(Widening { role, asked }),
        (_, Some(asked)) => Ok(asked),
        (role, None) => Ok(capped(role, default)),
    }
}

/// A route's `default` authority capped at `role` (none: authentication off, uncapped): the
/// authority of a way in that has no header to narrow it (the Consul API's maintenance mode).
pub fn capped(role: Option<Actor>, default: Actor) -> Actor {
    match role {
        Some(role) if !may_speak_as(role, default) => role,
        _ => default,
    }
}

impl Gate {
    /// The authority `caller` speaks with on this request ([`speaking_as`]); a header that
    /// widens its role is a `403 permission_denied` on the audit trail. `resource` names the
    /// request (`PUT /v1/registry/acme/prod/api/api-0/serving`).
    pub fn speaking_as(
        &self,
        caller: &Caller,
        peer: Option<&Peer>,
        asked: Option<Actor>,
        default: Actor,
        resource: impl FnOnce() -> String,
    ) -> Result<Actor, ApiError> {
        speaking_as(caller.role(), asked, default).map_err(|Widening { role, asked }| {
            let reason = format!("X-Muster-Actor: {asked} widens this token's role, {role}");
            let token = caller.token_ref();
            self.meter
                .denied(token.and_then(|t| t.tenant()), ErrorCode::PermissionDenied);
            self.audit.denied(AuditDenial {
                principal: Some(caller.principal().clone()),
                tenant: token.and_then(|t| t.tenant().cloned()),
                key: None,
                verb: format!("speak as {asked}"),
                resource: resource(),
                code: ErrorCode::PermissionDenied,
                reason: reason.clone(),
                source: peer.map(|p| p.addr),
                at_ms: self.clock.unix_now_ms(),
            });
            ApiError::new(ErrorCode::PermissionDenied, reason)
        })
    }

    /// The registry format the cluster runs ([`muster_core::FORMAT`]).
    pub fn format(&self) -> u32 {
        self.read(muster_registry::Registry::format)
    }

    /// The registry format each member's build applies, by id; `None` for a member that did
    /// not answer within `timeout` ([`muster_consensus::Node::member_formats`]).
    pub async fn member_formats(&self, timeout: std::time::Duration) -> Vec<(u64, Option<u32>)> {
        self.node.member_formats(timeout).await
    }

    /// `409 upgrade_pending` unless the cluster runs format `needed`: what a newer format
    /// adds is proposed only once every member knows it (architecture.md "Formats and versions").
    pub fn require_format(&self, needed: u32, what: &str) -> Result<(), ApiError> {
        let format = self.format();
        if format >= needed {
            return Ok(());
        }
        Err(ApiError::from(Rejection::UpgradePending {
            what: what.to_owned(),
            format,
            needed,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Actor; 3] = [Actor::Owner, Actor::App, Actor::Checker];

    #[test]
    fn a_role_narrows_never_widens() {
        for role in ALL {
            for asked in ALL {
                let verdict = speaking_as(Some(role), Some(asked), Actor::App);
                let allowed = role == Actor::Owner || role == asked;
                assert_eq!(verdict.is_ok(), allowed, "{role} as {asked}");
                if allowed {
                    assert_eq!(verdict, Ok(asked));
                } else {
                    assert_eq!(verdict, Err(Widening { role, asked }));
                }
            }
        }
    }

    #[test]
    fn a_routes_default_is_capped_at_the_role() {
        // Trace (who may do what): a drain defaults to the owner; an app draining itself
        // makes an app drain, which it may lift, and only an owner's drain holds.
        assert_eq!(speaking_as(Some(Actor::App), None, Actor::Owner), Ok(Actor::App));
        assert_eq!(
            speaking_as(Some(Actor::Checker), None, Actor::Owner),
            Ok(Actor::Checker)
        );
        assert_eq!(speaking_as(Some(Actor::Checker), None, Actor::App), Ok(Actor::Checker));
        assert_eq!(speaking_as(Some(Actor::Owner), None, Actor::Owner), Ok(Actor::Owner));
        assert_eq!(speaking_as(Some(Actor::Owner), None, Actor::App), Ok(Actor::App));
    }

    #[test]
    fn with_authentication_off_the_header_decides() {
        for asked in ALL {
            assert_eq!(speaking_as(None, Some(asked), Actor::App), Ok(asked));
        }
        assert_eq!(speaking_as(None, None, Actor::Owner), Ok(Actor::Owner));
    }
}
