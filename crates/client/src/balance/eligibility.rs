//! Who may get new work from this caller (SPEC C3): authoritative serving state, reachability
//! from the caller's network scopes, and local ejection — and the panic fallback when too few
//! endpoints pass.
//!
//! Every endpoint of the view lands in one of three standings:
//!
//! ```text
//!   standing    when                                                   picked
//!   Excluded    no reachable address; `starting`; `draining`           never
//!   Unhealthy   `not_serving`, `unknown`, unaccepted `degraded`; ejected only in panic
//!   Eligible    everything else                                        always
//! ```
//!
//! Excluded endpoints are not *known* to this caller: an address it cannot reach is useless
//! even in a panic, a `starting` endpoint has never been ready, and `draining` is the owner's
//! explicit "no new work" (SPEC L5), not health evidence that might be wrong. Leaving them out
//! of the denominator also keeps a rolling deploy (many draining, many starting) from
//! tripping the panic threshold.
//!
//! # Reachability with several addresses
//!
//! An address with `scope: None` is reachable from everywhere; a scoped one only when the
//! caller lists its scope. An endpoint is reachable when **any** of its addresses is; the
//! caller should then dial [`EligibilityConfig::reachable_address`], the first reachable
//! address in record order, never one it cannot reach.

use std::sync::Arc;

use muster_core::{Address, Label, Revision, ServingState};

use crate::balance::{Fraction, PickReason};
use crate::eject::OutlierDetector;
use crate::member::Member;

/// What this caller accepts and can reach, and when it falls back to panic mode.
#[derive(Debug, Clone, PartialEq)]
pub struct EligibilityConfig {
    /// Whether `degraded` endpoints may get new work (SPEC M3).
    pub accept_degraded: bool,
    /// The network scopes this caller can reach (`lan`, `vpc-7`, ...), besides unscoped
    /// addresses, which everyone reaches.
    pub reachable_scopes: Vec<Label>,
    /// Below this fraction of eligible among known endpoints, pick over all known endpoints.
    /// Zero disables the fallback: with nothing eligible, nothing is picked.
    pub panic_threshold: Fraction,
}

/// Envoy's default healthy panic threshold: when half a fleet looks unhealthy at once, a
/// shared cause (checker partition, common dependency) is likelier than half the fleet
/// failing independently, and concentrating all load on the other half would finish it off.
const DEFAULT_PANIC_THRESHOLD: Fraction = Fraction::percent(50);

impl Default for EligibilityConfig {
    /// Ready endpoints only, unscoped addresses only, the 50% panic threshold.
    fn default() -> Self {
        EligibilityConfig {
            accept_degraded: false,
            reachable_scopes: Vec::new(),
            panic_threshold: DEFAULT_PANIC_THRESHOLD,
        }
    }
}

impl EligibilityConfig {
    /// Whether this caller can reach `address`.
    pub fn reaches(&self, address: &Address) -> bool {
        match &address.scope {
            None => true,
            Some(scope) => self.reachable_scopes.contains(scope),
        }
    }

    /// The address to dial: the first one in record order this caller can reach.
    pub fn reachable_address<'a>(&self, endpoint: &'a Member) -> Option<&'a Address> {
        endpoint.addresses.iter().find(|address| self.reaches(address))
    }

    /// Where `endpoint` stands for this caller, given whether it is locally ejected.
    pub fn standing(&self, endpoint: &Member, ejected: bool) -> Standing {
        if self.reachable_address(endpoint).is_none() {
            return Standing::Excluded(Excluded::Unreachable);
        }
        match endpoint.serving {
            state @ (ServingState::Starting | ServingState::Draining) => Standing::Excluded(Excluded::Serving(state)),
            state if !state.is_eligible(self.accept_degraded) => Standing::Unhealthy(Unhealthy::Serving(state)),
            _ if ejected => Standing::Unhealthy(Unhealthy::Ejected),
            _ => Standing::Eligible,
        }
    }
}

/// Where an endpoint stands for one caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// May get new work.
    Eligible,
    /// Known but not eligible: counts against the panic threshold, picked only in panic.
    Unhealthy(Unhealthy),
    /// Not a candidate at all, not even in panic.
    Excluded(Excluded),
}

