//! `muster lab`'s flags and scenario file, resolved into a [`Plan`] before anything runs.
//!
//! ```text
//!  --scenario FILE ([scenario] + [[setup]]) ─┐
//!  scenario flags (--instances, --kill ...) ─┼─▶ Scenario (flags override the file) ─┐
//!  --setup NAME,... (catalogue)              ─┤                                      ├─▶ Plan
//!  setup flags (--ttl, --watch, --eject ...) ─┴─▶ Setups (validated on the scenario) ─┘
//!  nothing at all                             ──▶ the reference scenario, its three setups
//! ```
//!
//! The setup flags describe one custom setup; its keys are the same as a `[[setup]]` table's
//! ([`SetupSpec`]). Every refusal is a [`ScenarioError`]: nothing is simulated.

use std::path::{Path, PathBuf};

use clap::Args;
use muster_health::preservation::PreservationConfig;
use serde::Deserialize;

use crate::error::ScenarioError;
use crate::live::LiveScenario;
use crate::scenario::{
    REFERENCE_CACHE_MS, REFERENCE_PROPAGATION_MS, Refresh, SETUP_NAMES, Scenario, Setup, Silence, Stop,
};
use crate::units::{format_ms, parse_ms, parse_share};

/// `muster lab`: simulate a fleet on Muster's real registry and client code.
#[derive(Debug, Clone, Default, Args)]
#[command(
    after_help = "With no arguments: the reference scenario (500 instances, 50 crash at 20 s, \
                        60 s in 10 ms ticks, 20 callers × 100 req/s) and its three setups: \
                        hard-coded, ttl-10s, ttl-2s. Known setups: hard-coded, ttl-10s, ttl-2s, \
                        watch, eject, drain, silence, preservation (or 'reference', 'all'). \
                        --live runs two setups on one fleet: the client library and muster proxy; \
                        the killed instances crash, or with --drain GRACE drain first."
)]
pub struct LabArgs {
    /// Setups from the catalogue to run (comma-separated or repeated; `reference`, `all`).
    #[arg(long = "setup", value_name = "NAME", value_delimiter = ',')]
    pub setups: Vec<String>,
    /// A TOML scenario file: a `[scenario]` table and `[[setup]]` tables.
    #[arg(long, value_name = "FILE")]
    pub scenario: Option<PathBuf>,
    /// Write a Markdown report and SVG plots into this directory.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// The live lab: a real server, instances behind real sockets, and two setups side by side:
    /// callers using muster-client (`live-ttl-…`) and callers through an in-process muster
    /// proxy (`muster-proxy-ttl-…`).
    #[arg(long)]
    pub live: bool,
    /// Scenario: instances at the start [default: 500; live: 100].
    #[arg(long, value_name = "N")]
    pub instances: Option<u32>,
    /// Scenario: how many crash, as a count or a share (`50`, `10%`) [default: 10%].
    #[arg(long, value_name = "N|P%")]
    pub kill: Option<String>,
    /// Scenario: when they crash [default: 20s; live: 5s].
    #[arg(long, value_name = "DURATION")]
    pub crash_at: Option<String>,
    /// Scenario: the run's length [default: 60s; live: 15s].
    #[arg(long, value_name = "DURATION")]
    pub duration: Option<String>,
    /// Scenario: the virtual clock's step [default: 10ms].
    #[arg(long, value_name = "DURATION")]
    pub tick: Option<String>,
    /// Scenario: callers [default: 20; live: 10].
    #[arg(long, value_name = "N")]
    pub callers: Option<u32>,
    /// Scenario: requests per second of each caller [default: 100; live: 50].
    #[arg(long, value_name = "N")]
    pub rate: Option<u32>,
    /// Scenario: the report's window for failed requests [default: 5s].
    #[arg(long, value_name = "DURATION")]
    pub window: Option<String>,
    /// Scenario: the seed of every random draw.
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Custom setup: its name [default: from its parameters].
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Custom setup: a hard-coded list instead of a registry.
    #[arg(long)]
    pub hard_coded: bool,
    /// Custom setup: the lease TTL [default: 10s; live: 2s].
    #[arg(long, value_name = "DURATION")]
    pub ttl: Option<String>,
    /// Custom setup: the mean heartbeat interval, jittered ±10% [default: TTL / 4].
    #[arg(long, value_name = "DURATION")]
    pub heartbeat: Option<String>,
    /// Custom setup: how long callers cache a lookup [default: 3s].
    #[arg(long, value_name = "DURATION")]
    pub cache: Option<String>,
    /// Custom setup: callers watch instead of caching.
    #[arg(long)]
    pub watch: bool,
    /// Custom setup: commit-to-delivery time of a watch [default: 20ms].
    #[arg(long, value_name = "DURATION")]
    pub propagation: Option<String>,
    /// Custom setup: callers eject an endpoint on its first failure, for this long.
    #[arg(long, value_name = "DURATION")]
    pub eject: Option<String>,
    /// Custom setup: planned shutdown — drain, then stop after this grace. Live: the killed
    /// instances are drained at --crash-at and stop once every view (the proxy's too) has the
    /// drain and this grace has passed (`--drain 500ms`).
    #[arg(long, value_name = "DURATION")]
    pub drain: Option<String>,
    /// Custom setup: live instances silenced at the crash (count or share of the fleet).
    #[arg(long, value_name = "N|P%")]
    pub silence: Option<String>,
    /// Custom setup: how long the silence lasts [default: 15s].
    #[arg(long, value_name = "DURATION")]
    pub silence_for: Option<String>,
    /// Custom setup: the self-preservation brake on expiries (30% per 60 s).
    #[arg(long)]
    pub preservation: bool,
}

