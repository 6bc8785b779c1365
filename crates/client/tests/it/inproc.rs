//! A registry started in-process on a free loopback port with a scratch data dir, and plain
//! HTTP and gRPC backends to register in it, for the tower tests.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use muster_client::{Drain, Incarnation, InstanceId, Registration, Resolver, ResolverConfig, ServiceKey};
use muster_server::ServerConfig;
use muster_testkit::server::InProcess;
use tokio::net::TcpListener;

/// The longest any single step may take: generous for a loaded 2-core machine, reached only
/// when something is broken.
pub(crate) const STEP: Duration = Duration::from_secs(20);

/// How often a bounded wait looks again.
pub(crate) const POLL: Duration = Duration::from_millis(20);

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

pub(crate) fn key(service: &str) -> ServiceKey {
    ServiceKey::new("acme", "prod", service).unwrap()
}

/// A registry on a free loopback port with a scratch data dir (`muster_testkit::server`),
/// with what the tower tests register in it.
pub(crate) struct Registry(InProcess);

impl std::ops::Deref for Registry {
    type Target = InProcess;

    fn deref(&self) -> &InProcess {
        &self.0
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

    /// Stops the server (a registry outage): watches are cut, reconnects are refused.
    pub(crate) async fn stop(mut self) {
        self.0.stop().await;
    }

    /// A resolver of `service`, holding a view (bounded wait).
    pub(crate) async fn resolver(&self, service: &str) -> Resolver {
        let resolver = Resolver::start(self.client(), key(service), ResolverConfig::default());
        until("the resolver has a view", || resolver.view().active().is_some()).await;
        resolver
    }

    /// Registers `instance` of `service` at 127.0.0.1 with its `http` port.
    pub(crate) async fn register(&self, service: &str, instance: &str, port: u16) {
        let registration = Registration::new(Incarnation(1))
            .address("127.0.0.1")
            .port("http", port);
        self.client()
            .register(&key(service), &InstanceId::new(instance).unwrap(), registration)
            .await
            .unwrap();
    }

    pub(crate) async fn drain(&self, service: &str, instance: &str) {
        self.client()
            .drain(
                &key(service),
                &InstanceId::new(instance).unwrap(),
                Drain::new(Incarnation(1)),
            )
            .await
            .unwrap();
    }
}

/// Waits until `resolver`'s view holds `count` endpoints.
pub(crate) async fn until_endpoints(resolver: &Resolver, count: usize) {
    until(&format!("the view holds {count} endpoints"), || {
        resolver.view().active().is_some_and(|set| set.iter().count() == count)
    })
    .await;
}

/// An HTTP/1.1 backend on a free loopback port that counts requests and answers with a
/// status that the test may change.
pub(crate) struct Backend {
    pub(crate) addr: SocketAddr,
    requests: Arc<AtomicUsize>,
    status: Arc<AtomicU16>,
}

impl Backend {
    pub(crate) async fn start() -> Backend {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(AtomicUsize::new(0));
        let status = Arc::new(AtomicU16::new(200));
        let (counted, answer) = (Arc::clone(&requests), Arc::clone(&status));
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (counted, answer) = (Arc::clone(&counted), Arc::clone(&answer));
                let service = hyper::service::service_fn(move |_request: hyper::Request<hyper::body::Incoming>| {
                    counted.fetch_add(1, Ordering::SeqCst);
                    let status = answer.load(Ordering::SeqCst);
                    async move {
                        hyper::Response::builder()
                            .status(status)
                            .body(Full::new(Bytes::from_static(b"ok")))
                    }
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service),
                );
            }
        });
        Backend { addr, requests, status }
    }

    pub(crate) fn port(&self) -> u16 {
        self.addr.port()
    }

    pub(crate) fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    pub(crate) fn answer(&self, status: u16) {
        self.status.store(status, Ordering::SeqCst);
    }
}
