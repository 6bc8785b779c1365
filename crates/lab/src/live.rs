//! The live lab (SPEC X2): the scenario scaled to one machine, on real processes' parts —
//! a real `muster serve` (in-process, on a free loopback port, a temporary data dir),
//! instances that are real TCP listeners kept registered by the real [`Registrar`], and two
//! sets of callers, run side by side on the same fleet, each reported as one setup:
//! - `live-ttl-…` (the client library, `.setups[0]`): each caller is the real [`Resolver`]
//!   (a watch) and [`Picker`] (round robin);
//! - `muster-proxy-ttl-…` (SPEC D3): each caller connects to the TCP listener of an
//!   in-process `muster proxy` ([`muster_proxy::start`]) in front of the same service, which
//!   picks, ejects and retries connect failures within its retry budget.
//!
//! Measured on the wall clock; same report format as the simulation.
//!
//! ```text
//!  muster_server::start(127.0.0.1:0) ◀── renew (Registrar, TTL/3 ±10%) ── instance i: TcpListener
//!        │ watch                                                      ▲ connect; it writes one byte
//!        ├──▶ Resolver ─▶ Picker::pick ─────────────────────────────┤◀── library caller (rate/s)
//!        └──▶ muster proxy (tcp, 127.0.0.1:0) ──connect, retry──────┘◀── proxy caller (rate/s)
//!  at crash_at, crash: the killed instances' listener tasks are aborted (the port refuses at
//!               once) and their registrars dropped (renewals stop, as SIGKILL would stop them)
//!  at crash_at, drain (`--drain GRACE`): the killed instances are drained through the client;
//!               once every view (the proxy's included) has them draining and GRACE has passed,
//!               they stop as above
//! ```
//!
//! A failed library request is a refused (or timed-out) connection. A proxied request is
//! served only when the instance's byte comes back through the proxy within
//! [`CONNECT_TIMEOUT`]: the proxy accepts before it connects upstream, so an accepted
//! connection proves nothing. The stale window is measured
//! like the simulation's (crash to the last failed request, plus the 1 ms resolution) and
//! bounded by TTL + the server's lease-keeper tick (100 ms) + the watch propagation, which is
//! measured after the run (drain one live instance, time until every caller's view has it),
//! plus [`MARGIN_MS`] for scheduling on a loaded machine.
//!
//! Through the proxy a crash costs at most [`live_proxy_crash_at_most`] failed requests; a
//! drain costs none, through either.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use muster_client::{
    Client, Drain, EligibilityConfig, OutlierDetector, Picker, Registrar, RegistrarConfig, Registration, Resolver,
    ResolverConfig, Risk, Strategy,
};
use muster_core::{Incarnation, Protocol, ServiceKey, ServingState};
use muster_proxy::RunningProxy;
use muster_proxy::config::{ListenerConfig, ListenerProtocol, ProxyConfig};
use rand_core::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::args::{LabArgs, Plan, ScenarioFile, build_scenario};
use crate::clock::Stopwatch;
use crate::control::instance_id;
use crate::error::{LabError, ScenarioError};
use crate::expect::{Expected, LIVE_DRAIN_FAILED, live_proxy_crash_at_most};
use crate::report::{LiveFigures, Report, ScenarioSummary, SetupReport};
use crate::scenario::{Scenario, Stop};
use crate::sim::killed_instances;

/// The stated margin of the live stale-window bound: 500 ms covers scheduling delays of the
/// server, the callers and the test itself on a 2-core machine shared with builds.
pub const MARGIN_MS: u64 = 500;
/// The server's leader task checks deadlines every 100 ms (`muster_leader::TICK_MS`), so an
/// expiry is up to this late.
pub const KEEPER_TICK_MS: u64 = 100;
/// A connection that is neither accepted nor refused within this counts as failed; through
/// the proxy, the instance's byte must be back within it.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// The proxy's bound on one upstream connect: a retry still fits in [`CONNECT_TIMEOUT`].
const PROXY_CONNECT_TIMEOUT: Duration = Duration::from_millis(200);
/// The longest drain grace: the drained instances must stop inside the run.
const MAX_DRAIN_GRACE_MS: u64 = 60_000;
/// How long every view may take to show a change before the run is abandoned.
const VIEW_WAIT: Duration = Duration::from_secs(10);
/// The registrar renews every third of the TTL (`RENEW_DIVISOR`).
const RENEW_DIVISOR: u64 = 3;
/// At most this many instances (each one a socket and two tasks).
const MAX_LIVE_INSTANCES: u32 = 2_000;

