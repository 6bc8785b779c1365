//! The live lab (SPEC X2): the scenario scaled to one machine, on real processes' parts —
//! a real `muster serve` (in-process, on a free loopback port, a temporary data dir),
//! instances that are real TCP listeners kept registered by the real [`Registrar`], callers
//! that are the real [`Resolver`] (a watch) and [`Picker`] (round robin) — measured on the
//! wall clock. Same report format as the simulation.
//!
//! ```text
//!  muster_server::start(127.0.0.1:0) ◀── renew (Registrar, TTL/3 ±10%) ── instance i: TcpListener
//!        │ watch                                                              ▲ connect (a request)
//!        ▼                                                                    │
//!  Resolver ─▶ Picker::pick ──────────────────────────────────────────────── caller c (rate/s)
//!  at crash_at: the killed instances' listener tasks are aborted (the port refuses at once)
//!               and their registrars dropped (renewals stop, as SIGKILL would stop them)
//! ```
//!
//! A failed request is a refused (or timed-out) connection. The stale window is measured
//! like the simulation's (crash to the last failed request, plus the 1 ms resolution) and
//! bounded by TTL + the server's lease-keeper tick (100 ms) + the watch propagation, which is
//! measured after the run (drain one live instance, time until every caller's view has it),
//! + [`MARGIN_MS`] for scheduling on a loaded machine.

use std::sync::Arc;
use std::time::Duration;

use muster_client::{
    Client, Drain, EligibilityConfig, OutlierDetector, Picker, Registrar, RegistrarConfig, Resolver, ResolverConfig,
    Risk, Strategy,
};
use muster_core::{AddressSpec, EndpointSpec, Incarnation, PortSpec, Protocol, ServiceKey, ServingState};
use rand_core::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::args::{LabArgs, Plan, ScenarioFile, build_scenario};
use crate::clock::Stopwatch;
use crate::control::instance_id;
use crate::error::{LabError, ScenarioError};
use crate::expect::Expected;
use crate::report::{Report, ScenarioSummary, SetupReport};
use crate::scenario::Scenario;
use crate::sim::killed_instances;

/// The stated margin of the live stale-window bound: 500 ms covers scheduling delays of the
/// server, the callers and the test itself on a 2-core machine shared with builds.
pub const MARGIN_MS: u64 = 500;
/// The server's leader task checks deadlines every 100 ms (`muster_leader::TICK_MS`), so an
/// expiry is up to this late.
pub const KEEPER_TICK_MS: u64 = 100;
/// A connection that is neither accepted nor refused within this counts as failed.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// The registrar renews every third of the TTL (`RENEW_DIVISOR`).
const RENEW_DIVISOR: u64 = 3;
/// At most this many instances (each one a socket and two tasks).
const MAX_LIVE_INSTANCES: u32 = 2_000;

/// The live lab's scenario: the simulation's, plus the TTL of its one setup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveScenario {
    /// Instances, crash, run, callers, rate, window and seed (the tick is not used).
    pub scenario: Scenario,
    /// The lease TTL the registrars ask for.
    pub ttl_ms: u64,
}

impl LiveScenario {
    /// The default live scale: 100 instances, 10 killed at 5 s of a 15 s run, 10 callers ×
    /// 50 req/s, TTL 2 s.
    pub fn standard() -> LiveScenario {
        LiveScenario {
            scenario: Scenario {
                instances: 100,
                killed: 10,
                crash_at_ms: 5_000,
                duration_ms: 15_000,
                tick_ms: 1,
                callers: 10,
                rate_per_caller: 50,
                window_ms: 5_000,
                ..Scenario::reference()
            },
            ttl_ms: 2_000,
        }
    }

