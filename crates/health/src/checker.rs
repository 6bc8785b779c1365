//! The checker's decisions, pure (SPEC H1–H5): which probe is due, what a result means for
//! routing, and what to propose. The leader engine (`muster-leader`) wraps it, and the
//! server's leader task is the thin shell around that: it feeds registry changes in, runs the
//! probes [`Checker::due`] hands out, feeds results and TTL reports back, and proposes what
//! comes out.
//!
//! ```text
//!  registry events ──sync / remove──▶ Checker ◀──TTL reports (pass / warn / fail)
//!                                       │ due(now): probes whose time came, spread by jitter,
//!                                       │           within the concurrency and the budget
//!                                       ▼
//!                      shell runs probes ──record(result)──▶ Hysteresis per check
//!                                                              │ only crossings
//!                                                              ▼
//!                       combine checks (startup hold, readiness votes, liveness reported)
//!                                                              │ leaving routing?
//!                                                              ▼
//!                                           Brakes (self-preservation, floor) ──▶ Decision
//! ```
//!
//! # Schedule
//! Each check's first probe falls at a random point of its first interval, and every next
//! one an interval later ± `jitter` (10%): probes of the same interval never align, and
//! 10,000 checks at 10 s make a steady ~1,000 probes per second. A probe still running when
//! its next turn comes skips that turn. At most `max_in_flight` probes run at once and at
//! most `budget_per_s` start per second; probes over either limit wait in order.
//!
//! # Fairness between tenants (SPEC S6)
//! One tenant's probes may take at most `tenant_budget_per_s` of a second's starts and
//! `tenant_max_in_flight` of the running probes; a probe over its tenant's share moves to the
//! next budget second without holding up anyone else's. The defaults are half the global
//! limits, so a tenant with a huge fleet (or one whose every target hangs to the timeout)
//! always leaves the other half to everyone else, and another tenant's detection is not
//! starved.
//!
//! # Targets (SPEC S6)
//! Before a probe is handed out, the [`TargetPolicy`] of this node may refuse it (its own
//! listeners; loopback, link-local and metadata addresses unless allowed): the probe is not
//! run and counts as a failure with reason `check_target_refused: ...`, so a check aimed
//! there can never make an endpoint look healthy.
//!
//! # What is proposed
//! The endpoint's routing state combines its checks: a startup check that never passed holds
//! `starting` (that is what a startup check is for: a slow start); otherwise the worst
//! readiness check decides (`not_serving` over `unknown` over `starting` over `degraded` over
//! `ready`), and one that failed `fall` times before it ever passed is `not_serving` like any
//! other (H2). Liveness checks never vote (SPEC H1): their
//! crossings are reported for logs and metrics. A state is proposed only when the combination
//! differs from what the checker last proposed, so a probe result that crosses no threshold
//! proposes nothing. Leaving routing asks the [`Brakes`] first; a held removal is retried at
//! the endpoint's next probe.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::ops::RangeInclusive;
use std::time::Duration;

use muster_core::check::CheckStatus;
use muster_core::{
    Actor, Check, CheckKind, Endpoint, Incarnation, InstanceId, Label, ServiceKey, ServingState, Signal,
};
use rand_core::RngCore;

use crate::hysteresis::{Health, Hysteresis, ProbeResult, Thresholds};
use crate::preservation::{Brakes, Counts, Verdict, in_routing};
use crate::target::TargetPolicy;

#[path = "decision.rs"]
mod decision;
pub use decision::{Decision, Proposal, ReportError, TtlReport};

/// The checker's limits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CheckerConfig {
    /// Each probe lands within ± this fraction of its interval from the nominal time: 10%.
    pub jitter: f64,
    /// Probes running at once: 512 — 10,000 checks at 10 s with 2 s timeouts need at most
    /// ~2,000 when every target hangs, and a healthy fleet needs a handful.
    pub max_in_flight: usize,
    /// Probes started per second at most: 5,000 — five times the 10,000-check fleet's rate,
    /// and a cap on what the checker can do to the network when misconfigured.
    pub budget_per_s: u32,
    /// Crossings within `flap_window_ms` tolerated before an endpoint is held `degraded`.
    pub flap_limit: usize,
    /// The flap window.
    pub flap_window_ms: u64,
    /// Probes one tenant may start per second: 2,500, half of `budget_per_s`.
    pub tenant_budget_per_s: u32,
    /// Probes of one tenant running at once: 256, half of `max_in_flight`.
    pub tenant_max_in_flight: usize,
}

