//! Who may do what (SPEC S1, S2): bearer tokens, the rules they carry, and the pure verdict.
//!
//! ```text
//!  bearer secret ──SHA-256──▶ AclTable::authenticate ──▶ Token { tenant, rules }
//!  (or a verified certificate SAN bound to a token)            │
//!                                                               ▼
//!  Request { tenant, scope, verb } ─────────────────▶ Token::authorize ──▶ Allow | Deny(reason)
//! ```
//!
//! - A token belongs to one tenant, or is an operator token (no tenant: every tenant, and the
//!   cluster-wide routes).
//! - A [`Rule`] is `NAMESPACE/SERVICE=VERB,...`, each side exact, `prefix*` or `*`, allow or
//!   deny. The most specific matching rule decides (namespace first, then service; exact
//!   beats a longer prefix beats a shorter prefix beats `*`); a deny wins a tie; no matching
//!   rule denies.
//! - A token creates only tokens within its own rights ([`mint::within`]).
//! - Secrets are 256 random bits, stored only as SHA-256 hashes, compared in constant time.
//!   The table is replicated state (the registry holds it; its commands go through the Raft
//!   log), so every node judges alike.
//!
//! Nothing here reads a clock or draws randomness: the server passes the secret's random
//! bytes in (STYLE.md rule 3).

#![forbid(unsafe_code)]

pub mod mint;
mod rule;
mod table;
mod token;
mod verb;
mod verdict;

pub use rule::{Effect, Pattern, Rule, RuleError};
pub use table::{AclState, AclTable};
pub use token::{
    Accessor, MAX_DESCRIPTION, MAX_RULES, MAX_SAN, MAX_TOKENS, SECRET_BYTES, Secret, SecretHash, TOKEN_PRINCIPAL,
    Token, TokenSpec,
};
pub use verb::{Verb, Verbs};
pub use verdict::{Denial, Request, Scope};
