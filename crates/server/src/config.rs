//! The server's configuration: TOML file, overridden by command-line flags.

use std::net::SocketAddr;
use std::path::PathBuf;

use muster_dns::ZoneConfig;
use muster_registry::RegistryConfig;
use serde::{Deserialize, Serialize};

/// Everything `muster serve` can be told. Every field has a default that makes a working
/// single-node registry on loopback.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Where the Raft log, vote and snapshots live.
    pub data_dir: PathBuf,
    /// The HTTP API's address. Loopback unless auth is configured (SPEC S1).
    pub http: SocketAddr,
    /// The DNS listener's address, UDP and TCP (issue 6). Loopback, like the API.
    pub dns: SocketAddr,
    /// Whether the DNS listener runs: on by default.
    pub dns_enabled: bool,
    /// What DNS answers: domain (`muster.`), tenant (`default`), TTLs, eligibility.
    pub dns_zone: ZoneConfig,
    /// The registry's limits, policy, quotas and history.
    pub registry: RegistryConfig,
    /// Largest accepted request body: 64 KiB is sixteen maximal records.
    pub max_body_bytes: usize,
    /// Frames a watcher may have queued before it is told to resync: 1,024.
    pub watch_queue_frames: usize,
    /// How often an idle watch gets a `progress` frame: 5 s.
    pub progress_interval_ms: u64,
    /// Log entries between state-machine snapshots: 10,000 bounds replay at restart to a
    /// fraction of a second while snapshotting a large registry rarely.
    pub snapshot_every: u64,
    /// How long a stopping server waits for in-flight requests and watchers to finish before
    /// it closes their connections: 10 s, well inside a typical orchestrator's 30 s grace.
    pub shutdown_grace_ms: u64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            data_dir: PathBuf::from("muster-data"),
            http: SocketAddr::from(([127, 0, 0, 1], 7070)),
            dns: SocketAddr::from(([127, 0, 0, 1], 7053)),
            dns_enabled: true,
            dns_zone: ZoneConfig::default(),
            registry: RegistryConfig::default(),
            max_body_bytes: 64 * 1024,
            watch_queue_frames: 1024,
            progress_interval_ms: 5_000,
            snapshot_every: 10_000,
            shutdown_grace_ms: 10_000,
        }
    }
}