impl Default for CheckerConfig {
    fn default() -> Self {
        let flaps = Thresholds::default();
        CheckerConfig {
            jitter: 0.1,
            max_in_flight: 512,
            budget_per_s: 5_000,
            flap_limit: flaps.flap_limit,
            flap_window_ms: flaps.flap_window_ms,
            tenant_budget_per_s: 2_500,
            tenant_max_in_flight: 256,
        }
    }
}

/// Names one check of one endpoint registration for the time of one probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProbeId {
    endpoint: u64,
    check: usize,
}

/// A probe to run now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// Hand back to [`Checker::record`] with the result.
    pub id: ProbeId,
    /// What to probe.
    pub kind: CheckKind,
    /// How long it may take.
    pub timeout: Duration,
}

struct CheckState {
    check: Check,
    hysteresis: Hysteresis,
    /// The heap entry that is current for this check; older entries are skipped.
    next_due_ms: u64,
    in_flight: bool,
    /// A startup check that has passed stops probing and voting.
    done: bool,
}

struct Tracked {
    key: ServiceKey,
    instance: InstanceId,
    incarnation: Incarnation,
    checks: Vec<CheckState>,
    /// What the checker last proposed (or the registered state, before any proposal).
    proposed: ServingState,
    /// The TTL note last proposed, and when (ms): a changed note with no crossing is
    /// recorded at most once per [`NOTE_EVERY_MS`].
    note: Option<(String, u64)>,
    /// Self-preservation holds this endpoint's removal (it is told once per hold; the brake
    /// is asked again at every probe).
    held: bool,
}

/// The least time between two records of a TTL check's note when its state holds: apps often
/// put a timestamp or a counter in every report (Consul's `check_update_interval` is for the
/// same; its default is 5 minutes), and every record is a replicated write.
pub const NOTE_EVERY_MS: u64 = 60_000;

/// The checker's state: every checked endpoint, its checks and the schedule.
pub struct Checker<R> {
    config: CheckerConfig,
    rng: R,
    next_id: u64,
    tracked: HashMap<u64, Tracked>,
    by_instance: HashMap<(ServiceKey, InstanceId), u64>,
    /// Each service's tracked endpoints, for what concerns a whole service (SPEC H5's
    /// "failing at once").
    by_service: HashMap<ServiceKey, HashSet<u64>>,
    schedule: BinaryHeap<Reverse<(u64, ProbeId)>>,
    in_flight: usize,
    /// The start of the current budget second and the probes started in it.
    budget: (u64, u32),
    /// Per tenant: probes started in the current budget second, and probes running.
    tenants: HashMap<Label, TenantLoad>,
    /// What this node may probe.
    targets: TargetPolicy,
}

/// One tenant's share of the limits in use.
#[derive(Debug, Default, Clone, Copy)]
struct TenantLoad {
    started: u32,
    in_flight: usize,
}

impl<R: RngCore> Checker<R> {
    /// An empty checker drawing jitter from `rng`.
    pub fn new(config: CheckerConfig, rng: R) -> Checker<R> {
        Checker {
            config,
            rng,
            next_id: 0,
            tracked: HashMap::new(),
            by_instance: HashMap::new(),
            by_service: HashMap::new(),
            schedule: BinaryHeap::new(),
            in_flight: 0,
            budget: (0, 0),
            tenants: HashMap::new(),
            targets: TargetPolicy::default(),
        }
    }

    /// Sets what this node may probe (the server sets it once its listeners are bound).
    pub fn set_target_policy(&mut self, targets: TargetPolicy) {
        self.targets = targets;
    }

    /// Endpoints with checks.
    pub fn endpoints(&self) -> usize {
        self.tracked.len()
    }

