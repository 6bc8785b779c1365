//! What a lab run simulates: the [`Scenario`] (fleet, crash, callers, clock, seed) shared by
//! every setup, and the [`Setup`]s compared on it (how callers learn the fleet).
//!
//! ```text
//!  Scenario: 500 instances ─ 50 crash at 20 s ─ 60 s in 10 ms ticks ─ 20 callers × 100 req/s
//!     │
//!     ├─ Setup "hard-coded": a fixed list, no registry
//!     ├─ Setup "ttl-10s":    registry, TTL 10 s, heartbeat 2.5 s, callers cache 3 s
//!     └─ Setup "ttl-2s":     registry, TTL 2 s, heartbeat 0.5 s, callers cache 3 s
//!        beyond: watch instead of cache, ejection on first failure, drain before stop,
//!                a mass silence with and without self-preservation
//! ```
//!
//! Both are plain values; [`Scenario::validate`] and [`Setup::validate`] refuse what cannot
//! run (with a typed [`ScenarioError`]) before anything is simulated.

use muster_health::preservation::PreservationConfig;

use crate::error::ScenarioError;

/// The fleet, the crash, the callers and the clock: the same for every setup of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scenario {
    /// Instances registered at the start.
    pub instances: u32,
    /// Instances that crash (or, in a drain setup, shut down) at `crash_at_ms`: the same ones
    /// in every setup.
    pub killed: u32,
    /// When they crash.
    pub crash_at_ms: u64,
    /// How long the run lasts.
    pub duration_ms: u64,
    /// The virtual clock's step.
    pub tick_ms: u64,
    /// Callers, each with its own copy of the list.
    pub callers: u32,
    /// Requests per second of each caller.
    pub rate_per_caller: u32,
    /// The report's window for failed requests.
    pub window_ms: u64,
    /// Every random draw (phases, jitter, rotation starts, who crashes) comes from this.
    pub seed: u64,
}

/// The reference seed: any fixed value; this one spells "muster" in ASCII.
pub const REFERENCE_SEED: u64 = 0x6d75_7374_6572;

/// The largest fleet: instance `i` gets the address `10.0.0.0 + i + 1`, so a pick maps back
/// to its instance without a lookup, and a /8 holds 2^24 − 2 of them.
pub const MAX_INSTANCES: u32 = (1 << 24) - 2;

impl Scenario {
    /// The reference scenario (SPEC X): 500 instances, the same 50 crash at 20 s, 60 s in
    /// 10 ms ticks, 20 callers × 100 requests/s, failures counted per 5 s window.
    pub fn reference() -> Scenario {
        Scenario {
            instances: 500,
            killed: 50,
            crash_at_ms: 20_000,
            duration_ms: 60_000,
            tick_ms: 10,
            callers: 20,
            rate_per_caller: 100,
            window_ms: 5_000,
            seed: REFERENCE_SEED,
        }
    }

    /// Refuses a scenario that cannot run or would not mean anything.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        let invalid = |field: &'static str, why: String| Err(ScenarioError::Invalid { field, why });
        if self.instances == 0 || self.instances > MAX_INSTANCES {
            return invalid(
                "instances",
                format!("{} is not between 1 and {MAX_INSTANCES}", self.instances),
            );
        }
        if self.killed > self.instances {
            return invalid(
                "kill",
                format!("{} killed of {} instances", self.killed, self.instances),
            );
        }
        if self.tick_ms == 0 {
            return invalid("tick", "must be at least 1 ms".into());
        }
        if self.duration_ms == 0 || !self.duration_ms.is_multiple_of(self.tick_ms) {
            return invalid(
                "duration",
                format!(
                    "{} ms is not a positive multiple of the {} ms tick",
                    self.duration_ms, self.tick_ms
                ),
            );
        }
        if !self.crash_at_ms.is_multiple_of(self.tick_ms) || self.crash_at_ms >= self.duration_ms {
            return invalid(
                "crash_at",
                format!(
                    "{} ms must be a multiple of the {} ms tick and before the end ({} ms)",
                    self.crash_at_ms, self.tick_ms, self.duration_ms
                ),
            );
        }
        if self.window_ms == 0 || !self.window_ms.is_multiple_of(self.tick_ms) {
            return invalid(
                "window",
                format!(
                    "{} ms is not a positive multiple of the {} ms tick",
                    self.window_ms, self.tick_ms
                ),
            );
        }
        if self.callers == 0 {
            return invalid("callers", "at least one caller".into());
        }
        if self.rate_per_caller == 0 {
            return invalid("rate", "at least one request per second".into());
        }
        // A bound on the work of one run, not on realism: 10^10 picks is hours.
        let picks = u128::from(self.callers) * u128::from(self.rate_per_caller) * u128::from(self.duration_ms) / 1_000;
        if picks > 10_000_000_000 {
            return invalid(
                "rate",
                format!("{picks} requests in one run is more than the lab simulates (10^10)"),
            );
        }
        Ok(())
    }

    /// Ticks in the run.
    pub fn ticks(&self) -> u64 {
        self.duration_ms / self.tick_ms
    }

    /// The tick of the crash.
    pub fn crash_tick(&self) -> u64 {
        self.crash_at_ms / self.tick_ms
    }

    /// Requests each caller sends during tick `tick`: the rate spread evenly over the ticks
    /// (100 requests/s in 10 ms ticks is exactly one per tick).
    pub fn requests_in_tick(&self, tick: u64) -> u64 {
        let through = |t: u64| t * u64::from(self.rate_per_caller) * self.tick_ms / 1_000;
        through(tick + 1) - through(tick)
    }
}

