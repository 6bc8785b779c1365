//! One check's state over time (SPEC H2, H4): rise/fall thresholds, the startup hold, an
//! `unknown` that is the checker's own blindness, and flap damping.
//!
//! ```text
//!   starting ──first pass──▶ passing ──fall fails──▶ failing ──rise passes──▶ passing
//!       │                       │  ▲                        ▲
//!       │                  rise warns / rise passes ──▶ warning
//!       └──────────────── fall fails before any pass ───────┘
//!   any ──fall probes the checker could not run──▶ unknown (not "not serving")
//!   more than `flap_limit` crossings within `flap_window` ──▶ held degraded until a whole
//!   window passes without a crossing
//! ```
//!
//! A check that fails `fall` times before it ever passed is `failing` (H2): a backend that
//! answers 500, refuses or hangs from its first probe is evidence that must show, not a
//! `starting` that lasts until the lease runs out. The first pass still lifts a check out of
//! `starting` at once; out of `failing` it takes `rise` passes, like any recovery.
//!
//! Only crossings are reported ([`Hysteresis::observe`] returns `Some`): the checker proposes
//! those as commands, never every probe result.

use std::collections::VecDeque;

use muster_core::ServingState;

/// One probe's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeResult {
    /// The target answered as healthy.
    Pass,
    /// The target answered, degraded (a TTL check's `warn`).
    Warn,
    /// The target answered unhealthy, or did not answer in time.
    Fail,
    /// The target's host refused the connection: nothing listens there (a process that
    /// died). A failure, and direct evidence of that one endpoint's death when it repeats
    /// (SPEC H5: [`Hysteresis::refused_in_a_row`]).
    Refused,
    /// The checker could not run the probe (no route from here, no probe budget left): says
    /// nothing about the target.
    Unreachable,
}

/// Where a check stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// No pass yet.
    Starting,
    /// Passing.
    Passing,
    /// Passing, degraded.
    Warning,
    /// Failing.
    Failing,
    /// The checker cannot tell.
    Unknown,
}

impl Health {
    /// The serving state this health routes as.
    pub fn serving(self) -> ServingState {
        match self {
            Health::Starting => ServingState::Starting,
            Health::Passing => ServingState::Ready,
            Health::Warning => ServingState::Degraded,
            Health::Failing => ServingState::NotServing,
            Health::Unknown => ServingState::Unknown,
        }
    }
}

/// Thresholds of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    /// Consecutive passes (or warns) to rise.
    pub rise: u32,
    /// Consecutive failures (or unrunnable probes) to fall.
    pub fall: u32,
    /// Crossings tolerated within `flap_window_ms` before damping.
    pub flap_limit: usize,
    /// The flap window.
    pub flap_window_ms: u64,
}

impl Default for Thresholds {
    /// Rise 2, fall 3 (see `check`); more than 4 crossings in 5 minutes is flapping: an
    /// endpoint that honestly fails and recovers does so a couple of times, not every minute.
    fn default() -> Self {
        Thresholds {
            rise: 2,
            fall: 3,
            flap_limit: 4,
            flap_window_ms: 300_000,
        }
    }
}

/// A reported crossing: what routing should now say, and why (for the observation record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    /// The new serving state.
    pub serving: ServingState,
    /// Why, in words.
    pub reason: String,
}

/// One check's hysteresis state.
#[derive(Debug, Clone)]
pub struct Hysteresis {
    thresholds: Thresholds,
    health: Health,
    passes: u32,
    warns: u32,
    fails: u32,
    /// Consecutive refused connections (part of `fails`).
    refusals: u32,
    /// When the current run of failures began (its first failed probe).
    failing_since_ms: Option<u64>,
    blind: u32,
    /// Times of recent crossings, oldest first, at most `flap_limit + 1`.
    crossings: VecDeque<u64>,
    damped: bool,
}

impl Hysteresis {
    /// A check that has not passed yet.
    pub fn new(thresholds: Thresholds) -> Hysteresis {
        Hysteresis {
            thresholds,
            health: Health::Starting,
            passes: 0,
            warns: 0,
            fails: 0,
            refusals: 0,
            failing_since_ms: None,
            blind: 0,
            crossings: VecDeque::new(),
            damped: false,
        }
    }

    /// A check resumed where its endpoint's record stands (after a restart or a leader
    /// change): a record already routed as `ready` is not sent back to `starting`.
    pub fn resume(thresholds: Thresholds, serving: ServingState) -> Hysteresis {
        let health = match serving {
            ServingState::Ready => Health::Passing,
            ServingState::Degraded => Health::Warning,
            ServingState::NotServing => Health::Failing,
            ServingState::Unknown => Health::Unknown,
            ServingState::Starting | ServingState::Draining => Health::Starting,
        };
        Hysteresis {
            health,
            ..Hysteresis::new(thresholds)
        }
    }

