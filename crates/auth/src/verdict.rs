//! The verdict: does a token's rule set let this request through?
//!
//! A request names a tenant (or none, for the cluster-wide routes), a [`Scope`] and a verb.
//! Rules are kept sorted by precedence ([`Rule::precedence`]: most specific first, deny
//! before allow), so the verdict for one service is the first rule that covers it. The
//! property test below checks that this agrees, refusal for refusal, with the rule as stated
//! (the most specific matches decide, deny wins ties, default deny), evaluated literally by
//! a reference that shares no matching or ordering code with it.

use std::fmt;

use muster_core::Label;

use crate::rule::{Effect, Rule};
use crate::verb::Verb;

/// What a request touches, inside its tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope<'a> {
    /// One service: reads, watches and writes of it.
    Service {
        /// The namespace.
        namespace: &'a str,
        /// The service.
        service: &'a str,
    },
    /// Some service of a namespace: a list or a namespace watch passes this gate when an
    /// allow rule for the verb names the namespace. The gate grants nothing by itself: the
    /// results are then filtered service by service with [`Scope::Service`].
    Namespace(&'a str),
    /// Some service of the tenant: leases, which belong to the tenant, not to a service,
    /// pass when an allow rule for the verb exists. A lease carries no endpoint by itself;
    /// what attaches to it is judged per service.
    AnyService,
    /// The tenant as a whole (token management, the audit trail): only `*/*` rules count.
    Whole,
    /// Every service of the tenant at once: a lease granted without a service, which any
    /// of the tenant's endpoints may hold (SPEC L4). A `*/*` rule must allow the verb and no
    /// deny rule may name it, whatever it covers.
    EveryService,
}

/// One request, as the verdict sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request<'a> {
    /// The tenant the request names; `None` for the cluster-wide routes (policy,
    /// membership), which only an operator token may use.
    pub tenant: Option<&'a Label>,
    /// What it touches.
    pub scope: Scope<'a>,
    /// What it does.
    pub verb: Verb,
}

/// Why a request was refused: the audit trail and the error message say this.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denial {
    /// The token belongs to another tenant than the one the request names (SPEC S3).
    OtherTenant {
        /// The token's tenant.
        token: Label,
        /// The tenant the request names.
        asked: Label,
    },
    /// A cluster-wide route, and the token is a tenant's.
    OperatorOnly,
    /// No rule of the token covers the request (default deny).
    NoRule,
    /// A deny rule decided.
    DeniedBy(Rule),
}

impl fmt::Display for Denial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Denial::OtherTenant { token, asked } => {
                write!(f, "the token belongs to tenant '{token}', not '{asked}'")
            }
            Denial::OperatorOnly => f.write_str("only an operator token may use cluster-wide routes"),
            Denial::NoRule => f.write_str("no rule of the token allows it"),
            Denial::DeniedBy(rule) => write!(f, "denied by the rule '{rule}'"),
        }
    }
}

/// The verdict for `request` by a token of `tenant` (`None`: an operator token) whose
/// `rules` are sorted by precedence.
pub(crate) fn authorize(tenant: Option<&Label>, rules: &[Rule], request: &Request<'_>) -> Result<(), Denial> {
    match (tenant, request.tenant) {
        (Some(own), Some(asked)) if own != asked => {
            return Err(Denial::OtherTenant {
                token: own.clone(),
                asked: asked.clone(),
            });
        }
        (Some(_), None) => return Err(Denial::OperatorOnly),
        _ => {}
    }
    let verb = request.verb;
    let decided = match request.scope {
        Scope::Service { namespace, service } => rules.iter().find(|r| r.covers(verb, namespace, service)),
        Scope::Namespace(namespace) => rules
            .iter()
            .find(|r| r.effect == Effect::Allow && r.verbs.contains(verb) && r.namespace.matches(namespace)),
        Scope::AnyService => rules
            .iter()
            .find(|r| r.effect == Effect::Allow && r.verbs.contains(verb)),
        Scope::Whole => rules.iter().find(|r| r.is_tenant_wide() && r.verbs.contains(verb)),
        Scope::EveryService => rules
            .iter()
            .find(|r| r.effect == Effect::Deny && r.verbs.contains(verb))
            .or_else(|| rules.iter().find(|r| r.is_tenant_wide() && r.verbs.contains(verb))),
    };
    match decided {
        Some(rule) if rule.effect == Effect::Allow => Ok(()),
        Some(rule) => Err(Denial::DeniedBy(rule.clone())),
        None => Err(Denial::NoRule),
    }
}

