//! Minting within the minter (SPEC S2): a token may create only tokens whose every allowed
//! (service, verb) it is itself allowed, its own deny rules included.
//!
//! The rules of both tokens name finitely many patterns, and a verdict on one name depends
//! only on which of them match it. So for each side of a rule (namespace, service) a few
//! representative names stand for every name: each exact name, and for each prefix pattern
//! (and for none) one name whose longest matching prefix is that one and which no exact
//! name equals. Checking every pair of representatives under every verb is checking every
//! service there is. The property test compares this with a brute force over a small world.

use std::collections::BTreeSet;
use std::fmt;

use muster_core::Label;

use crate::rule::{Effect, Pattern, Rule};
use crate::verb::Verb;
use crate::verdict::{Request, Scope, authorize};

/// A right the new token's rules would grant that the minter lacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lacking {
    /// The new token's rule that grants it.
    pub rule: Rule,
    /// The verb.
    pub verb: Verb,
    /// Where: `namespace/service`, or `*/*` for the tenant as a whole.
    pub target: String,
}

impl fmt::Display for Lacking {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the rule '{}' would allow {} on {}, which the creating token is not allowed",
            self.rule, self.verb, self.target
        )
    }
}

/// The characters of a name (`Pattern::parse`).
const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789-";

/// One name per region of `patterns`: every exact name, and per prefix (and for none) a
/// name whose longest matching prefix it is and that is no exact name, when there is one.
fn representatives<'a>(patterns: impl Iterator<Item = &'a Pattern>) -> Vec<String> {
    let (mut prefixes, mut exacts) = (BTreeSet::new(), BTreeSet::new());
    for pattern in patterns {
        match pattern {
            Pattern::Any => {}
            Pattern::Prefix(prefix) => {
                prefixes.insert(prefix.to_string());
            }
            Pattern::Exact(exact) => {
                exacts.insert(exact.to_string());
            }
        }
    }
    let mut names: Vec<String> = exacts.iter().cloned().collect();
    for base in std::iter::once(String::new()).chain(prefixes.iter().cloned()) {
        names.extend(member(&base, &prefixes, &exacts));
    }
    names
}

/// A name whose longest matching prefix pattern is `base` (none: `""`) and that no exact
/// pattern names, if there is one. Depth first from `base`: a name under a longer prefix
/// pattern leaves the region with all its extensions; a name that is neither is a member;
/// only the base and exact names are looked under. The search is complete: every proper
/// prefix (from `base`) of the region's shortest member is exact or the empty base, so
/// the search reaches it, and it looks under at most `exacts + 2` names.
fn member(base: &str, prefixes: &BTreeSet<String>, exacts: &BTreeSet<String>) -> Option<String> {
    let outside = |name: &str| {
        prefixes
            .iter()
            .any(|p| p.len() > base.len() && name.starts_with(p.as_str()))
    };
    let mut stack = vec![base.to_owned()];
    while let Some(name) = stack.pop() {
        if outside(&name) {
            continue;
        }
        if !name.is_empty() && !exacts.contains(&name) {
            return Some(name);
        }
        stack.extend(ALPHABET.iter().rev().map(|c| format!("{name}{}", char::from(*c))));
    }
    None
}