    /// Probes running now.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// When the shell should call [`Checker::due`] next: the earliest queued turn, or — when
    /// that is already due but waits for a limit — the next budget second (for the budget)
    /// or `None` (for the concurrency: a probe result comes first). `None` with nothing
    /// queued, too.
    pub fn wake_at(&self, now_ms: u64) -> Option<u64> {
        let due = self.schedule.peek().map(|Reverse((due, _))| *due)?;
        if due > now_ms {
            Some(due)
        } else if self.in_flight >= self.config.max_in_flight {
            None
        } else {
            Some(self.budget.0.saturating_add(1_000).max(now_ms + 1))
        }
    }

    /// Takes in an endpoint's current record. A new incarnation or changed checks start
    /// afresh (hysteresis from `starting`, new random phases); the same checks keep their
    /// state. An endpoint without checks is forgotten.
    pub fn sync(&mut self, key: &ServiceKey, endpoint: &Endpoint, now_ms: u64) {
        let slot = (key.clone(), endpoint.instance.clone());
        if let Some(id) = self.by_instance.get(&slot) {
            let tracked = &self.tracked[id];
            let same = tracked.incarnation == endpoint.incarnation
                && tracked.checks.len() == endpoint.checks.len()
                && tracked.checks.iter().zip(&endpoint.checks).all(|(s, c)| s.check == *c);
            if same {
                // Someone else may have set the state (an owner's drain, the app): compare
                // the next crossing with what the record says now.
                if let Some(tracked) = self.tracked.get_mut(id) {
                    tracked.proposed = endpoint.serving;
                }
                return;
            }
            self.remove(key, &endpoint.instance);
        }
        if endpoint.checks.is_empty() {
            return;
        }
        let id = self.next_id;
        self.next_id += 1;
        let config = self.config;
        let thresholds = |check: &Check| Thresholds {
            rise: check.rise,
            fall: check.fall,
            flap_limit: config.flap_limit,
            flap_window_ms: config.flap_window_ms,
        };
        let mut checks = Vec::with_capacity(endpoint.checks.len());
        for (index, check) in endpoint.checks.iter().enumerate() {
            // A TTL check's first deadline is one TTL after registration; a probe's first
            // turn is a random point of its first interval.
            let due = match check.kind {
                CheckKind::Ttl { ttl } => now_ms.saturating_add(millis(ttl)),
                _ => now_ms.saturating_add(self.first_turn(millis(check.interval))),
            };
            self.schedule.push(Reverse((
                due,
                ProbeId {
                    endpoint: id,
                    check: index,
                },
            )));
            // A record past `starting` resumes there: a restart must not send a serving
            // fleet back to `starting`, nor re-run startup checks that already passed.
            let resumed = endpoint.serving != ServingState::Starting;
            checks.push(CheckState {
                check: check.clone(),
                hysteresis: Hysteresis::resume(thresholds(check), endpoint.serving),
                next_due_ms: due,
                in_flight: false,
                done: resumed && check.signal == Signal::Startup,
            });
        }
        self.tracked.insert(
            id,
            Tracked {
                key: key.clone(),
                instance: endpoint.instance.clone(),
                incarnation: endpoint.incarnation,
                checks,
                proposed: endpoint.serving,
                // A reason the checker recorded counts as its last note, so a new leader does
                // not write every instance's note again at once.
                note: (endpoint.observation.actor == Actor::Checker)
                    .then(|| (endpoint.observation.reason.to_string(), now_ms)),
                held: false,
            },
        );
        self.by_instance.insert(slot, id);
        self.by_service.entry(key.clone()).or_default().insert(id);
    }

    /// Forgets an endpoint (it left the registry). Its queued turns and running probes are
    /// ignored from now on.
    pub fn remove(&mut self, key: &ServiceKey, instance: &InstanceId) {
        if let Some(id) = self.by_instance.remove(&(key.clone(), instance.clone()))
            && let Some(tracked) = self.tracked.remove(&id)
        {
            if let Some(ids) = self.by_service.get_mut(key) {
                ids.remove(&id);
                if ids.is_empty() {
                    self.by_service.remove(key);
                }
            }
            let running = tracked.checks.iter().filter(|c| c.in_flight).count();
            self.in_flight -= running;
            self.tenant_done(&tracked.key.tenant, running);
        }
    }

    /// Forgets everything (the registry was replaced; the shell syncs every endpoint again).
    pub fn clear(&mut self) {
        self.tracked.clear();
        self.by_instance.clear();
        self.by_service.clear();
        self.schedule.clear();
        self.in_flight = 0;
        self.tenants.clear();
    }