/// The live lab's scenario: the simulation's, plus the TTL and how the killed instances stop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveScenario {
    /// Instances, crash, run, callers, rate, window and seed (the tick is not used). Both
    /// setups get `callers` callers of their own.
    pub scenario: Scenario,
    /// The lease TTL the registrars ask for.
    pub ttl_ms: u64,
    /// [`Stop::Crash`] (killed at `crash_at`), or [`Stop::Drain`]: drained at `crash_at`,
    /// stopped once every view has the drain and the grace has passed (`--drain GRACE`).
    pub stop: Stop,
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
            stop: Stop::Crash,
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
        let grace_ms = match self.stop {
            Stop::Drain { grace_ms } => grace_ms,
            Stop::Crash => 0,
        };
        if grace_ms > MAX_DRAIN_GRACE_MS || self.scenario.crash_at_ms + grace_ms >= self.scenario.duration_ms {
            return invalid(
                "drain",
                format!(
                    "a grace of {} must end inside the run (crash_at + grace < duration) and be at most {}",
                    crate::units::format_ms(grace_ms),
                    crate::units::format_ms(MAX_DRAIN_GRACE_MS)
                ),
            );
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
        ("--silence", args.silence.is_some() || args.silence_for.is_some()),
        ("--preservation", args.preservation),
        ("[[setup]] tables", file.is_some_and(|f| !f.setup.is_empty())),
    ];
    if let Some((flag, _)) = simulation_only.iter().find(|(_, given)| *given) {
        return Err(ScenarioError::Parse {
            field: "live".into(),
            why: format!(
                "{flag} is for the simulation; the live lab runs its two setups (client library, muster proxy) \
                 with a TTL and, with --drain, a planned stop"
            ),
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
        stop: match &args.drain {
            Some(text) => Stop::Drain {
                grace_ms: crate::units::parse_ms(text).map_err(|why| ScenarioError::Parse {
                    field: "drain".into(),
                    why,
                })?,
            },
            None => Stop::Crash,
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

impl Instance {
    /// Stops it as SIGKILL would: the port refuses at once, renewals stop. The renewals it
    /// made.
    async fn kill(self) -> u64 {
        self.listener.abort();
        drop(self.registrar);
        self.renewals.await.unwrap_or(0)
    }
}

/// What one caller saw.
struct CallerRecord {
    requests: u64,
    failures: Vec<u64>,
}

/// How a caller reaches the fleet.
#[derive(Clone)]
enum Via {
    /// Its own resolver and picker (the client library).
    Library(Arc<Picker>),
    /// The proxy's TCP listener.
    Proxy(SocketAddr),
}

fn live_error(what: &str) -> impl FnOnce(String) -> LabError + '_ {
    move |why| LabError::Live(format!("{what}: {why}"))
}

/// Starts instance `index`: a listener that writes one byte on accept and closes, and its
/// registrar.
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
            // The byte is how a caller behind the proxy knows an instance served it. Written
            // without an await (a fresh socket's send buffer is empty), so aborting the task
            // never leaves an accepted connection unanswered.
            if let Ok(mut stream) = stream.into_std() {
                let _ = std::io::Write::write(&mut stream, b"!");
            }
        }
    });
    let registration = Registration::new(Incarnation(1))
        .address("127.0.0.1")
        .port_speaking("tcp", port, Protocol::Tcp);
    let config = RegistrarConfig {
        ttl: Duration::from_millis(ttl_ms),
        initial_serving: ServingState::Ready,
        ..RegistrarConfig::default()
    };
    let registrar = Registrar::builder(client.clone(), key.clone(), instance_id(index), registration)
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

/// One request: a connection to the picked instance, or one through the proxy that must
/// bring the instance's byte back.
async fn request(via: &Via, at: u64) -> bool {
    match via {
        Via::Library(picker) => match picker.pick(Risk::ReadOnly, at) {
            Ok(pick) => {
                let port = pick.endpoint.ports.first().map_or(0, |p| p.port);
                matches!(
                    tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(("127.0.0.1", port))).await,
                    Ok(Ok(_))
                )
            }
            Err(_) => false,
        },
        Via::Proxy(addr) => {
            let served = async {
                let mut stream = TcpStream::connect(addr).await?;
                let mut byte = [0u8; 1];
                // A close without the byte is an error here (unexpected end of file).
                stream.read_exact(&mut byte).await.map(|_| ())
            };
            matches!(tokio::time::timeout(CONNECT_TIMEOUT, served).await, Ok(Ok(())))
        }
    }
}

