//! Starting and stopping the daemon: the node, the HTTP listener, the leader task.
//!
//! ```text
//!  start: check config, read TLS files ─▶ hub, leader feed, DNS zone ─▶ Node::open(observers = DNS feed, hub,
//!         leader feed) ─▶ bind HTTP, Consul, DNS (and the cluster listener) ─▶ serve + leader task
//!         ─▶ ready
//!  stop:  not ready ─▶ DNS stops ─▶ stop accepting on HTTP and Consul (graceful) ─▶ watchers get
//!         `closing`, blocking queries return ─▶ in-flight requests finish (bounded by shutdown_grace_ms)
//!         ─▶ leader task stops ─▶ Node::shutdown
//!  fail:  the node's storage fails (Raft stops for good) ─▶ status: not ready, `fatal` names
//!         the error; writes answer `storage_failed` ─▶ the same graceful stop ─▶ the run
//!         ends with the error (`muster serve` exits non-zero)
//! ```

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use muster_consensus::{Node, NodeConfig};
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use crate::app::App;
use crate::config::BOOTSTRAP_SECRET_ENV;
use crate::dns::DnsFeed;
use crate::join::JoinKey;
use crate::lab_run::Hooks;
use crate::metrics::{Metrics, MetricsObserver};
use crate::observers::Observers;
use crate::{ServerConfig, ServerError, cluster, dns, format, leader, routes};
use muster_api::PolicyWatch;
use muster_consul as consul;
use muster_consul::ConsulView;
use muster_consul::Jitter;
use muster_consul::stats::ConsulCounts;
use muster_consul::waiters::Waiters;
use muster_gate::TokenWatch;
use muster_gate::audit::AuditLog;
use muster_gate::clock::ServerClock;
use muster_gate::forward::ClusterLink;
use muster_gate::leader::LeaderLink;
use muster_gate::{Gate, Parts};
use muster_http::guard::RequestGuard;
use muster_http::listener::Listening;
use muster_http::{accept, descriptors};
use muster_hub::{WatchHub, WatchStats};
use muster_leader::duties::Duties;

/// The in-memory pipe of [`RunningServer::connect`], each way: a watch frame or a reply of a
/// few services fits, and a larger one waits for the reader as on a socket.
const IN_PROCESS_BUFFER: usize = 64 * 1024;

/// How often the leader duties' runner looks at leadership: a new leader's reaper and
/// mirrors start within this of its election, small beside the election itself.
const LEADERSHIP_POLL: Duration = Duration::from_millis(200);

/// A server that is running; [`RunningServer::stop`] stops it gracefully.
pub struct RunningServer {
    local_addr: SocketAddr,
    app: Arc<App>,
    stopping: watch::Sender<bool>,
    stop_accepting: oneshot::Sender<()>,
    serve: JoinHandle<std::io::Result<()>>,
    /// The leader task (lease expiry, drain ends, checks; idle on a follower).
    leader: JoinHandle<()>,
    /// The leader duties' runner, when there are duties: joined before the node stops.
    duties: Option<JoinHandle<()>>,
    /// The node-to-node listener, in a cluster: stopped after the node.
    cluster_serve: Option<(oneshot::Sender<()>, JoinHandle<std::io::Result<()>>)>,
    shutdown_grace: Duration,
    dns: Option<muster_dns::DnsListener>,
    /// The Consul-compatible listener, when enabled: its address, stop and accept loop.
    consul: Option<ConsulServe>,
    #[cfg(feature = "xds")]
    xds: Option<muster_xds::server::XdsServe>,
    /// The HTTP API's router and settings and the DNS zone, for in-process callers.
    in_process: InProcess,
}

/// What [`RunningServer::connect`] and [`RunningServer::answer_dns`] serve from: the very
/// router, connection settings and zone the listeners use.
struct InProcess {
    router: axum::Router,
    listening: Listening,
    /// Set when DNS is enabled.
    dns_zone: Option<Arc<muster_dns::LiveZone>>,
    /// The connections [`RunningServer::connect`] made: none outlives [`RunningServer::stop`].
    connections: std::sync::Mutex<tokio::task::JoinSet<()>>,
}

