//! The server's configuration: TOML file, overridden by command-line flags.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;

use muster_consensus::ClusterConfig;

use crate::auth::AuthConfig;
use muster_core::ServiceKey;
use muster_core::address::host_port;
use muster_dns::ZoneConfig;
use muster_health::checker::CheckerConfig;
use muster_health::preservation::{Brakes, PreservationConfig};
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
    /// The DNS listener's address, UDP and TCP (SPEC D2). Loopback, like the API.
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
    /// The health checker and self-preservation.
    pub health: HealthConfig,
    /// This node's id in its cluster (1 for a single node).
    pub node_id: u64,
    /// The node-to-node listener (Raft traffic and forwarded writes); required in a cluster.
    pub cluster_addr: Option<SocketAddr>,
    /// Every voter of a static cluster, this node included: id → `host:port` of its cluster
    /// listener. Empty: a single node.
    pub peers: BTreeMap<u64, String>,
    /// The secret every node-to-node request carries; required in a cluster.
    pub cluster_secret: Option<String>,
    /// Authentication and authorisation (SPEC S1, S2): off by default, and then the API
    /// binds loopback only.
    pub auth: AuthConfig,
}

/// The shortest cluster secret accepted: 16 bytes, so guessing it over the network is not an
/// option.
pub(crate) const MIN_SECRET_BYTES: usize = 16;

impl ServerConfig {
    /// The consensus layer's view of the cluster settings; `None` for a single node. An error
    /// names the setting.
    pub(crate) fn cluster(&self) -> Result<Option<ClusterConfig>, String> {
        if self.peers.is_empty() {
            if self.cluster_addr.is_some() || self.cluster_secret.is_some() {
                return Err("peers: a cluster needs --peers ID=ADDR,... (every voter, this node included)".into());
            }
            return Ok(None);
        }
        let Some(listen) = self.cluster_addr else {
            return Err("cluster_addr: a cluster member needs a node-to-node listener address".into());
        };
        let Some(secret) = self.cluster_secret.clone() else {
            return Err("cluster_secret: a cluster needs a shared secret".into());
        };
        if secret.len() < MIN_SECRET_BYTES {
            return Err(format!("cluster_secret: must be at least {MIN_SECRET_BYTES} bytes"));
        }
        let Some(advertised) = self.peers.get(&self.node_id) else {
            return Err(format!("node_id: {} is not among the peers", self.node_id));
        };
        // The listener may bind a wildcard address; the port must be the advertised one.
        if host_port(advertised).map(|(_, port)| port) != Some(listen.port()) {
            return Err(format!(
                "peers: node {} is listed at {advertised}, but cluster_addr is {listen}",
                self.node_id
            ));
        }
        Ok(Some(ClusterConfig {
            node_id: self.node_id,
            members: self.peers.clone(),
            secret,
        }))
    }
}

/// The health checker's limits and the self-preservation brake (SPEC H2, H5). Defaults are
/// those of [`CheckerConfig`] and [`PreservationConfig`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HealthConfig {
    /// Probes running at once.
    pub max_in_flight: usize,
    /// Probes started per second at most.
    pub budget_per_s: u32,
    /// Probe times spread by ± this percentage of the interval.
    pub jitter_percent: u8,
    /// Crossings tolerated within `flap_window_ms` before an endpoint is held `degraded`.
    pub flap_limit: usize,
    /// The flap window.
    pub flap_window_ms: u64,
    /// Percentage of a service's endpoints that may leave routing (checks failing, leases
    /// expiring) within `preservation_window_ms` before self-preservation holds the rest.
    pub preservation_percent: u8,
    /// The self-preservation window.
    pub preservation_window_ms: u64,
    /// Serving endpoints never removed below, per service unless `floors` says otherwise.
    pub floor: usize,
    /// Per-service floors: `"tenant/namespace/service" = 3`.
    pub floors: BTreeMap<String, usize>,
}

impl Default for HealthConfig {
    fn default() -> Self {
        let checker = CheckerConfig::default();
        let brake = PreservationConfig::default();
        HealthConfig {
            max_in_flight: checker.max_in_flight,
            budget_per_s: checker.budget_per_s,
            jitter_percent: (checker.jitter * 100.0).round() as u8,
            flap_limit: checker.flap_limit,
            flap_window_ms: checker.flap_window_ms,
            preservation_percent: (brake.max_fraction * 100.0).round() as u8,
            preservation_window_ms: brake.window_ms,
            floor: brake.floor,
            floors: BTreeMap::new(),
        }
    }
}

impl HealthConfig {
    /// The checker's settings.
    pub(crate) fn checker(&self) -> CheckerConfig {
        CheckerConfig {
            jitter: f64::from(self.jitter_percent) / 100.0,
            max_in_flight: self.max_in_flight,
            budget_per_s: self.budget_per_s,
            flap_limit: self.flap_limit,
            flap_window_ms: self.flap_window_ms,
        }
    }

    /// The brakes, with their floors; an error names a bad setting.
    pub(crate) fn brakes(&self) -> Result<Brakes, String> {
        if self.jitter_percent > 50 {
            return Err(format!(
                "health.jitter_percent: must be 0 to 50, got {}",
                self.jitter_percent
            ));
        }
        if self.preservation_percent > 100 {
            return Err(format!(
                "health.preservation_percent: must be 0 to 100, got {}",
                self.preservation_percent
            ));
        }
        if self.preservation_window_ms == 0 || self.flap_window_ms == 0 {
            return Err(
                "health.preservation_window_ms and health.flap_window_ms: must be at least 1 (0 would switch the brake or the damping off)".into(),
            );
        }
        if self.max_in_flight == 0 || self.budget_per_s == 0 {
            return Err("health.max_in_flight and health.budget_per_s: must be at least 1".into());
        }
        let mut floors = HashMap::new();
        for (name, floor) in &self.floors {
            let parts: Vec<&str> = name.split('/').collect();
            let key = match parts[..] {
                [tenant, namespace, service] => ServiceKey::new(tenant, namespace, service).map_err(|e| e.to_string()),
                _ => Err("expected tenant/namespace/service".to_owned()),
            }
            .map_err(|why| format!("health.floors: '{name}': {why}"))?;
            floors.insert(key, *floor);
        }
        Ok(Brakes::new(
            PreservationConfig {
                max_fraction: f64::from(self.preservation_percent) / 100.0,
                window_ms: self.preservation_window_ms,
                floor: self.floor,
            },
            floors,
        ))
    }
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
            health: HealthConfig::default(),
            node_id: 1,
            cluster_addr: None,
            peers: BTreeMap::new(),
            cluster_secret: None,
            auth: AuthConfig::default(),
        }
    }
}
