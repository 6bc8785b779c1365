//! The token commands (SPEC S1): bootstrap once, create, revoke. Each commits at a new
//! revision with no service updates, so the audit trail and a reader of the log can place it,
//! and every replica's table changes at the same point of the log.

use muster_auth::{Accessor, AclTable, TOKEN_PRINCIPAL, Token};
use muster_core::Rejection;

use crate::applied::Applied;
use crate::command::{AclBootstrap, CommandMeta, CreateToken, RevokeToken};
use crate::registry::Registry;

impl Registry {
    /// The tokens in force.
    pub fn acl(&self) -> &AclTable {
        &self.acl
    }

    /// Puts an imported token table in place; `state.rs` has checked it.
    pub(crate) fn with_acl(mut self, acl: AclTable) -> Registry {
        self.acl = acl;
        self
    }

    /// A command proposed for a token is refused if the token is gone by the time it
    /// applies: the node that took the request judged it before the revocation reached it
    /// (or while it was racing on the leader). Every replica decides alike.
    pub(crate) fn check_principal(&self, meta: &CommandMeta) -> Result<(), Rejection> {
        let Some(accessor) = meta.principal.as_str().strip_prefix(TOKEN_PRINCIPAL) else {
            return Ok(());
        };
        match Accessor::parse(accessor) {
            Ok(accessor) if self.acl.get(&accessor).is_some() => Ok(()),
            _ => Err(Rejection::TokenRevoked {
                accessor: accessor.to_owned(),
            }),
        }
    }

    pub(crate) fn bootstrap(&mut self, command: &AclBootstrap, meta: &CommandMeta) -> Result<Applied, Rejection> {
        if self.acl.bootstrapped() {
            return Err(Rejection::AlreadyBootstrapped);
        }
        if command.token.tenant.is_some() {
            return Err(Rejection::InvalidField {
                field: "token.tenant".into(),
                reason: "the bootstrap token is an operator token".into(),
            });
        }
        self.add_token(&command.token, meta)?;
        self.acl.set_bootstrapped();
        Ok(self.acl_committed())
    }

    pub(crate) fn create_token(&mut self, command: &CreateToken, meta: &CommandMeta) -> Result<Applied, Rejection> {
        self.add_token(&command.token, meta)?;
        Ok(self.acl_committed())
    }

    pub(crate) fn revoke_token(&mut self, command: &RevokeToken) -> Result<Applied, Rejection> {
        if self.acl.revoke(&command.accessor).is_none() {
            return Err(Rejection::NotFound {
                subject: format!("token {}", command.accessor),
            });
        }
        Ok(self.acl_committed())
    }

    fn add_token(&mut self, spec: &muster_auth::TokenSpec, meta: &CommandMeta) -> Result<(), Rejection> {
        if spec.role != muster_core::Actor::App {
            self.needs_format(2, "a token with a role")?;
        }
        if spec.rules.iter().any(|rule| rule.verbs.needs_format_2()) {
            self.needs_format(2, "the metrics right")?;
        }
        self.acl.check(spec).map_err(|reason| Rejection::InvalidField {
            field: "token".into(),
            reason,
        })?;
        self.acl
            .insert(Token::new(spec.clone(), meta.at_ms, meta.principal.clone()));
        Ok(())
    }

