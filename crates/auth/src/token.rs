//! Tokens: a public accessor (what lists, audit and revocation name), a secret shown once
//! and stored only as its SHA-256, the tenant it belongs to and its rules.

use std::fmt;

use muster_core::{Actor, Label, Principal};
use serde::{Deserialize, Serialize};
use smol_str::SmolStr;

use crate::rule::Rule;
use crate::verdict::{Denial, Request, authorize};

/// Random bytes in a secret and in an accessor: 256 bits for the secret (SPEC S1), 128 for
/// the accessor, which is public and only has to be unique.
pub const SECRET_BYTES: usize = 32;
const ACCESSOR_BYTES: usize = 16;

/// The prefix of a token's principal (`token:<accessor>`).
pub const TOKEN_PRINCIPAL: &str = "token:";

/// Most tokens a cluster holds: bounds the replicated table and every snapshot.
pub const MAX_TOKENS: usize = 100_000;

/// Most rules one token may carry.
pub const MAX_RULES: usize = 64;
/// Longest description.
pub const MAX_DESCRIPTION: usize = 256;
/// Longest certificate SAN a token may be bound to.
pub const MAX_SAN: usize = 512;

/// A token's public id: 32 lowercase hex digits.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Accessor(SmolStr);

impl Accessor {
    /// An accessor from random bytes.
    pub fn from_random(bytes: [u8; ACCESSOR_BYTES]) -> Accessor {
        Accessor(SmolStr::new(hex(&bytes)))
    }

    /// Validates an accessor's text.
    pub fn parse(text: &str) -> Result<Accessor, String> {
        if text.len() == 2 * ACCESSOR_BYTES && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            Ok(Accessor(SmolStr::new(text)))
        } else {
            Err(format!(
                "accessor: '{}' is not an accessor ({} lowercase hex digits)",
                text.escape_debug(),
                2 * ACCESSOR_BYTES
            ))
        }
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Accessor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for Accessor {
    type Error = String;

    fn try_from(text: String) -> Result<Accessor, String> {
        Accessor::parse(&text)
    }
}

impl From<Accessor> for String {
    fn from(accessor: Accessor) -> String {
        accessor.0.into()
    }
}

/// A bearer secret: 64 hex digits of 256 random bits. Shown once, at creation; `Debug`
/// does not print it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// A secret from random bytes (the caller draws them from the OS).
    pub fn from_random(bytes: [u8; SECRET_BYTES]) -> Secret {
        Secret(hex(&bytes))
    }

    /// The text a client sends as `Authorization: Bearer <text>`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Its hash, the only form stored.
    pub fn hash(&self) -> SecretHash {
        SecretHash::of(&self.0)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// The SHA-256 of a secret's text, serialised as hex.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SecretHash([u8; 32]);

impl SecretHash {
    /// The hash of whatever a client presented.
    pub fn of(presented: &str) -> SecretHash {
        let digest = ring::digest::digest(&ring::digest::SHA256, presented.as_bytes());
        let mut bytes = [0; 32];
        bytes.copy_from_slice(digest.as_ref());
        SecretHash(bytes)
    }

    /// Equality that takes the same time wherever the first difference is.
    pub fn constant_time_eq(&self, other: &SecretHash) -> bool {
        let difference = self.0.iter().zip(other.0.iter()).fold(0u8, |acc, (a, b)| acc | (a ^ b));
        std::hint::black_box(difference) == 0
    }
}

impl fmt::Debug for SecretHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretHash({}..)", &hex(&self.0)[..8])
    }
}

impl TryFrom<String> for SecretHash {
    type Error = String;

    fn try_from(text: String) -> Result<SecretHash, String> {
        let bytes = unhex(&text)
            .filter(|b| b.len() == 32)
            .ok_or("secret_hash: expected 64 hex digits")?;
        let mut hash = [0; 32];
        hash.copy_from_slice(&bytes);
        Ok(SecretHash(hash))
    }
}

impl From<SecretHash> for String {
    fn from(hash: SecretHash) -> String {
        hex(&hash.0)
    }
}

/// What a token-creating command carries: everything but the creation facts, which the
/// registry takes from the command's metadata when it applies it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenSpec {
    /// The public id.
    pub accessor: Accessor,
    /// The secret's hash.
    pub secret_hash: SecretHash,
    /// The tenant it belongs to; none: an operator token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<Label>,
    /// Its rules, in any order.
    pub rules: Vec<Rule>,
    /// A client certificate SAN (URI or DNS name) that authenticates as this token over
    /// mutual TLS, instead of the secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub san: Option<String>,
    /// What it is for, in words.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// The authority it speaks with (SPEC L5): the lifecycle owner, the application or its
    /// checker. `app` unless given, and then not written, so a token without a role reads
    /// as before; an operator token speaks as any role ([`Token::role`]).
    #[serde(default = "app", skip_serializing_if = "is_app")]
    pub role: Actor,
}