#[cfg(test)]
mod tests {
    use std::cmp::Ordering;

    use proptest::prelude::*;

    use super::*;
    use crate::rule::Pattern;

    /// A name pattern read naively, straight from its text form's meaning (`*`, `prefix*`,
    /// `name`), without [`Pattern::matches`].
    fn naive_match(pattern: &Pattern, name: &str) -> bool {
        match pattern {
            Pattern::Any => true,
            Pattern::Prefix(prefix) => name.get(..prefix.len()) == Some(prefix.as_str()),
            Pattern::Exact(exact) => name == exact.as_str(),
        }
    }

    /// Which of two patterns that both match one name is the more specific, as SPEC S2 states
    /// it: an exact name beats any prefix, a longer prefix a shorter one, any prefix `*`.
    /// Pairwise, written without [`Pattern::specificity`].
    fn naive_narrower(a: &Pattern, b: &Pattern) -> Ordering {
        match (a, b) {
            (Pattern::Exact(_), Pattern::Exact(_)) | (Pattern::Any, Pattern::Any) => Ordering::Equal,
            (Pattern::Exact(_), _) | (Pattern::Prefix(_), Pattern::Any) => Ordering::Greater,
            (_, Pattern::Exact(_)) | (Pattern::Any, Pattern::Prefix(_)) => Ordering::Less,
            (Pattern::Prefix(a), Pattern::Prefix(b)) => a.len().cmp(&b.len()),
        }
    }

    /// A rule against another, both covering one request: the namespace decides, then the
    /// service.
    fn naive_rule_narrower(a: &Rule, b: &Rule) -> Ordering {
        naive_narrower(&a.namespace, &b.namespace).then_with(|| naive_narrower(&a.service, &b.service))
    }