    /// The probes to start now, and the TTL deadlines that passed (already decided: their
    /// decisions are returned too).
    pub fn due(
        &mut self,
        now_ms: u64,
        brakes: &mut Brakes,
        counts: &mut dyn FnMut(&ServiceKey) -> Counts,
    ) -> (Vec<Probe>, Vec<Decision>) {
        let mut probes = Vec::new();
        let mut decisions = Vec::new();
        if now_ms.saturating_sub(self.budget.0) >= 1_000 {
            self.budget = (now_ms, 0);
            self.tenants.retain(|_, load| {
                load.started = 0;
                load.in_flight > 0
            });
        }
        while let Some(&Reverse((due, id))) = self.schedule.peek() {
            if due > now_ms {
                break;
            }
            let Some(state) = self.state(id) else {
                self.schedule.pop();
                continue;
            };
            if state.done {
                self.schedule.pop();
                continue;
            }
            if state.next_due_ms != due {
                // A TTL report moved the deadline later: the one queued entry follows it.
                let later = state.next_due_ms;
                self.schedule.pop();
                if later > due {
                    self.schedule.push(Reverse((later, id)));
                }
                continue;
            }
            let (kind_ttl, interval) = match state.check.kind {
                CheckKind::Ttl { ttl } => (Some(ttl), millis(ttl)),
                _ => (None, millis(state.check.interval)),
            };
            if let Some(ttl) = kind_ttl {
                // No report within the TTL: a failure, and the next deadline a TTL later.
                self.schedule.pop();
                self.reschedule(id, now_ms.saturating_add(millis(ttl)));
                let reason = format!("no report within {} ms", ttl.as_millis());
                decisions.extend(self.observe(id, ProbeResult::Fail, Some(reason), now_ms, brakes, counts));
                continue;
            }
            if let Some(why) = self.targets.refusal(&state.check.kind) {
                // Never run, never healthy: a failure at every turn.
                self.schedule.pop();
                let next = self.next_turn(now_ms, interval);
                self.reschedule(id, next);
                decisions.extend(self.observe(id, ProbeResult::Fail, Some(why), now_ms, brakes, counts));
                continue;
            }
            let budget_left = self.budget.1 < self.config.budget_per_s;
            if self.in_flight >= self.config.max_in_flight || !budget_left {
                break;
            }
            let tenant = &self.tracked[&id.endpoint].key.tenant;
            let load = self.tenants.get(tenant).copied().unwrap_or_default();
            if load.started >= self.config.tenant_budget_per_s || load.in_flight >= self.config.tenant_max_in_flight {
                // Over its tenant's share: the next budget second, without holding up the
                // probes of other tenants queued behind it.
                self.schedule.pop();
                let later = self.budget.0.saturating_add(1_000).max(now_ms + 1);
                self.reschedule(id, later);
                continue;
            }
            self.schedule.pop();
            // The next turn follows the nominal one, so a late start does not slow the
            // rate; a checker more than a turn behind starts again from now.
            let nominal = if now_ms.saturating_sub(due) > interval {
                now_ms
            } else {
                due
            };
            let next = self.next_turn(nominal, interval);
            let state = self.state_mut(id).expect("checked above");
            let skipped = state.in_flight;
            state.next_due_ms = next;
            let probe = (!skipped).then(|| {
                state.in_flight = true;
                Probe {
                    id,
                    kind: state.check.kind.clone(),
                    timeout: state.check.timeout,
                }
            });
            self.schedule.push(Reverse((next, id)));
            if let Some(probe) = probe {
                self.in_flight += 1;
                self.budget.1 += 1;
                let tenant = self.tracked[&id.endpoint].key.tenant.clone();
                let load = self.tenants.entry(tenant).or_default();
                load.started += 1;
                load.in_flight += 1;
                probes.push(probe);
            }
        }
        (probes, decisions)
    }