/// One caller: `rate` requests per second until `end_ms`; `in_flight` counts its request
/// under way.
async fn run_caller(via: Via, watch: Stopwatch, rate: u32, end_ms: u64, in_flight: Arc<AtomicU64>) -> CallerRecord {
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
        in_flight.fetch_add(1, Ordering::Relaxed);
        let served = request(&via, at).await;
        in_flight.fetch_sub(1, Ordering::Relaxed);
        if !served {
            record.failures.push(at);
        }
    }
}

/// The proxy's counters at the end of the run.
#[derive(Debug, Default, Clone, Copy)]
struct ProxyCounters {
    retries: u64,
    budget_exhausted: u64,
    ejections: u64,
}

/// What one set of callers saw.
struct SetupRecord {
    callers: Vec<CallerRecord>,
    in_flight_at_stop: u64,
}

/// Everything [`drive`] measured.
struct Measured {
    library: SetupRecord,
    proxied: SetupRecord,
    proxy: ProxyCounters,
    renewals: u64,
    propagation_ms: u64,
    /// From the drain until every view had it.
    drain_seen_ms: Option<u64>,
    /// From the crash until every library caller's view had dropped the killed instances.
    removed_seen_ms: Option<u64>,
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
    let measured = result?;
    stopped.map_err(|e| LabError::Live(format!("stopping the server: {e}")))?;
    let ttl = crate::units::format_ms(live.ttl_ms);
    let (suffix, stop_words) = match live.stop {
        Stop::Crash => ("", "killed instances crash".to_owned()),
        Stop::Drain { grace_ms } => (
            "-drain",
            format!(
                "killed instances drained, then stopped once every view had the drain and {} passed",
                crate::units::format_ms(grace_ms)
            ),
        ),
    };
    let library = setup_report(
        live,
        &measured,
        &measured.library,
        format!("live-ttl-{ttl}{suffix}"),
        format!(
            "a real server on loopback; {} instances as TCP listeners kept registered by the registrar \
             (TTL {ttl}, renewal every TTL/3 ±10%); callers watch through the client's resolver and pick round robin; \
             {stop_words}; measured watch propagation {} ms",
            scenario.instances, measured.propagation_ms
        ),
        None,
    );
    let proxied = setup_report(
        live,
        &measured,
        &measured.proxied,
        format!("muster-proxy-ttl-{ttl}{suffix}"),
        format!(
            "the same server and fleet; each caller connects to an in-process muster proxy's TCP listener \
             (p2c, retry budget 20% + 10/s, {} attempts, upstream connect timeout {} ms); a request is served \
             when the instance's byte comes back within {} ms; {stop_words}",
            muster_proxy::config::DEFAULT_MAX_ATTEMPTS,
            PROXY_CONNECT_TIMEOUT.as_millis(),
            CONNECT_TIMEOUT.as_millis()
        ),
        Some(measured.proxy),
    );
    Ok(Report {
        mode: "live",
        scenario: ScenarioSummary::of(scenario),
        setups: vec![library, proxied],
    })
}