    /// Where the check stands (before damping).
    pub fn health(&self) -> Health {
        self.health
    }

    /// Whether the target refused the connection at each of the last `fall` probes: direct
    /// evidence that nothing listens there any more, not a dependency it shares with others.
    pub fn refused_in_a_row(&self) -> bool {
        self.refusals >= self.thresholds.fall
    }

    /// When the current run of failed probes began; `None` unless the last probe the
    /// checker ran failed.
    pub fn failing_since(&self) -> Option<u64> {
        self.failing_since_ms
    }

    /// The serving state routing should use: the health's, or `degraded` while damped.
    pub fn serving(&self) -> ServingState {
        if self.damped && self.health != Health::Starting {
            ServingState::Degraded
        } else {
            self.health.serving()
        }
    }

    /// Records one probe; returns the new serving state when it changed.
    pub fn observe(&mut self, result: ProbeResult, now_ms: u64) -> Option<Transition> {
        let before = self.serving();
        let t = self.thresholds;
        self.refusals = if result == ProbeResult::Refused {
            self.refusals + 1
        } else {
            0
        };
        self.failing_since_ms = match result {
            ProbeResult::Fail | ProbeResult::Refused => Some(self.failing_since_ms.unwrap_or(now_ms)),
            ProbeResult::Pass | ProbeResult::Warn => None,
            ProbeResult::Unreachable => self.failing_since_ms,
        };
        let (next, why) = match result {
            ProbeResult::Pass => {
                (self.passes, self.warns, self.fails, self.blind) = (self.passes + 1, 0, 0, 0);
                let rising = self.health == Health::Starting || self.passes >= t.rise;
                (
                    rising.then_some(Health::Passing),
                    format!("{} consecutive passes", self.passes),
                )
            }
            ProbeResult::Warn => {
                (self.passes, self.warns, self.fails, self.blind) = (0, self.warns + 1, 0, 0);
                let rising = self.health == Health::Starting || self.warns >= t.rise;
                (
                    rising.then_some(Health::Warning),
                    format!("{} consecutive warnings", self.warns),
                )
            }
            ProbeResult::Fail | ProbeResult::Refused => {
                (self.passes, self.warns, self.fails, self.blind) = (0, 0, self.fails + 1, 0);
                // From `starting` too (H2): `fall` failures before any pass are as much
                // evidence as `fall` failures after one.
                let falling = self.fails >= t.fall;
                let refused = match self.refusals {
                    n if n == self.fails => ", the connection refused each time".to_owned(),
                    n if self.refused_in_a_row() => format!(", the connection refused the last {n} times"),
                    _ => String::new(),
                };
                (
                    falling.then_some(Health::Failing),
                    format!("{} consecutive failures{refused}", self.fails),
                )
            }
            ProbeResult::Unreachable => {
                self.blind += 1;
                let blind = self.blind >= t.fall;
                (
                    blind.then_some(Health::Unknown),
                    format!("the checker could not probe {} times in a row", self.blind),
                )
            }
        };
        if let Some(next) = next.filter(|next| *next != self.health) {
            let was_starting = self.health == Health::Starting;
            self.health = next;
            if !was_starting && matches!(next, Health::Passing | Health::Warning | Health::Failing) {
                self.record_crossing(now_ms);
            }
        }
        self.settle(now_ms);
        let after = self.serving();
        (after != before).then(|| Transition {
            serving: after,
            reason: if self.damped {
                format!("flapping ({why}), held degraded until stable")
            } else {
                why
            },
        })
    }

    fn record_crossing(&mut self, now_ms: u64) {
        self.crossings.push_back(now_ms);
        if self.crossings.len() > self.thresholds.flap_limit + 1 {
            self.crossings.pop_front();
        }
    }

