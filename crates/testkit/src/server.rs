//! A registry started in-process for tests (feature `server`): a scratch data directory,
//! free loopback ports for every listener, short progress frames. The server's, the client
//! library's, the proxy's and the command line's tests all start theirs here, and add what
//! their own tests need around it.
//!
//! ```text
//!  InProcess::start_with(configure) ─▶ muster_server::start ─▶ running
//!     stop ─▶ stopped ─▶ start_again (same port: clients pointed at it reconnect)
//!                      └▶ start_again_on_any_port
//!     away(f): f runs against the registry on another port while its usual one is closed
//! ```

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use muster_client::Client;
use muster_server::{ConsulConfig, Hooks, RunningServer, ServerConfig, ServerError};
use tempfile::TempDir;

/// The longest any single step may take: generous for a loaded 2-core machine, reached only
/// when something is broken.
pub const STEP: Duration = Duration::from_secs(20);

/// How often [`until`] looks again.
const POLL: Duration = Duration::from_millis(20);

/// Waits (bounded by [`STEP`]) until `done` holds; panics naming `what` otherwise.
pub async fn until(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..(STEP.as_millis() / POLL.as_millis()) {
        if done() {
            return;
        }
        tokio::time::sleep(POLL).await;
    }
    panic!("timed out waiting until {what}");
}

/// A configuration for tests in `dir`: free loopback ports (parallel tests would collide
/// on Consul's 8500 and DNS's 53), progress frames every 200 ms, a one-second shutdown grace.
pub fn test_config(dir: &Path) -> ServerConfig {
    ServerConfig {
        data_dir: dir.to_path_buf(),
        http: "127.0.0.1:0".parse().expect("an address"),
        dns: "127.0.0.1:0".parse().expect("an address"),
        consul: ConsulConfig {
            addr: "127.0.0.1:0".parse().expect("an address"),
            ..ConsulConfig::default()
        },
        progress_interval_ms: 200,
        shutdown_grace_ms: 1_000,
        ..ServerConfig::default()
    }
}

/// A registry running in this process, with its data directory.
pub struct InProcess {
    server: Option<RunningServer>,
    /// Where the HTTP API listens (kept while the server is stopped or handed to a task).
    addr: SocketAddr,
    config: ServerConfig,
    _dir: TempDir,
}

impl InProcess {
    /// Starts with the test configuration.
    pub async fn start() -> InProcess {
        InProcess::start_with(|_| {}).await
    }

    /// Starts with the test configuration as `configure` leaves it.
    pub async fn start_with(configure: impl FnOnce(&mut ServerConfig)) -> InProcess {
        InProcess::start_hooked(configure, Hooks::default()).await
    }

    /// [`InProcess::start_with`] with the binary's hooks (the dashboard's lab runner).
    pub async fn start_hooked(configure: impl FnOnce(&mut ServerConfig), hooks: Hooks) -> InProcess {
        let dir = tempfile::tempdir().expect("a scratch directory");
        let mut config = test_config(dir.path());
        configure(&mut config);
        let server = tokio::time::timeout(STEP, muster_server::start_with(config.clone(), hooks))
            .await
            .expect("the registry starts in time")
            .expect("the registry starts");
        InProcess {
            addr: server.local_addr(),
            server: Some(server),
            config,
            _dir: dir,
        }
    }

    /// The running server.
    pub fn running(&self) -> &RunningServer {
        self.server.as_ref().expect("the registry is running")
    }

    /// Its configuration (the HTTP port as asked: `127.0.0.1:0` unless pinned).
    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    /// The HTTP API's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `path` on the HTTP API.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        &self.config.data_dir
    }

    /// A client of the HTTP API.
    pub fn client(&self) -> Client {
        Client::new(&self.url("")).expect("a valid address")
    }

    /// The watch streams the server holds open now.
    pub fn watchers(&self) -> usize {
        self.running().watch_stats().watchers
    }

    /// The node-to-node listener's address (cluster tests).
    pub fn cluster_addr(&self) -> SocketAddr {
        self.config.cluster_addr.expect("a cluster member")
    }

    /// The node-to-node listener's base URL (cluster tests).
    pub fn cluster_url(&self) -> String {
        format!("http://{}", self.cluster_addr())
    }

    /// Where the DNS listener answers.
    pub fn dns_addr(&self) -> SocketAddr {
        self.running().dns_addr().expect("DNS is enabled")
    }

    /// Where the Consul-compatible API listens.
    pub fn consul_addr(&self) -> SocketAddr {
        self.running().consul_addr().expect("the Consul API is enabled")
    }

    /// Where the xDS listener answers.
    pub fn xds_addr(&self) -> SocketAddr {
        self.running().xds_addr().expect("the xDS listener is enabled")
    }

    /// Stops the server gracefully (a registry outage: watches are cut, reconnects refused).
    pub async fn stop(&mut self) {
        let server = self.server.take().expect("the registry is running");
        tokio::time::timeout(STEP, server.stop())
            .await
            .expect("the registry stops in time")
            .expect("the registry stops cleanly");
    }

    /// Starts again after [`InProcess::stop`], on the same data directory and port.
    pub async fn start_again(&mut self) {
        let pinned = ServerConfig {
            http: self.addr,
            ..self.config.clone()
        };
        self.start_from(pinned).await;
    }

    /// Starts again after [`InProcess::stop`], on the same data directory and any free
    /// port (the port a test held may be taken by another test meanwhile).
    pub async fn start_again_on_any_port(&mut self) {
        self.start_from(self.config.clone()).await;
    }

    async fn start_from(&mut self, config: ServerConfig) {
        assert!(self.server.is_none(), "the registry is stopped");
        let server = tokio::time::timeout(STEP, muster_server::start(config))
            .await
            .expect("the registry restarts in time")
            .expect("the registry restarts");
        self.addr = server.local_addr();
        self.server = Some(server);
    }

    /// Replaces the configuration while the server is stopped (the next start uses it).
    pub fn reconfigure(&mut self, config: ServerConfig) {
        assert!(self.server.is_none(), "the registry is stopped");
        self.config = config;
    }

    /// Stops, changes the configuration, and starts again on the same port.
    pub async fn restart_with(&mut self, configure: impl FnOnce(&mut ServerConfig)) {
        configure(&mut self.config);
        self.stop().await;
        self.start_again().await;
    }

    /// Runs `while_away` against the registry reopened on another port, so clients of the
    /// usual port are cut off meanwhile; then brings it back on the usual port.
    pub async fn away<F, Fut>(&mut self, while_away: F)
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = ()>,
    {
        let usual = self.addr;
        self.stop().await;
        self.start_again_on_any_port().await;
        while_away(self.client()).await;
        self.stop().await;
        self.addr = usual;
        self.start_again().await;
    }

    /// Hands the server to a task that serves it until the test ends or the node fails;
    /// requests still reach it at [`InProcess::addr`].
    pub fn serve_in_background(&mut self) -> tokio::task::JoinHandle<Result<(), ServerError>> {
        let server = self.server.take().expect("the registry is running");
        tokio::spawn(server.serve_until(std::future::pending()))
    }
}