    /// Refuses what cannot run live.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        self.scenario.validate()?;
        let invalid = |field: &'static str, why: String| Err(ScenarioError::Invalid { field, why });
        if self.scenario.instances > MAX_LIVE_INSTANCES {
            return invalid(
                "instances",
                format!("the live lab runs at most {MAX_LIVE_INSTANCES} instances (sockets and tasks on this machine)"),
            );
        }
        let config = muster_registry::RegistryConfig::default();
        if !(config.min_lease_ttl_ms..=config.max_lease_ttl_ms).contains(&self.ttl_ms) {
            return invalid("ttl", format!("{} ms is outside the registry's range", self.ttl_ms));
        }
        if self.scenario.duration_ms > 600_000 {
            return invalid("duration", "the live lab runs at most 10 minutes".into());
        }
        Ok(())
    }
}

/// `--live`: the scenario flags and TTL; simulation-only flags are refused.
pub(crate) fn plan(args: &LabArgs, file: Option<&ScenarioFile>) -> Result<Plan, ScenarioError> {
    let simulation_only = [
        ("--setup", !args.setups.is_empty()),
        ("--tick", args.tick.is_some()),
        ("--name", args.name.is_some()),
        ("--hard-coded", args.hard_coded),
        ("--heartbeat (the registrar renews at TTL/3)", args.heartbeat.is_some()),
        ("--cache (live callers watch)", args.cache.is_some()),
        ("--watch", args.watch),
        ("--propagation (measured live)", args.propagation.is_some()),
        ("--eject", args.eject.is_some()),
        ("--drain", args.drain.is_some()),
        ("--silence", args.silence.is_some() || args.silence_for.is_some()),
        ("--preservation", args.preservation),
        ("[[setup]] tables", file.is_some_and(|f| !f.setup.is_empty())),
    ];
    if let Some((flag, _)) = simulation_only.iter().find(|(_, given)| *given) {
        return Err(ScenarioError::Parse {
            field: "live".into(),
            why: format!("{flag} is for the simulation; the live lab runs one setup (registry, TTL, watch)"),
        });
    }
    let standard = LiveScenario::standard();
    let mut spec = file.map(|f| f.scenario.clone()).unwrap_or_default();
    spec = crate::args::merge(spec, crate::args::scenario_flags(args));
    let live = LiveScenario {
        scenario: build_scenario(&spec, &standard.scenario)?,
        ttl_ms: match &args.ttl {
            Some(text) => crate::units::parse_ms(text).map_err(|why| ScenarioError::Parse {
                field: "ttl".into(),
                why,
            })?,
            None => standard.ttl_ms,
        },
    };
    live.validate()?;
    Ok(Plan::Live(live))
}

/// One instance: its listener task and its registrar.
struct Instance {
    port: u16,
    listener: JoinHandle<()>,
    registrar: Registrar,
    renewals: JoinHandle<u64>,
}

/// What one caller saw.
struct CallerRecord {
    requests: u64,
    failures: Vec<u64>,
}

fn live_error(what: &str) -> impl FnOnce(String) -> LabError + '_ {
    move |why| LabError::Live(format!("{what}: {why}"))
}

/// Starts instance `index`: a listener that accepts and closes, and its registrar.
async fn start_instance(
    client: &Client,
    key: &ServiceKey,
    index: u32,
    ttl_ms: u64,
    seed: u64,
) -> Result<Instance, LabError> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| LabError::Live(format!("instance {index}: bind: {e}")))?;
    let port = listener.local_addr().map_err(|e| LabError::Live(e.to_string()))?.port();
    let accept = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            drop(stream);
        }
    });
    let endpoint = EndpointSpec {
        addresses: vec![AddressSpec {
            ip: "127.0.0.1".into(),
            scope: None,
        }],
        ports: vec![PortSpec {
            name: "tcp".into(),
            port,
            protocol: Protocol::Tcp,
        }],
        ..EndpointSpec::default()
    };
    let config = RegistrarConfig {
        ttl: Duration::from_millis(ttl_ms),
        initial_serving: ServingState::Ready,
        ..RegistrarConfig::default()
    };
    let registrar = Registrar::builder(
        client.clone(),
        key.clone(),
        instance_id(index),
        endpoint,
        Incarnation(1),
    )
    .config(config)
    .rng(Xoshiro256PlusPlus::seed_from_u64(seed ^ u64::from(index)))
    .start();
    registrar
        .registered()
        .await
        .map_err(|status| LabError::Live(format!("instance {index} did not register: {status:?}")))?;
    // Renewals, counted from the registrar's status: each one moves the lease deadline.
    let mut status = registrar.subscribe();
    let renewals = tokio::spawn(async move {
        let mut count = 0;
        let mut deadline = status.borrow().registration().map(|r| r.lease_deadline);
        while status.changed().await.is_ok() {
            let now = status.borrow().registration().map(|r| r.lease_deadline);
            if now != deadline && now.is_some() {
                count += 1;
                deadline = now;
            }
        }
        count
    });
    Ok(Instance {
        port,
        listener: accept,
        registrar,
        renewals,
    })
}