impl InProcess {
    fn connections(&self) -> std::sync::MutexGuard<'_, tokio::task::JoinSet<()>> {
        self.connections
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The Consul-compatible listener's accept loop (SPEC E1), stopped with the HTTP API's.
struct ConsulServe {
    addr: SocketAddr,
    stop_accepting: oneshot::Sender<()>,
    serve: JoinHandle<std::io::Result<()>>,
}

fn check(config: &ServerConfig) -> Result<(), ServerError> {
    if !config.http.ip().is_loopback() && !config.auth.enabled {
        return Err(ServerError::Config(format!(
            "http: {} is not a loopback address; without authentication ([auth] enabled = true) \
             the API binds loopback only (SPEC S1), e.g. 127.0.0.1:7070",
            config.http
        )));
    }
    config.consul.check(config.auth.enabled).map_err(ServerError::Config)?;
    config.xds.check(config.auth.enabled).map_err(ServerError::Config)?;
    if config.watch_queue_frames == 0 {
        return Err(ServerError::Config("watch_queue_frames: must be at least 1".into()));
    }
    if config.progress_interval_ms == 0 {
        return Err(ServerError::Config("progress_interval_ms: must be at least 1".into()));
    }
    if config.body_read_timeout_ms == 0 {
        return Err(ServerError::Config("body_read_timeout_ms: must be at least 1".into()));
    }
    if config.write_rate_per_principal == 0 || config.write_burst_per_principal == 0 {
        return Err(ServerError::Config(
            "write_rate_per_principal and write_burst_per_principal: must be at least 1".into(),
        ));
    }
    if config.max_watches_per_principal == 0 || config.max_watches_per_tenant == 0 {
        return Err(ServerError::Config(
            "max_watches_per_principal and max_watches_per_tenant: must be at least 1".into(),
        ));
    }
    if config.xds.max_names_per_principal == 0 {
        return Err(ServerError::Config(
            "xds.max_names_per_principal: must be at least 1".into(),
        ));
    }
    for origin in &config.allowed_origins {
        muster_http::guard::check_origin(origin).map_err(ServerError::Config)?;
    }
    let convergence = &config.convergence;
    if convergence.report_every_ms == 0 || convergence.silent_after_ms < 2 * convergence.report_every_ms {
        return Err(ServerError::Config(
            "convergence: report_every_ms must be at least 1 and silent_after_ms at least twice it (a subscriber one report late must not look silent)".into(),
        ));
    }
    if convergence.forget_after_ms < convergence.silent_after_ms
        || convergence.max_subscribers == 0
        || convergence.max_subscribers_per_tenant == 0
    {
        return Err(ServerError::Config(
            "convergence: forget_after_ms must be at least silent_after_ms, and max_subscribers and max_subscribers_per_tenant at least 1".into(),
        ));
    }
    if config.audit.retention == 0 {
        return Err(ServerError::Config("audit.retention: must be at least 1".into()));
    }
    if config.audit.denial_retention == 0 {
        return Err(ServerError::Config("audit.denial_retention: must be at least 1".into()));
    }
    if config.max_body_bytes == 0 {
        return Err(ServerError::Config("max_body_bytes: must be at least 1".into()));
    }
    config.health.brakes().map_err(ServerError::Config)?;
    config.federation.resolve().map_err(ServerError::Config)?;
    config.cluster().map_err(ServerError::Config)?;
    config.limits.check().map_err(ServerError::Config)?;
    config
        .registry
        .validate()
        .map_err(|err| ServerError::Config(format!("registry.{err}")))?;
    Ok(())
}

/// A number that tells this start's audit cursors from another node's or an earlier start's:
/// 64 bits from the standard library's per-process hash keys (drawn from the operating
/// system's generator), mixed with a per-call counter so two servers of one process differ.
fn random_epoch() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    hasher.finish()
}

/// Opens the node, binds the HTTP API and starts serving. Bind `127.0.0.1:0` and read
/// [`RunningServer::local_addr`] to run on a free port. No hooks: the dashboard's lab runs
/// answer `lab_unavailable` (see [`start_with`]).
pub async fn start(config: ServerConfig) -> Result<RunningServer, ServerError> {
    start_with(config, Hooks::default()).await
}

