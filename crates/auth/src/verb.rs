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
///
/// Every verb but `metrics` stands for every verb (`*`): `metrics` came with registry format
/// 2, and a token's `*` written before it, or read by a build before it, lists the seven
/// others. So `*` is written as those seven (a build of the second wave reads it), and read
/// back as every verb; only a set naming `metrics` without all the others is new to the log
/// (architecture.md "Formats and versions").
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

impl Verbs {
    /// Every verb a registry of format 1 knows: all but `metrics`.
    fn first_format() -> Verbs {
        Verbs::all().without(Verb::Metrics)
    }

    /// Whether writing the set needs registry format 2: it names `metrics` and is not `*`.
    pub fn needs_format_2(self) -> bool {
        self.contains(Verb::Metrics) && self != Verbs::all()
    }
}

impl From<Vec<Verb>> for Verbs {
    fn from(verbs: Vec<Verb>) -> Verbs {
        let set: Verbs = verbs.into_iter().collect();
        if set.0 & Verbs::first_format().0 == Verbs::first_format().0 {
            Verbs::all()
        } else {
            set
        }
    }
}

impl From<Verbs> for Vec<Verb> {
    fn from(verbs: Verbs) -> Vec<Verb> {
        let written = if verbs == Verbs::all() {
            Verbs::first_format()
        } else {
            verbs
        };
        written.iter().collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A token's `*` stays readable by a build of registry format 1, which knows no `metrics`
    /// verb (architecture.md "Formats and versions"), and means every verb when read back.
    #[test]
    fn every_verb_is_written_as_the_seven_a_format_1_build_knows_and_read_back_as_every_verb() {
        let written = serde_json::to_value(Verbs::all()).unwrap();
        assert_eq!(
            written,
            serde_json::json!(["read", "watch", "register", "renew", "set_state", "deregister", "admin"])
        );
        assert_eq!(serde_json::from_value::<Verbs>(written).unwrap(), Verbs::all());
        assert!(!Verbs::all().needs_format_2());
        let metrics: Verbs = [Verb::Metrics].into_iter().collect();
        assert_eq!(serde_json::to_value(metrics).unwrap(), serde_json::json!(["metrics"]));
        assert!(metrics.needs_format_2());
        let some: Verbs = [Verb::Read, Verb::Watch].into_iter().collect();
        assert_eq!(
            serde_json::from_value::<Verbs>(serde_json::to_value(some).unwrap()).unwrap(),
            some
        );
        assert!(!some.needs_format_2());
    }
}
