//! Self-preservation and the serving floor (SPEC H5): a brake per service on how fast
//! endpoints may leave routing, so that one shared-dependency incident cannot evict a fleet.
//!
//! Every removal the checker or the lease keeper wants to make (a readiness failure, an
//! expiry) asks [`Preservation::decide`] first. A removal is held when the service would drop
//! to its serving floor, or when removals within the window would exceed `max_fraction` of
//! the service: then protection is active, the service says so (`protection_active`), and
//! held removals are retried as the window slides. An instance that is really dead keeps its
//! traffic a little longer; a fleet that only looks dead keeps serving.
//!
//! The brake exists for correlated loss, so it stays out of the way of what is not:
//! - a service smaller than `min_endpoints` gets no brake (only its floor): at 30%, a service
//!   of 4 may lose one endpoint a minute, so every second real death would be held;
//! - direct evidence of one endpoint's death (its connection refused at each of the last
//!   `fall` probes: nothing listens there any more) passes the brake while the endpoints
//!   failing at once are no more than the brake allows in a window, up to twice that many
//!   removals in the window. A rolling kill passes one by one; a shared dependency failing
//!   many endpoints at once is still held.

use std::collections::{HashMap, VecDeque};

use muster_core::{ServiceKey, ServingState};

/// The brake's settings for one service.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PreservationConfig {
    /// Fraction of the service that may leave within `window_ms`: 30% — a rolling deploy
    /// or a zone loss fits, "everything at once" does not.
    pub max_fraction: f64,
    /// The window over which removals are counted: 60 s, several check intervals.
    pub window_ms: u64,
    /// Serving endpoints never removed below: 0 by default. A floor keeps dead endpoints in
    /// routing on purpose (fail-open), a choice to make per service where it is justified
    /// (reference/control-plane-state.txt), not for every service.
    pub floor: usize,
    /// Services with fewer endpoints than this get no brake (their floor still holds): 5.
    /// Below 5, 30% is one endpoint a window, so the brake would hold the second of two
    /// real failures, which is what anyone testing with 2–4 instances meets first; a
    /// correlated loss of a service that small is kept by a floor, set where it is wanted.
    pub min_endpoints: usize,
}

impl Default for PreservationConfig {
    fn default() -> Self {
        PreservationConfig {
            max_fraction: 0.3,
            window_ms: 60_000,
            floor: 0,
            min_endpoints: 5,
        }
    }
}

/// What to do with one wanted removal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Remove it (the removal is counted).
    Remove,
    /// Keep it serving for now, and why.
    Hold(String),
}

/// One service's brake.
#[derive(Debug, Clone)]
pub struct Preservation {
    config: PreservationConfig,
    /// Times of removals within the window, oldest first.
    removals: VecDeque<u64>,
    /// When a removal was last held by rate: protection is active until a whole window
    /// passes without one (and without removals).
    last_hold_ms: Option<u64>,
    /// The largest size the service had while removals were in the window: an expired
    /// endpoint leaves the total, and the fraction is of the service as it was, not of
    /// what is left of it.
    peak_total: usize,
}

impl Preservation {
    /// A brake with no removals yet.
    pub fn new(config: PreservationConfig) -> Preservation {
        Preservation {
            config,
            removals: VecDeque::new(),
            last_hold_ms: None,
            peak_total: 0,
        }
    }

    /// Whether protection is active (reported in the API and metrics).
    pub fn protection_active(&self) -> bool {
        self.last_hold_ms.is_some()
    }

    /// Decides one removal from a service of `total` endpoints of which `serving` are in
    /// routing now, and counts it when allowed.
    pub fn decide(&mut self, serving: usize, total: usize, now_ms: u64) -> Verdict {
        let verdict = self.check(serving, total, 0, now_ms);
        if verdict == Verdict::Remove {
            self.record(now_ms);
        }
        verdict
    }

    /// Whether one more removal would be allowed on top of `pending` ones already allowed
    /// but not yet [recorded](Preservation::record) — for a batch that is all or nothing
    /// (the endpoints of one lease). Counts nothing; a hold by rate turns protection on.
    pub fn check(&mut self, serving: usize, total: usize, pending: usize, now_ms: u64) -> Verdict {
        self.judge(serving, total, pending, None::<fn() -> usize>, now_ms)
    }

    /// Like [`check`](Self::check) for a removal with direct evidence of its endpoint's death
    /// while `failing_at_once()` endpoints of the service (this one included; counted only
    /// when the rate alone would hold) are failing: allowed past the rate while they are no
    /// more than a window allows, and the window's removals no more than twice that.
    pub fn check_evidenced(
        &mut self,
        serving: usize,
        total: usize,
        failing_at_once: impl FnOnce() -> usize,
        now_ms: u64,
    ) -> Verdict {
        self.judge(serving, total, 0, Some(failing_at_once), now_ms)
    }