/// [`start`] with what the binary plugs in: the dashboard's lab runner (SPEC U2).
pub async fn start_with(config: ServerConfig, hooks: Hooks) -> Result<RunningServer, ServerError> {
    check(&config)?;
    // The secret a bootstrap needs (SPEC S1): read before anything opens.
    // Without authentication there is no bootstrap, and no secret to read.
    let bootstrap_secret = if config.auth.enabled {
        config.bootstrap_secret(std::env::var(BOOTSTRAP_SECRET_ENV).ok())?
    } else {
        None
    };
    let dns_zone = dns::zone(&config)?;
    let clock = ServerClock::start();
    let brakes = config.health.brakes().map_err(ServerError::Config)?;
    // Loopback check targets are allowed while authentication is off (SPEC S6; see
    // `muster_health::target`): every caller is then on this host already.
    let check_targets = config
        .health
        .targets(!config.auth.enabled)
        .map_err(ServerError::Config)?;
    let hub = WatchHub::new(config.watch_queue_frames);
    let federation = config.federation.resolve().map_err(ServerError::Config)?;
    let (leader_feed, leader_messages) = leader::channel();
    let (asked_tx, asked) = tokio::sync::mpsc::unbounded_channel();
    let (token_watch, acl_changes) = TokenWatch::new();
    let audit = Arc::new(AuditLog::new(
        config.audit.retention,
        config.audit.denial_retention,
        random_epoch(),
    ));
    let metrics = Arc::new(Metrics::new(Arc::clone(&dns_zone)));
    // Failover tiers change with time too (a mirror past its stale budget): their ticker
    // stages into the same zone.
    let tier_zone = Arc::clone(&dns_zone);
    let mut cluster = config.cluster().map_err(ServerError::Config)?;
    // TLS material is read once, before anything is bound: a bad file fails the start.
    let http_tls = config.tls.server_config().map_err(ServerError::Config)?;
    let cluster_tls = config.cluster_tls.load().map_err(ServerError::Config)?;
    if let (Some(cluster), Some(tls)) = (cluster.as_mut(), &cluster_tls) {
        cluster.tls = Some(Arc::clone(&tls.client));
    }
    // The node-to-node listener is bound before the node opens, so peers can reach it as
    // soon as it votes.
    let cluster_listener = match (&cluster, config.cluster_addr) {
        (Some(_), Some(addr)) => Some(
            TcpListener::bind(addr)
                .await
                .map_err(|source| ServerError::Bind { addr, source })?,
        ),
        _ => None,
    };
    let link = cluster.as_ref().map(|c| {
        let advertised = c.members.get(&c.node_id).cloned().unwrap_or_default();
        let join = Arc::new(JoinKey::new(c.node_id, advertised, c.secret.expose()));
        (
            join,
            ClusterLink::new(c.members.clone(), c.secret.clone(), c.tls.clone()),
        )
    });
    // The Consul API's blocking queries wake on the apply path, each on its own service
    // (`consul::waiters`).
    let consul_waiters = Arc::new(Waiters::default());
    // The DNS listener is a subscriber of its tenant's services (SPEC O3).
    let dns_subscriber = config.dns_enabled.then(|| {
        let id = muster_core::convergence::ClientId::new(format!("dns:{}", config.dns))
            .expect("a socket address is a valid client id");
        (id, config.dns_zone.tenant.clone())
    });
    let convergence = Arc::new(muster_api::convergence::Convergence::new(
        config.convergence.ledger(),
        clock,
        dns_subscriber,
    ));
    // The xDS streams wake on the apply path, each on the services it subscribes to.
    #[cfg(feature = "xds")]
    let xds_hub = Arc::new(muster_xds::server::XdsHub::default());
    let observers = Observers {
        dns: DnsFeed::new(
            Arc::clone(&dns_zone),
            federation.as_ref().map(|f| (Arc::clone(f), clock)),
        ),
        convergence: Arc::clone(&convergence),
        hub: Arc::clone(&hub),
        leader: leader_feed,
        policy: PolicyWatch::new(config.registry.clone()),
        audit: Arc::clone(&audit),
        tokens: token_watch,
        metrics: MetricsObserver(Arc::clone(&metrics)),
        endpoint_log: crate::endpoint_log::EndpointLog::default(),
        consul: config.consul.enabled.then(|| Arc::clone(&consul_waiters)),
        #[cfg(feature = "xds")]
        xds: config.xds.addr.is_some().then(|| Arc::clone(&xds_hub)),
    };
    let node = Node::open(
        NodeConfig {
            registry: config.registry.clone(),
            snapshot_every: config.snapshot_every,
            // The log reaches back past the previous snapshot, so a current snapshot found
            // corrupt at start falls back to the previous one and the log after it, losing
            // nothing (SPEC R6); the 1,000 beyond that let a follower a little behind catch
            // up from the log.
            keep_after_snapshot: config.snapshot_every.saturating_add(1_000),
            cluster,
            ..NodeConfig::new(config.data_dir.clone())
        },
        Arc::new(observers),
    )
    .await?;
    let listener = match muster_http::accept::bind(config.http) {
        Ok(listener) => listener,
        Err(source) => {
            let _ = node.shutdown().await;
            return Err(ServerError::Bind {
                addr: config.http,
                source,
            });
        }
    };
    let local_addr = listener.local_addr().map_err(|source| ServerError::Bind {
        addr: config.http,
        source,
    })?;
    let consul_listener = if config.consul.enabled {
        let bound = match muster_http::accept::bind(config.consul.addr) {
            Ok(listener) => listener.local_addr().map(|addr| (listener, addr)),
            Err(source) => Err(source),
        };
        match bound {
            Ok(bound) => Some(bound),
            Err(source) => {
                let _ = node.shutdown().await;
                return Err(ServerError::Config(format!(
                    "consul.addr: cannot listen on {}: {source} (is a Consul agent running there? \
                     `--consul ADDR` picks another address, `--consul off` turns the Consul-compatible API off)",
                    config.consul.addr
                )));
            }
        }
    } else {
        None
    };
    #[cfg(feature = "xds")]
    let xds_listener = match config.xds.addr {
        None => None,
        Some(addr) => match muster_http::accept::bind(addr).and_then(|l| l.local_addr().map(|a| (l, a))) {
            Ok(bound) => Some(bound),
            Err(source) => {
                let _ = node.shutdown().await;
                return Err(ServerError::Config(format!(
                    "xds.addr: cannot listen on {addr}: {source} (`--xds ADDR` picks another address, `--xds off` turns xDS off)"
                )));
            }
        },
    };
    let dns = match dns::listen(&config, Arc::clone(&dns_zone)).await {
        Ok(dns) => dns,
        Err(err) => {
            let _ = node.shutdown().await;
            return Err(err);
        }
    };
    let (stopping, stopping_rx) = watch::channel(false);
    let (join, link) = link.unzip();
    let (gate, wiring) = Gate::new(Parts {
        node: node.clone(),
        hub,
        clock,
        // Jitter only has to differ between servers and runs.
        leader: LeaderLink::new(config.health.checker(), brakes, clock.unix_now_ms()),
        cluster: link,
        admission: muster_gate::Admission::new(crate::admit::budgets(&config)),
        write_rates: muster_gate::WriteRates::new(muster_gate::Rate {
            per_second: config.write_rate_per_principal,
            burst: config.write_burst_per_principal,
        }),
        audit,
        auth: config.auth.clone(),
        bootstrap_secret,
        acl_changes,
        stopping: stopping_rx.clone(),
        meter: Arc::clone(&metrics) as Arc<dyn muster_gate::Meter>,
        outputs: asked_tx,
    });
    // The xDS control plane, an adapter over the gate (SPEC D5).
    #[cfg(feature = "xds")]
    let xds = Arc::new(muster_xds::server::XdsState::new(
        Arc::clone(&gate),
        Arc::new(crate::bridges::XdsServing {
            federation: federation.clone(),
            convergence: Arc::clone(&convergence),
        }),
        Arc::clone(&xds_hub),
        config.xds.tenant.clone(),
    ));
    let native = Arc::new(muster_api::Native::new(
        Arc::clone(&gate),
        Arc::clone(&metrics) as Arc<dyn muster_api::Meter>,
        Arc::clone(&metrics.blocking_native),
        federation
            .clone()
            .map(|federation| Arc::new(crate::bridges::FederatedReads(federation)) as Arc<dyn muster_api::Federated>),
        config.registry.clone(),
        Arc::clone(&convergence),
    ));
    let app = Arc::new(App {
        gate,
        wiring,
        node,
        progress_interval: Duration::from_millis(config.progress_interval_ms),
        metrics,
        consul_stats: Arc::default(),
        join,
        #[cfg(feature = "xds")]
        xds,
        convergence,
        native,
        federation: federation.clone(),
    });
    // Without authentication the API binds loopback only, and a genuine caller names a
    // loopback Host; anything else is DNS rebinding (SPEC S6, `guard`).
    let guard = RequestGuard::new(
        &config.allowed_origins,
        !config.auth.enabled,
        Duration::from_millis(config.body_read_timeout_ms),
    )
    .audited(Arc::new(crate::audit_guard::GuardRefusals {
        log: Arc::clone(app.wiring.audit()),
        clock: app.gate.clock,
    }));
    let router = routes::router(
        Arc::clone(&app),
        config.max_body_bytes,
        guard.clone(),
        crate::lab_run::LabState::new(&hooks),
    );
    // The checker never probes this node's own listeners (SPEC S6).
    #[cfg(feature = "xds")]
    let xds_addr = xds_listener.as_ref().map(|(_, addr)| *addr);
    #[cfg(not(feature = "xds"))]
    let xds_addr: Option<SocketAddr> = None;
    let own_listeners = [
        Some(local_addr),
        consul_listener.as_ref().map(|(_, addr)| *addr),
        xds_addr,
        dns.as_ref().map(muster_dns::DnsListener::local_addr),
        config.cluster_addr,
    ];
    app.wiring
        .set_check_targets(check_targets.with_listeners(own_listeners.into_iter().flatten()));
    let (stop_accepting, stop_accepting_rx) = oneshot::channel::<()>();
    let (http_budget, cluster_budget) = descriptors::budgets(&config.limits);
    let http_listening = Listening::new(&config.limits.http, http_tls);
    // The xDS listener shares the HTTP API's budget, limits and TLS (with ALPN h2).
    #[cfg(feature = "xds")]
    let xds = xds_listener.map(|(listener, addr)| {
        muster_xds::server::serve(
            listener,
            addr,
            Arc::clone(&app.xds),
            http_budget.clone(),
            http_listening.clone(),
        )
    });
    // The Consul listener shares the HTTP API's connection budget, limits and TLS: one
    // budget keeps the two from taking, together, the descriptors storage needs.
    let mut duties = Duties::new();
    let consul = consul_listener.map(|(listener, addr)| {
        let view = Arc::new(ConsulView {
            tenant: config.consul.tenant.clone(),
            namespace: config.consul.namespace.clone(),
            datacenter: config.consul.datacenter.clone(),
            node: config.consul.node_name(config.node_id),
            node_id: format!("00000000-0000-0000-0000-{:012x}", config.node_id),
            node_address: config.consul.node_address(addr),
            port: addr.port(),
            waiters: Arc::clone(&consul_waiters),
            jitter: Jitter::new(app.gate.clock.unix_now_ms()),
        });
        let consul_app = Arc::new(consul::ConsulApp {
            gate: Arc::clone(&app.gate),
            stats: Arc::clone(&app.consul_stats),
            blocking: Arc::clone(&app.metrics.blocking_consul),
        });
        let router = consul::router(Arc::clone(&consul_app), view, guard, config.max_body_bytes);
        // `DeregisterCriticalServiceAfter`: the Consul API's reaper, a leader duty.
        let reaping = consul_app;
        duties.add("consul reaper", move |_term| {
            Box::pin(consul::reap(Arc::clone(&reaping)))
        });
        let (stop_accepting, stop_rx) = oneshot::channel::<()>();
        let serve = tokio::spawn(accept::serve(
            listener,
            router,
            stop_rx,
            http_budget.clone(),
            http_listening.clone(),
        ));
        ConsulServe {
            addr,
            stop_accepting,
            serve,
        }
    });
    let in_process = InProcess {
        router: router.clone(),
        listening: http_listening.clone(),
        dns_zone: dns.is_some().then_some(dns_zone),
        connections: std::sync::Mutex::default(),
    };
    let serve = tokio::spawn(accept::serve(
        listener,
        router,
        stop_accepting_rx,
        http_budget,
        http_listening,
    ));
    let cluster_listening = Listening::new(&config.limits.cluster, cluster_tls.map(|tls| tls.server));
    let join = app.join.clone();
    let cluster_serve = cluster_listener.zip(join).map(|(listener, join)| {
        let (stop, stop_rx) = oneshot::channel::<()>();
        let task = tokio::spawn(accept::serve(
            listener,
            cluster::router(Arc::clone(&app), join),
            stop_rx,
            cluster_budget,
            cluster_listening,
        ));
        (stop, task)
    });
    // One timer for every watch stream's `progress` frames; it ends when the hub closes.
    tokio::spawn(Arc::clone(app.wiring.hub()).run_progress_ticker(app.progress_interval));
    // Open xDS streams are live subscribers of what they acknowledged (SPEC O3).
    #[cfg(feature = "xds")]
    let alive = {
        let xds = Arc::clone(&app.xds);
        move || xds.followed()
    };
    #[cfg(not(feature = "xds"))]
    let alive = Vec::new;
    tokio::spawn(muster_api::convergence::run_sweeper(
        Arc::clone(&app.convergence),
        alive,
        stopping_rx.clone(),
    ));
    if let Some(federation) = federation {
        // A served set that changed with no command: staged in the DNS zone, and the xDS
        // sessions that serve it woken (under the registry's read lock).
        #[cfg(feature = "xds")]
        let xds = Arc::clone(&xds_hub);
        let changed = move |key: &muster_core::ServiceKey,
                            served: Option<Arc<muster_core::ServiceSnapshot>>,
                            revision: muster_core::Revision| {
            tier_zone.stage(key, served, revision);
            #[cfg(feature = "xds")]
            xds.wake(key);
        };
        tokio::spawn(muster_federation::run_ticker(
            Arc::clone(&app.gate),
            Arc::clone(&federation),
            changed,
            stopping_rx.clone(),
        ));
        let (app, federation) = (Arc::clone(&app), Arc::clone(&federation));
        duties.add("federation mirrors", move |_term| {
            Box::pin(muster_federation::lead(Arc::clone(&app.gate), Arc::clone(&federation)))
        });
    }
    // The registry format rises once every member applies it (architecture.md "Formats and versions").
    // A group of one member (with or without a cluster listener) raises it before it serves,
    // so its first request sees this build's rules; a one-member cluster first elects itself.
    let alone = config.peers.is_empty() || config.peers.keys().eq([&config.node_id]);
    if alone {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while !app.gate.is_leader() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        format::raise_once(&app).await;
    }
    let raising = Arc::clone(&app);
    duties.add("registry format", move |_term| {
        Box::pin(format::raise(Arc::clone(&raising)))
    });
    // The leader-only loops run while this node leads, and only then (DESIGN "Third wave").
    let leading = Arc::clone(&app);
    let duties = (!duties.is_empty()).then(|| {
        tokio::spawn(duties.run(
            move || leading.gate.is_ready().then(|| leading.gate.leading_term()).flatten(),
            LEADERSHIP_POLL,
            stopping_rx.clone(),
        ))
    });
    tokio::spawn(leader::carry_out(Arc::downgrade(&app), asked));
    let leader = tokio::spawn(leader::run(Arc::clone(&app), leader_messages, stopping_rx));
    // Ends when the server starts stopping (or the node stops).
    tokio::spawn(crate::metrics::follow_leader(Arc::clone(&app)));

    app.wiring.set_ready(true);
    // Debug: `muster serve` prints the one startup line, with every listener (SPEC O2).
    tracing::debug!(%local_addr, consul = ?consul.as_ref().map(|c| c.addr), "muster serving");
    Ok(RunningServer {
        local_addr,
        app,
        stopping,
        stop_accepting,
        serve,
        leader,
        duties,
        cluster_serve,
        shutdown_grace: Duration::from_millis(config.shutdown_grace_ms),
        dns,
        consul,
        #[cfg(feature = "xds")]
        xds,
        in_process,
    })
}

