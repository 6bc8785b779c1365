use std::collections::HashMap;

use proptest::prelude::*;

use super::*;

fn holder(tenant: Option<&str>, principal: &str) -> Holder {
    Holder::new(
        tenant.map(|tenant| Label::new("tenant", tenant).unwrap()),
        Principal::new(principal).unwrap(),
    )
}

fn budgets(per_principal: usize, per_tenant: usize) -> Budgets {
    Budgets {
        per_principal,
        per_tenant,
        live_per_principal: 2,
        names_per_principal: 10,
    }
}

#[test]
fn every_kind_of_hold_counts_against_one_principal_budget_and_comes_back_on_drop() {
    let admission = Admission::new(budgets(4, 100));
    let alice = holder(Some("acme"), "alice");
    let held: Vec<Permit> = Hold::ALL
        .iter()
        .map(|hold| admission.acquire(&alice, *hold).unwrap())
        .collect();
    let refused = admission.acquire(&alice, Hold::Parked).unwrap_err();
    assert_eq!(
        (refused.budget, refused.held, refused.max),
        (Budget::PerPrincipal, 4, 4)
    );
    assert!(refused.to_string().contains("max_watches_per_principal"), "{refused}");
    // Another principal of the tenant, and the same principal in another tenant, are not held up.
    assert!(admission.acquire(&holder(Some("acme"), "bob"), Hold::Watch).is_ok());
    assert!(admission.acquire(&holder(Some("globex"), "alice"), Hold::Xds).is_ok());
    drop(held);
    assert_eq!(admission.held_by(&alice), Held::default());
    assert_eq!(
        admission.report(),
        Report {
            refused: [1, 0, 0, 0],
            ..Report::default()
        }
    );
}

#[test]
fn a_tenant_over_its_budget_is_refused_whichever_principal_asks() {
    let admission = Admission::new(budgets(10, 3));
    let _held: Vec<Permit> = ["a", "b", "c"]
        .iter()
        .map(|name| admission.acquire(&holder(Some("acme"), name), Hold::Watch).unwrap())
        .collect();
    let refused = admission.acquire(&holder(Some("acme"), "d"), Hold::Live).unwrap_err();
    assert_eq!(refused.budget, Budget::PerTenant);
    assert_eq!(admission.held_by(&holder(Some("acme"), "d")), Held::default());
    // The cluster-wide group is a tenant of its own.
    assert!(admission.acquire(&holder(None, "d"), Hold::Live).is_ok());
}

#[test]
fn live_views_have_a_smaller_budget_of_their_own_within_the_principals() {
    let admission = Admission::new(budgets(10, 100));
    let operator = holder(None, "operator");
    let _views = [
        admission.acquire(&operator, Hold::Live).unwrap(),
        admission.acquire(&operator, Hold::Live).unwrap(),
    ];
    assert_eq!(
        admission.acquire(&operator, Hold::Live).unwrap_err().budget,
        Budget::LivePerPrincipal
    );
    // Other holds of the same principal still fit.
    assert!(admission.acquire(&operator, Hold::Watch).is_ok());
}

#[test]
fn names_are_counted_across_a_principals_streams_and_a_refused_resize_keeps_what_was_held() {
    let admission = Admission::new(budgets(10, 100));
    let envoy = holder(Some("acme"), "envoy");
    let mut first = admission.names(&envoy);
    let mut second = admission.names(&envoy);
    first.resize(6).unwrap();
    let refused = second.resize(5).unwrap_err();
    assert_eq!(
        (refused.budget, refused.held, refused.max),
        (Budget::NamesPerPrincipal, 11, 10)
    );
    assert_eq!((second.held(), admission.held_by(&envoy).names), (0, 6));
    second.resize(4).unwrap();
    first.resize(1).unwrap();
    assert_eq!(admission.held_by(&envoy).names, 5);
    drop(first);
    assert_eq!(admission.held_by(&envoy).names, 4);
    drop(second);
    assert_eq!(admission.report().tenants, Vec::new());
}

#[derive(Debug, Clone)]
enum Op {
    Acquire { who: usize, hold: usize },
    Release(usize),
    Resize { stream: usize, names: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..4_usize, 0..4_usize).prop_map(|(who, hold)| Op::Acquire { who, hold }),
        (0..64_usize).prop_map(Op::Release),
        (0..4_usize, 0..8_usize).prop_map(|(stream, names)| Op::Resize { stream, names }),
    ]
}

