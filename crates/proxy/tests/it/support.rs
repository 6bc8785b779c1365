//! What the proxy's tests share: an in-process registry, real backends (HTTP/1.1 + h2c
//! servers that name themselves and count requests, a TCP echo), a proxy in front, and a
//! bounded wait.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use muster_client::{Drain, Incarnation, InstanceId, Protocol, Registration, ServiceKey};
use muster_proxy::RunningProxy;
use muster_proxy::config::{ListenerConfig, ListenerProtocol, ProxyConfig};
use muster_server::ServerConfig;
use muster_testkit::server::InProcess;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinSet;

/// The longest any single step may take on a loaded 2-core machine; reached only when broken.
pub(crate) const STEP: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(20);

/// Waits (bounded by [`STEP`]) until `done` holds.
pub(crate) async fn until(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..(STEP.as_millis() / POLL.as_millis()) {
        if done() {
            return;
        }
        tokio::time::sleep(POLL).await;
    }
    panic!("timed out waiting until {what}");
}

pub(crate) fn key() -> ServiceKey {
    ServiceKey::new("default", "prod", "api").unwrap()
}

/// A registry on a free loopback port with a scratch data dir (`muster_testkit::server`);
/// stoppable and restartable on the same port.
pub(crate) struct Registry(InProcess);

impl std::ops::Deref for Registry {
    type Target = InProcess;

    fn deref(&self) -> &InProcess {
        &self.0
    }
}

impl std::ops::DerefMut for Registry {
    fn deref_mut(&mut self) -> &mut InProcess {
        &mut self.0
    }
}

impl Registry {
    pub(crate) async fn start() -> Registry {
        Registry::start_with(|_| {}).await
    }

    /// [`Registry::start`] with `configure` applied to the configuration.
    pub(crate) async fn start_with(configure: impl FnOnce(&mut ServerConfig)) -> Registry {
        Registry(InProcess::start_with(configure).await)
    }

    /// Starts again on the same port after [`InProcess::stop`].
    pub(crate) async fn restart(&mut self) {
        self.0.start_again().await;
    }

    /// Registers `backend` as `instance` (incarnation 1, its port named `http` speaking
    /// `protocol`).
    pub(crate) async fn register(&self, instance: &str, addr: SocketAddr, protocol: Protocol) {
        let registration = Registration::new(Incarnation(1))
            .address(addr.ip().to_string())
            .port_speaking("http", addr.port(), protocol);
        self.client()
            .register(&key(), &InstanceId::new(instance).unwrap(), registration)
            .await
            .expect("registers");
    }

    pub(crate) async fn drain(&self, instance: &str) {
        self.client()
            .drain(&key(), &InstanceId::new(instance).unwrap(), Drain::new(Incarnation(1)))
            .await
            .expect("drains");
    }
}

/// A backend: HTTP/1.1 and h2c on one port. `GET /slow?ms=N` answers after N ms; `/fail`
/// answers 503; anything else answers 200 with the backend's name. Counts requests.
pub(crate) struct Backend {
    pub(crate) addr: SocketAddr,
    pub(crate) requests: Arc<AtomicU64>,
    tasks: JoinSet<()>,
}