/// What to run.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// Simulate these setups on this scenario.
    Simulate {
        /// The scenario.
        scenario: Scenario,
        /// The setups, in order.
        setups: Vec<Setup>,
    },
    /// Run the live lab.
    Live(LiveScenario),
}

/// A duration, count or share as written in a file: `"2.5s"`, `50`, `"10%"`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Value {
    /// A bare number.
    Number(u64),
    /// Text with a unit or a percent sign.
    Text(String),
}

impl Value {
    fn text(&self) -> String {
        match self {
            Value::Number(n) => n.to_string(),
            Value::Text(text) => text.clone(),
        }
    }
}

/// A scenario file's `[scenario]` table; every key optional.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioSpec {
    /// Instances.
    pub instances: Option<u32>,
    /// Killed: a count or a share.
    pub kill: Option<Value>,
    /// Crash time.
    pub crash_at: Option<String>,
    /// Run length.
    pub duration: Option<String>,
    /// Tick.
    pub tick: Option<String>,
    /// Callers.
    pub callers: Option<u32>,
    /// Requests per second per caller.
    pub rate: Option<u32>,
    /// Report window.
    pub window: Option<String>,
    /// Seed.
    pub seed: Option<u64>,
}

/// One setup, as a `[[setup]]` table or the custom-setup flags.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetupSpec {
    /// A catalogue setup to start from (`ttl-2s`, `watch` ...); the other keys change it.
    #[serde(rename = "use")]
    pub base: Option<String>,
    /// The name.
    pub name: Option<String>,
    /// A hard-coded list.
    #[serde(default)]
    pub hard_coded: bool,
    /// TTL.
    pub ttl: Option<String>,
    /// Heartbeat interval.
    pub heartbeat: Option<String>,
    /// Cache lifetime.
    pub cache: Option<String>,
    /// Watch instead of cache.
    #[serde(default)]
    pub watch: bool,
    /// Watch propagation.
    pub propagation: Option<String>,
    /// Ejection length.
    pub eject: Option<String>,
    /// Drain grace.
    pub drain: Option<String>,
    /// Silenced instances.
    pub silence: Option<Value>,
    /// Silence length.
    pub silence_for: Option<String>,
    /// Self-preservation.
    #[serde(default)]
    pub preservation: bool,
}

/// A scenario file.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    /// The scenario.
    #[serde(default)]
    pub scenario: ScenarioSpec,
    /// The setups.
    #[serde(default)]
    pub setup: Vec<SetupSpec>,
}

impl ScenarioFile {
    /// Parses a scenario file's text.
    pub fn parse(text: &str, path: &Path) -> Result<ScenarioFile, ScenarioError> {
        toml::from_str(text).map_err(|error| ScenarioError::File {
            path: path.to_path_buf(),
            why: error.to_string().trim().to_owned(),
        })
    }
}

fn parse_error(field: &str) -> impl FnOnce(String) -> ScenarioError + '_ {
    move |why| ScenarioError::Parse {
        field: field.to_owned(),
        why,
    }
}

fn duration(field: &str, text: Option<&String>) -> Result<Option<u64>, ScenarioError> {
    text.map(|t| parse_ms(t).map_err(parse_error(field))).transpose()
}

