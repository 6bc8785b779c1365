//! Admission (SPEC W4, S6): one table of budgets for everything a caller can hold open, so
//! no principal or tenant can take the node's streams, tasks, descriptors or memory from
//! the others.
//!
//! ```text
//!  watch stream ─┐
//!  live view ────┤                     over a budget ──▶ Refusal (HTTP 429, gRPC
//!  xDS stream ───┼─▶ acquire(holder) ─┤                  RESOURCE_EXHAUSTED); nothing held
//!  parked query ─┘                     │ ok              by anyone else is touched
//!                                      ▼
//!                         Permit, owned by the stream or query ──drop──▶ the slots return
//!
//!  xDS names ──▶ NameBudget::resize(n) on every subscription change ──drop──▶ returned
//! ```
//!
//! Every hold counts against two budgets: its holder's (a principal within a tenant:
//! `max_watches_per_principal`) and its tenant's, all principals together
//! (`max_watches_per_tenant`). A live view also counts against `live_per_principal` (a
//! dashboard tab holds one or two), and the names an xDS stream subscribes to against
//! `names_per_principal`.
//!
//! # Correctness
//! - Counts change only under one lock; an acquire or a resize takes every slot it needs or
//!   none, so no count ever exceeds its budget and a refusal changes nothing.
//! - A slot is given back exactly once, by its permit's drop (a [`NameBudget`] gives back
//!   what it holds). An entry whose counts reach zero is removed: the table holds only
//!   principals and tenants that hold something, so its size is bounded by what is held.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use muster_core::{Label, Principal};

/// What a caller holds open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Hold {
    /// An HTTP watch stream (`/v1/watch/...`).
    Watch,
    /// A dashboard live view (`?stream=true`).
    Live,
    /// An xDS stream (ADS, either variant).
    Xds,
    /// A blocking query parked until a change or its wait (native `?index=`, Consul).
    Parked,
}

impl Hold {
    /// Every kind, in report order.
    pub const ALL: [Hold; 4] = [Hold::Watch, Hold::Live, Hold::Xds, Hold::Parked];

    /// The name in status and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Hold::Watch => "watch",
            Hold::Live => "live",
            Hold::Xds => "xds",
            Hold::Parked => "parked",
        }
    }

    fn slot(self) -> usize {
        self as usize
    }
}

/// Who holds: a principal, within the tenant its hold addresses (`None`: cluster-wide — an
/// operator's view, or every caller while authentication is off).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Holder {
    /// The tenant.
    pub tenant: Option<Label>,
    /// The principal.
    pub principal: Principal,
}

impl Holder {
    /// `principal` holding in `tenant`.
    pub fn new(tenant: Option<Label>, principal: Principal) -> Holder {
        Holder { tenant, principal }
    }

    fn tenant_name(&self) -> String {
        tenant_name(self.tenant.as_ref())
    }
}

fn tenant_name(tenant: Option<&Label>) -> String {
    tenant.map_or_else(|| "(cluster-wide)".to_owned(), ToString::to_string)
}

/// The budgets (each at least 1; the server's configuration checks that).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budgets {
    /// Streams and parked queries one principal may hold in one tenant
    /// (`max_watches_per_principal`).
    pub per_principal: usize,
    /// Streams and parked queries one tenant may hold, all its principals together
    /// (`max_watches_per_tenant`).
    pub per_tenant: usize,
    /// Live views one principal may hold in one tenant.
    pub live_per_principal: usize,
    /// xDS resource names one principal may subscribe to in one tenant, all its streams
    /// together (`[xds] max_names_per_principal`).
    pub names_per_principal: usize,
}

impl Budgets {
    /// The size of `budget`.
    pub fn of(&self, budget: Budget) -> usize {
        match budget {
            Budget::PerPrincipal => self.per_principal,
            Budget::PerTenant => self.per_tenant,
            Budget::LivePerPrincipal => self.live_per_principal,
            Budget::NamesPerPrincipal => self.names_per_principal,
        }
    }
}

/// Which budget refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Budget {
    /// [`Budgets::per_principal`].
    PerPrincipal,
    /// [`Budgets::per_tenant`].
    PerTenant,
    /// [`Budgets::live_per_principal`].
    LivePerPrincipal,
    /// [`Budgets::names_per_principal`].
    NamesPerPrincipal,
}

impl Budget {
    /// Every budget, in report order.
    pub const ALL: [Budget; 4] = [
        Budget::PerPrincipal,
        Budget::PerTenant,
        Budget::LivePerPrincipal,
        Budget::NamesPerPrincipal,
    ];

