//! One caller under the virtual clock: the client library's real [`View`], [`EligibleSet`],
//! [`RoundRobin`] and [`OutlierDetector`], wired the way `muster_client::Picker` wires them.
//!
//! ```text
//!  lookup (cache) ──install──▶ View ──▶ set changed? ──▶ EligibleSet::build ──▶ RoundRobin::new
//!  update (watch) ──on_update─┘                              ▲  (random start)      │ pick
//!  failure ──▶ OutlierDetector::record_failure ── ejected ───┘                      ▼
//!              (ejections survive refreshes: the detector outlives every set)   instance alive?
//! ```
//!
//! A pick is the balancer's `Arc` clone and nothing else: no allocation on the request path.
//! The balancer is rebuilt only when the view's revision changes, an ejection starts or one
//! ends — as the picker does — so a refresh that finds nothing new keeps the rotation going.

use std::sync::Arc;

use muster_client::balance::{Balancer, EligibleSet, RoundRobin};
use muster_client::view::{Next, View};
use muster_client::{EjectionConfig, EligibilityConfig, FailureOutcome, OutlierDetector};
use muster_core::{Revision, ServiceSnapshot, ServiceUpdate};
use rand_xoshiro::Xoshiro256PlusPlus;

use crate::control::index_of;

/// What one request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Routed to a live instance.
    Served,
    /// Routed to a dead one: a failed request (no retries).
    Failed,
    /// Nothing to route to: also a failed request.
    NoEndpoint,
}

/// One caller's list, balancer and ejections.
#[derive(Debug)]
pub(crate) struct Caller {
    view: View,
    built_at: Option<Revision>,
    balancer: Option<RoundRobin>,
    known: usize,
    detector: OutlierDetector,
    ejecting: bool,
    rebuild_at_ms: Option<u64>,
    dirty: bool,
    eligibility: EligibilityConfig,
    rng: Xoshiro256PlusPlus,
    /// Ejections this caller started.
    pub(crate) ejections: u64,
}

impl Caller {
    /// A caller with an empty view; `eject_ms` turns on ejection at the first failure.
    pub(crate) fn new(key: muster_core::ServiceKey, eject_ms: Option<u64>, rng: Xoshiro256PlusPlus) -> Caller {
        let detector = match eject_ms {
            Some(ms) => OutlierDetector::new(EjectionConfig {
                consecutive_failures: 1,
                base_ejection_ms: ms,
                max_ejection_ms: ms.max(EjectionConfig::default().max_ejection_ms),
                ..EjectionConfig::default()
            })
            .expect("a valid ejection config: checked by Setup::validate"),
            None => OutlierDetector::default(),
        };
        Caller {
            view: View::new(key),
            built_at: None,
            balancer: None,
            known: 0,
            detector,
            ejecting: eject_ms.is_some(),
            rebuild_at_ms: None,
            dirty: true,
            eligibility: EligibilityConfig::default(),
            rng,
            ejections: 0,
        }
    }

    /// A lookup's answer (a cache refresh): the whole set, read at `read_at`.
    pub(crate) fn install(&mut self, snapshot: &ServiceSnapshot, read_at: Revision, now_ms: u64) {
        self.view.install(snapshot.clone(), read_at, now_ms);
        self.dirty |= self.built_at != Some(snapshot.revision());
    }

    /// A watch update; `false` if the view doubted it and wants a fresh snapshot.
    pub(crate) fn on_update(&mut self, update: &ServiceUpdate, now_ms: u64) -> bool {
        self.dirty = true;
        self.view.on_update(update, now_ms) == Next::Continue
    }

    /// Rebuilds the balancer if the set changed or an ejection ended.
    pub(crate) fn refresh_balancer(&mut self, now_ms: u64) {
        if self.rebuild_at_ms.is_some_and(|at| at <= now_ms) {
            self.dirty = true;
        }
        if self.dirty {
            self.rebuild(now_ms);
        }
    }

    fn rebuild(&mut self, now_ms: u64) {
        self.dirty = false;
        let Some(active) = self.view.active().map(Arc::clone) else {
            self.balancer = None;
            return;
        };
        let set = EligibleSet::build(
            active.revision(),
            active.iter(),
            &self.eligibility,
            &self.detector,
            now_ms,
        );
        self.known = set.known().len();
        self.balancer = Some(RoundRobin::new(&set, &mut self.rng));
        self.built_at = Some(active.revision());
        self.rebuild_at_ms = self.detector.next_return_ms(now_ms);
    }

    /// Sends one request: picks, and sees whether the instance is alive.
    pub(crate) fn request(&mut self, alive: &[bool], now_ms: u64) -> Outcome {
        let Some(pick) = self.balancer.as_mut().and_then(|balancer| balancer.pick(&mut self.rng)) else {
            return Outcome::NoEndpoint;
        };
        if alive[index_of(&pick.endpoint.addresses)] {
            if self.ejecting {
                self.detector.record_success(&pick.endpoint, now_ms);
            }
            return Outcome::Served;
        }
        if self.ejecting
            && let FailureOutcome::Ejected(_) = self.detector.record_failure(&pick.endpoint, self.known, now_ms)
        {
            self.ejections += 1;
            self.rebuild(now_ms);
        }
        Outcome::Failed
    }
}