/// The scenario keys given as flags.
pub(crate) fn scenario_flags(args: &LabArgs) -> ScenarioSpec {
    ScenarioSpec {
        instances: args.instances,
        kill: args.kill.clone().map(Value::Text),
        crash_at: args.crash_at.clone(),
        duration: args.duration.clone(),
        tick: args.tick.clone(),
        callers: args.callers,
        rate: args.rate,
        window: args.window.clone(),
        seed: args.seed,
    }
}

impl LabArgs {
    /// The custom setup the flags describe, if any setup flag is given.
    fn setup_spec(&self) -> Option<SetupSpec> {
        let given = self.name.is_some()
            || self.hard_coded
            || self.ttl.is_some()
            || self.heartbeat.is_some()
            || self.cache.is_some()
            || self.watch
            || self.propagation.is_some()
            || self.eject.is_some()
            || self.drain.is_some()
            || self.silence.is_some()
            || self.silence_for.is_some()
            || self.preservation;
        given.then(|| SetupSpec {
            base: None,
            name: self.name.clone(),
            hard_coded: self.hard_coded,
            ttl: self.ttl.clone(),
            heartbeat: self.heartbeat.clone(),
            cache: self.cache.clone(),
            watch: self.watch,
            propagation: self.propagation.clone(),
            eject: self.eject.clone(),
            drain: self.drain.clone(),
            silence: self.silence.clone().map(Value::Text),
            silence_for: self.silence_for.clone(),
            preservation: self.preservation,
        })
    }
}

/// `over`'s keys where given, else `base`'s.
pub(crate) fn merge(base: ScenarioSpec, over: ScenarioSpec) -> ScenarioSpec {
    ScenarioSpec {
        instances: over.instances.or(base.instances),
        kill: over.kill.or(base.kill),
        crash_at: over.crash_at.or(base.crash_at),
        duration: over.duration.or(base.duration),
        tick: over.tick.or(base.tick),
        callers: over.callers.or(base.callers),
        rate: over.rate.or(base.rate),
        window: over.window.or(base.window),
        seed: over.seed.or(base.seed),
    }
}

/// The scenario: `defaults` changed by the spec's keys.
pub fn build_scenario(spec: &ScenarioSpec, defaults: &Scenario) -> Result<Scenario, ScenarioError> {
    let instances = spec.instances.unwrap_or(defaults.instances);
    let killed = match &spec.kill {
        Some(kill) => parse_share(&kill.text(), instances).map_err(parse_error("kill"))?,
        // The reference's 10%, of whatever fleet was asked for.
        None => (u64::from(instances) * u64::from(defaults.killed) / u64::from(defaults.instances.max(1))) as u32,
    };
    let scenario = Scenario {
        instances,
        killed,
        crash_at_ms: duration("crash_at", spec.crash_at.as_ref())?.unwrap_or(defaults.crash_at_ms),
        duration_ms: duration("duration", spec.duration.as_ref())?.unwrap_or(defaults.duration_ms),
        tick_ms: duration("tick", spec.tick.as_ref())?.unwrap_or(defaults.tick_ms),
        callers: spec.callers.unwrap_or(defaults.callers),
        rate_per_caller: spec.rate.unwrap_or(defaults.rate_per_caller),
        window_ms: duration("window", spec.window.as_ref())?.unwrap_or(defaults.window_ms),
        seed: spec.seed.unwrap_or(defaults.seed),
    };
    scenario.validate()?;
    Ok(scenario)
}