/// One caller: `rate` connects per second through the picker until `end_ms`.
async fn run_caller(picker: Arc<Picker>, watch: Stopwatch, rate: u32, end_ms: u64) -> CallerRecord {
    let mut record = CallerRecord {
        requests: 0,
        failures: Vec::new(),
    };
    let mut ticker = tokio::time::interval(Duration::from_micros(1_000_000 / u64::from(rate)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        ticker.tick().await;
        let at = watch.elapsed_ms();
        if at >= end_ms {
            return record;
        }
        record.requests += 1;
        let served = match picker.pick(Risk::ReadOnly, at) {
            Ok(pick) => {
                let port = pick.endpoint.ports.first().map_or(0, |p| p.port);
                matches!(
                    tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(("127.0.0.1", port))).await,
                    Ok(Ok(_))
                )
            }
            Err(_) => false,
        };
        if !served {
            record.failures.push(at);
        }
    }
}

/// Runs the live lab; `progress` gets `(elapsed ms, duration ms)` about every second.
pub async fn run(live: &LiveScenario, progress: &mut dyn FnMut(u64, u64)) -> Result<Report, LabError> {
    let scenario = &live.scenario;
    let data = tempfile::tempdir().map_err(|e| LabError::Live(format!("temporary data dir: {e}")))?;
    let config = muster_server::ServerConfig {
        data_dir: data.path().to_path_buf(),
        http: "127.0.0.1:0".parse().expect("a socket address"),
        dns: "127.0.0.1:0".parse().expect("a socket address"),
        // The lab drives the native API only; Consul's default port could be taken.
        consul: muster_server::ConsulConfig {
            enabled: false,
            ..muster_server::ConsulConfig::default()
        },
        ..muster_server::ServerConfig::default()
    };
    let server = muster_server::start(config)
        .await
        .map_err(|e| LabError::Live(format!("server: {e}")))?;
    let client = Client::new(&format!("http://{}", server.local_addr())).map_err(|e| LabError::Live(e.to_string()))?;
    let key = ServiceKey::new("lab", "live", "api").expect("a valid key");
    let result = drive(live, &client, &key, progress).await;
    let stopped = server.stop().await;
    drop(data);
    let (records, renewals, propagation_ms) = result?;
    stopped.map_err(|e| LabError::Live(format!("stopping the server: {e}")))?;

    let duration_s = scenario.duration_ms as f64 / 1_000.0;
    let crash = scenario.crash_at_ms;
    let failures: Vec<u64> = records.iter().flat_map(|r| r.failures.iter().copied()).collect();
    let last = failures.iter().copied().filter(|&at| at >= crash).max();
    let mut failed_per_window = vec![0; scenario.duration_ms.div_ceil(scenario.window_ms) as usize];
    let mut failed_per_s = vec![0; scenario.duration_ms.div_ceil(1_000) as usize];
    for &at in &failures {
        let at = at.min(scenario.duration_ms - 1);
        failed_per_window[(at / scenario.window_ms) as usize] += 1;
        failed_per_s[(at / 1_000) as usize] += 1;
    }
    let (n, killed) = (f64::from(scenario.instances), f64::from(scenario.killed));
    let ttl = live.ttl_ms as f64;
    let interval_ms = ttl / RENEW_DIVISOR as f64;
    let mean_live =
        (n * crash as f64 + (n - killed) * (scenario.duration_ms - crash) as f64) / scenario.duration_ms as f64;
    // Crash to removal: TTL − the last renewal's age (a third of the TTL, halved), plus half a
    // keeper tick on average, plus the measured propagation.
    let exposure_ms = ttl - interval_ms / 2.0 + KEEPER_TICK_MS as f64 / 2.0 + propagation_ms as f64;
    let rate = f64::from(scenario.callers) * f64::from(scenario.rate_per_caller);
    let expected_failed = killed * rate / n * exposure_ms / 1_000.0;
    let requests: u64 = records.iter().map(|r| r.requests).sum();
    let setup = SetupReport {
        name: format!("live-ttl-{}", crate::units::format_ms(live.ttl_ms)),
        description: format!(
            "a real server on loopback; {} instances as TCP listeners kept registered by the registrar \
             (TTL {}, renewal every TTL/3 ±10%); callers watch through the client's resolver and pick round robin; \
             measured watch propagation {} ms",
            scenario.instances,
            crate::units::format_ms(live.ttl_ms),
            propagation_ms
        ),
        ttl_s: Some(ttl / 1_000.0),
        heartbeat_interval_s: Some(interval_ms / 1_000.0),
        refresh: "watch",
        cache_s: None,
        failed: failures.len() as u64,
        stale_window_s: last.map_or(0.0, |last| (last + 1 - crash) as f64 / 1_000.0),
        heartbeats_per_s: renewals as f64 / duration_s,
        lookups_per_s: 0.0,
        failed_per_window,
        failed_per_s,
        requests,
        unroutable: 0,
        watch_deliveries_per_s: 0.0,
        reregistrations: 0,
        evicted_alive: 0,
        min_registered: (scenario.instances - scenario.killed) as usize,
        ejections: 0,
        protection_s: 0.0,
        expected: Expected {
            failed: Some(expected_failed),
            failed_at_most: None,
            failed_nominal: Some(expected_failed),
            stale_window_bound_s: Some(live_bound_ms(live.ttl_ms, propagation_ms) as f64 / 1_000.0),
            heartbeats_per_s: mean_live / (interval_ms / 1_000.0),
            lookups_per_s: 0.0,
            mean_heartbeat_age_s: Some(interval_ms / 2_000.0),
            mean_cache_wait_s: Some(propagation_ms as f64 / 1_000.0),
        },
    };
    Ok(Report {
        mode: "live",
        scenario: ScenarioSummary::of(scenario),
        setups: vec![setup],
    })
}

