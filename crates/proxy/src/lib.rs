//! `muster proxy` (SPEC D3): a stable local address per service that forwards to the
//! service's eligible endpoints with everything the client library knows — the verified
//! view (C1), balancing (C4), local outlier ejection (C5, H6), a retry budget, drain
//! handling (L6) and the last-known-good set through a registry outage (C2).
//!
//! ```text
//!  caller ──▶ listener 127.0.0.1:15001 ──detect (auto)──┬─ HTTP/1.1, h2c, gRPC ──▶ http: per request
//!                                                      └─ anything else ───────▶ tcp: per connection
//!                      │ choose                                   │ outcome
//!                      ▼                                          ▼
//!  Resolver (watch, LKG file) ──▶ Picker (balancer, ejections) ◀── report
//!  admin 127.0.0.1:15000 ──▶ /metrics, /debug/endpoints
//!  stop (SIGTERM) ──▶ no new connections; HTTP/2 GOAWAY, HTTP/1 `Connection: close`; streams
//!                     finish or are cut after the drain grace
//! ```
//!
//! - [`config`]: listeners and settings, from flags or a TOML file, validated.
//! - [`target`]: a listener's view, balancer, budget and in-flight counts.
//! - [`http`] / [`tcp`]: the two forwarding paths; [`detect`] tells them apart.
//! - [`classify`], [`budget`], [`replay`]: what may be retried, how much, and how a body is
//!   sent twice.
//! - [`answer`]: the proxy's own answers (refusals, upstream failures), HTTP or gRPC.
//! - [`admin`]: the admin routes.

#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use muster_client::Client;
use muster_client::FailoverTier;
use muster_client::StaleBudget;
use muster_client::{Resolver, ResolverConfig};
use muster_core::ServiceKey;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

pub mod admin;
pub mod answer;
pub mod budget;
pub mod classify;
mod clock;
pub mod config;
pub mod detect;
pub mod http;
pub mod replay;
pub mod target;
pub mod tcp;

use crate::config::{ListenerProtocol, ProxyConfig};
use crate::detect::Detected;
use crate::http::HttpForwarder;
use crate::target::{Stats, Target};

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyError {
    /// The settings cannot work.
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    /// A listener's address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl ProxyError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            ProxyError::Config(err) => err.code,
            ProxyError::Bind { .. } => "bind_failed",
        }
    }
}

/// A running proxy.
#[derive(Debug)]
pub struct RunningProxy {
    listeners: Vec<SocketAddr>,
    admin: Option<SocketAddr>,
    targets: Arc<Vec<Arc<Target>>>,
    resolvers: Vec<Arc<Resolver>>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    /// The upstream-pool pruners: they follow the views and end when stopped.
    pruners: Vec<JoinHandle<()>>,
}

/// The last-known-good file of a service in `dir`.
pub fn lkg_path(dir: &std::path::Path, key: &ServiceKey) -> std::path::PathBuf {
    dir.join(format!("{}.{}.{}.lkg", key.tenant, key.namespace, key.service))
}

/// Starts every listener of `config` (and its admin listener) against the registry `client`
/// talks to. Each service is resolved once, however many listeners forward to it.
pub async fn start(config: ProxyConfig, client: Client) -> Result<RunningProxy, ProxyError> {
    config.validate()?;
    let mut resolvers: Vec<Arc<Resolver>> = Vec::new();
    let mut bound = Vec::new();
    for listener in &config.listeners {
        let socket = TcpListener::bind(listener.listen)
            .await
            .map_err(|source| ProxyError::Bind {
                addr: listener.listen,
                source,
            })?;
        bound.push(socket);
    }
    let admin = match config.admin {
        Some(addr) => Some(
            TcpListener::bind(addr)
                .await
                .map_err(|source| ProxyError::Bind { addr, source })?,
        ),
        None => None,
    };
    let (stop, stopping) = watch::channel(false);
    let mut targets = Vec::new();
    let mut tasks = Vec::new();
    let mut pruners = Vec::new();
    let mut addrs = Vec::new();
    for (listener, socket) in config.listeners.iter().zip(bound) {
        let resolver = match resolvers.iter().find(|r| r.key() == &listener.service) {
            Some(resolver) => Arc::clone(resolver),
            None => {
                let resolver = Arc::new(Resolver::start(
                    client.clone(),
                    listener.service.clone(),
                    ResolverConfig {
                        // A proxy serves its last known good set through an outage, however
                        // old, and reports the age (SPEC C2: read-only use of a stale view).
                        budget: StaleBudget {
                            stale_reads_allowed: true,
                            ..StaleBudget::default()
                        },
                        last_known_good: config.lkg_dir.as_deref().map(|dir| lkg_path(dir, &listener.service)),
                    },
                ));
                resolvers.push(Arc::clone(&resolver));
                resolver
            }
        };
        let mut listener = listener.clone();
        listener.listen = socket.local_addr().unwrap_or(listener.listen);
        addrs.push(listener.listen);
        let mut target = Target::new(&listener, &config, resolver);
        if config.failover {
            target = target.with_failover(FailoverTier::start(
                client.clone(),
                listener.service.clone(),
                FAILOVER_EVERY,
            ));
        }
        let target = Arc::new(target);
        let forwarder = (listener.protocol != ListenerProtocol::Tcp).then(|| {
            let forwarder = HttpForwarder::new(Arc::clone(&target), config.connect_timeout, config.response_timeout);
            pruners.push(tokio::spawn(Arc::clone(&forwarder).prune()));
            forwarder
        });
        let settings = Settings {
            connect_timeout: config.connect_timeout,
            detect_timeout: config.detect_timeout,
            grace: config.drain_grace,
        };
        tasks.push(tokio::spawn(accept_loop(
            socket,
            Arc::clone(&target),
            forwarder,
            settings,
            stopping.clone(),
        )));
        targets.push(target);
    }
    let targets = Arc::new(targets);
    let admin_addr = match admin {
        Some(socket) => {
            let addr = socket.local_addr().ok();
            let router = admin::router(Arc::clone(&targets));
            let mut stopped = stopping.clone();
            tasks.push(tokio::spawn(async move {
                let shutdown = async move {
                    let _ = stopped.wait_for(|stop| *stop).await;
                };
                if let Err(error) = axum::serve(socket, router).with_graceful_shutdown(shutdown).await {
                    tracing::warn!(%error, "admin listener failed");
                }
            }));
            addr
        }
        None => None,
    };
    Ok(RunningProxy {
        listeners: addrs,
        admin: admin_addr,
        targets,
        resolvers,
        stop,
        tasks,
        pruners,
    })
}