    /// Records a probe's result. `None` when the endpoint left meanwhile or nothing is to be
    /// done.
    pub fn record(
        &mut self,
        id: ProbeId,
        result: ProbeResult,
        now_ms: u64,
        brakes: &mut Brakes,
        counts: &mut dyn FnMut(&ServiceKey) -> Counts,
    ) -> Option<Decision> {
        let state = self.state_mut(id)?;
        if !state.in_flight {
            return None;
        }
        state.in_flight = false;
        self.in_flight -= 1;
        let tenant = self.tracked[&id.endpoint].key.tenant.clone();
        self.tenant_done(&tenant, 1);
        self.observe(id, result, None, now_ms, brakes, counts)
    }

    /// A TTL report from the instance (or its agent): applies to every TTL check of the
    /// endpoint and restarts their deadlines.
    pub fn report(
        &mut self,
        report: &TtlReport,
        now_ms: u64,
        brakes: &mut Brakes,
        counts: &mut dyn FnMut(&ServiceKey) -> Counts,
    ) -> Result<Vec<Decision>, ReportError> {
        let TtlReport {
            key,
            instance,
            incarnation,
            status,
            note,
        } = report;
        let (incarnation, status) = (*incarnation, *status);
        let not_found = || ReportError::NotFound {
            key: key.clone(),
            instance: instance.clone(),
        };
        let endpoint = *self
            .by_instance
            .get(&(key.clone(), instance.clone()))
            .ok_or_else(not_found)?;
        let tracked = &self.tracked[&endpoint];
        if tracked.incarnation != incarnation {
            return Err(ReportError::StaleIncarnation {
                given: incarnation,
                registered: tracked.incarnation,
            });
        }
        let ttl_checks: Vec<(usize, Duration)> = tracked
            .checks
            .iter()
            .enumerate()
            .filter_map(|(index, state)| match state.check.kind {
                CheckKind::Ttl { ttl } if !state.done => Some((index, ttl)),
                _ => None,
            })
            .collect();
        if ttl_checks.is_empty() {
            return Err(ReportError::NoTtlCheck {
                key: key.clone(),
                instance: instance.clone(),
            });
        }
        let result = match status {
            CheckStatus::Pass => ProbeResult::Pass,
            CheckStatus::Warn => ProbeResult::Warn,
            CheckStatus::Fail => ProbeResult::Fail,
        };
        let mut decisions = Vec::new();
        for (check, ttl) in ttl_checks {
            let id = ProbeId { endpoint, check };
            // The queued deadline entry stays; `due` moves it when it comes up early.
            if let Some(state) = self.state_mut(id) {
                state.next_due_ms = now_ms.saturating_add(millis(ttl));
            }
            let reason = format!("reported {}", format!("{status:?}").to_lowercase());
            decisions.extend(self.observe(id, result, Some(reason), now_ms, brakes, counts));
        }
        if let Some(note) = note {
            self.note(endpoint, note, now_ms, &mut decisions);
        }
        Ok(decisions)
    }

    /// A report's note is the reason of the state it sets (SPEC H4: the app's own words for
    /// what its check saw). With no crossing, a changed note is recorded on its own, at most
    /// once per [`NOTE_EVERY_MS`], while the checker's own state stands (not during a drain,
    /// whose reason is the drainer's).
    fn note(&mut self, endpoint: u64, note: &str, now_ms: u64, decisions: &mut Vec<Decision>) {
        let Some(tracked) = self.tracked.get_mut(&endpoint) else {
            return;
        };
        let mut crossed = false;
        for decision in decisions.iter_mut() {
            if let Decision::Propose(proposal) = decision {
                note.clone_into(&mut proposal.reason);
                crossed = true;
            }
        }
        let due = match &tracked.note {
            Some((last, at)) => last != note && now_ms.saturating_sub(*at) >= NOTE_EVERY_MS,
            None => true,
        };
        // A held removal leaves the record routed: a note ("db down") must not be written
        // onto it as if it were the reason it is ready.
        if !crossed && (!due || !decisions.is_empty() || tracked.held || tracked.proposed == ServingState::Draining) {
            return;
        }
        tracked.note = Some((note.to_owned(), now_ms));
        if !crossed {
            decisions.push(Decision::Note(Proposal {
                key: tracked.key.clone(),
                instance: tracked.instance.clone(),
                incarnation: tracked.incarnation,
                state: tracked.proposed,
                reason: note.to_owned(),
            }));
        }
    }