    fn judge(
        &mut self,
        serving: usize,
        total: usize,
        pending: usize,
        evidenced: Option<impl FnOnce() -> usize>,
        now_ms: u64,
    ) -> Verdict {
        self.expire(now_ms);
        let serving = serving.saturating_sub(pending);
        if serving <= self.config.floor {
            return Verdict::Hold(format!(
                "serving floor: {serving} of {total} serving, floor {}",
                self.config.floor
            ));
        }
        self.peak_total = self.peak_total.max(total);
        if self.peak_total < self.config.min_endpoints {
            return Verdict::Remove;
        }
        let allowed = ((self.config.max_fraction * self.peak_total as f64).floor() as usize).max(1);
        let within_rate = self.removals.len() + pending < allowed;
        let evidence_passes = || {
            self.removals.len() < 2 * allowed && evidenced.is_some_and(|failing_at_once| failing_at_once() <= allowed)
        };
        if !within_rate && !evidence_passes() {
            self.last_hold_ms = Some(now_ms);
            return Verdict::Hold(format!(
                "protection_active: {} of {total} endpoints already left within {} s (at most {:.0}%)",
                self.removals.len(),
                self.config.window_ms / 1_000,
                self.config.max_fraction * 100.0
            ));
        }
        Verdict::Remove
    }

    /// Counts one removal now.
    pub fn record(&mut self, now_ms: u64) {
        self.removals.push_back(now_ms);
    }

    /// Slides the window; protection ends once a whole window passes with no removal and no
    /// held one (the pressure is gone, not merely under the limit: ending at the limit, or
    /// while removals are still being held, would flap).
    pub fn expire(&mut self, now_ms: u64) {
        let window = self.config.window_ms;
        while self
            .removals
            .front()
            .is_some_and(|at| now_ms.saturating_sub(*at) >= window)
        {
            self.removals.pop_front();
        }
        if self.removals.is_empty() && self.last_hold_ms.is_some_and(|at| now_ms.saturating_sub(at) >= window) {
            self.last_hold_ms = None;
        }
        if self.removals.is_empty() && self.last_hold_ms.is_none() {
            self.peak_total = 0;
        }
    }
}

/// Serving and total endpoints of one service, as the registry holds them now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    /// Endpoints in routing (`ready` or `degraded`).
    pub serving: usize,
    /// All endpoints.
    pub total: usize,
}

impl Counts {
    /// Counts a set of serving states.
    pub fn of(states: impl IntoIterator<Item = ServingState>) -> Counts {
        states.into_iter().fold(Counts::default(), |counts, state| Counts {
            serving: counts.serving + usize::from(in_routing(state)),
            total: counts.total + 1,
        })
    }
}

/// Whether an endpoint in this state takes traffic, for the brake: `ready` or `degraded`.
pub fn in_routing(state: ServingState) -> bool {
    state.is_eligible(true)
}

/// Protection beginning or ending for a service: told once per hold, for its owner to report
/// (the brakes log nothing themselves).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtectionChange {
    /// The service.
    pub key: ServiceKey,
    /// Protection began (`true`) or ended.
    pub active: bool,
    /// The service's endpoints when it began (zero when it ended).
    pub counts: Counts,
}

/// The brakes of every service, shared by everything that removes endpoints (the checker and
/// the lease keeper), with per-service serving floors.
#[derive(Debug, Clone, Default)]
pub struct Brakes {
    config: PreservationConfig,
    floors: HashMap<ServiceKey, usize>,
    services: HashMap<ServiceKey, Preservation>,
    /// Changes not yet taken ([`Brakes::take_changes`]).
    changes: Vec<ProtectionChange>,
}

impl Brakes {
    /// Brakes with `config` for every service, and a floor of its own for some.
    pub fn new(config: PreservationConfig, floors: HashMap<ServiceKey, usize>) -> Brakes {
        Brakes {
            config,
            floors,
            services: HashMap::new(),
            changes: Vec::new(),
        }
    }

    /// Decides one removal from `key`, which has `counts` now, and counts it when allowed.
    pub fn decide(&mut self, key: &ServiceKey, counts: Counts, now_ms: u64) -> Verdict {
        let verdict = self.check(key, counts, 0, now_ms);
        if verdict == Verdict::Remove {
            self.record(key, now_ms);
        }
        verdict
    }

    /// [`Preservation::check_evidenced`] for `key`, counted when allowed.
    pub fn decide_evidenced(
        &mut self,
        key: &ServiceKey,
        counts: Counts,
        failing_at_once: impl FnOnce() -> usize,
        now_ms: u64,
    ) -> Verdict {
        let verdict = self.judge(key, counts, |brake| {
            brake.check_evidenced(counts.serving, counts.total, failing_at_once, now_ms)
        });
        if verdict == Verdict::Remove {
            self.record(key, now_ms);
        }
        verdict
    }

    /// [`Preservation::check`] for `key`: counts nothing.
    pub fn check(&mut self, key: &ServiceKey, counts: Counts, pending: usize, now_ms: u64) -> Verdict {
        self.judge(key, counts, |brake| {
            brake.check(counts.serving, counts.total, pending, now_ms)
        })
    }