impl RunningServer {
    /// The address the HTTP API listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The address the DNS listener answers on (UDP and TCP), when DNS is enabled.
    pub fn dns_addr(&self) -> Option<SocketAddr> {
        self.dns.as_ref().map(muster_dns::DnsListener::local_addr)
    }

    /// The address the Consul-compatible API listens on, when it is enabled (SPEC E1).
    pub fn consul_addr(&self) -> Option<SocketAddr> {
        self.consul.as_ref().map(|consul| consul.addr)
    }

    /// The address the xDS control plane listens on, when it is enabled (SPEC D5).
    pub fn xds_addr(&self) -> Option<SocketAddr> {
        #[cfg(feature = "xds")]
        return self.xds.as_ref().map(|xds| xds.addr);
        #[cfg(not(feature = "xds"))]
        None
    }

    /// A new in-memory connection to the HTTP API: write HTTP/1.1 requests into it and read
    /// the responses back. It is served as a plain-HTTP connection from 127.0.0.1 to
    /// [`RunningServer::local_addr`] would be — the same router, guards and connection
    /// settings — but without TLS or a client certificate, even when the listener needs them,
    /// and a loopback caller may bootstrap the ACL system when no bootstrap secret is set. It
    /// holds no descriptor and ends when the server stops. Call it inside the server's Tokio
    /// runtime (it spawns the connection's task). The instruction-count gate drives the
    /// request path through it (`docs/performance.md` "Instruction counts", SPEC K2).
    pub fn connect(&self) -> tokio::io::DuplexStream {
        let (client, server) = tokio::io::duplex(IN_PROCESS_BUFFER);
        let in_process = &self.in_process;
        let mut connections = in_process.connections();
        while connections.try_join_next().is_some() {}
        connections.spawn({
            let router = in_process.router.clone();
            let listening = in_process.listening.clone();
            let stopping = self.stopping.subscribe();
            async move {
                let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
                accept::serve_io(server, router, &listening, loopback, stopping).await;
            }
        });
        client
    }

