//! The server's configuration: TOML file, overridden by command-line flags.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;

use muster_consensus::ClusterConfig;

use muster_core::address::host_port;
use muster_core::{Secret, ServiceKey};
use muster_dns::ZoneConfig;
use muster_gate::AuthConfig;
use muster_health::checker::CheckerConfig;
use muster_health::preservation::{Brakes, PreservationConfig};
use muster_health::target::TargetPolicy;
use muster_registry::RegistryConfig;
use serde::{Deserialize, Serialize};

use crate::ServerError;
use crate::xds::config::XdsConfig;
use muster_consul::config::ConsulConfig;
use muster_federation::FederationConfig;
use muster_http::listener::{ClusterTlsConfig, LimitsConfig, TlsConfig};

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
    /// Whether the DNS listener runs: on by default; `muster serve --dns off` turns it off.
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
    /// listener. Empty: a single node. The member with the lowest id forms the cluster and
    /// needs 3 voters (they survive 1 failure) or 5 (2 failures); 2, 4 or more than 5 are
    /// refused with the reason, and 1 alone forms a cluster to grow with `muster cluster add`.
    /// A joiner lists the members it joins and itself.
    pub peers: BTreeMap<u64, String>,
    /// The secret every node-to-node request carries; required in a cluster (and kept as a
    /// second factor over `cluster_tls`).
    pub cluster_secret: Option<muster_core::Secret>,
    /// Browser origins (`scheme://host[:port]`) allowed to call the API (SPEC S6): a request
    /// carrying any other `Origin` is refused with `forbidden_origin`. Empty (the default):
    /// no browser may call it; native clients send no `Origin` and are unaffected.
    pub allowed_origins: Vec<String>,
    /// How long a request body may take to arrive once the head is read: 10 s is far more
    /// than a 64 KiB body needs on any link that can run a registry, and short enough that a
    /// client trickling bodies cannot hold many connections for long. Later:
    /// `request_timeout`.
    pub body_read_timeout_ms: u64,
    /// Streams one principal may hold open in one tenant (SPEC W4): watches, dashboard live
    /// views, xDS streams and parked blocking queries (native and Consul) together; more:
    /// `too_many_watches` (xDS: `RESOURCE_EXHAUSTED`). 16,384 leaves room for the
    /// 10,000-watcher fan-out bench on one (anonymous) principal.
    pub max_watches_per_principal: usize,
    /// Streams one tenant may hold open, all its principals together, counted as
    /// `max_watches_per_principal` counts: 65,536, four principals at their cap, so one
    /// tenant cannot take every descriptor of the node.
    pub max_watches_per_tenant: usize,
    /// Writes one principal may make a second, sustained, with authentication on (SPEC W4,
    /// S6): registrations, renewals, serving-state reports, drains and deregistrations
    /// through the native and Consul APIs, each a Raft entry and a fan-out to every
    /// watcher. More: `429 rate_limited` with `Retry-After`. 10,000 a second registers a
    /// 100,000-endpoint fleet in ten seconds from one registrar (or renews 10,000 leases a
    /// second), about half of what one node commits durably, so one looping client or
    /// stolen token cannot take the whole write path from the others. Without
    /// authentication every caller is one principal, and no rate applies.
    pub write_rate_per_principal: u64,
    /// Writes one principal may make at once above `write_rate_per_principal`, after an
    /// idle spell: 20,000, two seconds' worth, so a registrar's start-up burst is taken
    /// whole.
    pub write_burst_per_principal: u64,
    /// The audit trail (SPEC S4).
    pub audit: AuditConfig,
    /// Authentication and authorisation (SPEC S1, S2): off by default, and then the API
    /// binds loopback only.
    pub auth: AuthConfig,
    /// TLS (and optional mutual TLS) for the HTTP API (SPEC S1); off by default.
    pub tls: TlsConfig,
    /// Mutual TLS between the members of a cluster (SPEC S1); off by default.
    pub cluster_tls: ClusterTlsConfig,
    /// Each listener's connection, header and handshake limits (SPEC S6).
    pub limits: LimitsConfig,
    /// The Consul-compatible HTTP API (SPEC E1): on by default at `127.0.0.1:8500`.
    pub consul: ConsulConfig,
    /// The xDS control plane (SPEC D5): off unless `[xds] addr` (`--xds ADDR`) is set.
    pub xds: XdsConfig,
    /// Convergence telemetry (SPEC O3): how subscribers' reports are kept.
    pub convergence: ConvergenceConfig,
    /// Federation with peer regions (SPEC G1, G2): this region's name, what it mirrors of
    /// each peer, failover policies. Off unless `region` is set.
    pub federation: FederationConfig,
}