/// One setup's report from its callers' records; `proxy` for the setup behind the proxy.
fn setup_report(
    live: &LiveScenario,
    measured: &Measured,
    record: &SetupRecord,
    name: String,
    description: String,
    proxy: Option<ProxyCounters>,
) -> SetupReport {
    let scenario = &live.scenario;
    let duration_s = scenario.duration_ms as f64 / 1_000.0;
    let crash = scenario.crash_at_ms;
    let failures: Vec<u64> = record.callers.iter().flat_map(|r| r.failures.iter().copied()).collect();
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
    let propagation_ms = measured.propagation_ms;
    let bound_ms = live_bound_ms(live.ttl_ms, propagation_ms);
    let rate = f64::from(scenario.callers) * f64::from(scenario.rate_per_caller);
    let heartbeats_per_s = mean_live / (interval_ms / 1_000.0);
    let expected = match (live.stop, proxy) {
        (Stop::Drain { .. }, _) => Expected {
            failed: Some(LIVE_DRAIN_FAILED),
            failed_at_most: None,
            failed_nominal: Some(LIVE_DRAIN_FAILED),
            stale_window_bound_s: Some(0.0),
            heartbeats_per_s,
            lookups_per_s: 0.0,
            mean_heartbeat_age_s: None,
            mean_cache_wait_s: Some(propagation_ms as f64 / 1_000.0),
        },
        (Stop::Crash, Some(_)) => Expected {
            failed: None,
            failed_at_most: Some(live_proxy_crash_at_most(
                u64::from(scenario.callers),
                scenario.killed,
                scenario.instances,
                muster_proxy::config::DEFAULT_MAX_ATTEMPTS,
                rate * bound_ms as f64 / 1_000.0,
            )),
            failed_nominal: None,
            stale_window_bound_s: Some(bound_ms as f64 / 1_000.0),
            heartbeats_per_s,
            lookups_per_s: 0.0,
            mean_heartbeat_age_s: Some(interval_ms / 2_000.0),
            mean_cache_wait_s: Some(propagation_ms as f64 / 1_000.0),
        },
        (Stop::Crash, None) => {
            // Crash to removal: TTL − the last renewal's age (a third of the TTL, halved), plus
            // half a keeper tick on average, plus the measured propagation.
            let exposure_ms = ttl - interval_ms / 2.0 + KEEPER_TICK_MS as f64 / 2.0 + propagation_ms as f64;
            let expected_failed = killed * rate / n * exposure_ms / 1_000.0;
            Expected {
                failed: Some(expected_failed),
                failed_at_most: None,
                failed_nominal: Some(expected_failed),
                stale_window_bound_s: Some(bound_ms as f64 / 1_000.0),
                heartbeats_per_s,
                lookups_per_s: 0.0,
                mean_heartbeat_age_s: Some(interval_ms / 2_000.0),
                mean_cache_wait_s: Some(propagation_ms as f64 / 1_000.0),
            }
        }
    };
    let counters = proxy.unwrap_or_default();
    SetupReport {
        name,
        description,
        ttl_s: Some(ttl / 1_000.0),
        heartbeat_interval_s: Some(interval_ms / 1_000.0),
        refresh: "watch",
        cache_s: None,
        failed: failures.len() as u64,
        stale_window_s: last.map_or(0.0, |last| (last + 1 - crash) as f64 / 1_000.0),
        heartbeats_per_s: measured.renewals as f64 / duration_s,
        lookups_per_s: 0.0,
        failed_per_window,
        failed_per_s,
        requests: record.callers.iter().map(|r| r.requests).sum(),
        unroutable: 0,
        watch_deliveries_per_s: 0.0,
        reregistrations: 0,
        evicted_alive: 0,
        min_registered: (scenario.instances - scenario.killed) as usize,
        ejections: counters.ejections,
        protection_s: 0.0,
        expected,
        live: Some(LiveFigures {
            via: if proxy.is_some() {
                "muster-proxy"
            } else {
                "client-library"
            },
            stop: match live.stop {
                Stop::Crash => "crash",
                Stop::Drain { .. } => "drain",
            },
            drain_grace_s: match live.stop {
                Stop::Drain { grace_ms } => Some(grace_ms as f64 / 1_000.0),
                Stop::Crash => None,
            },
            drain_seen_s: measured.drain_seen_ms.map(|ms| ms as f64 / 1_000.0),
            removed_seen_s: match live.stop {
                Stop::Crash => measured.removed_seen_ms.map(|ms| ms as f64 / 1_000.0),
                Stop::Drain { .. } => None,
            },
            in_flight_at_stop: record.in_flight_at_stop,
            retries: counters.retries,
            budget_exhausted: counters.budget_exhausted,
        }),
    }
}

/// The live stale-window bound: TTL + keeper tick + measured propagation + [`MARGIN_MS`].
pub fn live_bound_ms(ttl_ms: u64, propagation_ms: u64) -> u64 {
    ttl_ms + KEEPER_TICK_MS + propagation_ms + MARGIN_MS
}

/// An in-process `muster proxy` with one TCP listener on a free loopback port in front of
/// `key`, with the proxy's defaults but a connect timeout that leaves room for a retry.
async fn start_proxy(client: &Client, key: &ServiceKey) -> Result<RunningProxy, LabError> {
    let mut listener = ListenerConfig::new("127.0.0.1:0".parse().expect("a socket address"), key.clone());
    listener.protocol = ListenerProtocol::Tcp;
    let config = ProxyConfig {
        listeners: vec![listener],
        admin: None,
        connect_timeout: PROXY_CONNECT_TIMEOUT,
        // Streams here last a byte; the grace only bounds the proxy's own shutdown.
        drain_grace: Duration::from_secs(1),
        ..ProxyConfig::default()
    };
    muster_proxy::start(config, client.clone())
        .await
        .map_err(|e| LabError::Live(format!("proxy: {} ({})", e, e.code())))
}