impl RunningProxy {
    /// The bound address of each listener, in the configuration's order.
    pub fn listeners(&self) -> &[SocketAddr] {
        &self.listeners
    }

    /// The admin listener's address.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin
    }

    /// The listeners' state, for reports.
    pub fn targets(&self) -> &[Arc<Target>] {
        &self.targets
    }

    /// Drains and stops (SPEC L6): no new connections; HTTP/2 connections get GOAWAY and
    /// HTTP/1 ones close once idle; requests and TCP streams in flight finish, or are cut
    /// when the drain grace runs out. Then the resolvers stop (saving nothing new).
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
        for pruner in self.pruners {
            pruner.abort();
            let _ = pruner.await;
        }
        drop(self.targets);
        // A stop through any handle stops the resolver for every handle.
        for resolver in self.resolvers {
            Resolver::clone(&resolver).stop().await;
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Settings {
    connect_timeout: Duration,
    detect_timeout: Duration,
    grace: Duration,
}

/// How often a listener without a view logs its refusals: once per this many milliseconds.
const REFUSAL_LOG_MS: u64 = 5_000;

/// How often a `failover` proxy asks its region for each service's failover decision: the
/// server's own tier ticker runs at its federation heartbeat (1 s by default).
const FAILOVER_EVERY: Duration = Duration::from_secs(1);

async fn accept_loop(
    socket: TcpListener,
    target: Arc<Target>,
    forwarder: Option<Arc<HttpForwarder>>,
    settings: Settings,
    mut stopping: watch::Receiver<bool>,
) {
    let graceful = GracefulShutdown::new();
    let builder = Arc::new(auto::Builder::new(TokioExecutor::new()));
    let mut streams = JoinSet::new();
    let mut logged_refusal_ms: Option<u64> = None;
    loop {
        let accepted = tokio::select! {
            accepted = socket.accept() => accepted,
            _ = stopping.wait_for(|stop| *stop) => break,
        };
        while streams.try_join_next().is_some() {}
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(error) => {
                // Out of file descriptors, most likely: back off instead of spinning.
                tracing::warn!(listener = %target.config.listen, %error, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if !target.has_view() {
            // Never forward to nothing (SPEC D3): refuse, and say why.
            Stats::bump(&target.stats.refused);
            let now = clock::now_ms();
            if logged_refusal_ms.is_none_or(|at| now.saturating_sub(at) >= REFUSAL_LOG_MS) {
                logged_refusal_ms = Some(now);
                tracing::error!(
                    listener = %target.config.listen,
                    service = %target.config.service,
                    "refusing connections: no view of the service (the registry has not answered since start and there is no last-known-good set)"
                );
            }
            drop(stream);
            continue;
        }
        let _ = stream.set_nodelay(true);
        let protocol = target.config.protocol;
        let target = Arc::clone(&target);
        let forwarder = forwarder.clone();
        let builder = Arc::clone(&builder);
        let watcher = graceful.watcher();
        let stopping = stopping.clone();
        streams.spawn(async move {
            let http = match (protocol, &forwarder) {
                (ListenerProtocol::Tcp, _) | (_, None) => false,
                (ListenerProtocol::Http, Some(_)) => true,
                (ListenerProtocol::Auto, Some(_)) => {
                    detect::detect(&stream, settings.detect_timeout).await == Detected::Http
                }
            };
            // Boxed: an HTTP connection's hyper state is allocated by the connections that
            // speak HTTP, so an idle TCP stream's task carries only its own (SPEC D3).
            match forwarder.filter(|_| http) {
                Some(forwarder) => Box::pin(serve_http(stream, forwarder, &builder, watcher)).await,
                None => tcp::forward(target, stream, settings.connect_timeout, settings.grace, stopping).await,
            }
        });
    }
    drop(socket);
    // Drain: HTTP connections are told to finish (GOAWAY / Connection: close), TCP streams
    // run on; all within the grace.
    let drained = async {
        graceful.shutdown().await;
        while streams.join_next().await.is_some() {}
    };
    if tokio::time::timeout(settings.grace, drained).await.is_err() {
        tracing::info!(listener = %target.config.listen, "drain grace ran out; cutting what is left");
    }
}

async fn serve_http(
    stream: TcpStream,
    forwarder: Arc<HttpForwarder>,
    builder: &auto::Builder<TokioExecutor>,
    watcher: hyper_util::server::graceful::Watcher,
) {
    let service = service_fn(move |request| Arc::clone(&forwarder).forward(request));
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    if let Err(error) = watcher.watch(connection).await {
        tracing::debug!(%error, "client connection ended with an error");
    }
}