    /// Tells the checker a proposal did not commit, so the next result proposes again.
    pub fn proposal_failed(&mut self, key: &ServiceKey, instance: &InstanceId, registered: ServingState) {
        if let Some(id) = self.by_instance.get(&(key.clone(), instance.clone()))
            && let Some(tracked) = self.tracked.get_mut(id)
        {
            tracked.proposed = registered;
            // A note that did not commit is due again with the next report.
            tracked.note = None;
        }
    }

    /// The routing state each endpoint's checks combine to now, for status pages and tests.
    pub fn health_of(&self, key: &ServiceKey, instance: &InstanceId) -> Option<ServingState> {
        let id = self.by_instance.get(&(key.clone(), instance.clone()))?;
        combine(&self.tracked[id].checks).map(|(state, _)| state)
    }

    fn observe(
        &mut self,
        id: ProbeId,
        result: ProbeResult,
        why: Option<String>,
        now_ms: u64,
        brakes: &mut Brakes,
        counts: &mut dyn FnMut(&ServiceKey) -> Counts,
    ) -> Option<Decision> {
        let tracked = self.tracked.get_mut(&id.endpoint)?;
        let state = &mut tracked.checks[id.check];
        let transition = state.hysteresis.observe(result, now_ms);
        let describe = |reason: &str| match &why {
            Some(why) => format!("{}: {why} ({reason})", state.check.target()),
            None => format!("{}: {reason}", state.check.target()),
        };
        if state.check.signal == Signal::Liveness {
            return transition.map(|t| Decision::Liveness {
                key: tracked.key.clone(),
                instance: tracked.instance.clone(),
                health: state.hysteresis.health(),
                reason: describe(&t.reason),
            });
        }
        let crossing = transition.map(|t| describe(&t.reason));
        // A startup check is done at its first pass (or warn); a checker that cannot reach
        // it (`unknown`) has not seen it start.
        if state.check.signal == Signal::Startup
            && matches!(state.hysteresis.health(), Health::Passing | Health::Warning)
        {
            state.done = true;
        }
        let (desired, deciding) = combine(&tracked.checks)?;
        if desired == tracked.proposed {
            tracked.held = false;
            return None;
        }
        let reason = crossing.unwrap_or_else(|| {
            let state = &tracked.checks[deciding];
            format!("{}: {:?}", state.check.target(), state.hysteresis.health()).to_lowercase()
        });
        if in_routing(tracked.proposed) && !in_routing(desired) {
            let key = tracked.key.clone();
            // Direct evidence: a readiness check refused at each of its last `fall` probes.
            // Endpoints "fail at once" when their failures began within twice the time that
            // took to see of this one's.
            let refused = tracked
                .checks
                .iter()
                .filter(|c| c.check.signal == Signal::Readiness && c.hysteresis.refused_in_a_row())
                .filter_map(|c| {
                    let span = 2 * u64::from(c.check.fall) * millis(c.check.interval);
                    let began = c.hysteresis.failing_since()?;
                    Some(began.saturating_sub(span)..=began.saturating_add(span))
                })
                .next();
            let verdict = if let Some(began) = refused {
                // Counted only when the rate alone would hold the removal.
                let failing = || self.failing_at_once(&key, &began);
                brakes.decide_evidenced(&key, counts(&key), failing, now_ms)
            } else {
                brakes.decide(&key, counts(&key), now_ms)
            };
            let tracked = self.tracked.get_mut(&id.endpoint)?;
            if let Verdict::Hold(why) = verdict {
                if std::mem::replace(&mut tracked.held, true) {
                    return None;
                }
                return Some(Decision::Held {
                    key,
                    instance: tracked.instance.clone(),
                    reason: format!("{reason}; held: {why}"),
                });
            }
            return Some(propose(tracked, desired, reason));
        }
        Some(propose(tracked, desired, reason))
    }

    /// How many of `key`'s checked endpoints fail a readiness check still, their failures
    /// having begun within `began`: those failing at once, removed already or not.
    fn failing_at_once(&self, key: &ServiceKey, began: &RangeInclusive<u64>) -> usize {
        self.by_service
            .get(key)
            .into_iter()
            .flatten()
            .filter_map(|id| self.tracked.get(id))
            .filter(|t| {
                t.checks.iter().any(|c| {
                    c.check.signal == Signal::Readiness
                        && c.hysteresis.failing_since().is_some_and(|at| began.contains(&at))
                })
            })
            .count()
    }