/// Why a known endpoint is not eligible.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unhealthy {
    /// Its authoritative state refuses new work (`not_serving`, `unknown`, or `degraded` for a
    /// caller that does not accept it).
    Serving(ServingState),
    /// This client ejected it after consecutive failures (SPEC C5, H6).
    Ejected,
}

/// Why an endpoint is not a candidate at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Excluded {
    /// None of its addresses is reachable from this caller's scopes.
    Unreachable,
    /// `starting` (never ready yet) or `draining` (the owner said no new work).
    Serving(ServingState),
}

/// Whether picks use the eligible endpoints or, in panic, all known ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetMode {
    /// At or above the panic threshold: picks use the eligible endpoints.
    Normal,
    /// Below the panic threshold: picks use all known endpoints.
    Panic,
}

/// The known endpoints of one view for one caller, eligible ones first, and the mode the
/// balancers built from it run in. Built once per view or ejection change.
#[derive(Debug, Clone)]
pub struct EligibleSet {
    revision: Revision,
    /// Eligible endpoints, then unhealthy ones; each part sorted by (instance, incarnation) so
    /// that balancers built from one view behave the same whatever order the view iterates in.
    known: Vec<Arc<Member>>,
    eligible_len: usize,
    mode: SetMode,
}

impl EligibleSet {
    /// Classifies the view's `endpoints` (at `revision`) for a caller with `config`, taking
    /// the local `ejections` as of `now_ms`.
    pub fn build<'a>(
        revision: Revision,
        endpoints: impl IntoIterator<Item = &'a Arc<Member>>,
        config: &EligibilityConfig,
        ejections: &OutlierDetector,
        now_ms: u64,
    ) -> EligibleSet {
        let mut eligible = Vec::new();
        let mut unhealthy = Vec::new();
        for endpoint in endpoints {
            match config.standing(endpoint, ejections.is_ejected(endpoint, now_ms)) {
                Standing::Eligible => eligible.push(Arc::clone(endpoint)),
                Standing::Unhealthy(_) => unhealthy.push(Arc::clone(endpoint)),
                Standing::Excluded(_) => {}
            }
        }
        let by_identity =
            |a: &Arc<Member>, b: &Arc<Member>| (&a.instance, a.incarnation).cmp(&(&b.instance, b.incarnation));
        eligible.sort_unstable_by(by_identity);
        unhealthy.sort_unstable_by(by_identity);
        let eligible_len = eligible.len();
        let known_len = eligible_len + unhealthy.len();
        // Strictly below: a set exactly at the threshold still trusts its health evidence.
        let panic = (eligible_len as f64) < config.panic_threshold.get() * known_len as f64;
        let mut known = eligible;
        known.append(&mut unhealthy);
        EligibleSet {
            revision,
            known,
            eligible_len,
            mode: if panic { SetMode::Panic } else { SetMode::Normal },
        }
    }

    /// The revision of the view this set was built from.
    pub fn revision(&self) -> Revision {
        self.revision
    }

    /// Every known endpoint: reachable, neither starting nor draining.
    pub fn known(&self) -> &[Arc<Member>] {
        &self.known
    }

    /// The eligible endpoints.
    pub fn eligible(&self) -> &[Arc<Member>] {
        &self.known[..self.eligible_len]
    }

    /// Whether picks use the eligible endpoints or all known ones.
    pub fn mode(&self) -> SetMode {
        self.mode
    }

    /// The fraction of known endpoints that are eligible (1 for an empty set).
    pub fn healthy_fraction(&self) -> f64 {
        if self.known.is_empty() {
            1.0
        } else {
            self.eligible_len as f64 / self.known.len() as f64
        }
    }

    /// What picks choose from: the eligible endpoints, or in panic all known ones.
    pub fn routable(&self) -> &[Arc<Member>] {
        match self.mode {
            SetMode::Normal => self.eligible(),
            SetMode::Panic => self.known(),
        }
    }

    /// The reason every pick from [`routable`](Self::routable) carries.
    pub(crate) fn routing_reason(&self) -> PickReason {
        match self.mode {
            SetMode::Normal => PickReason::Normal,
            SetMode::Panic => PickReason::Panic,
        }
    }
}

#[cfg(test)]
#[path = "eligibility_tests.rs"]
mod tests;