    /// The setting's name, as the configuration spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Budget::PerPrincipal => "max_watches_per_principal",
            Budget::PerTenant => "max_watches_per_tenant",
            Budget::LivePerPrincipal => "max_live_views_per_principal",
            Budget::NamesPerPrincipal => "max_names_per_principal",
        }
    }

    fn slot(self) -> usize {
        self as usize
    }
}

/// A hold refused: which budget is spent, by whom, and how much it holds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Refusal {
    /// The budget that is spent.
    pub budget: Budget,
    /// Who asked.
    pub holder: Holder,
    /// What it (or its tenant) already holds of that budget.
    pub held: usize,
    /// The budget's size.
    pub max: usize,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (principal, tenant) = (&self.holder.principal, self.holder.tenant_name());
        let (held, max, budget) = (self.held, self.max, self.budget.as_str());
        match self.budget {
            Budget::PerPrincipal => write!(
                f,
                "{principal} already holds {held} open watches, streams and parked queries in tenant {tenant}, \
                 the {budget} ({max}); close one or watch a namespace instead of each service"
            ),
            Budget::PerTenant => write!(
                f,
                "tenant {tenant} already holds {held} open watches, streams and parked queries, the {budget} ({max})"
            ),
            Budget::LivePerPrincipal => write!(
                f,
                "{principal} already streams {held} live views in tenant {tenant}, the most one principal may \
                 ({max}); close one or read without stream=true"
            ),
            Budget::NamesPerPrincipal => write!(
                f,
                "{principal} would subscribe to {held} xDS resource names in tenant {tenant}, over [xds] {budget} \
                 ({max}); subscribe to fewer names on this principal's streams"
            ),
        }
    }
}

/// What one holder or tenant holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Held {
    /// Open holds by kind, in [`Hold::ALL`]'s order.
    pub holds: [usize; 4],
    /// Subscribed xDS names.
    pub names: usize,
}

impl Held {
    /// Streams and parked queries, every kind together.
    pub fn streams(&self) -> usize {
        self.holds.iter().sum()
    }

    /// Open holds of `hold`.
    pub fn of(&self, hold: Hold) -> usize {
        self.holds[hold.slot()]
    }

    fn is_empty(&self) -> bool {
        self.streams() == 0 && self.names == 0
    }
}

#[derive(Default)]
struct Table {
    principals: HashMap<Holder, Held>,
    tenants: HashMap<Option<Label>, Held>,
}

impl Table {
    /// Applies `change` to `holder`'s and its tenant's counts, removing entries left empty.
    fn update(&mut self, holder: &Holder, change: impl Fn(&mut Held)) {
        update(&mut self.principals, holder, &change);
        update(&mut self.tenants, &holder.tenant, &change);
    }
}

fn update<K: std::hash::Hash + Eq + Clone>(map: &mut HashMap<K, Held>, key: &K, change: impl Fn(&mut Held)) {
    let held = map.entry(key.clone()).or_default();
    change(held);
    if held.is_empty() {
        map.remove(key);
    }
}

/// The table of budgets (see the module docs). Shared by every listener of a node.
pub struct Admission {
    budgets: Budgets,
    table: Mutex<Table>,
    refused: [AtomicU64; 4],
}

impl fmt::Debug for Admission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Admission")
            .field("budgets", &self.budgets)
            .finish_non_exhaustive()
    }
}

/// What the node holds, for status and metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Every holder together.
    pub held: Held,
    /// Principals holding anything.
    pub principals: usize,
    /// Per tenant (`None`: cluster-wide), sorted by tenant.
    pub tenants: Vec<(Option<Label>, Held)>,
    /// Refusals since the start, by budget, in [`Budget::ALL`]'s order.
    pub refused: [u64; 4],
}

impl Admission {
    /// A table enforcing `budgets`.
    pub fn new(budgets: Budgets) -> Arc<Admission> {
        Arc::new(Admission {
            budgets,
            table: Mutex::new(Table::default()),
            refused: Default::default(),
        })
    }