proptest! {
    /// Against a naive model: a hold is granted exactly when every budget it counts against
    /// has room, and the table's counts are always the model's.
    #[test]
    fn the_table_grants_exactly_what_fits_and_counts_what_is_held(ops in proptest::collection::vec(op(), 1..200)) {
        let limits = Budgets { per_principal: 5, per_tenant: 7, live_per_principal: 2, names_per_principal: 9 };
        let admission = Admission::new(limits);
        // Two principals of acme, one of globex, one cluster-wide.
        let holders = [holder(Some("acme"), "a"), holder(Some("acme"), "b"), holder(Some("globex"), "a"), holder(None, "a")];
        let mut permits: Vec<(usize, Hold, Permit)> = Vec::new();
        // One name budget per holder.
        let mut names: Vec<NameBudget> = holders.iter().map(|h| admission.names(h)).collect();
        for op in ops {
            match op {
                Op::Acquire { who, hold } => {
                    let hold = Hold::ALL[hold];
                    let mine = permits.iter().filter(|(w, _, _)| *w == who).count();
                    let tenant = permits.iter().filter(|(w, _, _)| holders[*w].tenant == holders[who].tenant).count();
                    let live = permits.iter().filter(|(w, h, _)| *w == who && *h == Hold::Live).count();
                    let fits = mine < limits.per_principal && tenant < limits.per_tenant
                        && (hold != Hold::Live || live < limits.live_per_principal);
                    match admission.acquire(&holders[who], hold) {
                        Ok(permit) => { prop_assert!(fits); permits.push((who, hold, permit)); }
                        Err(_) => prop_assert!(!fits),
                    }
                }
                Op::Release(i) => if !permits.is_empty() { permits.swap_remove(i % permits.len()); },
                Op::Resize { stream, names: n } => {
                    let fits = n <= limits.names_per_principal;
                    prop_assert_eq!(names[stream].resize(n).is_ok(), fits);
                }
            }
            let mut expected: HashMap<&Holder, Held> = HashMap::new();
            for (who, hold, _) in &permits {
                expected.entry(&holders[*who]).or_default().holds[hold.slot()] += 1;
            }
            for (who, budget) in names.iter().enumerate() {
                expected.entry(&holders[who]).or_default().names += budget.held();
            }
            for holder in &holders {
                prop_assert_eq!(admission.held_by(holder), expected.get(holder).copied().unwrap_or_default());
            }
        }
        drop(permits);
        drop(names);
        prop_assert_eq!(admission.report().tenants, Vec::new());
        prop_assert_eq!(admission.report().principals, 0);
    }
}

/// The early check a stream's decoder asks before decoding a request: room counts the
/// holder's names held by its other streams, never the asking stream's own, holds nothing,
/// and refuses (counted) exactly when the resize that follows would.
#[test]
fn room_for_names_is_asked_before_decoding_and_holds_nothing() {
    let admission = Admission::new(budgets(4, 100));
    let alice = holder(Some("acme"), "alice");
    let mut first = admission.names(&alice);
    first.resize(8).unwrap();
    // The first stream re-asking for its own 8 (a state-of-the-world ACK), or 10.
    assert!(admission.room_for_names(&alice, 8, 8).is_ok());
    assert!(admission.room_for_names(&alice, 8, 10).is_ok());
    // A second stream (holding none) asking for 3: 8 + 3 > 10.
    let refused = admission.room_for_names(&alice, 0, 3).unwrap_err();
    assert_eq!(
        (refused.budget, refused.held, refused.max),
        (Budget::NamesPerPrincipal, 11, 10)
    );
    assert!(refused.to_string().contains("max_names_per_principal"), "{refused}");
    assert_eq!(admission.held_by(&alice).names, 8, "asking holds nothing");
    assert_eq!(admission.report().refused[Budget::NamesPerPrincipal as usize], 1);
    // What the early check takes, the resize takes too.
    assert!(admission.room_for_names(&alice, 0, 2).is_ok());
    assert!(admission.names(&alice).resize(2).is_ok());
}