/// A setup from its spec, on `scenario`.
pub fn build_setup(spec: &SetupSpec, scenario: &Scenario) -> Result<Setup, ScenarioError> {
    let base = match &spec.base {
        Some(name) => Some(named(name, scenario)?),
        None => None,
    };
    let registry_keys = spec.ttl.is_some()
        || spec.heartbeat.is_some()
        || spec.cache.is_some()
        || spec.watch
        || spec.propagation.is_some()
        || spec.silence.is_some()
        || spec.preservation;
    if spec.hard_coded && registry_keys {
        return Err(ScenarioError::Parse {
            field: "hard_coded".into(),
            why: "a hard-coded list has no TTL, heartbeat, cache, watch, silence or self-preservation".into(),
        });
    }
    let eject = duration("eject", spec.eject.as_ref())?;
    let drain = duration("drain", spec.drain.as_ref())?;
    let mut setup = if spec.hard_coded {
        Setup::hard_coded()
    } else {
        let from = base.as_ref().and_then(|b| b.registry_setup().cloned());
        let ttl = duration("ttl", spec.ttl.as_ref())?
            .or(from.as_ref().map(|r| r.ttl_ms))
            .unwrap_or(10_000);
        // A quarter of the TTL, as both reference setups: three heartbeats may be lost.
        let heartbeat = duration("heartbeat", spec.heartbeat.as_ref())?
            .or(from.as_ref().filter(|_| spec.ttl.is_none()).map(|r| r.heartbeat_ms))
            .unwrap_or(ttl / 4);
        let mut setup = Setup::registry("custom", ttl, heartbeat);
        let refresh = if spec.watch || spec.propagation.is_some() {
            Refresh::Watch {
                propagation_ms: duration("propagation", spec.propagation.as_ref())?.unwrap_or(REFERENCE_PROPAGATION_MS),
            }
        } else if let Some(cache) = duration("cache", spec.cache.as_ref())? {
            Refresh::Cache { period_ms: cache }
        } else {
            from.as_ref().map_or(
                Refresh::Cache {
                    period_ms: REFERENCE_CACHE_MS,
                },
                |r| r.refresh,
            )
        };
        setup = setup.with_refresh(refresh);
        let silence = match &spec.silence {
            Some(count) => Some(Silence {
                instances: parse_share(&count.text(), scenario.instances).map_err(parse_error("silence"))?,
                from_ms: scenario.crash_at_ms,
                for_ms: duration("silence_for", spec.silence_for.as_ref())?.unwrap_or(15_000),
            }),
            None => from.as_ref().and_then(|r| r.silence),
        };
        if let Some(silence) = silence {
            setup = setup.with_silence(silence);
        }
        if spec.preservation || from.as_ref().is_some_and(|r| r.preservation.is_some()) {
            setup = setup.with_preservation(PreservationConfig::default());
        }
        setup
    };
    setup.eject_ms = eject.or(base.as_ref().and_then(|b| b.eject_ms));
    setup.stop = match drain {
        Some(grace_ms) => Stop::Drain { grace_ms },
        None => base.as_ref().map_or(Stop::Crash, |b| b.stop),
    };
    setup.name = match (&spec.name, &base) {
        (Some(name), _) => name.clone(),
        (None, Some(base)) if !registry_keys && eject.is_none() && drain.is_none() => base.name.clone(),
        _ => default_name(&setup),
    };
    setup.validate(scenario)?;
    Ok(setup)
}

/// A name from a custom setup's parameters: `ttl-2s`, `ttl-2s-watch-eject`, `hard-coded`.
fn default_name(setup: &Setup) -> String {
    let mut name = match setup.registry_setup() {
        None => "hard-coded".to_owned(),
        Some(r) => {
            let mut name = format!("ttl-{}", format_ms(r.ttl_ms));
            if matches!(r.refresh, Refresh::Watch { .. }) {
                name.push_str("-watch");
            }
            if r.silence.is_some() {
                name.push_str("-silence");
            }
            if r.preservation.is_some() {
                name.push_str("-preservation");
            }
            name
        }
    };
    if setup.eject_ms.is_some() {
        name.push_str("-eject");
    }
    if matches!(setup.stop, Stop::Drain { .. }) {
        name.push_str("-drain");
    }
    name
}

fn named(name: &str, scenario: &Scenario) -> Result<Setup, ScenarioError> {
    Setup::named(name, scenario).ok_or_else(|| ScenarioError::UnknownSetup {
        name: name.to_owned(),
        known: SETUP_NAMES.join(", "),
    })
}