    /// `finished` probes of `tenant` stopped running.
    fn tenant_done(&mut self, tenant: &Label, finished: usize) {
        if let Some(load) = self.tenants.get_mut(tenant) {
            load.in_flight = load.in_flight.saturating_sub(finished);
        }
    }

    fn state(&self, id: ProbeId) -> Option<&CheckState> {
        self.tracked.get(&id.endpoint).map(|tracked| &tracked.checks[id.check])
    }

    fn state_mut(&mut self, id: ProbeId) -> Option<&mut CheckState> {
        self.tracked
            .get_mut(&id.endpoint)
            .map(|tracked| &mut tracked.checks[id.check])
    }

    fn reschedule(&mut self, id: ProbeId, due: u64) {
        if let Some(state) = self.state_mut(id) {
            state.next_due_ms = due;
            self.schedule.push(Reverse((due, id)));
        }
    }

    /// `from + interval ± jitter`.
    fn next_turn(&mut self, from: u64, interval: u64) -> u64 {
        let spread = (interval as f64 * self.config.jitter) as u64;
        let jitter = self.draw(2 * spread + 1);
        from.saturating_add(interval - spread + jitter)
    }

    /// The wait before a new check's first probe, drawn from the stationary distribution of
    /// the jittered schedule (the forward recurrence time of intervals uniform in
    /// `interval ± spread`): uniform over `[0, interval - spread)`, then falling linearly to
    /// zero at `interval + spread`. A fleet registered at once then probes at its long-run
    /// rate from the first second; a plain uniform first phase overlaps the first and second
    /// rounds and bunches ~25% more probes into the seconds around one interval.
    fn first_turn(&mut self, interval: u64) -> u64 {
        let spread = (interval as f64 * self.config.jitter) as u64;
        let uniform = interval - spread;
        let u = self.unit();
        if spread == 0 || u * interval as f64 <= uniform as f64 {
            return self.draw(uniform.max(1));
        }
        let tail = 2.0 * spread as f64 * self.unit().sqrt();
        ((interval + spread) as f64 - tail) as u64
    }

    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.rng.next_u64() >> 11) as f64 / (1_u64 << 53) as f64
    }

    /// Uniform in `0..bound` (0 when `bound` is 0).
    fn draw(&mut self, bound: u64) -> u64 {
        if bound == 0 { 0 } else { self.rng.next_u64() % bound }
    }
}

fn millis(duration: Duration) -> u64 {
    duration.as_millis() as u64
}

/// The routing state checks combine to, and the index of the check that decided it; `None`
/// when no check votes (only liveness checks).
fn combine(checks: &[CheckState]) -> Option<(ServingState, usize)> {
    let severity = |state: ServingState| match state {
        ServingState::NotServing => 5,
        ServingState::Unknown => 4,
        ServingState::Starting => 3,
        ServingState::Degraded => 2,
        ServingState::Draining => 1,
        ServingState::Ready => 0,
    };
    let startup_pending = checks.iter().position(|c| c.check.signal == Signal::Startup && !c.done);
    if let Some(index) = startup_pending {
        return Some((ServingState::Starting, index));
    }
    checks
        .iter()
        .enumerate()
        .filter(|(_, c)| c.check.signal == Signal::Readiness)
        .map(|(index, c)| (c.hysteresis.serving(), index))
        .max_by_key(|(state, _)| severity(*state))
        .or_else(|| {
            // Only startup (passed) and liveness checks: the startup pass made it ready.
            checks
                .iter()
                .position(|c| c.check.signal == Signal::Startup)
                .map(|index| (ServingState::Ready, index))
        })
}

/// Proposes `desired` for a tracked endpoint (the checker's own state moves with it).
fn propose(tracked: &mut Tracked, desired: ServingState, reason: String) -> Decision {
    tracked.held = false;
    tracked.proposed = desired;
    Decision::Propose(Proposal {
        key: tracked.key.clone(),
        instance: tracked.instance.clone(),
        incarnation: tracked.incarnation,
        state: desired,
        reason,
    })
}

#[cfg(test)]
#[path = "checker_tests.rs"]
mod tests;