/// Waits (at most [`VIEW_WAIT`]) until every resolver's view satisfies `seen`.
async fn until_every_view(
    resolvers: &[Arc<Resolver>],
    what: &str,
    seen: impl Fn(&muster_client::view::View) -> bool,
) -> Result<(), LabError> {
    for resolver in resolvers {
        let mut views = resolver.subscribe();
        tokio::time::timeout(VIEW_WAIT, views.wait_for(|view| seen(view)))
            .await
            .map_err(|_| LabError::Live(format!("{what} did not reach every caller within {VIEW_WAIT:?}")))?
            .map_err(|e| LabError::Live(e.to_string()))?;
    }
    Ok(())
}

/// Instances up, callers on (both setups), the crash or drain, the end; then the propagation
/// measurement.
async fn drive(
    live: &LiveScenario,
    client: &Client,
    key: &ServiceKey,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Measured, LabError> {
    let scenario = &live.scenario;
    let mut instances = Vec::with_capacity(scenario.instances as usize);
    for index in 0..scenario.instances {
        instances.push(start_instance(client, key, index, live.ttl_ms, scenario.seed).await?);
    }
    let proxy = start_proxy(client, key).await?;
    let result = drive_callers(live, client, key, &mut instances, &proxy, progress).await;
    let target = &proxy.targets()[0];
    let counters = ProxyCounters {
        retries: target.stats.retries.load(Ordering::Relaxed),
        budget_exhausted: target.stats.budget_exhausted.load(Ordering::Relaxed),
        ejections: target.stats.ejections.load(Ordering::Relaxed),
    };
    proxy.shutdown().await;
    let mut measured = result?;
    for instance in instances {
        measured.renewals += instance.kill().await;
    }
    measured.proxy = counters;
    Ok(measured)
}

async fn drive_callers(
    live: &LiveScenario,
    client: &Client,
    key: &ServiceKey,
    instances: &mut Vec<Instance>,
    proxy: &RunningProxy,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Measured, LabError> {
    let scenario = &live.scenario;
    let mut resolvers = Vec::new();
    let mut pickers = Vec::new();
    for _ in 0..scenario.callers {
        let resolver = Arc::new(Resolver::start(client.clone(), key.clone(), ResolverConfig::default()));
        let picker = Picker::new(
            Resolver::clone(&resolver),
            EligibilityConfig::default(),
            Strategy::RoundRobin,
            OutlierDetector::default(),
        )
        .map_err(|e| LabError::Live(e.to_string()))?;
        resolvers.push(resolver);
        pickers.push(Arc::new(picker));
    }
    // Every view — the callers' and the proxy's — for drains and the propagation probe.
    let mut views = resolvers.clone();
    views.push(Arc::clone(proxy.targets()[0].resolver()));
    // Every caller sees the whole fleet before the clock starts.
    let want = scenario.instances as usize;
    until_every_view(&views, "the whole fleet", |view| {
        view.active().is_some_and(|set| set.len() == want)
    })
    .await?;
    let watch = Stopwatch::start();
    let (library_in_flight, proxied_in_flight) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let spawn = |via: Via, in_flight: &Arc<AtomicU64>| {
        tokio::spawn(run_caller(
            via,
            watch,
            scenario.rate_per_caller,
            scenario.duration_ms,
            Arc::clone(in_flight),
        ))
    };
    let library: Vec<JoinHandle<CallerRecord>> = pickers
        .iter()
        .map(|picker| spawn(Via::Library(Arc::clone(picker)), &library_in_flight))
        .collect();
    let proxy_addr = proxy.listeners()[0];
    let proxied: Vec<JoinHandle<CallerRecord>> = (0..scenario.callers)
        .map(|_| spawn(Via::Proxy(proxy_addr), &proxied_in_flight))
        .collect();
    let killed = killed_instances(scenario);
    let mut crashed = false;
    let mut renewals = 0;
    let mut in_flight_at_stop = (0, 0);
    let mut drain_seen_ms = None;
    let mut removal: Option<JoinHandle<Option<u64>>> = None;
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
            if let Stop::Drain { grace_ms } = live.stop {
                let drained_at = watch.elapsed_ms();
                drain_seen_ms = Some(drain(client, key, instances, &killed, &views).await?);
                watch.sleep_until(drained_at + grace_ms).await;
            }
            in_flight_at_stop = (
                library_in_flight.load(Ordering::Relaxed),
                proxied_in_flight.load(Ordering::Relaxed),
            );
            // SIGKILL, as far as tasks can have it: the port refuses at once, renewals stop.
            for &index in killed.iter().rev() {
                renewals += instances.remove(index as usize).kill().await;
            }
            // When every library caller's view has dropped the killed instances (on the run's
            // stopwatch, since the crash): the event that ends the stale window.
            let gone: Vec<_> = killed.iter().map(|&index| instance_id(index)).collect();
            let (callers, crash_ms) = (resolvers.clone(), scenario.crash_at_ms);
            removal = Some(tokio::spawn(async move {
                for resolver in &callers {
                    let mut views = resolver.subscribe();
                    views
                        .wait_for(|view| {
                            view.active()
                                .is_some_and(|set| gone.iter().all(|id| set.get(id).is_none()))
                        })
                        .await
                        .ok()?;
                }
                Some(watch.elapsed_ms().saturating_sub(crash_ms))
            }));
        }
        progress(watch.elapsed_ms().min(scenario.duration_ms), scenario.duration_ms);
    }
    let mut records = (Vec::new(), Vec::new());
    for caller in library {
        records
            .0
            .push(caller.await.map_err(|e| LabError::Live(format!("caller: {e}")))?);
    }
    for caller in proxied {
        records
            .1
            .push(caller.await.map_err(|e| LabError::Live(format!("caller: {e}")))?);
    }
    // Seen within the run, or not at all.
    let removed_seen_ms = match removal {
        Some(task) if task.is_finished() => task.await.ok().flatten(),
        Some(task) => {
            task.abort();
            None
        }
        None => None,
    };
    let propagation_ms = measure_propagation(client, key, instances, &resolvers, &views).await?;
    for resolver in resolvers {
        if let Ok(resolver) = Arc::try_unwrap(resolver) {
            resolver.stop().await;
        }
    }
    drop(pickers);
    Ok(Measured {
        library: SetupRecord {
            callers: records.0,
            in_flight_at_stop: in_flight_at_stop.0,
        },
        proxied: SetupRecord {
            callers: records.1,
            in_flight_at_stop: in_flight_at_stop.1,
        },
        proxy: ProxyCounters::default(),
        renewals,
        propagation_ms,
        drain_seen_ms,
        removed_seen_ms,
    })
}

