//! Every token in force, indexed by accessor, by secret hash and by certificate SAN: part of
//! the registry's replicated state (the registry applies the commands that change it and
//! writes it into snapshots).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::token::{Accessor, SecretHash, Token, TokenSpec};

/// The tokens in force.
#[derive(Debug, Clone, Default)]
pub struct AclTable {
    bootstrapped: bool,
    tokens: BTreeMap<Accessor, Arc<Token>>,
    by_hash: HashMap<SecretHash, Accessor>,
    by_san: HashMap<String, Accessor>,
    /// Counts changes, so a node can tell its open watch streams to re-check their tokens
    /// after a revocation (derived: not in snapshots).
    generation: u64,
}

/// The table as a snapshot stores it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AclState {
    /// Whether the first operator token was made.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub bootstrapped: bool,
    /// Every token, by accessor.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tokens: Vec<Token>,
}

impl AclTable {
    /// Whether `muster acl bootstrap` already ran.
    pub fn bootstrapped(&self) -> bool {
        self.bootstrapped
    }

    /// The token a bearer secret belongs to. The lookup is by the secret's SHA-256 (what an
    /// observer could time is a hash it cannot invert), then confirmed in constant time.
    pub fn authenticate(&self, presented: &str) -> Option<Arc<Token>> {
        let hash = SecretHash::of(presented);
        let token = self.tokens.get(self.by_hash.get(&hash)?)?;
        token
            .spec
            .secret_hash
            .constant_time_eq(&hash)
            .then(|| Arc::clone(token))
    }

    /// The token bound to one of a verified certificate's SANs.
    pub fn by_certificate<'a>(&self, sans: impl IntoIterator<Item = &'a str>) -> Option<Arc<Token>> {
        sans.into_iter()
            .find_map(|san| self.by_san.get(san))
            .and_then(|accessor| self.tokens.get(accessor))
            .map(Arc::clone)
    }

    /// A token by accessor.
    pub fn get(&self, accessor: &Accessor) -> Option<&Arc<Token>> {
        self.tokens.get(accessor)
    }

    /// Every token, by accessor.
    pub fn tokens(&self) -> impl Iterator<Item = &Arc<Token>> {
        self.tokens.values()
    }

    /// The change count (see the field).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Why `spec` cannot be added: a bound broken, or an accessor, secret or SAN in use.
    pub fn check(&self, spec: &TokenSpec) -> Result<(), String> {
        spec.validate()?;
        if self.tokens.len() >= crate::token::MAX_TOKENS {
            return Err(format!(
                "the cluster holds {} tokens, the most it keeps",
                self.tokens.len()
            ));
        }
        if self.tokens.contains_key(&spec.accessor) {
            return Err(format!("accessor: {} is in use", spec.accessor));
        }
        if self.by_hash.contains_key(&spec.secret_hash) {
            return Err("secret_hash: in use by another token".into());
        }
        if let Some(san) = &spec.san
            && self.by_san.contains_key(san)
        {
            return Err(format!("san: '{san}' is bound to another token"));
        }
        Ok(())
    }

    /// Adds a token that passed [`AclTable::check`].
    pub fn insert(&mut self, token: Token) {
        let accessor = token.accessor().clone();
        self.by_hash.insert(token.spec.secret_hash, accessor.clone());
        if let Some(san) = &token.spec.san {
            self.by_san.insert(san.clone(), accessor.clone());
        }
        self.tokens.insert(accessor, Arc::new(token));
        self.generation += 1;
    }

    /// Records that the first operator token was made.
    pub fn set_bootstrapped(&mut self) {
        self.bootstrapped = true;
    }

    /// Removes a token; `None` if there is none by that accessor.
    pub fn revoke(&mut self, accessor: &Accessor) -> Option<Arc<Token>> {
        let token = self.tokens.remove(accessor)?;
        self.by_hash.remove(&token.spec.secret_hash);
        if let Some(san) = &token.spec.san {
            self.by_san.remove(san);
        }
        self.generation += 1;
        Some(token)
    }

    /// The table for a snapshot.
    pub fn export(&self) -> AclState {
        AclState {
            bootstrapped: self.bootstrapped,
            tokens: self.tokens.values().map(|t| Token::clone(t)).collect(),
        }
    }

    /// The table a snapshot holds; refused if two tokens share an accessor, secret or SAN.
    pub fn import(state: AclState) -> Result<AclTable, String> {
        let mut table = AclTable {
            bootstrapped: state.bootstrapped,
            ..AclTable::default()
        };
        for token in state.tokens {
            table.check(&token.spec)?;
            table.insert(Token::new(token.spec, token.created_at_ms, token.created_by));
        }
        Ok(table)
    }
}

#[cfg(test)]
mod tests {
    use muster_core::{Label, Principal};

    use super::*;
    use crate::rule::{Effect, Rule};
    use crate::token::Secret;

    fn spec(n: u8, san: Option<&str>) -> (TokenSpec, Secret) {
        let secret = Secret::from_random([n; 32]);
        let spec = TokenSpec {
            accessor: Accessor::from_random([n; 16]),
            secret_hash: secret.hash(),
            tenant: Some(Label::new("tenant", "acme").unwrap()),
            rules: vec![Rule::parse("prod/*=read", Effect::Allow).unwrap()],
            san: san.map(str::to_owned),
            description: String::new(),
            role: muster_core::Actor::App,
        };
        (spec, secret)
    }

    #[test]
    fn a_token_authenticates_by_secret_or_san_until_it_is_revoked() {
        let mut table = AclTable::default();
        let (spec, secret) = spec(1, Some("spiffe://acme/api"));
        table.check(&spec).unwrap();
        let accessor = spec.accessor.clone();
        table.insert(Token::new(spec, 5, Principal::new("operator").unwrap()));
        assert_eq!(table.authenticate(secret.as_str()).unwrap().accessor(), &accessor);
        assert!(table.authenticate("not-the-secret").is_none());
        assert!(table.by_certificate(["dns:x", "spiffe://acme/api"]).is_some());
        let generation = table.generation();
        assert!(table.revoke(&accessor).is_some());
        assert!(table.generation() > generation);
        assert!(table.authenticate(secret.as_str()).is_none());
        assert!(table.by_certificate(["spiffe://acme/api"]).is_none());
        assert!(table.revoke(&accessor).is_none());
    }

    #[test]
    fn duplicates_are_refused_and_export_import_round_trips() {
        let mut table = AclTable::default();
        let (first, _) = spec(1, Some("spiffe://acme/api"));
        table.insert(Token::new(first.clone(), 5, Principal::new("operator").unwrap()));
        assert!(table.check(&first).unwrap_err().starts_with("accessor"));
        let (mut second, _) = spec(2, Some("spiffe://acme/api"));
        assert!(table.check(&second).unwrap_err().starts_with("san"));
        second.secret_hash = first.secret_hash;
        assert!(table.check(&second).unwrap_err().starts_with("secret_hash"));
        table.set_bootstrapped();
        let state = table.export();
        let again = AclTable::import(serde_json::from_str(&serde_json::to_string(&state).unwrap()).unwrap()).unwrap();
        assert_eq!(again.export(), state);
        assert!(again.bootstrapped());
    }
}