    fn judge(&mut self, key: &ServiceKey, counts: Counts, judge: impl FnOnce(&mut Preservation) -> Verdict) -> Verdict {
        let (config, floors) = (self.config, &self.floors);
        let brake = self.services.entry(key.clone()).or_insert_with(|| {
            Preservation::new(PreservationConfig {
                floor: floors.get(key).copied().unwrap_or(config.floor),
                ..config
            })
        });
        let was_active = brake.protection_active();
        let verdict = judge(brake);
        if !was_active && brake.protection_active() {
            self.changes.push(ProtectionChange {
                key: key.clone(),
                active: true,
                counts,
            });
        }
        verdict
    }

    /// Counts one removal from `key` now.
    pub fn record(&mut self, key: &ServiceKey, now_ms: u64) {
        if let Some(brake) = self.services.get_mut(key) {
            brake.record(now_ms);
        }
    }

    /// Whether `key` is protected now.
    pub fn protection_active(&self, key: &ServiceKey) -> bool {
        self.services.get(key).is_some_and(Preservation::protection_active)
    }

    /// The services under protection, sorted.
    pub fn protected(&self) -> Vec<ServiceKey> {
        let mut keys: Vec<ServiceKey> = self
            .services
            .iter()
            .filter(|(_, brake)| brake.protection_active())
            .map(|(key, _)| key.clone())
            .collect();
        keys.sort();
        keys
    }

    /// Slides every window; forgets services with nothing left in theirs. Protection that
    /// ends is a change, as its beginning was.
    pub fn expire(&mut self, now_ms: u64) {
        let changes = &mut self.changes;
        self.services.retain(|key, brake| {
            let was_active = brake.protection_active();
            brake.expire(now_ms);
            if was_active && !brake.protection_active() {
                changes.push(ProtectionChange {
                    key: key.clone(),
                    active: false,
                    counts: Counts::default(),
                });
            }
            brake.protection_active() || !brake.removals.is_empty()
        });
    }

    /// The protection changes since the last take, oldest first.
    pub fn take_changes(&mut self) -> Vec<ProtectionChange> {
        std::mem::take(&mut self.changes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// reference/control-plane-state.txt, "Health checker causes fleet eviction": a shared
    /// dependency slows, every instance's deep check fails at once. Only the allowed fraction
    /// leaves; the rest keep serving, and the service says protection is active.
    #[test]
    fn a_shared_dependency_failure_does_not_evict_the_fleet() {
        let mut brake = Preservation::new(PreservationConfig::default());
        let total = 10;
        let mut serving = total;
        for _ in 0..total {
            if brake.decide(serving, total, 1_000) == Verdict::Remove {
                serving -= 1;
            }
        }
        assert_eq!(serving, 7, "30% of 10 may leave within the window");
        assert!(brake.protection_active());
        let held = brake.decide(serving, total, 2_000);
        assert!(
            matches!(&held, Verdict::Hold(why) if why.starts_with("protection_active")),
            "{held:?}"
        );
        // The window slides past the removals and the last hold: the pressure is gone,
        // protection ends and removals resume.
        brake.expire(61_000);
        assert!(brake.protection_active(), "a removal was held 59 s ago");
        brake.expire(62_000);
        assert!(!brake.protection_active());
        assert_eq!(brake.decide(serving, total, 62_000), Verdict::Remove);
    }

    /// An agent's lease covering a whole service expires: all of it or none may leave, so
    /// it is held, counted nothing, and protection stays on while it keeps being held.
    #[test]
    fn an_all_or_nothing_batch_over_the_limit_is_held_without_counting() {
        let mut brake = Preservation::new(PreservationConfig::default());
        let mut held_at = 0;
        for now in (0..120_000).step_by(100) {
            let allowed = (0..10).all(|pending| brake.check(10, 10, pending, now) == Verdict::Remove);
            assert!(!allowed);
            held_at = now;
            assert!(brake.protection_active(), "at {now}");
        }
        assert!(brake.removals.is_empty(), "a held batch counts nothing");
        brake.expire(held_at + 60_000);
        assert!(!brake.protection_active());
    }

    /// Expired endpoints leave the service's total: the fraction stays one of the service as
    /// it was when the removals began (3 of 10), not of what is left (2 of 9, then 2 of 8).
    #[test]
    fn expiries_one_by_one_count_against_the_service_as_it_was() {
        let mut brake = Preservation::new(PreservationConfig::default());
        let mut total = 10;
        while brake.decide(total, total, 1_000) == Verdict::Remove {
            total -= 1;
        }
        assert_eq!(total, 7);
    }

    #[test]
    fn the_serving_floor_is_never_crossed() {
        let mut brake = Preservation::new(PreservationConfig {
            max_fraction: 1.0,
            floor: 2,
            ..PreservationConfig::default()
        });
        assert_eq!(brake.decide(3, 3, 0), Verdict::Remove);
        assert!(matches!(brake.decide(2, 3, 0), Verdict::Hold(why) if why.starts_with("serving floor")));
    }
}