    /// The DNS answer to one query, as the UDP listener would send it (SPEC D2), counted in
    /// the DNS metrics like any query; `None` when DNS is off or the query gets no answer (a
    /// datagram too short to be a query).
    pub fn answer_dns(&self, query: &[u8]) -> Option<Vec<u8>> {
        let zone = self.in_process.dns_zone.as_ref()?;
        let mut answer = Vec::new();
        match zone.answer(query, muster_dns::Transport::Udp, 0, &mut answer) {
            muster_dns::Outcome::Answered { .. } => Some(answer),
            _ => None,
        }
    }

    /// The Consul-compatible API's blocking queries and their wake-ups so far.
    pub fn consul_counts(&self) -> ConsulCounts {
        self.app.consul_stats.counts()
    }

    /// What the watch hub holds.
    pub fn watch_stats(&self) -> WatchStats {
        self.app.gate.watch_stats()
    }

    /// Serves until `shutdown` resolves or the node fails, then stops gracefully. A node
    /// whose storage failed cannot acknowledge anything any more, so serving on would only
    /// hand out frozen state: DNS stops and watchers are told `closing` at once, every route
    /// but status and metrics answers `storage_failed`, and status says why (not ready,
    /// `fatal`) for the shutdown grace, so a readiness probe or an operator sees it before the
    /// process goes (an earlier `shutdown` cuts that short); then the usual stop, and the
    /// failure is returned as the error.
    pub async fn serve_until(mut self, shutdown: impl Future<Output = ()>) -> Result<(), ServerError> {
        let mut shutdown = std::pin::pin!(shutdown);
        let failure = tokio::select! {
            () = &mut shutdown => None,
            failure = self.app.node.failed() => Some(failure),
        };
        let Some(failure) = failure else {
            return self.stop().await;
        };
        tracing::error!(error = %failure, grace = ?self.shutdown_grace, "the node's storage failed: stopping");
        self.app.wiring.set_ready(false);
        if let Some(dns) = self.dns.take() {
            dns.stop().await;
        }
        self.app.wiring.hub().close();
        tokio::select! {
            () = tokio::time::sleep(self.shutdown_grace) => {}
            () = &mut shutdown => {}
        }
        if let Err(error) = self.stop().await {
            tracing::warn!(%error, "stopping after the storage failure");
        }
        Err(ServerError::Consensus(failure))
    }