/// One way for callers to learn the fleet, compared on the scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct Setup {
    /// Its name in reports (`hard-coded`, `ttl-10s`, ...).
    pub name: String,
    /// A hard-coded list, or a registry.
    pub discovery: Discovery,
    /// Client-side ejection: how long an endpoint that failed a request is left out (it is
    /// ejected on the first failure, and the ejection survives refreshes).
    pub eject_ms: Option<u64>,
    /// How the killed instances stop.
    pub stop: Stop,
}

/// How callers learn the fleet.
#[derive(Debug, Clone, PartialEq)]
pub enum Discovery {
    /// Every caller has the list of the start, forever.
    HardCoded,
    /// Instances register and heartbeat; callers read the registry.
    Registry(RegistrySetup),
}

/// A registry setup's parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct RegistrySetup {
    /// The lease TTL: an instance silent for longer is removed.
    pub ttl_ms: u64,
    /// The mean heartbeat interval (each one is jittered by ±10%).
    pub heartbeat_ms: u64,
    /// How callers refresh their list.
    pub refresh: Refresh,
    /// The self-preservation brake on expiries (SPEC H5), if on.
    pub preservation: Option<PreservationConfig>,
    /// A mass silence: live instances whose heartbeats stop reaching the registry.
    pub silence: Option<Silence>,
}

/// How callers refresh their list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refresh {
    /// Each caller looks the service up every `period_ms`, with its own random phase.
    Cache {
        /// The cache's lifetime.
        period_ms: u64,
    },
    /// Each caller watches the service: every committed change reaches it `propagation_ms`
    /// later.
    Watch {
        /// Commit to delivery (rounded up to the tick).
        propagation_ms: u64,
    },
}

/// How the killed instances stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// They crash: no goodbye, no more heartbeats, every request to them fails.
    Crash,
    /// Planned shutdown (registrar order): drain, keep serving for `grace_ms`, deregister,
    /// revoke the lease, then stop.
    Drain {
        /// Draining to stopping.
        grace_ms: u64,
    },
}

/// Live instances whose heartbeats stop reaching the registry for a while (a partition
/// between them and the registry, not between them and their callers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Silence {
    /// How many, chosen among the instances that do not crash.
    pub instances: u32,
    /// When it starts.
    pub from_ms: u64,
    /// How long it lasts.
    pub for_ms: u64,
}

/// The registry's shortest and longest lease TTL (`RegistryConfig`'s defaults): a setup
/// outside them would be refused by the registry, so it is refused here first.
fn ttl_range() -> (u64, u64) {
    let config = muster_registry::RegistryConfig::default();
    (config.min_lease_ttl_ms, config.max_lease_ttl_ms)
}

/// The caches of the reference: 3 s.
pub const REFERENCE_CACHE_MS: u64 = 3_000;
/// Client ejection in the ejection setup: 30 s, Envoy's base ejection time.
pub const REFERENCE_EJECT_MS: u64 = 30_000;
/// Drain grace in the drain setup: the registrar's default (5 s), longer than the 3 s cache.
pub const REFERENCE_DRAIN_MS: u64 = 5_000;
/// Watch propagation in the watch setup: 20 ms, two ticks; the live lab measures the real one
/// (a few ms on loopback) so this is on the safe side.
pub const REFERENCE_PROPAGATION_MS: u64 = 20;

/// The names [`Setup::named`] knows, reference ones first.
pub const SETUP_NAMES: [&str; 8] = [
    "hard-coded",
    "ttl-10s",
    "ttl-2s",
    "watch",
    "eject",
    "drain",
    "silence",
    "preservation",
];