    /// Updates damping: on when more than `flap_limit` crossings fall within the window, off
    /// once a whole window has passed without one.
    fn settle(&mut self, now_ms: u64) {
        let window = self.thresholds.flap_window_ms;
        let recent = self
            .crossings
            .iter()
            .filter(|at| now_ms.saturating_sub(**at) < window)
            .count();
        if recent > self.thresholds.flap_limit {
            self.damped = true;
        } else if self.damped
            && self
                .crossings
                .back()
                .is_none_or(|last| now_ms.saturating_sub(*last) >= window)
        {
            self.damped = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ProbeResult::*;

    fn run(check: &mut Hysteresis, results: &[ProbeResult], start_ms: u64) -> Vec<ServingState> {
        results
            .iter()
            .enumerate()
            .filter_map(|(i, r)| check.observe(*r, start_ms + i as u64 * 1_000))
            .map(|t| t.serving)
            .collect()
    }

    #[test]
    fn the_first_pass_lifts_starting_at_once_and_failures_below_fall_do_not_leave_it() {
        let mut check = Hysteresis::new(Thresholds::default());
        assert_eq!(check.serving(), ServingState::Starting);
        assert_eq!(run(&mut check, &[Fail, Fail], 0), []);
        assert_eq!(run(&mut check, &[Pass], 10_000), [ServingState::Ready]);
    }

    /// Trace: a backend answering 500 from its first probe stayed `starting` until its lease
    /// ran out; `not_serving` appeared only after it had once been `ready` (H2, H4).
    #[test]
    fn fall_failures_before_any_pass_are_failing_not_starting() {
        let mut check = Hysteresis::new(Thresholds::default());
        assert_eq!(run(&mut check, &[Fail, Fail], 0), []);
        assert_eq!(
            check.observe(Fail, 2_000),
            Some(Transition {
                serving: ServingState::NotServing,
                reason: "3 consecutive failures".into()
            })
        );
        assert_eq!(check.health(), Health::Failing);
        assert_eq!(
            run(&mut check, &[Fail, Fail], 3_000),
            [],
            "no crossing while it keeps failing"
        );
        // Out of `failing`, recovery takes `rise` passes like any other.
        assert_eq!(run(&mut check, &[Pass, Pass], 10_000), [ServingState::Ready]);
        assert_eq!(check.crossings.len(), 1, "only the recovery is a flap crossing");
    }

    #[test]
    fn fall_probes_the_checker_cannot_run_before_any_pass_are_unknown() {
        let mut check = Hysteresis::new(Thresholds::default());
        let blind = check.observe(Unreachable, 0);
        assert_eq!(blind, None);
        assert_eq!(
            run(&mut check, &[Unreachable, Unreachable], 1_000),
            [ServingState::Unknown]
        );
        assert_eq!(check.health(), Health::Unknown);
    }

    #[test]
    fn only_threshold_crossings_change_the_state() {
        let mut check = Hysteresis::new(Thresholds::default());
        assert_eq!(
            run(&mut check, &[Pass, Fail, Fail, Pass, Fail, Fail], 0),
            [ServingState::Ready],
            "no 3 failures in a row"
        );
        let transition = check.observe(Fail, 10_000).unwrap();
        assert_eq!(
            transition,
            Transition {
                serving: ServingState::NotServing,
                reason: "3 consecutive failures".into()
            }
        );
        assert_eq!(
            run(&mut check, &[Pass, Fail, Pass, Pass], 20_000),
            [ServingState::Ready],
            "rise needs 2 passes in a row"
        );
    }

    #[test]
    fn warnings_degrade_and_an_unrunnable_probe_is_unknown_not_failing() {
        let mut check = Hysteresis::new(Thresholds::default());
        check.observe(Pass, 0);
        assert_eq!(run(&mut check, &[Warn, Warn], 1_000), [ServingState::Degraded]);
        let blind = run(&mut check, &[Unreachable, Unreachable, Unreachable], 10_000);
        assert_eq!(blind, [ServingState::Unknown]);
        assert_ne!(check.serving(), ServingState::NotServing);
    }

    #[test]
    fn a_check_flapping_at_every_probe_is_held_degraded_until_stable() {
        let t = Thresholds {
            rise: 1,
            fall: 1,
            flap_limit: 4,
            flap_window_ms: 60_000,
        };
        let mut check = Hysteresis::new(t);
        check.observe(Pass, 0);
        let flapping: Vec<ProbeResult> = (0..40).map(|i| if i % 2 == 0 { Fail } else { Pass }).collect();
        let changes = run(&mut check, &flapping, 1_000);
        // Four honest crossings, then one change to degraded, then nothing while it flaps.
        assert_eq!(changes.len(), 5, "{changes:?}");
        assert_eq!(changes.last(), Some(&ServingState::Degraded));
        assert_eq!(check.serving(), ServingState::Degraded);
        // Stable for a whole window: released to its real state.
        let calm: Vec<ProbeResult> = vec![Pass; 70];
        let released = run(&mut check, &calm, 100_000);
        assert_eq!(released, [ServingState::Ready]);
    }
}