    /// A token change at the next revision.
    fn acl_committed(&mut self) -> Applied {
        self.revision = self.revision.next();
        Applied {
            revision: self.revision,
            updates: Vec::new(),
            lease: None,
            unchanged: None,
            released: Vec::new(),
            mirrored: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use muster_auth::{Accessor, Effect, Rule, Secret, TokenSpec};
    use muster_core::{Actor, Label, Principal};

    use super::*;
    use crate::{Command, RegistryConfig};

    fn meta() -> CommandMeta {
        CommandMeta {
            at_ms: 10,
            principal: Principal::new("anonymous").unwrap(),
            actor: Actor::Owner,
        }
    }

    fn spec(n: u8, tenant: Option<&str>) -> (TokenSpec, Secret) {
        let secret = Secret::from_random([n; 32]);
        let spec = TokenSpec {
            accessor: Accessor::from_random([n; 16]),
            secret_hash: secret.hash(),
            tenant: tenant.map(|t| Label::new("tenant", t).unwrap()),
            rules: vec![
                Rule::parse(
                    "*/*=read,watch,register,renew,set_state,deregister,admin",
                    Effect::Allow,
                )
                .unwrap(),
            ],
            san: None,
            description: String::new(),
            role: muster_core::Actor::App,
        };
        (spec, secret)
    }

    #[test]
    fn bootstrap_works_once_and_tokens_survive_export_and_import() {
        let mut registry = Registry::new(RegistryConfig::default());
        let (first, secret) = spec(1, None);
        let applied = registry
            .apply(&Command::AclBootstrap(AclBootstrap { token: first }), &meta())
            .unwrap();
        assert_eq!(applied.revision, muster_core::Revision(1));
        let (second, _) = spec(2, None);
        let again = registry.apply(&Command::AclBootstrap(AclBootstrap { token: second.clone() }), &meta());
        assert_eq!(again, Err(Rejection::AlreadyBootstrapped));
        registry
            .apply(&Command::CreateToken(CreateToken { token: second }), &meta())
            .unwrap();
        let token = registry.acl().authenticate(secret.as_str()).unwrap();
        assert_eq!(token.created_at_ms, 10);

        let state = serde_json::to_string(&registry.export()).unwrap();
        assert!(!state.contains(secret.as_str()), "only hashes are stored");
        let restored = Registry::import(RegistryConfig::default(), serde_json::from_str(&state).unwrap()).unwrap();
        assert!(restored.acl().bootstrapped());
        assert_eq!(restored.acl().tokens().count(), 2);
        assert!(restored.acl().authenticate(secret.as_str()).is_some());
    }

    #[test]
    fn a_revoked_token_no_longer_authenticates_and_a_second_revoke_is_not_found() {
        let mut registry = Registry::new(RegistryConfig::default());
        let (token, secret) = spec(3, Some("acme"));
        let accessor = token.accessor.clone();
        registry
            .apply(&Command::CreateToken(CreateToken { token }), &meta())
            .unwrap();
        let revoke = Command::RevokeToken(RevokeToken { accessor });
        registry.apply(&revoke, &meta()).unwrap();
        assert!(registry.acl().authenticate(secret.as_str()).is_none());
        let revision = registry.revision();
        assert_eq!(registry.apply(&revoke, &meta()).unwrap_err().code(), "not_found");
        assert_eq!(registry.revision(), revision, "a refusal changes nothing");
    }

    #[test]
    fn a_command_for_a_token_revoked_before_it_applies_is_refused() {
        let mut registry = Registry::new(RegistryConfig::default());
        let (token, _) = spec(5, Some("acme"));
        let accessor = token.accessor.clone();
        registry
            .apply(&Command::CreateToken(CreateToken { token }), &meta())
            .unwrap();
        let as_token = CommandMeta {
            principal: Principal::new(&format!("token:{accessor}")).unwrap(),
            ..meta()
        };
        let grant = Command::GrantLease(crate::GrantLease {
            tenant: Label::new("tenant", "acme").unwrap(),
            ttl_ms: 10_000,
            service: None,
        });
        registry.apply(&grant, &as_token).unwrap();
        registry
            .apply(&Command::RevokeToken(RevokeToken { accessor }), &meta())
            .unwrap();
        let revision = registry.revision();
        let refused = registry.apply(&grant, &as_token).unwrap_err();
        assert_eq!(refused.code(), "unauthenticated");
        assert_eq!(registry.revision(), revision, "a refusal changes nothing");
    }

    #[test]
    fn a_bootstrap_token_with_a_tenant_is_refused() {
        let mut registry = Registry::new(RegistryConfig::default());
        let (token, _) = spec(4, Some("acme"));
        let refused = registry.apply(&Command::AclBootstrap(AclBootstrap { token }), &meta());
        assert_eq!(refused.unwrap_err().code(), "invalid_field");
        assert!(!registry.acl().bootstrapped());
    }
}
