//! `muster bench`'s flags ([`BenchArgs`], a clap `Args` the CLI embeds) and their
//! resolution into a [`Plan`]: `--quick` defaults, explicit flags on top. Pure.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use serde::Serialize;

use crate::BenchError;

/// One workload of the benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Workload {
    /// Durable registrations of new instances (etcd: `kv/put`).
    Register,
    /// Lease renewals (etcd: `lease/keepalive`).
    Renew,
    /// Snapshot reads of a 5-endpoint service (etcd: a range over 5 keys).
    Read,
    /// One change delivered to many watchers: commit→delivery latency.
    Fanout,
    /// Server memory per idle watch stream.
    Watchers,
    /// The health checker at fleet scale (probe rate, CPU) and detection latency per check
    /// kind (SPEC H). Muster only; not part of the default set (it runs about a minute).
    Checks,
    /// New TLS connections per second, each a full handshake (no session resumption) and one
    /// `GET /v1/status`. Muster over TLS only (`--tls`), which adds it to the default set.
    Handshake,
    /// Blocking queries on the Consul-compatible API, one per service over
    /// `--consul-services` services, one change per second: wake-ups per change against
    /// Consul's wake-everyone model, and server CPU. Muster only; not part of the default set.
    Consul,
    /// ADS streams (`--xds-streams`) subscribed to one service's EDS, then `--changes`
    /// endpoint changes: commit-to-push and commit-to-ACK latency, and server memory per idle
    /// stream (SPEC D5). Muster only, built with the `xds` feature; not part of the default set.
    Xds,
    /// `--watchers` real muster-client resolvers of one service, each its own client reporting
    /// what it applied, then `--changes` (at most 16) endpoint changes: commit→applied from the
    /// server's ledger and commit→DNS-answer from a probe (SPEC O3). Muster only; not part of
    /// the default set.
    Convergence,
    /// `--watchers` watch streams over `--services` services, then the server killed
    /// (SIGKILL) and restarted on the same data dir: every watcher reconnects at once resuming
    /// from its revision (SPEC K1, W3). Muster with `--spawn` only; not part of the default set.
    Reconnect,
    /// A `--fleet` of endpoints over 3 zones, a watcher per service, then one zone (30%)
    /// drained in one second, open loop (SPEC K1, L6). Muster with `--spawn` only; opt-in.
    Evacuation,
    /// `--leases` leases, one endpoint each, expiring in the same second beside an unrelated
    /// writer (SPEC K1, L3). Muster with `--spawn` only; opt-in.
    Expiry,
    /// One hot service written as fast as the server takes it beside `--cold-services` cold
    /// ones with a watcher each: cold delivery latency with and without the hot load (SPEC
    /// K1's fair scheduling). Muster with `--spawn` only; opt-in.
    Hotcold,
    /// How cost grows with size (SPEC K1, R5): a spawned one-member cluster grown to each
    /// `--endpoints` size, and at each the fill rate, registration p50/p99, server RSS per
    /// endpoint, restart time after a clean stop and after `kill -9`, and a new member's
    /// catch-up time. Muster only, `--spawn` only; not part of the default set.
    Scale,
    /// Federation (SPEC G2): a spawned region b mirroring `--mirror-endpoints` endpoints of a
    /// spawned region a, then `--mirror-rate` changes a second in a for `--duration`: lag from
    /// a's commit to b showing it, and b's memory per mirrored endpoint. Muster with
    /// `--spawn` only; opt-in.
    Mirror,
    /// A spawned 3-node cluster for `--duration` under registrations, renewals, drains,
    /// expiries, resuming watches and a leader change every few minutes: each node's RSS,
    /// open files and threads every minute, and the client's history held against every
    /// node at the end (SPEC R5, R6). Muster with `--spawn` only; opt-in.
    Soak,
}

impl Workload {
    /// Every workload, in the order they run.
    pub const ALL: [Workload; 5] = [
        Workload::Register,
        Workload::Renew,
        Workload::Read,
        Workload::Fanout,
        Workload::Watchers,
    ];

