//! A registry started in-process on a free loopback port with a scratch data dir, for the
//! client library's tests: stop it, restart it on the same port, or open it on another port
//! while clients cannot reach it.

use std::time::Duration;

use muster_client::Client;
use muster_client::Registration;
use muster_core::{Incarnation, InstanceId, ServiceKey};
use muster_server::{RunningServer, ServerConfig};
use tempfile::TempDir;

/// The longest any single step may take: generous for a loaded 2-core machine, reached only
/// when something is broken.
pub(crate) const STEP: Duration = Duration::from_secs(20);

/// The registry's shortest TTL: the tests outlive several of them in a few seconds.
pub(crate) const TTL: Duration = Duration::from_secs(1);

/// How often a bounded wait looks again.
pub(crate) const POLL: Duration = Duration::from_millis(50);

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

/// Registers `instance` of `key` at `ip`, without a lease: the plain record the client tests use.
pub(crate) async fn register(client: &Client, key: &ServiceKey, instance: &str, incarnation: u64, ip: &str) {
    let registration = Registration::new(Incarnation(incarnation)).address(ip);
    client
        .register(key, &InstanceId::new(instance).unwrap(), registration)
        .await
        .unwrap();
}

/// A registry on a free loopback port with a scratch data dir.
pub(crate) struct Registry {
    server: Option<RunningServer>,
    config: ServerConfig,
    _dir: TempDir,
}

impl Registry {
    pub(crate) async fn start() -> Registry {
        Registry::start_with(|config| config).await
    }

    /// Starts with a configuration adjusted by `adjust` (e.g. a short history).
    pub(crate) async fn start_with(adjust: impl FnOnce(ServerConfig) -> ServerConfig) -> Registry {
        let dir = tempfile::tempdir().unwrap();
        let config = adjust(ServerConfig {
            data_dir: dir.path().to_path_buf(),
            http: "127.0.0.1:0".parse().unwrap(),
            dns: "127.0.0.1:0".parse().unwrap(),
            // A free port: parallel tests would collide on Consul's 8500.
            consul: muster_server::ConsulConfig {
                addr: "127.0.0.1:0".parse().unwrap(),
                ..muster_server::ConsulConfig::default()
            },
            progress_interval_ms: 200,
            shutdown_grace_ms: 1_000,
            ..ServerConfig::default()
        });
        let server = tokio::time::timeout(STEP, muster_server::start(config.clone()))
            .await
            .expect("the registry starts in time")
            .expect("the registry starts");
        Registry {
            // A restart comes back on the same port, where the clients point.
            config: ServerConfig {
                http: server.local_addr(),
                ..config
            },
            server: Some(server),
            _dir: dir,
        }
    }

    pub(crate) fn client(&self) -> Client {
        Client::new(&format!("http://{}", self.config.http)).unwrap()
    }

    /// The watch streams the server holds open now (its hub's subscribed watchers).
    pub(crate) fn watchers(&self) -> usize {
        self.server.as_ref().expect("running").watch_stats().watchers
    }

    pub(crate) async fn stop(&mut self) {
        let server = self.server.take().expect("running");
        tokio::time::timeout(STEP, server.stop())
            .await
            .expect("the registry stops in time")
            .expect("the registry stops");
    }

    pub(crate) async fn restart(&mut self) {
        let server = tokio::time::timeout(STEP, muster_server::start(self.config.clone()))
            .await
            .expect("the registry restarts in time")
            .expect("the registry restarts");
        self.server = Some(server);
    }

    /// Runs `while_away` against the registry reopened on another port, so that clients of
    /// the usual port are disconnected meanwhile; then brings it back on the usual port.
    pub(crate) async fn away<F, Fut>(&mut self, while_away: F)
    where
        F: FnOnce(Client) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        self.stop().await;
        let elsewhere = ServerConfig {
            http: "127.0.0.1:0".parse().unwrap(),
            ..self.config.clone()
        };
        let server = tokio::time::timeout(STEP, muster_server::start(elsewhere))
            .await
            .unwrap()
            .unwrap();
        while_away(Client::new(&format!("http://{}", server.local_addr())).unwrap()).await;
        tokio::time::timeout(STEP, server.stop()).await.unwrap().unwrap();
        self.restart().await;
    }
}
