//! A rule: which namespaces and services, which verbs, allow or deny.
//!
//! Text form (the CLI's `--allow` / `--deny`): `NAMESPACE/SERVICE=VERB,...`, where each name
//! is exact (`prod`), a prefix (`pay*`) or any (`*`), and the verbs are wire names or `*`
//! for all of them: `prod/api=read,watch`, `prod/*=register,renew`, `*/*=*`.

use std::cmp::Ordering;
use std::fmt;

use serde::{Deserialize, Serialize};
use smol_str::SmolStr;

use crate::verb::{Verb, Verbs};

/// The longest name a pattern may hold: a DNS label.
const MAX_NAME: usize = 63;

/// Why a rule's text was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("rule '{text}': {reason} (expected NAMESPACE/SERVICE=VERB,..., e.g. prod/api=read,watch)")]
pub struct RuleError {
    /// The text as given.
    pub text: String,
    /// What is wrong with it.
    pub reason: String,
}

/// Which names a rule covers.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Pattern {
    /// Every name (`*`).
    Any,
    /// Names that start with this (`pay*`).
    Prefix(SmolStr),
    /// Exactly this name.
    Exact(SmolStr),
}

impl Pattern {
    /// Parses `*`, `prefix*` or a name.
    pub fn parse(text: &str) -> Result<Pattern, String> {
        let (name, prefix) = match text.strip_suffix('*') {
            Some("") => return Ok(Pattern::Any),
            Some(name) => (name, true),
            None => (text, false),
        };
        if name.is_empty() || name.len() > MAX_NAME {
            return Err(format!("'{text}': a name is 1 to {MAX_NAME} characters"));
        }
        if let Some(bad) = name.chars().find(|c| !matches!(c, 'a'..='z' | '0'..='9' | '-')) {
            return Err(format!(
                "'{}': '{}' is not allowed in a name (a-z, 0-9, '-'; '*' only at the end)",
                text.escape_debug(),
                bad.escape_debug()
            ));
        }
        Ok(if prefix {
            Pattern::Prefix(SmolStr::new(name))
        } else {
            Pattern::Exact(SmolStr::new(name))
        })
    }

    /// Whether `name` is covered.
    pub fn matches(&self, name: &str) -> bool {
        match self {
            Pattern::Any => true,
            Pattern::Prefix(prefix) => name.starts_with(prefix.as_str()),
            Pattern::Exact(exact) => name == exact.as_str(),
        }
    }

    /// How specific the pattern is: exact beats any prefix, a longer prefix beats a shorter
    /// one, and every prefix beats `*`.
    pub fn specificity(&self) -> (u8, usize) {
        match self {
            Pattern::Any => (0, 0),
            Pattern::Prefix(prefix) => (1, prefix.len()),
            Pattern::Exact(exact) => (2, exact.len()),
        }
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pattern::Any => f.write_str("*"),
            Pattern::Prefix(prefix) => write!(f, "{prefix}*"),
            Pattern::Exact(exact) => f.write_str(exact),
        }
    }
}

impl TryFrom<String> for Pattern {
    type Error = String;

    fn try_from(text: String) -> Result<Pattern, String> {
        Pattern::parse(&text)
    }
}

impl From<Pattern> for String {
    fn from(pattern: Pattern) -> String {
        pattern.to_string()
    }
}

/// Whether a matching rule lets the request through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// Let it through.
    Allow,
    /// Refuse it.
    Deny,
}

/// One rule of a token.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// The namespaces covered.
    pub namespace: Pattern,
    /// The services covered.
    pub service: Pattern,
    /// The verbs covered (never empty).
    pub verbs: Verbs,
    /// Allow or deny.
    pub effect: Effect,
}