    /// The name used in flags and reports.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Register => "register",
            Workload::Renew => "renew",
            Workload::Read => "read",
            Workload::Fanout => "fanout",
            Workload::Watchers => "watchers",
            Workload::Checks => "checks",
            Workload::Handshake => "handshake",
            Workload::Consul => "consul",
            Workload::Xds => "xds",
            Workload::Convergence => "convergence",
            Workload::Reconnect => "reconnect",
            Workload::Evacuation => "evacuation",
            Workload::Expiry => "expiry",
            Workload::Hotcold => "hotcold",
            Workload::Scale => "scale",
            Workload::Mirror => "mirror",
            Workload::Soak => "soak",
        }
    }
}

/// `muster bench`: drive load at Muster and etcd over HTTP, side by side, and report
/// throughput, p50/p99 and the ratio against the targets (reported, never asserted).
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// A running Muster server to load, e.g. http://127.0.0.1:7070.
    #[arg(long = "server", value_name = "URL", group = "running", conflicts_with_all = ["spawn", "servers"])]
    pub server: Option<String>,
    /// Several nodes of one running Muster cluster, comma-separated, in place of `--server`:
    /// the first takes the setups' writes and every other workload; the read workload spreads
    /// its requests round-robin over all of them (SPEC R3's read scale-out).
    #[arg(
        long,
        value_name = "URLS",
        value_delimiter = ',',
        group = "running",
        conflicts_with = "spawn"
    )]
    pub servers: Vec<String>,
    /// The read workload's `consistency=` (SPEC R3) [default: none sent: the server's
    /// `default`].
    #[arg(long, value_enum, value_name = "LEVEL")]
    pub consistency: Option<ReadConsistency>,
    /// Start `muster serve` on a free loopback port with a temporary data dir, and stop it after.
    #[arg(long)]
    pub spawn: bool,
    /// The muster binary `--spawn` runs [default: this executable].
    #[arg(long, value_name = "PATH")]
    pub muster_bin: Option<PathBuf>,
    /// The PID of the `--server` process, for the memory workload (`--spawn` knows its own).
    #[arg(long, value_name = "PID", requires = "running")]
    pub server_pid: Option<u32>,
    /// A running etcd 3.4 to compare against, through its /v3 JSON gateway.
    #[arg(long = "etcd", value_name = "URL", conflicts_with = "spawn_etcd")]
    pub etcd: Option<String>,
    /// Start etcd on free loopback ports with a temporary data dir, and stop it after.
    #[arg(long)]
    pub spawn_etcd: bool,
    /// The etcd binary `--spawn-etcd` runs.
    #[arg(long, value_name = "PATH", default_value = "/usr/bin/etcd")]
    pub etcd_bin: PathBuf,
    /// The PID of the `--etcd` process, for the memory workload.
    #[arg(long, value_name = "PID", requires = "etcd")]
    pub etcd_pid: Option<u32>,
    /// Which workloads to run, comma-separated [default: all].
    #[arg(long, value_enum, value_delimiter = ',', value_name = "LIST")]
    pub workloads: Vec<Workload>,
    /// Concurrent connections (one request in flight on each) for register, renew and read.
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub connections: usize,
    /// How long each request workload runs per system (10s, 500ms) [default: 10s; --quick: 2s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// At most this many requests per workload per system, whichever bound comes first
    /// (register: at most 900,000, inside the server's default per-tenant endpoint quota).
    #[arg(long, value_name = "N", default_value_t = 2_000_000)]
    pub max_requests: u64,
    /// Watch streams for fanout and watchers, resolvers for convergence [default: 10000;
    /// --quick: 1000].
    #[arg(long, value_name = "N")]
    pub watchers: Option<usize>,
    /// Changes committed one at a time in fanout and convergence (at most 16 there: the
    /// server's ledger keeps 16), one per second in consul, and one per 500 ms at most in xds
    /// [default: 20; --quick: 5].
    #[arg(long, value_name = "N")]
    pub changes: Option<usize>,
    /// Pause between fanout changes, after the previous one reached every watcher.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "100ms")]
    pub change_interval: Duration,
    /// Leases granted before the renew workload, renewed round-robin [default: 1000]; in the
    /// expiry workload, leases that expire together [default: 50000; --quick: 2000].
    #[arg(long, value_name = "N")]
    pub leases: Option<usize>,
    /// Services the register workload spreads its new instances over (and the reconnect
    /// workload its watchers).
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub services: usize,
    /// Endpoints with HTTP checks (10 s interval) in the checks workload [default: 10000;
    /// --quick: 1000].
    #[arg(long, value_name = "N")]
    pub checks: Option<usize>,
    /// How long the checks workload counts probes and server CPU [default: 30s; --quick: 5s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub check_window: Option<Duration>,
    /// Detections measured per check kind [default: 3; --quick: 1].
    #[arg(long, value_name = "N")]
    pub detection_samples: Option<usize>,
    /// Services of the consul workload, one blocking query waiting on each.
    #[arg(long, value_name = "N", default_value_t = 1_000)]
    pub consul_services: usize,
    /// The Consul-compatible listener of the `--server`, e.g. http://127.0.0.1:8500, for the
    /// consul workload (`--spawn` knows its own).
    #[arg(long = "consul", value_name = "URL", requires = "server")]
    pub consul: Option<String>,
    /// ADS streams of the xds workload, all subscribed to one service.
    #[arg(long, value_name = "N", default_value_t = 1_000)]
    pub xds_streams: usize,
    /// HTTP/2 connections the xds workload's streams share, round-robin [default: one per
    /// stream, as gRPC clients with a channel each].
    #[arg(long, value_name = "N")]
    pub xds_connections: Option<usize>,
    /// HTTP/2 connections (prior knowledge) the fanout and watchers streams share, round-robin
    /// (SPEC W3's multiplexed watches) [default: one HTTP/1.1 connection per stream]. Muster
    /// only: etcd's JSON gateway watches over HTTP/1.1.
    #[arg(long, value_name = "N")]
    pub watch_connections: Option<usize>,
    /// The xDS gRPC listener of the `--server`, e.g. 127.0.0.1:18000, for the xds workload
    /// (`--spawn` starts its server with one).
    #[arg(long = "xds", value_name = "ADDR", requires = "server")]
    pub xds: Option<std::net::SocketAddr>,
    /// The DNS listener (UDP) of the `--server`, e.g. 127.0.0.1:8600, for the convergence
    /// workload's commit→DNS-answer probe (`--spawn` knows its own); its domain must be the
    /// default `muster.` and its tenant `default`.
    #[arg(long = "dns", value_name = "ADDR", requires = "server")]
    pub dns: Option<std::net::SocketAddr>,
    /// With --spawn: also start a second `muster serve` with its API over TLS (a throwaway CA
    /// made in memory), run the same workloads against it over keep-alive TLS connections
    /// (as `muster+tls+auth`: TLS and `[auth] enabled = true`, a bootstrapped token on every request), and measure the TLS handshake rate (`handshake`).
    #[arg(long)]
    pub tls: bool,
    /// The storm workloads' sizes (`--fleet`, `--cold-services`).
    #[command(flatten)]
    pub storm: crate::storms::StormArgs,
    /// The scale workload's sizes (`--endpoints`).
    #[command(flatten)]
    pub scale: crate::scale::ScaleArgs,
    /// Endpoints region a holds and region b mirrors, for the mirror workload [default:
    /// 10000; --quick: 1000].
    #[arg(long, value_name = "N")]
    pub mirror_endpoints: Option<u64>,
    /// Changes a second in region a during the mirror workload.
    #[arg(long, value_name = "N", default_value_t = crate::mirror::DEFAULT_RATE)]
    pub mirror_rate: u64,
    /// A short run for CI: 2 s per workload, 1,000 watchers, 5 changes.
    #[arg(long)]
    pub quick: bool,
    /// Also write the report as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub report_file: Option<PathBuf>,
}