/// How many of [`SETUP_NAMES`] are the reference setups.
pub const REFERENCE_SETUPS: usize = 3;

impl Setup {
    /// The hard-coded list.
    pub fn hard_coded() -> Setup {
        Setup {
            name: "hard-coded".into(),
            discovery: Discovery::HardCoded,
            eject_ms: None,
            stop: Stop::Crash,
        }
    }

    /// A registry setup with a 3 s cache and no extras.
    pub fn registry(name: impl Into<String>, ttl_ms: u64, heartbeat_ms: u64) -> Setup {
        Setup {
            name: name.into(),
            discovery: Discovery::Registry(RegistrySetup {
                ttl_ms,
                heartbeat_ms,
                refresh: Refresh::Cache {
                    period_ms: REFERENCE_CACHE_MS,
                },
                preservation: None,
                silence: None,
            }),
            eject_ms: None,
            stop: Stop::Crash,
        }
    }

    /// A setup of the catalogue (see [`SETUP_NAMES`]); `scenario` sizes the mass silence.
    pub fn named(name: &str, scenario: &Scenario) -> Option<Setup> {
        // 40% of the fleet silenced for 15 s from the crash: with the 10% that crash, half the
        // fleet goes quiet at once — past the 30% self-preservation allows per minute.
        let silence = Silence {
            instances: (scenario.instances - scenario.killed).min(scenario.instances * 2 / 5),
            from_ms: scenario.crash_at_ms,
            for_ms: 15_000,
        };
        let setup = match name {
            "hard-coded" => Setup::hard_coded(),
            "ttl-10s" => Setup::registry(name, 10_000, 2_500),
            "ttl-2s" => Setup::registry(name, 2_000, 500),
            "watch" => Setup::registry(name, 2_000, 500).with_refresh(Refresh::Watch {
                propagation_ms: REFERENCE_PROPAGATION_MS,
            }),
            "eject" => Setup::registry(name, 10_000, 2_500).with_eject(REFERENCE_EJECT_MS),
            "drain" => Setup::registry(name, 10_000, 2_500).with_stop(Stop::Drain {
                grace_ms: REFERENCE_DRAIN_MS,
            }),
            "silence" => Setup::registry(name, 2_000, 500).with_silence(silence),
            "preservation" => Setup::registry(name, 2_000, 500)
                .with_silence(silence)
                .with_preservation(PreservationConfig::default()),
            _ => return None,
        };
        Some(setup)
    }

    /// The three reference setups.
    pub fn reference(scenario: &Scenario) -> Vec<Setup> {
        SETUP_NAMES[..REFERENCE_SETUPS]
            .iter()
            .filter_map(|name| Setup::named(name, scenario))
            .collect()
    }

    /// Every setup of the catalogue.
    pub fn all(scenario: &Scenario) -> Vec<Setup> {
        SETUP_NAMES
            .iter()
            .filter_map(|name| Setup::named(name, scenario))
            .collect()
    }

    /// The same setup under another name.
    pub fn with_name(mut self, name: impl Into<String>) -> Setup {
        self.name = name.into();
        self
    }

    /// Client ejection on the first failure, for `eject_ms`.
    pub fn with_eject(mut self, eject_ms: u64) -> Setup {
        self.eject_ms = Some(eject_ms);
        self
    }

    /// How the killed instances stop.
    pub fn with_stop(mut self, stop: Stop) -> Setup {
        self.stop = stop;
        self
    }

    /// How callers refresh (registry setups only; a hard-coded list is left as it is).
    pub fn with_refresh(mut self, refresh: Refresh) -> Setup {
        if let Discovery::Registry(registry) = &mut self.discovery {
            registry.refresh = refresh;
        }
        self
    }

    /// A mass silence (registry setups only).
    pub fn with_silence(mut self, silence: Silence) -> Setup {
        if let Discovery::Registry(registry) = &mut self.discovery {
            registry.silence = Some(silence);
        }
        self
    }

    /// The self-preservation brake on expiries (registry setups only).
    pub fn with_preservation(mut self, config: PreservationConfig) -> Setup {
        if let Discovery::Registry(registry) = &mut self.discovery {
            registry.preservation = Some(config);
        }
        self
    }

    /// The registry parameters, if any.
    pub fn registry_setup(&self) -> Option<&RegistrySetup> {
        match &self.discovery {
            Discovery::Registry(registry) => Some(registry),
            Discovery::HardCoded => None,
        }
    }