/// Resolves the flags and the (already parsed) scenario file into a plan.
pub fn plan(args: &LabArgs, file: Option<ScenarioFile>) -> Result<Plan, ScenarioError> {
    if args.live {
        return crate::live::plan(args, file.as_ref());
    }
    let file = file.unwrap_or_default();
    let scenario = build_scenario(&merge(file.scenario, scenario_flags(args)), &Scenario::reference())?;
    let mut setups = Vec::new();
    for name in &args.setups {
        match name.as_str() {
            "reference" => setups.extend(Setup::reference(&scenario)),
            "all" => setups.extend(Setup::all(&scenario)),
            name => setups.push(named(name, &scenario)?),
        }
    }
    for spec in &file.setup {
        setups.push(build_setup(spec, &scenario)?);
    }
    if let Some(spec) = args.setup_spec() {
        setups.push(build_setup(&spec, &scenario)?);
    }
    if setups.is_empty() {
        setups = Setup::reference(&scenario);
    }
    for setup in &setups {
        setup.validate(&scenario)?;
        if setups.iter().filter(|other| other.name == setup.name).count() > 1 {
            return Err(ScenarioError::Parse {
                field: "setup".into(),
                why: format!(
                    "two setups are named '{}'; name them apart (--name, or name = ...)",
                    setup.name
                ),
            });
        }
    }
    Ok(Plan::Simulate { scenario, setups })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(build: impl FnOnce(&mut LabArgs)) -> LabArgs {
        let mut args = LabArgs::default();
        build(&mut args);
        args
    }

    fn simulate(plan: Plan) -> (Scenario, Vec<Setup>) {
        match plan {
            Plan::Simulate { scenario, setups } => (scenario, setups),
            Plan::Live(_) => panic!("not a simulation"),
        }
    }

    #[test]
    fn no_arguments_is_the_reference_scenario_and_its_three_setups() {
        let (scenario, setups) = simulate(plan(&LabArgs::default(), None).unwrap());
        assert_eq!(scenario, Scenario::reference());
        let names: Vec<_> = setups.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["hard-coded", "ttl-10s", "ttl-2s"]);
    }

    #[test]
    fn flags_describe_one_custom_setup_on_a_changed_scenario() {
        let a = args(|a| {
            a.instances = Some(200);
            a.kill = Some("10%".into());
            a.ttl = Some("2s".into());
            a.watch = true;
            a.eject = Some("30s".into());
        });
        let (scenario, setups) = simulate(plan(&a, None).unwrap());
        assert_eq!((scenario.instances, scenario.killed), (200, 20));
        assert_eq!(setups.len(), 1);
        assert_eq!(setups[0].name, "ttl-2s-watch-eject");
        let registry = setups[0].registry_setup().unwrap();
        assert_eq!((registry.ttl_ms, registry.heartbeat_ms), (2_000, 500));
        assert_eq!(registry.refresh, Refresh::Watch { propagation_ms: 20 });
        assert_eq!(setups[0].eject_ms, Some(30_000));
    }

    #[test]
    fn a_scenario_file_sets_the_scenario_and_setups_and_flags_override_it() {
        let text = r#"
            [scenario]
            instances = 100
            kill = 5
            seed = 7

            [[setup]]
            use = "ttl-2s"

            [[setup]]
            name = "fast-drain"
            ttl = "2s"
            drain = "4s"
        "#;
        let file = ScenarioFile::parse(text, Path::new("lab.toml")).unwrap();
        let a = args(|a| a.seed = Some(9));
        let (scenario, setups) = simulate(plan(&a, Some(file)).unwrap());
        assert_eq!((scenario.instances, scenario.killed, scenario.seed), (100, 5, 9));
        assert_eq!(setups[0].name, "ttl-2s");
        assert_eq!(setups[1].name, "fast-drain");
        assert_eq!(setups[1].stop, Stop::Drain { grace_ms: 4_000 });
    }

    #[test]
    fn bad_input_is_refused_with_a_typed_error_before_anything_runs() {
        let refused = |a: LabArgs| plan(&a, None).unwrap_err();
        assert!(matches!(
            refused(args(|a| a.ttl = Some("2".into()))),
            ScenarioError::Parse { field, .. } if field == "ttl"
        ));
        assert!(matches!(
            refused(args(|a| a.setups = vec!["nope".into()])),
            ScenarioError::UnknownSetup { .. }
        ));
        assert!(matches!(
            refused(args(|a| a.kill = Some("120%".into()))),
            ScenarioError::Parse { .. }
        ));
        assert!(matches!(
            refused(args(|a| {
                a.hard_coded = true;
                a.ttl = Some("2s".into());
            })),
            ScenarioError::Parse { .. }
        ));
        assert!(matches!(
            refused(args(|a| a.ttl = Some("100ms".into()))),
            ScenarioError::Setup { field: "ttl", .. }
        ));
        assert!(matches!(
            refused(args(|a| a.setups = vec!["ttl-2s".into(), "ttl-2s".into()])),
            ScenarioError::Parse { .. }
        ));
        let error = ScenarioFile::parse("[scenario]\nfleet = 3\n", Path::new("x.toml")).unwrap_err();
        assert_eq!(error.code(), "scenario_file");
    }
}