    /// The rule as SPEC S2 and S3 state it, evaluated literally and independently of the
    /// implementation (no `covers`, `specificity`, `precedence` or sorted order): another
    /// tenant's request is refused as such, a tenant token on a cluster-wide route as such;
    /// among the rules that cover the request, those no other covering rule is narrower than
    /// decide, a deny among them wins (refused by that deny), none covering is `NoRule`.
    /// `Err` holds every refusal the rule allows (several decisive denies tie).
    fn reference(tenant: Option<&Label>, rules: &[Rule], request: &Request<'_>) -> Result<(), Vec<Denial>> {
        match (tenant, request.tenant) {
            (Some(own), Some(asked)) if own != asked => {
                return Err(vec![Denial::OtherTenant {
                    token: own.clone(),
                    asked: asked.clone(),
                }]);
            }
            (Some(_), None) => return Err(vec![Denial::OperatorOnly]),
            _ => {}
        }
        let verb = request.verb;
        let has_verb = |r: &Rule| Verb::ALL.iter().any(|v| *v == verb && r.verbs.contains(*v));
        let covering: Vec<&Rule> = match request.scope {
            Scope::Service { namespace, service } => rules
                .iter()
                .filter(|r| has_verb(r) && naive_match(&r.namespace, namespace) && naive_match(&r.service, service))
                .collect(),
            Scope::Whole => rules
                .iter()
                .filter(|r| has_verb(r) && r.namespace == Pattern::Any && r.service == Pattern::Any)
                .collect(),
            // Any deny rule of the verb refuses; else as the whole tenant.
            Scope::EveryService => {
                let denies: Vec<Denial> = rules
                    .iter()
                    .filter(|r| r.effect == Effect::Deny && has_verb(r))
                    .map(|r| Denial::DeniedBy(r.clone()))
                    .collect();
                if !denies.is_empty() {
                    return Err(denies);
                }
                rules
                    .iter()
                    .filter(|r| has_verb(r) && r.namespace == Pattern::Any && r.service == Pattern::Any)
                    .collect()
            }
            // Only an allow rule opens these gates; no deny refuses them here.
            Scope::Namespace(namespace) => {
                let allowed = rules
                    .iter()
                    .any(|r| r.effect == Effect::Allow && has_verb(r) && naive_match(&r.namespace, namespace));
                return if allowed { Ok(()) } else { Err(vec![Denial::NoRule]) };
            }
            Scope::AnyService => {
                let allowed = rules.iter().any(|r| r.effect == Effect::Allow && has_verb(r));
                return if allowed { Ok(()) } else { Err(vec![Denial::NoRule]) };
            }
        };
        if covering.is_empty() {
            return Err(vec![Denial::NoRule]);
        }
        let decisive: Vec<&Rule> = covering
            .iter()
            .filter(|r| {
                !covering
                    .iter()
                    .any(|other| naive_rule_narrower(other, r) == Ordering::Greater)
            })
            .copied()
            .collect();
        let denies: Vec<Denial> = decisive
            .iter()
            .filter(|r| r.effect == Effect::Deny)
            .map(|r| Denial::DeniedBy((*r).clone()))
            .collect();
        if denies.is_empty() { Ok(()) } else { Err(denies) }
    }

    const NAMES: [&str; 5] = ["a", "ab", "abc", "b", "api"];

    fn pattern() -> impl Strategy<Value = Pattern> {
        prop_oneof![
            Just(Pattern::Any),
            proptest::sample::select(&["a", "ab", "b"][..]).prop_map(|p| Pattern::Prefix(p.into())),
            proptest::sample::select(&NAMES[..]).prop_map(|n| Pattern::Exact(n.into())),
        ]
    }

    fn rule() -> impl Strategy<Value = Rule> {
        (
            pattern(),
            pattern(),
            proptest::collection::vec(proptest::sample::select(&Verb::ALL[..]), 1..4),
            any::<bool>(),
        )
            .prop_map(|(namespace, service, verbs, allow)| Rule {
                namespace,
                service,
                verbs: verbs.into_iter().collect(),
                effect: if allow { Effect::Allow } else { Effect::Deny },
            })
    }