    /// Refuses a setup that cannot run on `scenario`.
    pub fn validate(&self, scenario: &Scenario) -> Result<(), ScenarioError> {
        let invalid = |field: &'static str, why: String| {
            Err(ScenarioError::Setup {
                setup: self.name.clone(),
                field,
                why,
            })
        };
        if self.name.is_empty() {
            return invalid("name", "a setup needs a name".into());
        }
        if self.eject_ms == Some(0) {
            return invalid("eject", "an ejection lasts at least 1 ms".into());
        }
        let Some(registry) = self.registry_setup() else {
            if matches!(self.stop, Stop::Drain { .. }) {
                return invalid(
                    "drain",
                    "a hard-coded list cannot be drained: there is no registry".into(),
                );
            }
            return Ok(());
        };
        let (min_ttl, max_ttl) = ttl_range();
        if !(min_ttl..=max_ttl).contains(&registry.ttl_ms) {
            return invalid(
                "ttl",
                format!(
                    "{} ms is outside the registry's {min_ttl} ms to {max_ttl} ms",
                    registry.ttl_ms
                ),
            );
        }
        // The longest jittered interval (+10%) plus the tick must stay inside the TTL, or a
        // live instance would expire between two of its own heartbeats.
        if registry.heartbeat_ms == 0 || registry.heartbeat_ms * 11 / 10 + scenario.tick_ms >= registry.ttl_ms {
            return invalid(
                "heartbeat",
                format!(
                    "{} ms (+10% jitter, + one {} ms tick) must be positive and shorter than the {} ms TTL",
                    registry.heartbeat_ms, scenario.tick_ms, registry.ttl_ms
                ),
            );
        }
        if let Refresh::Cache { period_ms } = registry.refresh
            && (period_ms == 0 || !period_ms.is_multiple_of(scenario.tick_ms))
        {
            return invalid(
                "cache",
                format!(
                    "{period_ms} ms is not a positive multiple of the {} ms tick",
                    scenario.tick_ms
                ),
            );
        }
        if let Some(silence) = registry.silence {
            if silence.instances > scenario.instances - scenario.killed {
                return invalid(
                    "silence",
                    format!(
                        "{} silenced, but only {} instances do not crash",
                        silence.instances,
                        scenario.instances - scenario.killed
                    ),
                );
            }
            if !silence.from_ms.is_multiple_of(scenario.tick_ms) || !silence.for_ms.is_multiple_of(scenario.tick_ms) {
                return invalid(
                    "silence",
                    format!("start and length must be multiples of the {} ms tick", scenario.tick_ms),
                );
            }
        }
        if let Some(config) = registry.preservation
            && !(config.max_fraction > 0.0 && config.max_fraction <= 1.0 && config.window_ms > 0)
        {
            return invalid("preservation", "max_fraction in (0, 1] and a positive window".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_scenario_and_catalogue_are_valid() {
        let scenario = Scenario::reference();
        scenario.validate().unwrap();
        assert_eq!(scenario.ticks(), 6_000);
        assert_eq!(scenario.requests_in_tick(0), 1, "100 req/s in 10 ms ticks");
        for setup in Setup::all(&scenario) {
            setup.validate(&scenario).unwrap();
        }
        let names: Vec<_> = Setup::reference(&scenario).into_iter().map(|s| s.name).collect();
        assert_eq!(names, ["hard-coded", "ttl-10s", "ttl-2s"]);
    }

    #[test]
    fn an_uneven_rate_is_spread_over_the_ticks_without_losing_requests() {
        let scenario = Scenario {
            rate_per_caller: 33,
            ..Scenario::reference()
        };
        let total: u64 = (0..100).map(|tick| scenario.requests_in_tick(tick)).sum();
        assert_eq!(total, 33, "one second of 10 ms ticks");
    }

    #[test]
    fn setups_that_cannot_run_are_refused_with_the_field() {
        let scenario = Scenario::reference();
        let refused = |setup: Setup| match setup.validate(&scenario) {
            Err(ScenarioError::Setup { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(refused(Setup::registry("x", 500, 100)), "ttl");
        assert_eq!(refused(Setup::registry("x", 2_000, 1_900)), "heartbeat");
        assert_eq!(
            refused(Setup::hard_coded().with_stop(Stop::Drain { grace_ms: 1_000 })),
            "drain"
        );
        let too_many = Silence {
            instances: 460,
            from_ms: 0,
            for_ms: 1_000,
        };
        assert_eq!(
            refused(Setup::registry("x", 2_000, 500).with_silence(too_many)),
            "silence"
        );
        let bad = Scenario {
            killed: 501,
            ..Scenario::reference()
        };
        assert!(matches!(
            bad.validate(),
            Err(ScenarioError::Invalid { field: "kill", .. })
        ));
    }
}