    /// Stops gracefully: stop accepting, tell watchers `closing`, let in-flight requests
    /// finish (up to `shutdown_grace_ms`), stop the leader task, shut the node down.
    pub async fn stop(mut self) -> Result<(), ServerError> {
        self.app.wiring.set_ready(false);
        if let Some(dns) = self.dns.take() {
            dns.stop().await;
        }
        let _ = self.stop_accepting.send(());
        let consul = self.consul.take().map(|consul| {
            let _ = consul.stop_accepting.send(());
            consul.serve
        });
        self.app.wiring.hub().close();
        let _ = self.stopping.send(true);
        let deadline = tokio::time::Instant::now() + self.shutdown_grace;
        // xDS streams end when `stopping` turns (clients reconnect elsewhere); the listener
        // then stops within the grace.
        #[cfg(feature = "xds")]
        if let Some(xds) = self.xds.take() {
            let _ = xds.stop.send(());
            let mut serve = xds.serve;
            if tokio::time::timeout_at(deadline, &mut serve).await.is_err() {
                tracing::warn!(grace = ?self.shutdown_grace, "xDS connections still open after the grace; closing them");
                serve.abort();
                let _ = serve.await;
            }
        }
        if let Some(mut serve) = consul {
            // Both listeners drain within the one grace; Consul's outcome is only logged, the
            // HTTP API's is the result.
            match tokio::time::timeout_at(deadline, &mut serve).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(error))) => tracing::warn!(%error, "the Consul listener ended with an error"),
                Ok(Err(join)) => tracing::warn!(error = %join, "the Consul listener's task failed"),
                Err(_) => {
                    tracing::warn!(grace = ?self.shutdown_grace, "Consul connections still open after the grace; closing them");
                    serve.abort();
                    let _ = serve.await;
                }
            }
        }
        let mut serve = self.serve;
        let served = match tokio::time::timeout_at(deadline, &mut serve).await {
            Ok(Ok(result)) => result.map_err(ServerError::Serve),
            Ok(Err(join)) => Err(ServerError::Serve(std::io::Error::other(join))),
            Err(_) => {
                tracing::warn!(grace = ?self.shutdown_grace, "connections still open after the grace; closing them");
                // Aborting the accept loop aborts the connections it still holds; wait for
                // that, so none outlives `stop`.
                serve.abort();
                let _ = serve.await;
                Ok(())
            }
        };
        // In-process connections finish within the same grace, as the listener's do.
        let mut connections = std::mem::take(&mut *self.in_process.connections());
        if tokio::time::timeout_at(deadline, async { while connections.join_next().await.is_some() {} })
            .await
            .is_err()
        {
            connections.shutdown().await;
        }
        let _ = self.leader.await;
        if let Some(duties) = self.duties {
            let _ = duties.await;
        }
        self.app.node.shutdown().await?;
        if let Some((stop, task)) = self.cluster_serve {
            let _ = stop.send(());
            task.abort();
            let _ = task.await;
        }
        tracing::info!("muster stopped");
        served
    }
}

/// Runs the server until `shutdown` resolves, then stops gracefully: stop accepting, finish
/// in-flight writes, send watchers a final `closing` frame, return. If the node's storage
/// fails first, it stops the same way and returns the failure ([`RunningServer::serve_until`]).
pub async fn run(
    config: ServerConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    start(config).await?.serve_until(shutdown).await
}