fn app() -> Actor {
    Actor::App
}

fn is_app(role: &Actor) -> bool {
    *role == Actor::App
}

impl TokenSpec {
    /// Checks the bounds: rules, description, SAN.
    pub fn validate(&self) -> Result<(), String> {
        if self.rules.len() > MAX_RULES {
            return Err(format!("rules: at most {MAX_RULES}, got {}", self.rules.len()));
        }
        if self.rules.iter().any(|r| r.verbs.is_empty()) {
            return Err("rules: a rule needs at least one verb".into());
        }
        if self.description.len() > MAX_DESCRIPTION || self.description.chars().any(char::is_control) {
            return Err(format!(
                "description: at most {MAX_DESCRIPTION} bytes without control characters"
            ));
        }
        if let Some(san) = &self.san
            && (san.is_empty() || san.len() > MAX_SAN || !san.bytes().all(|b| b.is_ascii_graphic()))
        {
            return Err(format!("san: 1 to {MAX_SAN} printable ASCII characters"));
        }
        if self.tenant.is_none() && self.role != Actor::App {
            return Err("role: an operator token speaks as any role; a role is for a tenant's token".into());
        }
        Ok(())
    }
}

/// A token in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Token {
    /// What it was created with; its rules sorted by precedence.
    #[serde(flatten)]
    pub spec: TokenSpec,
    /// When its creation committed (the command's time).
    pub created_at_ms: u64,
    /// Who created it.
    pub created_by: Principal,
}

impl Token {
    /// A token from its spec and the facts of the command that creates it.
    pub fn new(mut spec: TokenSpec, created_at_ms: u64, created_by: Principal) -> Token {
        spec.rules.sort_by(Rule::precedence);
        Token {
            spec,
            created_at_ms,
            created_by,
        }
    }

    /// Its public id.
    pub fn accessor(&self) -> &Accessor {
        &self.spec.accessor
    }

    /// Its tenant; none for an operator token.
    pub fn tenant(&self) -> Option<&Label> {
        self.spec.tenant.as_ref()
    }

    /// The principal it acts as: `token:<accessor>`, recorded in audit records and as the
    /// registrar of what it writes.
    pub fn principal(&self) -> Principal {
        Principal::new(&format!("{TOKEN_PRINCIPAL}{}", self.spec.accessor))
            .expect("an accessor makes a valid principal")
    }

    /// The authority it speaks with when the request names none (SPEC L5): its role; the
    /// owner's for an operator token, which may speak as any role.
    pub fn role(&self) -> Actor {
        if self.spec.tenant.is_none() {
            Actor::Owner
        } else {
            self.spec.role
        }
    }

    /// Whether it may speak as `actor`: a role may narrow (an owner speaks as the app or its
    /// checker), never widen; the app and the checker speak only as themselves.
    pub fn may_speak_as(&self, actor: Actor) -> bool {
        let role = self.role();
        role == actor || role == Actor::Owner
    }

    /// The verdict for `request`.
    pub fn authorize(&self, request: &Request<'_>) -> Result<(), Denial> {
        authorize(self.spec.tenant.as_ref(), &self.spec.rules, request)
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(2 * bytes.len());
    for byte in bytes {
        text.push(char::from(DIGITS[usize::from(byte >> 4)]));
        text.push(char::from(DIGITS[usize::from(byte & 0xf)]));
    }
    text
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_is_stored_only_as_its_hash_and_matches_only_itself() {
        let secret = Secret::from_random([7; SECRET_BYTES]);
        assert_eq!(secret.as_str().len(), 64);
        assert_eq!(format!("{secret:?}"), "Secret(..)");
        let hash = secret.hash();
        assert!(hash.constant_time_eq(&SecretHash::of(secret.as_str())));
        assert!(!hash.constant_time_eq(&SecretHash::of("07")));
        let json = serde_json::to_string(&hash).unwrap();
        assert!(!json.contains(secret.as_str()));
        assert_eq!(serde_json::from_str::<SecretHash>(&json).unwrap(), hash);
        assert!(serde_json::from_str::<SecretHash>("\"abc\"").is_err());
    }

    #[test]
    fn accessors_are_hex_of_a_fixed_length() {
        let accessor = Accessor::from_random([0xab; 16]);
        assert_eq!(Accessor::parse(accessor.as_str()), Ok(accessor));
        assert!(Accessor::parse("ABAB").is_err());
        assert!(Accessor::parse(&"g".repeat(32)).is_err());
    }
}