/// The live stale-window bound: TTL + keeper tick + measured propagation + [`MARGIN_MS`].
pub fn live_bound_ms(ttl_ms: u64, propagation_ms: u64) -> u64 {
    ttl_ms + KEEPER_TICK_MS + propagation_ms + MARGIN_MS
}

/// Instances up, callers on, the crash, the end; then the propagation measurement.
async fn drive(
    live: &LiveScenario,
    client: &Client,
    key: &ServiceKey,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<(Vec<CallerRecord>, u64, u64), LabError> {
    let scenario = &live.scenario;
    let mut instances = Vec::with_capacity(scenario.instances as usize);
    for index in 0..scenario.instances {
        instances.push(start_instance(client, key, index, live.ttl_ms, scenario.seed).await?);
    }
    let mut resolvers = Vec::new();
    let mut pickers = Vec::new();
    for _ in 0..scenario.callers {
        let resolver = Arc::new(Resolver::start(client.clone(), key.clone(), ResolverConfig::default()));
        let picker = Picker::new(
            Arc::clone(&resolver),
            EligibilityConfig::default(),
            Strategy::RoundRobin,
            OutlierDetector::default(),
        )
        .map_err(|e| LabError::Live(e.to_string()))?;
        resolvers.push(resolver);
        pickers.push(Arc::new(picker));
    }
    // Every caller sees the whole fleet before the clock starts.
    for resolver in &resolvers {
        let mut views = resolver.subscribe();
        let want = scenario.instances as usize;
        tokio::time::timeout(
            Duration::from_secs(30),
            views.wait_for(|view| view.active().is_some_and(|set| set.len() == want)),
        )
        .await
        .map_err(|_| LabError::Live("callers did not see the whole fleet within 30 s".into()))?
        .map_err(|e| LabError::Live(e.to_string()))?;
    }
    let watch = Stopwatch::start();
    let callers: Vec<JoinHandle<CallerRecord>> = pickers
        .iter()
        .map(|picker| {
            tokio::spawn(run_caller(
                Arc::clone(picker),
                watch,
                scenario.rate_per_caller,
                scenario.duration_ms,
            ))
        })
        .collect();
    let killed = killed_instances(scenario);
    let mut crashed = false;
    let mut renewals = 0;
    while watch.elapsed_ms() < scenario.duration_ms {
        let now = watch.elapsed_ms();
        let next = if !crashed && now < scenario.crash_at_ms {
            scenario.crash_at_ms.min(now + 1_000)
        } else {
            (now + 1_000).min(scenario.duration_ms)
        };
        watch.sleep_until(next).await;
        if !crashed && watch.elapsed_ms() >= scenario.crash_at_ms {
            crashed = true;
            // SIGKILL, as far as tasks can have it: the port refuses at once, renewals stop.
            for &index in killed.iter().rev() {
                let instance = instances.remove(index as usize);
                instance.listener.abort();
                drop(instance.registrar);
                renewals += instance.renewals.await.unwrap_or(0);
            }
        }
        progress(watch.elapsed_ms().min(scenario.duration_ms), scenario.duration_ms);
    }
    let mut records = Vec::new();
    for caller in callers {
        records.push(caller.await.map_err(|e| LabError::Live(format!("caller: {e}")))?);
    }
    let propagation_ms = measure_propagation(client, key, &instances, &resolvers).await?;
    for instance in instances {
        instance.listener.abort();
        drop(instance.registrar);
        renewals += instance.renewals.await.unwrap_or(0);
    }
    for resolver in resolvers {
        if let Ok(resolver) = Arc::try_unwrap(resolver) {
            resolver.stop().await;
        }
    }
    drop(pickers);
    Ok((records, renewals, propagation_ms))
}

/// Drains one live instance and times until every caller's view shows it draining: the
/// watch path's commit-to-caller time on this machine now.
async fn measure_propagation(
    client: &Client,
    key: &ServiceKey,
    instances: &[Instance],
    resolvers: &[Arc<Resolver>],
) -> Result<u64, LabError> {
    let Some(canary) = instances.first() else {
        return Ok(0);
    };
    let registration = canary.registrar.status();
    let incarnation = registration.registration().map_or(Incarnation(1), |r| r.incarnation);
    let instance = resolvers[0]
        .view()
        .active()
        .and_then(|set| {
            set.iter()
                .find(|e| e.ports.iter().any(|p| p.port == canary.port))
                .map(|e| e.instance.clone())
        })
        .ok_or_else(|| LabError::Live("the canary is not in the callers' view".into()))?;
    let mut views: Vec<_> = resolvers.iter().map(|r| r.subscribe()).collect();
    let watch = Stopwatch::start();
    client
        .drain(key, &instance, Drain::new(incarnation).reason("lab: propagation probe"))
        .await
        .map_err(|e| live_error("drain probe")(e.to_string()))?;
    for views in &mut views {
        tokio::time::timeout(
            Duration::from_secs(10),
            views.wait_for(|view| {
                view.active()
                    .and_then(|set| set.get(&instance).map(|e| e.serving == ServingState::Draining))
                    .unwrap_or(false)
            }),
        )
        .await
        .map_err(|_| LabError::Live("the drain probe did not reach every caller within 10 s".into()))?
        .map_err(|e| LabError::Live(e.to_string()))?;
    }
    Ok(watch.elapsed_ms().max(1))
}