impl Rule {
    /// Parses `NAMESPACE/SERVICE=VERB,...` with the given effect.
    pub fn parse(text: &str, effect: Effect) -> Result<Rule, RuleError> {
        let refuse = |reason: String| RuleError {
            text: text.to_owned(),
            reason,
        };
        let (names, verbs) = text
            .split_once('=')
            .ok_or_else(|| refuse("no '=' before the verbs".into()))?;
        let (namespace, service) = names
            .split_once('/')
            .ok_or_else(|| refuse("no '/' between namespace and service".into()))?;
        let namespace = Pattern::parse(namespace).map_err(&refuse)?;
        let service = Pattern::parse(service).map_err(&refuse)?;
        let verbs = parse_verbs(verbs).map_err(refuse)?;
        Ok(Rule {
            namespace,
            service,
            verbs,
            effect,
        })
    }

    /// Whether the rule covers `verb` on `namespace/service`.
    pub fn covers(&self, verb: Verb, namespace: &str, service: &str) -> bool {
        self.verbs.contains(verb) && self.namespace.matches(namespace) && self.service.matches(service)
    }

    /// Whether the rule covers every service of the tenant (`*/*`).
    pub fn is_tenant_wide(&self) -> bool {
        self.namespace == Pattern::Any && self.service == Pattern::Any
    }

    /// Namespace first, then service (see [`Pattern::specificity`]).
    pub fn specificity(&self) -> ((u8, usize), (u8, usize)) {
        (self.namespace.specificity(), self.service.specificity())
    }

    /// The order rules are tried in: most specific first, a deny before an allow of the same
    /// specificity; the first that covers a request decides it.
    pub(crate) fn precedence(a: &Rule, b: &Rule) -> Ordering {
        b.specificity()
            .cmp(&a.specificity())
            .then_with(|| (a.effect == Effect::Allow).cmp(&(b.effect == Effect::Allow)))
    }
}

impl fmt::Display for Rule {
    /// The text form, without the effect.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}={}", self.namespace, self.service, self.verbs)
    }
}

fn parse_verbs(text: &str) -> Result<Verbs, String> {
    if text.trim() == "*" {
        return Ok(Verbs::all());
    }
    let mut verbs = Vec::new();
    for word in text.split(',').map(str::trim) {
        let verb = Verb::parse(word).ok_or_else(|| {
            format!(
                "'{}' is not a verb (read, watch, register, renew, set_state, deregister, admin, metrics, or *)",
                word.escape_debug()
            )
        })?;
        verbs.push(verb);
    }
    Ok(verbs.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse_from_their_text_and_print_back() {
        let rule = Rule::parse("prod/api=read,watch", Effect::Allow).unwrap();
        assert_eq!(rule.namespace, Pattern::Exact("prod".into()));
        assert_eq!(rule.service, Pattern::Exact("api".into()));
        assert!(rule.verbs.contains(Verb::Watch) && !rule.verbs.contains(Verb::Register));
        assert_eq!(rule.to_string(), "prod/api=read,watch");
        let wide = Rule::parse("*/pay*=*", Effect::Deny).unwrap();
        assert_eq!(wide.service, Pattern::Prefix("pay".into()));
        assert_eq!(wide.verbs, Verbs::all());
        assert_eq!(wide.to_string(), "*/pay*=*");
    }

    #[test]
    fn malformed_rules_are_refused_with_a_reason() {
        for bad in [
            "prod=read",
            "prod/api",
            "prod/api=fly",
            "prod/api=",
            "Prod/api=read",
            "pr*d/api=read",
            "/api=read",
        ] {
            let err = Rule::parse(bad, Effect::Allow).unwrap_err();
            assert_eq!(err.text, bad);
            assert!(!err.reason.is_empty());
        }
    }

    #[test]
    fn rules_round_trip_through_json() {
        let rule = Rule::parse("prod/pay*=register,renew", Effect::Deny).unwrap();
        let json = serde_json::to_string(&rule).unwrap();
        assert_eq!(
            json,
            r#"{"namespace":"prod","service":"pay*","verbs":["register","renew"],"effect":"deny"}"#
        );
        assert_eq!(serde_json::from_str::<Rule>(&json).unwrap(), rule);
        assert!(serde_json::from_str::<Rule>(&json.replace("pay*", "p*y")).is_err());
    }
}