    fn scope() -> impl Strategy<Value = (u8, &'static str, &'static str)> {
        (
            0u8..5,
            proptest::sample::select(&NAMES[..]),
            proptest::sample::select(&NAMES[..]),
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn the_verdict_agrees_with_the_rule_as_stated(
            rules in proptest::collection::vec(rule(), 0..8),
            token_tenant in proptest::option::of(0u8..2),
            asked_tenant in proptest::option::of(0u8..2),
            (kind, namespace, service) in scope(),
            verb in proptest::sample::select(&Verb::ALL[..]),
        ) {
            let tenants = [Label::new("tenant", "t0").unwrap(), Label::new("tenant", "t1").unwrap()];
            let own = token_tenant.map(|t| &tenants[usize::from(t)]);
            let asked = asked_tenant.map(|t| &tenants[usize::from(t)]);
            let scope = match kind {
                0 => Scope::Service { namespace, service },
                1 => Scope::Namespace(namespace),
                2 => Scope::AnyService,
                3 => Scope::EveryService,
                _ => Scope::Whole,
            };
            let request = Request { tenant: asked, scope, verb };
            let mut sorted = rules.clone();
            sorted.sort_by(Rule::precedence);
            // Not only allow or refuse: which refusal (the kind, and for a deny the rule).
            match (authorize(own, &sorted, &request), reference(own, &rules, &request)) {
                (Ok(()), Ok(())) => {}
                (Err(denial), Err(expected)) => prop_assert!(
                    expected.contains(&denial),
                    "refused with {:?}, the rule as stated refuses with one of {:?}", denial, expected
                ),
                (got, expected) => prop_assert!(false, "verdict {:?}, the rule as stated gives {:?}", got, expected),
            }
        }
    }

    fn rules(allow: &[&str], deny: &[&str]) -> Vec<Rule> {
        let mut rules: Vec<Rule> = allow
            .iter()
            .map(|t| Rule::parse(t, Effect::Allow).unwrap())
            .chain(deny.iter().map(|t| Rule::parse(t, Effect::Deny).unwrap()))
            .collect();
        rules.sort_by(Rule::precedence);
        rules
    }

    fn service<'a>(tenant: &'a Label, namespace: &'a str, service: &'a str, verb: Verb) -> Request<'a> {
        Request {
            tenant: Some(tenant),
            scope: Scope::Service { namespace, service },
            verb,
        }
    }

    #[test]
    fn the_most_specific_rule_wins_and_deny_wins_a_tie() {
        let acme = Label::new("tenant", "acme").unwrap();
        let rules = rules(
            &["prod/*=read,watch", "prod/pay*=register"],
            &["prod/payroll=read", "*/*=register"],
        );
        let own = Some(&acme);
        assert!(authorize(own, &rules, &service(&acme, "prod", "api", Verb::Read)).is_ok());
        assert_eq!(
            authorize(own, &rules, &service(&acme, "prod", "payroll", Verb::Read)),
            Err(Denial::DeniedBy(
                Rule::parse("prod/payroll=read", Effect::Deny).unwrap()
            ))
        );
        // prod/pay* is more specific than the */* deny.
        assert!(authorize(own, &rules, &service(&acme, "prod", "payments", Verb::Register)).is_ok());
        assert!(authorize(own, &rules, &service(&acme, "prod", "api", Verb::Register)).is_err());
        assert_eq!(
            authorize(own, &rules, &service(&acme, "dev", "api", Verb::Read)),
            Err(Denial::NoRule)
        );
        let tie = self::rules(&["prod/api=read"], &["prod/api=read"]);
        assert!(authorize(own, &tie, &service(&acme, "prod", "api", Verb::Read)).is_err());
    }

    #[test]
    fn a_tenant_token_never_reaches_another_tenant_or_the_cluster_routes() {
        let acme = Label::new("tenant", "acme").unwrap();
        let other = Label::new("tenant", "other").unwrap();
        let everything = rules(&["*/*=*"], &[]);
        assert_eq!(
            authorize(Some(&acme), &everything, &service(&other, "prod", "api", Verb::Read)),
            Err(Denial::OtherTenant {
                token: acme.clone(),
                asked: other.clone()
            })
        );
        let cluster = Request {
            tenant: None,
            scope: Scope::Whole,
            verb: Verb::Admin,
        };
        assert_eq!(authorize(Some(&acme), &everything, &cluster), Err(Denial::OperatorOnly));
        assert!(authorize(None, &everything, &cluster).is_ok());
        assert!(authorize(None, &everything, &service(&other, "prod", "api", Verb::Read)).is_ok());
    }

    #[test]
    fn only_tenant_wide_rules_decide_for_the_whole_tenant() {
        let acme = Label::new("tenant", "acme").unwrap();
        let whole = Request {
            tenant: Some(&acme),
            scope: Scope::Whole,
            verb: Verb::Admin,
        };
        assert!(authorize(Some(&acme), &rules(&["prod/*=admin"], &[]), &whole).is_err());
        assert!(authorize(Some(&acme), &rules(&["*/*=admin"], &[]), &whole).is_ok());
    }
}