/// A read's `consistency=` (SPEC R3), as the server spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReadConsistency {
    /// Whatever the node serving it has applied.
    Stale,
    /// The node's state if it is in touch with a leader (what a read without it gets).
    Default,
    /// Linearizable on any node (a read index round).
    Consistent,
}

impl ReadConsistency {
    /// The query parameter's value.
    pub fn name(self) -> &'static str {
        match self {
            ReadConsistency::Stale => "stale",
            ReadConsistency::Default => "default",
            ReadConsistency::Consistent => "consistent",
        }
    }
}

/// What a run will do, with every default resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Plan {
    /// The workloads, in running order.
    pub workloads: Vec<Workload>,
    /// Connections for request workloads.
    pub connections: usize,
    /// Time bound of each request workload, per system.
    #[serde(serialize_with = "crate::report::as_secs")]
    pub duration: Duration,
    /// Count bound of each request workload, per system.
    pub max_requests: u64,
    /// Watch streams for fanout and watchers.
    pub watchers: usize,
    /// Fanout changes.
    pub changes: usize,
    /// Pause between fanout changes.
    #[serde(serialize_with = "crate::report::as_secs")]
    pub change_interval: Duration,
    /// Leases renewed.
    pub leases: usize,
    /// Services registered into.
    pub services: usize,
    /// Endpoints with checks in the checks workload.
    pub checks: usize,
    /// The checks workload's measuring window.
    #[serde(serialize_with = "crate::report::as_secs")]
    pub check_window: Duration,
    /// Detections per check kind.
    pub detection_samples: usize,
    /// Services (and blocking queries) of the consul workload.
    pub consul_services: usize,
    /// ADS streams of the xds workload.
    pub xds_streams: usize,
    /// Connections they share (`None`: one each).
    pub xds_connections: Option<usize>,
    /// HTTP/2 connections the watch streams share (`None`: an HTTP/1.1 connection each).
    pub watch_connections: Option<usize>,
    /// The exceptional-load workloads' sizes (reconnect, evacuation, expiry, hotcold).
    pub storms: crate::storms::StormPlan,
    /// Fleet sizes of the scale workload, ascending.
    pub endpoints: Vec<u64>,
    /// Every node the read workload spreads over (`--servers`); empty: the one server.
    pub read_servers: Vec<String>,
    /// The read workload's `consistency=`; `None`: not sent.
    pub read_consistency: Option<ReadConsistency>,
}