/// Whether a token of `minter_tenant` with `minter` rules (sorted by precedence, as a
/// `Token`'s are) may create a token of `tenant` with `rules`: `Err` names the first right
/// the new rules grant that the minter lacks. The tenant check itself (a tenant's admin
/// makes only its own tenant's tokens) is the caller's.
pub fn within(
    minter_tenant: Option<&Label>,
    minter: &[Rule],
    tenant: Option<&Label>,
    rules: &[Rule],
) -> Result<(), Lacking> {
    let mut sorted = rules.to_vec();
    sorted.sort_by(Rule::precedence);
    let namespaces = representatives(minter.iter().chain(&sorted).map(|r| &r.namespace));
    let services = representatives(minter.iter().chain(&sorted).map(|r| &r.service));
    let granting = |verb: Verb, namespace: &str, service: &str| {
        sorted
            .iter()
            .find(|r| r.covers(verb, namespace, service))
            .filter(|r| r.effect == Effect::Allow)
            .cloned()
    };
    for verb in Verb::ALL {
        // The tenant as a whole (token management, the audit trail), and every service of
        // it at once (a lease of the whole tenant): only `*/*` rules grant them.
        for (scope, target) in [
            (Scope::Whole, "*/*"),
            (Scope::EveryService, "every service of the tenant"),
        ] {
            let asked = Request { tenant, scope, verb };
            if authorize(tenant, &sorted, &asked).is_ok() && authorize(minter_tenant, minter, &asked).is_err() {
                let rule = sorted
                    .iter()
                    .find(|r| r.is_tenant_wide() && r.verbs.contains(verb))
                    .cloned()
                    .expect("an allowed whole-tenant request has its rule");
                return Err(Lacking {
                    rule,
                    verb,
                    target: target.to_owned(),
                });
            }
        }
        // The gates that pass on an allow rule alone, deny rules notwithstanding: some
        // service of the tenant (leases) and some service of a namespace (lists, namespace
        // watches). A new token passing one the minter does not pass gains a right, even
        // when its own denies cover every service.
        let gates = std::iter::once((Scope::AnyService, "some service of the tenant".to_owned()))
            .chain(namespaces.iter().map(|ns| (Scope::Namespace(ns), format!("{ns}/*"))));
        for (scope, target) in gates {
            let gate = |tenant| Request { tenant, scope, verb };
            if authorize(tenant, &sorted, &gate(tenant)).is_ok()
                && authorize(minter_tenant, minter, &gate(tenant)).is_err()
            {
                let rule = sorted
                    .iter()
                    .find(|r| {
                        r.effect == Effect::Allow
                            && r.verbs.contains(verb)
                            && match scope {
                                Scope::Namespace(ns) => r.namespace.matches(ns),
                                _ => true,
                            }
                    })
                    .cloned()
                    .expect("a gate passed has its allow rule");
                return Err(Lacking { rule, verb, target });
            }
        }
        for namespace in &namespaces {
            for service in &services {
                let Some(rule) = granting(verb, namespace, service) else {
                    continue;
                };
                let request = Request {
                    tenant,
                    scope: Scope::Service { namespace, service },
                    verb,
                };
                if authorize(minter_tenant, minter, &request).is_err() {
                    return Err(Lacking {
                        rule,
                        verb,
                        target: format!("{namespace}/{service}"),
                    });
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn rules(text: &[(&str, Effect)]) -> Vec<Rule> {
        let mut rules: Vec<Rule> = text.iter().map(|(t, e)| Rule::parse(t, *e).unwrap()).collect();
        rules.sort_by(Rule::precedence);
        rules
    }

    fn acme() -> Label {
        Label::new("tenant", "acme").unwrap()
    }

    /// Trace (who may do what): a token with `admin` on `*/*` but a deny on one service
    /// minted a token allowed that service.
    #[test]
    fn a_minter_cannot_grant_past_its_own_deny() {
        let minter = rules(&[("*/*=*", Effect::Allow), ("prod/payroll=*", Effect::Deny)]);
        let wide = rules(&[("prod/*=read", Effect::Allow)]);
        let lacking = within(Some(&acme()), &minter, Some(&acme()), &wide).unwrap_err();
        assert_eq!(lacking.verb, Verb::Read);
        assert_eq!(lacking.target, "prod/payroll");
        assert!(lacking.to_string().contains("prod/*=read"), "{lacking}");
        // The same grant with the minter's deny copied in is within it.
        let narrowed = rules(&[("prod/*=read", Effect::Allow), ("prod/payroll=read", Effect::Deny)]);
        assert_eq!(within(Some(&acme()), &minter, Some(&acme()), &narrowed), Ok(()));
    }

    /// Review finding: an allow rule covered by its own deny grants no service, but still
    /// opens the gates that pass on an allow rule alone (leases for some service of the
    /// tenant, a namespace's list): a minter without such a rule may not make one.
    #[test]
    fn an_allow_rule_under_its_own_deny_still_needs_the_minters_right() {
        let minter = rules(&[("*/*=admin", Effect::Allow)]);
        let sneaky = rules(&[("prod/x=renew", Effect::Allow), ("prod/x=renew", Effect::Deny)]);
        let lacking = within(None, &minter, Some(&acme()), &sneaky).unwrap_err();
        assert_eq!(lacking.verb, Verb::Renew);
    }

    #[test]
    fn prefixes_are_judged_for_every_name_they_cover() {
        let minter = rules(&[("prod/pay*=read", Effect::Allow)]);
        assert_eq!(
            within(
                None,
                &minter,
                Some(&acme()),
                &rules(&[("prod/payroll=read", Effect::Allow)])
            ),
            Ok(())
        );
        assert_eq!(
            within(
                None,
                &minter,
                Some(&acme()),
                &rules(&[("prod/payments-*=read", Effect::Allow)])
            ),
            Ok(())
        );
        let wider = within(
            None,
            &minter,
            Some(&acme()),
            &rules(&[("prod/pa*=read", Effect::Allow)]),
        )
        .unwrap_err();
        assert!(!wider.target.starts_with("prod/pay"), "{wider:?}");
        assert!(
            within(
                None,
                &minter,
                Some(&acme()),
                &rules(&[("prod/pay*=watch", Effect::Allow)])
            )
            .is_err()
        );
        // Admin on the whole tenant needs admin on the whole tenant.
        let admin = rules(&[("*/*=admin", Effect::Allow)]);
        let lacking = within(None, &minter, Some(&acme()), &admin).unwrap_err();
        assert_eq!((lacking.verb, lacking.target.as_str()), (Verb::Admin, "*/*"));
    }

    /// A region found however deep its members lie: here every name of three characters
    /// or fewer is exact or under a longer prefix, and the region of no prefix still has
    /// members (111 patterns, within what two tokens of 64 rules can hold).
    #[test]
    fn a_region_is_found_however_deep_it_lies() {
        let mut prefixes = BTreeSet::new();
        let mut exacts = BTreeSet::new();
        for stem in ["", "b", "bb"] {
            for c in ALPHABET.iter().map(|c| char::from(*c)).filter(|c| *c != 'b') {
                prefixes.insert(format!("{stem}{c}"));
            }
            exacts.insert(format!("{stem}b"));
        }
        assert_eq!(prefixes.len() + exacts.len(), 111);
        assert_eq!(member("", &prefixes, &exacts).as_deref(), Some("bbba"));
        // A region that is empty: every extension of `x` is under a longer prefix, and `x`
        // itself is exact.
        let prefixes: BTreeSet<String> = ALPHABET.iter().map(|c| format!("x{}", char::from(*c))).collect();
        let exacts = BTreeSet::from(["x".to_owned()]);
        assert_eq!(member("x", &prefixes, &exacts), None);
    }

    // The world of the property test: names over "ab" of length 1 or 2 in patterns; the
    // brute force checks every name over "abc" up to length 3, which holds a name of every
    // region those patterns make.
    fn name() -> impl Strategy<Value = String> {
        proptest::collection::vec(prop_oneof![Just('a'), Just('b')], 1..3).prop_map(|c| c.into_iter().collect())
    }

    fn pattern() -> impl Strategy<Value = String> {
        prop_oneof![Just("*".to_owned()), name(), name().prop_map(|n| format!("{n}*"))]
    }

    fn rule() -> impl Strategy<Value = Rule> {
        let verbs = proptest::sample::subsequence(vec!["read", "watch", "admin"], 1..3);
        (pattern(), pattern(), verbs, any::<bool>()).prop_map(|(ns, svc, verbs, deny)| {
            let effect = if deny { Effect::Deny } else { Effect::Allow };
            Rule::parse(&format!("{ns}/{svc}={}", verbs.join(",")), effect).unwrap()
        })
    }

    fn world() -> Vec<String> {
        let mut names = vec![String::new()];
        let mut all = Vec::new();
        for _ in 0..3 {
            names = names
                .iter()
                .flat_map(|n| ['a', 'b', 'c'].map(|c| format!("{n}{c}")))
                .collect();
            all.extend(names.iter().cloned());
        }
        all
    }

    proptest! {
        /// `within` agrees with the brute force: the new rules grant nothing, in the whole
        /// small world, that the minter's rules do not.
        #[test]
        fn within_agrees_with_a_brute_force(
            minter in proptest::collection::vec(rule(), 0..5),
            new in proptest::collection::vec(rule(), 0..5),
        ) {
            let mut minter = minter;
            minter.sort_by(Rule::precedence);
            let mut sorted = new.clone();
            sorted.sort_by(Rule::precedence);
            let tenant = acme();
            let world = world();
            let mut brute = true;
            'all: for verb in [Verb::Read, Verb::Watch, Verb::Admin] {
                for scope in [Scope::Whole, Scope::EveryService] {
                    let whole = Request { tenant: Some(&tenant), scope, verb };
                    if authorize(None, &sorted, &whole).is_ok() && authorize(None, &minter, &whole).is_err() {
                        brute = false;
                        break 'all;
                    }
                }
                let gates = std::iter::once(Scope::AnyService).chain(world.iter().map(|ns| Scope::Namespace(ns)));
                for scope in gates {
                    let gate = Request { tenant: Some(&tenant), scope, verb };
                    if authorize(None, &sorted, &gate).is_ok() && authorize(None, &minter, &gate).is_err() {
                        brute = false;
                        break 'all;
                    }
                }
                for namespace in &world {
                    for service in &world {
                        let request = Request {
                            tenant: Some(&tenant),
                            scope: Scope::Service { namespace, service },
                            verb,
                        };
                        if authorize(None, &sorted, &request).is_ok() && authorize(None, &minter, &request).is_err() {
                            brute = false;
                            break 'all;
                        }
                    }
                }
            }
            prop_assert_eq!(within(None, &minter, Some(&tenant), &new).is_ok(), brute);
        }
    }
}