/// The audit trail's retention (SPEC S4): in memory, the newest `retention` mutations and,
/// apart from them, the newest `denial_retention` denials; see the `audit` module for what a
/// restart keeps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuditConfig {
    /// Mutation records kept: 10,000. A record is a few hundred bytes, so the default costs a
    /// few MiB; writes are registrations, state changes and removals (lease renewals are not
    /// logged), so it spans hours of a fleet of thousands of endpoints redeploying. Denials
    /// never count against it. Longer retention is a log shipper's job (poll `GET /v1/audit`).
    pub retention: usize,
    /// Denial records kept, apart from the mutations so that no flood of refused requests
    /// evicts a mutation (SPEC S8): 10,000, as many as the mutations. A flood from one source
    /// is one record per 10 s with a count, so 10,000 records hold a day of one address's
    /// flood or an hour of thirty addresses' at once, in a few MiB (at most about 20 MiB: a
    /// denial's reason and resource are cut at 512 bytes).
    pub denial_retention: usize,
}

impl Default for AuditConfig {
    fn default() -> Self {
        AuditConfig {
            retention: 10_000,
            denial_retention: 10_000,
        }
    }
}

/// How the server keeps subscribers' reports of what they applied (SPEC O3); see
/// `muster_convergence`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConvergenceConfig {
    /// A subscriber that has not reported for this long stops counting as live and is listed
    /// as silent: 30 s, three missed keep-alives.
    pub silent_after_ms: u64,
    /// How often a subscriber reports while nothing changes (each reply tells it): 10 s, so
    /// 10,000 idle watchers cost the server 1,000 small requests a second.
    pub report_every_ms: u64,
    /// A silent subscriber is forgotten after this long: 10 min.
    pub forget_after_ms: u64,
    /// Subscribers tracked in all (one per client and service; ~200 bytes each):
    /// 250,000. A report that would pass it is refused with `too_many_subscribers`.
    pub max_subscribers: usize,
    /// Subscribers tracked for one tenant's services (SPEC O3, S3): 50,000 (~10 MB). Client
    /// ids are the reporter's word, so without it one tenant's made-up ids could fill
    /// `max_subscribers` and get every other tenant's reports and xDS ACKs refused. 50,000
    /// is 5,000 clients following 10 services each, and a fifth of `max_subscribers`, so
    /// five tenants at this bound still fit. A report that would pass it is refused with
    /// `too_many_subscribers` for that tenant only; nothing another tenant holds is touched.
    pub max_subscribers_per_tenant: usize,
    /// Distinct cohorts counted per service: 64 (cohorts are zones and versions, not ids).
    pub max_cohorts: usize,
}

impl Default for ConvergenceConfig {
    fn default() -> Self {
        let ledger = muster_convergence::LedgerConfig::default();
        ConvergenceConfig {
            silent_after_ms: ledger.silent_after_ms,
            report_every_ms: ledger.report_every_ms,
            forget_after_ms: ledger.forget_after_ms,
            max_subscribers: ledger.max_subscribers,
            max_subscribers_per_tenant: ledger.max_subscribers_per_tenant,
            max_cohorts: ledger.max_cohorts,
        }
    }
}

impl ConvergenceConfig {
    /// The ledger's settings.
    pub(crate) fn ledger(&self) -> muster_convergence::LedgerConfig {
        muster_convergence::LedgerConfig {
            silent_after_ms: self.silent_after_ms,
            report_every_ms: self.report_every_ms,
            forget_after_ms: self.forget_after_ms,
            max_subscribers: self.max_subscribers,
            max_subscribers_per_tenant: self.max_subscribers_per_tenant,
            max_cohorts: self.max_cohorts,
            ..muster_convergence::LedgerConfig::default()
        }
    }
}

/// The shortest cluster secret accepted: 16 bytes, so guessing it over the network is not an
/// option.
pub(crate) const MIN_SECRET_BYTES: usize = 16;

/// The environment variable that gives the bootstrap secret when `[auth]
/// bootstrap_secret_file` is unset.
pub(crate) const BOOTSTRAP_SECRET_ENV: &str = "MUSTER_BOOTSTRAP_SECRET";

impl ServerConfig {
    /// The secret `POST /v1/acl/bootstrap` requires (SPEC S1): the first line of `[auth]
    /// bootstrap_secret_file`, else `from_env` (`MUSTER_BOOTSTRAP_SECRET`), else none (then
    /// bootstrap is accepted from loopback only). At least [`MIN_SECRET_BYTES`]; an error
    /// names the setting.
    pub(crate) fn bootstrap_secret(&self, from_env: Option<String>) -> Result<Option<Secret>, ServerError> {
        let (text, setting) = match &self.auth.bootstrap_secret_file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|err| {
                    ServerError::Config(format!(
                        "auth.bootstrap_secret_file: cannot read {}: {err}",
                        path.display()
                    ))
                })?;
                (
                    text.lines().next().unwrap_or_default().trim().to_owned(),
                    "auth.bootstrap_secret_file",
                )
            }
            None => match from_env.as_deref().map(str::trim) {
                Some(text) if !text.is_empty() => (text.to_owned(), BOOTSTRAP_SECRET_ENV),
                _ => return Ok(None),
            },
        };
        if text.len() < MIN_SECRET_BYTES {
            return Err(ServerError::Config(format!(
                "{setting}: the bootstrap secret must be at least {MIN_SECRET_BYTES} bytes"
            )));
        }
        Ok(Some(Secret::new(text)))
    }

    /// The consensus layer's view of the cluster settings; `None` for a single node. An error
    /// names the setting.
    pub(crate) fn cluster(&self) -> Result<Option<ClusterConfig>, String> {
        if self.peers.is_empty() {
            if self.cluster_addr.is_some()
                || self.cluster_secret.is_some()
                || self.cluster_tls != ClusterTlsConfig::default()
            {
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
        // The member with the lowest id forms the cluster from `peers` (the others wait to
        // hear from it, and a joiner lists the members it joins beside itself), so the count
        // is judged there.
        if self.peers.keys().next() == Some(&self.node_id) {
            founding_voters(self.peers.len()).map_err(|e| e.to_string())?;
        }
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
            // Loaded from `cluster_tls` when the server starts (`muster_http::listener`).
            tls: None,
        }))
    }
}