impl Backend {
    pub(crate) async fn http(name: &'static str) -> Backend {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(AtomicU64::new(0));
        let mut tasks = JoinSet::new();
        let counter = Arc::clone(&requests);
        tasks.spawn(async move {
            let mut connections = JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let counter = Arc::clone(&counter);
                connections.spawn(async move {
                    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                        let counter = Arc::clone(&counter);
                        async move { Ok::<_, Infallible>(answer(name, &counter, request).await) }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Backend { addr, requests, tasks }
    }

    /// A TCP backend that writes its name, then echoes.
    pub(crate) async fn echo(name: &'static str) -> Backend {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&requests);
        let mut tasks = JoinSet::new();
        tasks.spawn(async move {
            let mut connections = JoinSet::new();
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    continue;
                };
                counter.fetch_add(1, Ordering::Relaxed);
                connections.spawn(async move {
                    let _ = stream.write_all(format!("{name}\n").as_bytes()).await;
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = stream.read(&mut buf).await {
                        if n == 0 || stream.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        Backend { addr, requests, tasks }
    }

    pub(crate) fn count(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Kills the backend as SIGKILL would: the port refuses from now on and every open
    /// connection breaks.
    pub(crate) fn kill(&mut self) {
        self.tasks.abort_all();
    }
}

async fn answer(name: &str, counter: &AtomicU64, request: Request<Incoming>) -> Response<Full<Bytes>> {
    counter.fetch_add(1, Ordering::Relaxed);
    let path = request.uri().path().to_owned();
    let query = request.uri().query().unwrap_or("").to_owned();
    let body = request
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    if path == "/slow" {
        let ms: u64 = query.strip_prefix("ms=").and_then(|ms| ms.parse().ok()).unwrap_or(500);
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    if path == "/fail" {
        let mut response = Response::new(Full::new(Bytes::from_static(b"failing")));
        *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        return response;
    }
    let text = if body.is_empty() {
        name.to_owned()
    } else {
        format!("{name}:{}", body.len())
    };
    Response::new(Full::new(Bytes::from(text)))
}

/// A proxy with one listener on a free port in front of `registry`'s `prod/api`.
pub(crate) async fn proxy(registry: &Registry, protocol: ListenerProtocol) -> RunningProxy {
    proxy_with(registry, protocol, |config| config).await
}

pub(crate) async fn proxy_with(
    registry: &Registry,
    protocol: ListenerProtocol,
    adjust: impl FnOnce(ProxyConfig) -> ProxyConfig,
) -> RunningProxy {
    let mut listener = ListenerConfig::new("127.0.0.1:0".parse().unwrap(), key());
    listener.protocol = protocol;
    let config = adjust(ProxyConfig {
        listeners: vec![listener],
        admin: Some("127.0.0.1:0".parse().unwrap()),
        drain_grace: Duration::from_secs(2),
        ..ProxyConfig::default()
    });
    muster_proxy::start(config, registry.client())
        .await
        .expect("the proxy starts")
}

/// Waits until the proxy's listener routes over `eligible` endpoints.
pub(crate) async fn until_eligible(proxy: &RunningProxy, eligible: usize) {
    let target = Arc::clone(&proxy.targets()[0]);
    until(&format!("the proxy sees {eligible} eligible endpoints"), || {
        target.resolver().view().active().is_some_and(|set| {
            set.iter()
                .filter(|e| e.serving == muster_client::ServingState::Ready)
                .count()
                == eligible
        })
    })
    .await;
}

/// An HTTP client of the proxy: HTTP/1.1, or h2c with prior knowledge.
pub(crate) fn http_client(
    h2: bool,
) -> hyper_util::client::legacy::Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>> {
    let mut builder = hyper_util::client::legacy::Client::builder(TokioExecutor::new());
    builder.http2_only(h2);
    builder.build_http()
}

/// GETs `path` through the proxy; the status and body text, or the transport error.
pub(crate) async fn get(
    client: &hyper_util::client::legacy::Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
    proxy: SocketAddr,
    path: &str,
) -> Result<(u16, String), String> {
    let request = Request::get(format!("http://{proxy}{path}"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = tokio::time::timeout(STEP, client.request(request))
        .await
        .map_err(|_| "timed out".to_owned())?
        .map_err(|err| err.to_string())?;
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|err| err.to_string())?
        .to_bytes();
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// Three HTTP backends, `a`, `b` and `c`, registered as `prod/api`.
pub(crate) async fn three_backends(registry: &Registry) -> Vec<Backend> {
    let mut backends = Vec::new();
    for name in ["a", "b", "c"] {
        let backend = Backend::http(name).await;
        registry.register(name, backend.addr, Protocol::Http).await;
        backends.push(backend);
    }
    backends
}

/// A bounded load loop through the proxy: `callers` callers, each sending `requests` short
/// GETs (`/slow?ms=5`) one after another.
pub(crate) struct Load {
    tasks: JoinSet<()>,
    failures: Arc<AtomicU64>,
    /// Requests answered or failed so far.
    pub(crate) done: Arc<AtomicU64>,
}

impl Load {
    pub(crate) fn start(proxy: SocketAddr, callers: u64, requests: u64) -> Load {
        let failures = Arc::new(AtomicU64::new(0));
        let done = Arc::new(AtomicU64::new(0));
        let mut tasks = JoinSet::new();
        for _ in 0..callers {
            let (failures, done) = (Arc::clone(&failures), Arc::clone(&done));
            tasks.spawn(async move {
                let client = http_client(false);
                for _ in 0..requests {
                    if !matches!(get(&client, proxy, "/slow?ms=5").await, Ok((200, _))) {
                        failures.fetch_add(1, Ordering::Relaxed);
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        Load { tasks, failures, done }
    }

    /// Waits for every caller to finish; the failed requests.
    pub(crate) async fn failures(mut self) -> u64 {
        while self.tasks.join_next().await.is_some() {}
        self.failures.load(Ordering::Relaxed)
    }
}
