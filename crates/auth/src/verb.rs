//! The verbs a rule grants or denies, and a small set of them.

use std::fmt;

use serde::{Deserialize, Serialize};

/// What a request does. The wire spelling is the snake_case name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verb {
    /// Snapshot reads, service lists, blocking queries.
    Read,
    /// Watch streams.
    Watch,
    /// Register an endpoint; grant a lease.
    Register,
    /// Renew a lease; report a TTL check or requests in flight.
    Renew,
    /// Report serving state; drain.
    SetState,
    /// Deregister an endpoint; revoke a lease.
    Deregister,
    /// Manage tokens, read the audit trail; for an operator token also the cluster-wide
    /// routes (policy, membership).
    Admin,
    /// Scrape `/v1/metrics`: a tenant's series, with a `*/*` rule (operators see every
    /// series). Needs registry format 2 (architecture.md "Formats and versions").
    Metrics,
}

impl Verb {
    /// Every verb, in order.
    pub const ALL: [Verb; 8] = [
        Verb::Read,
        Verb::Watch,
        Verb::Register,
        Verb::Renew,
        Verb::SetState,
        Verb::Deregister,
        Verb::Admin,
        Verb::Metrics,
    ];

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Read => "read",
            Verb::Watch => "watch",
            Verb::Register => "register",
            Verb::Renew => "renew",
            Verb::SetState => "set_state",
            Verb::Deregister => "deregister",
            Verb::Admin => "admin",
            Verb::Metrics => "metrics",
        }
    }

    /// Parses a wire spelling.
    pub fn parse(text: &str) -> Option<Verb> {
        Verb::ALL.into_iter().find(|verb| verb.as_str() == text)
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A set of verbs (a bit set), serialised as a list of their names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(from = "Vec<Verb>", into = "Vec<Verb>")]
pub struct Verbs(u8);

impl Verbs {
    /// Every verb.
    pub fn all() -> Verbs {
        Verb::ALL.into_iter().collect()
    }

    /// Whether `verb` is in the set.
    pub fn contains(self, verb: Verb) -> bool {
        self.0 & verb.bit() != 0
    }

    /// The set without `verb`.
    #[must_use]
    pub fn without(self, verb: Verb) -> Verbs {
        Verbs(self.0 & !verb.bit())
    }

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The verbs in the set, in order.
    pub fn iter(self) -> impl Iterator<Item = Verb> {
        Verb::ALL.into_iter().filter(move |verb| self.contains(*verb))
    }
}

impl FromIterator<Verb> for Verbs {
    fn from_iter<I: IntoIterator<Item = Verb>>(verbs: I) -> Verbs {
        Verbs(verbs.into_iter().fold(0, |bits, verb| bits | verb.bit()))
    }
}

impl From<Vec<Verb>> for Verbs {
    fn from(verbs: Vec<Verb>) -> Verbs {
        verbs.into_iter().collect()
    }
}

impl From<Verbs> for Vec<Verb> {
    fn from(verbs: Verbs) -> Vec<Verb> {
        verbs.iter().collect()
    }
}

impl fmt::Display for Verbs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == Verbs::all() {
            return f.write_str("*");
        }
        for (i, verb) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            f.write_str(verb.as_str())?;
        }
        Ok(())
    }
}
