//! Counters by tenant and outcome, cheap enough for the renewal path (100,000 a second on
//! one leader): a lookup in a map that is read without a lock, then one atomic add.
//!
//! ```text
//!   add(tenant, outcome) ──load (lock-free)──▶ HashMap<tenant, [AtomicU64; outcomes]> ──fetch_add
//!        └─ first sight of a tenant: copy the map with it added, under `grow` (once per tenant)
//!   scrape ──▶ rows(visible) ──▶ (tenant, outcome, count) for every count above zero
//! ```
//!
//! # Correctness
//! - Bounded (SPEC O1: no unbounded labels): a caller picks the tenant of its path, so a
//!   refused request could name any string that is a DNS label. Past [`MAX_TENANTS`] tenants
//!   the rest are counted under [`OTHER`], which no tenant can be called (`_` is not allowed
//!   in a DNS label).
//! - A count is never lost: the map only grows, and an inserted tenant's slots are the same
//!   `Arc` in every later copy of the map.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::ArcSwap;
use muster_core::Label;

/// Tenants with counters of their own: far above the tenants of one registry (each has its
/// own tokens and quotas), low enough that a flood of made-up tenant names cannot grow a
/// scrape past a few hundred kilobytes.
pub(crate) const MAX_TENANTS: usize = 1_024;

/// The tenant label of counts past [`MAX_TENANTS`].
pub(crate) const OTHER: &str = "_other";

/// The tenant label of counts that belong to no tenant (an unauthenticated request, a
/// cluster-wide one).
pub(crate) const NO_TENANT: &str = "_none";

type Slots = Arc<[AtomicU64]>;

/// One counter family by tenant and outcome; outcomes are a fixed list given at creation.
pub(crate) struct TenantCounters {
    outcomes: Box<[&'static str]>,
    tenants: ArcSwap<HashMap<Label, Slots>>,
    /// Past the bound, and for counts of no tenant.
    other: Slots,
    none: Slots,
    /// Serialises the copy-and-insert of a new tenant.
    grow: Mutex<()>,
}

fn slots(len: usize) -> Slots {
    (0..len).map(|_| AtomicU64::new(0)).collect()
}

impl TenantCounters {
    /// Counters with these outcomes (indexes into the list are what [`TenantCounters::add`]
    /// takes).
    pub(crate) fn new(outcomes: impl IntoIterator<Item = &'static str>) -> TenantCounters {
        let outcomes: Box<[&'static str]> = outcomes.into_iter().collect();
        TenantCounters {
            other: slots(outcomes.len()),
            none: slots(outcomes.len()),
            outcomes,
            tenants: ArcSwap::from_pointee(HashMap::new()),
            grow: Mutex::new(()),
        }
    }

    /// Adds `n` to the count of `tenant` (`None`: no tenant) and outcome number `outcome`.
    pub(crate) fn add(&self, tenant: Option<&Label>, outcome: usize, n: u64) {
        let Some(tenant) = tenant else {
            self.none[outcome].fetch_add(n, Ordering::Relaxed);
            return;
        };
        if let Some(slots) = self.tenants.load().get(tenant) {
            slots[outcome].fetch_add(n, Ordering::Relaxed);
            return;
        }
        self.slots_of_new(tenant)[outcome].fetch_add(n, Ordering::Relaxed);
    }

    /// The slots of a tenant not in the map when last looked: added (or found added by a
    /// concurrent caller), or [`OTHER`]'s past the bound.
    fn slots_of_new(&self, tenant: &Label) -> Slots {
        let _grow = self.grow.lock().unwrap_or_else(PoisonError::into_inner);
        let current = self.tenants.load_full();
        if let Some(slots) = current.get(tenant) {
            return Arc::clone(slots);
        }
        if current.len() >= MAX_TENANTS {
            return Arc::clone(&self.other);
        }
        let added = slots(self.outcomes.len());
        let mut next = HashMap::clone(&current);
        next.insert(tenant.clone(), Arc::clone(&added));
        self.tenants.store(Arc::new(next));
        added
    }

    /// Every count above zero as (tenant, outcome, count), sorted, of the tenants `visible`
    /// lets through; the [`OTHER`] and [`NO_TENANT`] rows only when `all_tenants`.
    pub(crate) fn rows(&self, visible: impl Fn(&Label) -> bool, all_tenants: bool) -> Vec<(String, &'static str, u64)> {
        let tenants = self.tenants.load();
        let mut named: Vec<(&Label, &Slots)> = tenants.iter().filter(|(tenant, _)| visible(tenant)).collect();
        named.sort_by_key(|(tenant, _)| *tenant);
        let mut rows = Vec::new();
        let mut push = |tenant: &str, slots: &Slots| {
            for (outcome, count) in self.outcomes.iter().zip(slots.iter()) {
                let count = count.load(Ordering::Relaxed);
                if count > 0 {
                    rows.push((tenant.to_owned(), *outcome, count));
                }
            }
        };
        for (tenant, slots) in named {
            push(tenant.as_str(), slots);
        }
        if all_tenants {
            push(OTHER, &self.other);
            push(NO_TENANT, &self.none);
        }
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(name: &str) -> Label {
        Label::new("tenant", name).unwrap()
    }

    #[test]
    fn counts_land_under_their_tenant_and_outcome_and_only_visible_tenants_are_listed() {
        let counters = TenantCounters::new(["ok", "refused"]);
        counters.add(Some(&tenant("acme")), 0, 2);
        counters.add(Some(&tenant("acme")), 1, 1);
        counters.add(Some(&tenant("beta")), 0, 5);
        counters.add(None, 1, 1);
        assert_eq!(
            counters.rows(|_| true, true),
            [
                ("acme".to_owned(), "ok", 2),
                ("acme".to_owned(), "refused", 1),
                ("beta".to_owned(), "ok", 5),
                (NO_TENANT.to_owned(), "refused", 1),
            ]
        );
        assert_eq!(
            counters.rows(|t| t.as_str() == "beta", false),
            [("beta".to_owned(), "ok", 5)]
        );
    }

    #[test]
    fn a_flood_of_made_up_tenants_is_counted_under_other_past_the_bound() {
        let counters = TenantCounters::new(["refused"]);
        for n in 0..MAX_TENANTS + 10 {
            counters.add(Some(&tenant(&format!("t{n}"))), 0, 1);
        }
        let rows = counters.rows(|_| true, true);
        assert_eq!(rows.len(), MAX_TENANTS + 1);
        assert_eq!(rows.last().unwrap(), &(OTHER.to_owned(), "refused", 10));
    }
}