    /// The budgets enforced.
    pub fn budgets(&self) -> Budgets {
        self.budgets
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn refuse(&self, budget: Budget, holder: &Holder, held: usize, max: usize) -> Refusal {
        self.refused[budget.slot()].fetch_add(1, Ordering::Relaxed);
        Refusal {
            budget,
            holder: holder.clone(),
            held,
            max,
        }
    }

    /// One more `hold` for `holder`, or the budget that is spent (nothing changes then).
    pub fn acquire(self: &Arc<Self>, holder: &Holder, hold: Hold) -> Result<Permit, Refusal> {
        let mut table = self.table();
        let mine = table.principals.get(holder).copied().unwrap_or_default();
        let tenant = table.tenants.get(&holder.tenant).copied().unwrap_or_default();
        let budgets = self.budgets;
        if mine.streams() >= budgets.per_principal {
            return Err(self.refuse(Budget::PerPrincipal, holder, mine.streams(), budgets.per_principal));
        }
        if tenant.streams() >= budgets.per_tenant {
            return Err(self.refuse(Budget::PerTenant, holder, tenant.streams(), budgets.per_tenant));
        }
        if hold == Hold::Live && mine.of(Hold::Live) >= budgets.live_per_principal {
            return Err(self.refuse(
                Budget::LivePerPrincipal,
                holder,
                mine.of(Hold::Live),
                budgets.live_per_principal,
            ));
        }
        table.update(holder, |held| held.holds[hold.slot()] += 1);
        Ok(Permit {
            admission: Arc::clone(self),
            holder: holder.clone(),
            hold,
        })
    }

    /// Whether `holder` has room for a stream to hold `names` xDS names, the stream holding
    /// `own` of the holder's names already: what `NameBudget::resize` would answer for a
    /// stream alone in its kind, asked before a request is decoded. It errs only towards
    /// room (a stream's other kinds are not counted), so it refuses nothing the resize
    /// would take. Holds nothing.
    pub fn room_for_names(&self, holder: &Holder, own: usize, names: usize) -> Result<(), Refusal> {
        let table = self.table();
        let mine = table.principals.get(holder).map_or(0, |held| held.names);
        let would = mine.saturating_sub(own) + names;
        let max = self.budgets.names_per_principal;
        drop(table);
        if would > max {
            return Err(self.refuse(Budget::NamesPerPrincipal, holder, would, max));
        }
        Ok(())
    }

    /// A budget of xDS names for one stream of `holder`, holding none yet.
    pub fn names(self: &Arc<Self>, holder: &Holder) -> NameBudget {
        NameBudget {
            admission: Arc::clone(self),
            holder: holder.clone(),
            held: 0,
        }
    }

    /// What `holder` holds now.
    pub fn held_by(&self, holder: &Holder) -> Held {
        self.table().principals.get(holder).copied().unwrap_or_default()
    }

    /// What the node holds now.
    pub fn report(&self) -> Report {
        let table = self.table();
        let mut held = Held::default();
        for tenant in table.tenants.values() {
            for (total, one) in held.holds.iter_mut().zip(tenant.holds) {
                *total += one;
            }
            held.names += tenant.names;
        }
        let mut tenants: Vec<(Option<Label>, Held)> = table
            .tenants
            .iter()
            .map(|(tenant, held)| (tenant.clone(), *held))
            .collect();
        tenants.sort_by(|a, b| a.0.cmp(&b.0));
        Report {
            held,
            principals: table.principals.len(),
            tenants,
            refused: self.refused.each_ref().map(|count| count.load(Ordering::Relaxed)),
        }
    }
}

/// One open hold; dropping it gives its slot back.
#[derive(Debug)]
pub struct Permit {
    admission: Arc<Admission>,
    holder: Holder,
    hold: Hold,
}

impl Permit {
    /// Who holds it.
    pub fn holder(&self) -> &Holder {
        &self.holder
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let hold = self.hold.slot();
        self.admission.table().update(&self.holder, |held| {
            held.holds[hold] = held.holds[hold].saturating_sub(1)
        });
    }
}

/// The xDS names one stream holds; dropping it gives them back.
#[derive(Debug)]
pub struct NameBudget {
    admission: Arc<Admission>,
    holder: Holder,
    held: usize,
}

impl NameBudget {
    /// Holds `names` names from now on (more or fewer than before), or refuses when the
    /// holder's names would pass [`Budgets::names_per_principal`]; a refusal keeps what was
    /// held. Only the gate resizes ([`crate::Gate::hold_names`]), so every refusal is audited.
    pub(crate) fn resize(&mut self, names: usize) -> Result<(), Refusal> {
        let admission = Arc::clone(&self.admission);
        let mut table = admission.table();
        if names > self.held {
            let mine = table.principals.get(&self.holder).map_or(0, |held| held.names);
            let would = mine + (names - self.held);
            let max = admission.budgets.names_per_principal;
            if would > max {
                drop(table);
                return Err(admission.refuse(Budget::NamesPerPrincipal, &self.holder, would, max));
            }
        }
        let before = self.held;
        table.update(&self.holder, |held| held.names = held.names - before + names);
        self.held = names;
        Ok(())
    }

    /// The names held.
    pub fn held(&self) -> usize {
        self.held
    }
}

impl Drop for NameBudget {
    fn drop(&mut self) {
        if self.held > 0 {
            let before = self.held;
            self.admission
                .table()
                .update(&self.holder, |held| held.names = held.names.saturating_sub(before));
        }
    }
}

#[cfg(test)]
#[path = "admission_tests.rs"]
mod tests;