/// Drains the `killed` instances through the client (SPEC L6) and waits until every view has
/// them draining; how long that took, in milliseconds.
async fn drain(
    client: &Client,
    key: &ServiceKey,
    instances: &[Instance],
    killed: &[u32],
    views: &[Arc<Resolver>],
) -> Result<u64, LabError> {
    let watch = Stopwatch::start();
    let mut ids = Vec::with_capacity(killed.len());
    for &index in killed {
        let instance = &instances[index as usize];
        let incarnation = instance
            .registrar
            .status()
            .registration()
            .map_or(Incarnation(1), |r| r.incarnation);
        let id = instance_id(index);
        client
            .drain(key, &id, Drain::new(incarnation).reason("lab: planned stop"))
            .await
            .map_err(|e| live_error("drain")(e.to_string()))?;
        ids.push(id);
    }
    until_every_view(views, "the drain", |view| {
        view.active().is_some_and(|set| {
            ids.iter()
                .all(|id| set.get(id).is_none_or(|e| e.serving == ServingState::Draining))
        })
    })
    .await?;
    Ok(watch.elapsed_ms())
}

/// Drains one live instance and times until every view (the callers' and the proxy's) shows
/// it draining: the watch path's commit-to-caller time on this machine now.
async fn measure_propagation(
    client: &Client,
    key: &ServiceKey,
    instances: &[Instance],
    resolvers: &[Arc<Resolver>],
    views: &[Arc<Resolver>],
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
    let watch = Stopwatch::start();
    client
        .drain(key, &instance, Drain::new(incarnation).reason("lab: propagation probe"))
        .await
        .map_err(|e| live_error("drain probe")(e.to_string()))?;
    until_every_view(views, "the drain probe", |view| {
        view.active()
            .and_then(|set| set.get(&instance).map(|e| e.serving == ServingState::Draining))
            .unwrap_or(false)
    })
    .await?;
    Ok(watch.elapsed_ms().max(1))
}