/// Refuses a founding membership whose size a user would regret (U1): 3 voters survive one
/// failure and 5 survive two. One alone is allowed: it is the seed of a cluster grown with
/// `muster cluster add`, and as available as a single node, which its user chose. An even
/// count survives no more failures than one voter fewer while every write waits for more of
/// them (2 survive none), and more than 5 make each write wait for more acknowledgements than
/// any failure budget needs.
fn founding_voters(count: usize) -> Result<(), VoterCountError> {
    if matches!(count, 1 | 3 | 5) {
        return Ok(());
    }
    let quorum = count / 2 + 1;
    let survives = (count - 1) / 2;
    let why = match count {
        2 => "2 voters cannot survive any failure: every write needs both".to_owned(),
        even if even % 2 == 0 => format!(
            "{even} voters survive {survives} failure{}, no more than {} do, while every write waits for {quorum} of them",
            if survives == 1 { "" } else { "s" },
            even - 1
        ),
        many => format!("{many} voters make every write wait for {quorum} of them; 5 already survive 2 failures"),
    };
    Err(VoterCountError { why })
}

/// A founding membership of a count [`founding_voters`] refuses, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "peers: {why}. List 3 voters (they survive 1 failure) or 5 (2 failures); one alone forms a cluster to grow with `muster cluster add`"
)]
struct VoterCountError {
    why: String,
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
    /// Services with fewer endpoints than this get no brake, only their floor. Below 5,
    /// `preservation_percent` (30%) is one endpoint a window, so the brake would hold the
    /// second of two real failures, the first thing anyone testing with 2–4 instances
    /// meets; a correlated loss of a service that small is kept by a `floor` set for it.
    pub brake_min_endpoints: usize,
    /// Serving endpoints never removed below, per service unless `floors` says otherwise.
    pub floor: usize,
    /// Per-service floors: `"tenant/namespace/service" = 3`.
    pub floors: BTreeMap<String, usize>,
    /// Probes one tenant may start per second (SPEC S6): half of `budget_per_s` by default.
    pub tenant_budget_per_s: u32,
    /// Probes of one tenant running at once: half of `max_in_flight` by default.
    pub tenant_max_in_flight: usize,
    /// Networks (CIDR) whose check targets are probed even when loopback, link-local or a
    /// metadata address, e.g. `["127.0.0.0/8"]` for local endpoints with authentication on.
    /// Empty by default. Muster's own listeners are never probed.
    pub check_allowed_networks: Vec<String>,
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
            brake_min_endpoints: brake.min_endpoints,
            floor: brake.floor,
            floors: BTreeMap::new(),
            tenant_budget_per_s: checker.tenant_budget_per_s,
            tenant_max_in_flight: checker.tenant_max_in_flight,
            check_allowed_networks: Vec::new(),
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
            tenant_budget_per_s: self.tenant_budget_per_s,
            tenant_max_in_flight: self.tenant_max_in_flight,
        }
    }

    /// What the checker may probe, before the listeners are known. `allow_loopback` holds
    /// while authentication is off (see `muster_health::target`). An error names a bad network.
    pub(crate) fn targets(&self, allow_loopback: bool) -> Result<TargetPolicy, String> {
        TargetPolicy::new(allow_loopback, &self.check_allowed_networks)
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
        if self.tenant_max_in_flight == 0 || self.tenant_budget_per_s == 0 {
            return Err("health.tenant_max_in_flight and health.tenant_budget_per_s: must be at least 1".into());
        }
        self.targets(true)?;
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
                min_endpoints: self.brake_min_endpoints,
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
            allowed_origins: Vec::new(),
            body_read_timeout_ms: 10_000,
            max_watches_per_principal: 16_384,
            max_watches_per_tenant: 65_536,
            write_rate_per_principal: 10_000,
            write_burst_per_principal: 20_000,
            audit: AuditConfig::default(),
            auth: AuthConfig::default(),
            tls: TlsConfig::default(),
            cluster_tls: ClusterTlsConfig::default(),
            limits: LimitsConfig::default(),
            consul: ConsulConfig::default(),
            xds: XdsConfig::default(),
            convergence: ConvergenceConfig::default(),
            federation: FederationConfig::default(),
        }
    }
}
