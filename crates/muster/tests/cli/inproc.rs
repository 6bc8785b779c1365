//! A registry started in-process on a free loopback port with a scratch data dir, for the
//! client library's tests: stop it, restart it on the same port, or open it on another port
//! while clients cannot reach it.

use std::time::Duration;

use muster_client::Client;
use muster_client::Registration;
use muster_core::{Incarnation, InstanceId, ServiceKey};
use muster_server::ServerConfig;
use muster_testkit::server::InProcess;

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

/// A registry on a free loopback port with a scratch data dir (`muster_testkit::server`):
/// stop it, restart it on the same port, or open it on another port while clients cannot
/// reach it (`away`).
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
        Registry::start_with(|config| config).await
    }

    /// Starts with a configuration adjusted by `adjust` (e.g. a short history).
    pub(crate) async fn start_with(adjust: impl FnOnce(ServerConfig) -> ServerConfig) -> Registry {
        Registry(InProcess::start_with(|config| *config = adjust(config.clone())).await)
    }

    /// Starts again on the same port after [`InProcess::stop`].
    pub(crate) async fn restart(&mut self) {
        self.0.start_again().await;
    }
}