/// Leases the renew workload renews round-robin.
const DEFAULT_LEASES: usize = 1_000;
/// Per-workload duration of a full run: long enough for p99 to settle over ~10^5 requests.
const DEFAULT_DURATION: Duration = Duration::from_secs(10);
/// The fanout scale: one service watched by 10,000 clients.
const DEFAULT_WATCHERS: usize = 10_000;
/// 20 changes give 200,000 deliveries at the default scale: enough for a stable p99.
const DEFAULT_CHANGES: usize = 20;
/// `--quick`: the whole run stays around half a minute on a CI machine.
const QUICK_DURATION: Duration = Duration::from_secs(2);
/// `--quick`: a tenth of the watchers; they open in well under a second.
const QUICK_WATCHERS: usize = 1_000;
/// `--quick`: enough changes for a median, not for a tail.
const QUICK_CHANGES: usize = 5;

impl BenchArgs {
    /// Resolves the defaults (`--quick` changes them; explicit flags win) and checks the counts.
    pub fn plan(&self) -> Result<Plan, BenchError> {
        let mut workloads = if self.workloads.is_empty() {
            let mut all = Workload::ALL.to_vec();
            if self.tls {
                all.push(Workload::Handshake);
            }
            all
        } else {
            self.workloads.clone()
        };
        workloads.sort();
        workloads.dedup();
        let (duration, watchers, changes) = if self.quick {
            (QUICK_DURATION, QUICK_WATCHERS, QUICK_CHANGES)
        } else {
            (DEFAULT_DURATION, DEFAULT_WATCHERS, DEFAULT_CHANGES)
        };
        let (checks, check_window, detection_samples) = if self.quick {
            (1_000, Duration::from_secs(5), 1)
        } else {
            (10_000, Duration::from_secs(30), 3)
        };
        let plan = Plan {
            workloads,
            connections: self.connections,
            duration: self.duration.unwrap_or(duration),
            max_requests: self.max_requests,
            watchers: self.watchers.unwrap_or(watchers),
            changes: self.changes.unwrap_or(changes),
            change_interval: self.change_interval,
            leases: self.leases.unwrap_or(DEFAULT_LEASES),
            services: self.services,
            checks: self.checks.unwrap_or(checks),
            check_window: self.check_window.unwrap_or(check_window),
            detection_samples: self.detection_samples.unwrap_or(detection_samples),
            consul_services: self.consul_services,
            xds_streams: self.xds_streams,
            xds_connections: self.xds_connections,
            watch_connections: self.watch_connections,
            storms: crate::storms::StormPlan::resolve(self)?,
            endpoints: crate::scale::resolve_sizes(self.scale.endpoints.as_deref(), self.quick)?,
            read_servers: if self.servers.len() > 1 {
                self.servers.clone()
            } else {
                Vec::new()
            },
            read_consistency: self.consistency,
        };
        for (name, value) in [
            ("--connections", plan.connections),
            ("--watchers", plan.watchers),
            ("--changes", plan.changes),
            ("--leases", plan.leases),
            ("--services", plan.services),
            ("--checks", plan.checks),
            ("--detection-samples", plan.detection_samples),
            ("--consul-services", plan.consul_services),
            ("--xds-streams", plan.xds_streams),
            ("--xds-connections", plan.xds_connections.unwrap_or(1)),
            ("--watch-connections", plan.watch_connections.unwrap_or(1)),
        ] {
            if value == 0 {
                return Err(BenchError::Usage(format!("{name} must be at least 1")));
            }
        }
        if self.tls && !self.spawn {
            return Err(BenchError::Usage(
                "--tls needs --spawn: the bench starts the TLS server itself".into(),
            ));
        }
        crate::storms::check(self, &plan)?;
        if plan.workloads.contains(&Workload::Scale) && !self.spawn {
            return Err(BenchError::Usage(
                "the scale workload needs --spawn: it stops and restarts the server it grows".into(),
            ));
        }
        if plan.workloads.contains(&Workload::Soak) && !self.spawn {
            return Err(BenchError::Usage(
                "the soak workload needs --spawn: it starts a 3-node cluster of its own and stops its leaders".into(),
            ));
        }
        if plan.workloads.contains(&Workload::Mirror) {
            if !self.spawn {
                return Err(BenchError::Usage(
                    "the mirror workload needs --spawn: it starts two regions of its own".into(),
                ));
            }
            if self.mirror_endpoints == Some(0) || self.mirror_rate == 0 || self.mirror_rate > 10_000 {
                return Err(BenchError::Usage(
                    "--mirror-endpoints must be at least 1 and --mirror-rate 1 to 10000".into(),
                ));
            }
        }
        if plan.duration.is_zero() || plan.max_requests == 0 {
            return Err(BenchError::Usage(
                "--duration and --max-requests must be above 0".into(),
            ));
        }
        Ok(plan)
    }
}

/// Parses `10s`, `500ms`, `2m`, `1.5s` or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("'{text}' is not a duration (try 10s, 500ms, 2m)"))?;
    let seconds = match unit {
        "" | "s" => value,
        "ms" => value / 1_000.0,
        "m" => value * 60.0,
        _ => return Err(format!("'{text}': unknown unit '{unit}' (use ms, s or m)")),
    };
    Duration::try_from_secs_f64(seconds).map_err(|_| format!("'{text}' is out of range"))
}

#[cfg(test)]
#[path = "args_tests.rs"]
mod tests;
