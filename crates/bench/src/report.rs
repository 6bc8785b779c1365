//! The report: per workload and system, requests, errors, throughput, latency percentiles
//! or memory per watcher, the Muster/etcd ratio, and the issue's target next to it. Targets
//! are reported (met / not met), never asserted. Pure: rendering and math only.
//!
//! ```text
//!  driver / watch ──▶ SystemResult ──▶ WorkloadReport (target, ratio) ──▶ Report
//!                                                       (rendered in `render`: table, JSON)
//! ```

use std::time::Duration;

use serde::{Serialize, Serializer};

use crate::checks::ChecksSummary;
use crate::consul::ConsulSummary;
use crate::convergence::ConvergenceSummary;
use crate::histogram::Histogram;
use crate::render::thousands;
use crate::scale::ScaleSummary;
use crate::storms::StormSummary;
use crate::xds::XdsSummary;
use crate::{Plan, Workload};

/// Which system a result is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum System {
    /// The Muster server.
    Muster,
    /// etcd 3.4 through its JSON gateway.
    Etcd,
    /// A second Muster server of the same build, its API over TLS (`--tls`), loaded over
    /// keep-alive connections like the plain one.
    MusterTls,
}

impl System {
    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            System::Muster => "muster",
            System::Etcd => "etcd",
            System::MusterTls => "muster+tls+auth",
        }
    }
}

/// A workload's target from the issue, and which figure it judges.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    /// Successful requests per second, at least.
    MinThroughput {
        /// Requests per second.
        per_second: f64,
    },
    /// p99 of commit→delivery, at most.
    MaxP99 {
        /// Milliseconds.
        ms: f64,
    },
    /// Server RSS growth per idle watcher, at most.
    MaxBytesPerWatcher {
        /// Bytes.
        bytes: f64,
    },
    /// No target: the figure is reported (the TLS handshake rate).
    Reported,
    /// Every second's probe count within this fraction of the fleet's rate, and the server
    /// under this many cores.
    ProbeSchedule {
        /// Largest relative deviation of one second from endpoints ÷ interval.
        tolerance: f64,
        /// Server CPU, in cores.
        max_cores: f64,
    },
    /// The xDS figures (SPEC D5): p99 commit-to-push and commit-to-ACK, and memory per idle
    /// stream, each at most its limit.
    XdsConvergence {
        /// p99 write sent → push received, milliseconds.
        push_p99_ms: f64,
        /// p99 write sent → ACK recorded by the server, milliseconds.
        ack_p99_ms: f64,
        /// Server RSS growth per idle ADS stream, KiB.
        kib_per_stream: f64,
    },
}

impl Target {
    /// The issue's target for `workload` (SPEC D1, U1, "Performance").
    pub fn for_workload(workload: Workload) -> Target {
        match workload {
            Workload::Register => Target::MinThroughput { per_second: 20_000.0 },
            Workload::Renew => Target::MinThroughput { per_second: 50_000.0 },
            Workload::Read => Target::MinThroughput { per_second: 60_000.0 },
            Workload::Fanout => Target::MaxP99 { ms: 50.0 },
            Workload::Watchers => Target::MaxBytesPerWatcher { bytes: 20.0 * 1024.0 },
            Workload::Checks => Target::ProbeSchedule {
                tolerance: 0.2,
                max_cores: 0.5,
            },
            Workload::Handshake | Workload::Consul | Workload::Convergence => Target::Reported,
            Workload::Reconnect | Workload::Evacuation | Workload::Expiry | Workload::Hotcold => Target::Reported,
            Workload::Scale | Workload::Mirror | Workload::Soak => Target::Reported,
            Workload::Xds => Target::XdsConvergence {
                push_p99_ms: 50.0,
                ack_p99_ms: 100.0,
                kib_per_stream: 30.0,
            },
        }
    }

    /// The figure of `result` this target judges.
    pub fn figure(&self, result: &SystemResult) -> Option<f64> {
        match self {
            Target::MinThroughput { .. } => Some(result.throughput_per_s),
            Target::Reported => None,
            Target::MaxP99 { .. } => result.latency.as_ref().map(|l| l.p99_ms),
            Target::MaxBytesPerWatcher { .. } => result.memory.as_ref().map(|m| m.per_watcher_bytes),
            // One figure for two limits: the larger of deviation ÷ tolerance and cores ÷ limit
            // (at most 1 when both are met); the notes give both.
            Target::ProbeSchedule { tolerance, max_cores } => {
                let checks = result.checks.as_ref()?;
                let cores = result.server_cores?;
                Some((checks.max_deviation / tolerance).max(cores / max_cores))
            }
            // Likewise: the largest figure ÷ its limit; memory only when the PID was known.
            Target::XdsConvergence {
                push_p99_ms,
                ack_p99_ms,
                kib_per_stream,
            } => {
                let xds = result.xds.as_ref()?;
                let push = xds.push?.p99_ms / push_p99_ms;
                let ack = xds.ack?.p99_ms / ack_p99_ms;
                let memory = xds.kib_per_stream.map_or(0.0, |kib| kib / kib_per_stream);
                Some(push.max(ack).max(memory))
            }
        }
    }

    /// Whether `figure` meets the target.
    pub fn is_met(&self, figure: f64) -> bool {
        match *self {
            Target::MinThroughput { per_second } => figure >= per_second,
            Target::MaxP99 { ms } => figure <= ms,
            Target::MaxBytesPerWatcher { bytes } => figure <= bytes,
            Target::ProbeSchedule { .. } | Target::XdsConvergence { .. } => figure <= 1.0,
            Target::Reported => true,
        }
    }

    /// E.g. `≥ 20,000/s`.
    pub fn describe(&self) -> String {
        match *self {
            Target::MinThroughput { per_second } => format!("≥ {}/s", thousands(per_second as u64)),
            Target::MaxP99 { ms } => format!("p99 ≤ {ms} ms"),
            Target::Reported => "reported, no target".to_owned(),
            Target::MaxBytesPerWatcher { bytes } => format!("≤ {} KiB/watcher", bytes / 1024.0),
            Target::ProbeSchedule { tolerance, max_cores } => {
                format!("probes/s within ±{:.0}%, server < {max_cores} core", tolerance * 100.0)
            }
            Target::XdsConvergence {
                push_p99_ms,
                ack_p99_ms,
                kib_per_stream,
            } => format!("push p99 ≤ {push_p99_ms} ms, ACK p99 ≤ {ack_p99_ms} ms, ≤ {kib_per_stream} KiB/stream"),
        }
    }
}

/// The figures the issue quotes for comparison (measured with wrk, 64 connections, same box).
pub fn anchors(workload: Workload) -> &'static str {
    match workload {
        Workload::Register => "etcd 3.4 ≈ 6,600 puts/s; a Rust Nacos 44,000/s (in memory, not durable)",
        Workload::Renew => "etcd 3.4 ≈ 5,500 keepalives/s; the Rust Nacos 35,000 beats/s",
        Workload::Read => "the Rust Nacos 48,000/s",
        Workload::Fanout => "10,000 watchers of one service",
        Workload::Watchers => "etcd publishes ≈ 35 KiB per connection+stream",
        Workload::Checks => "10,000 endpoints with HTTP checks at 10 s: 1,000 probes/s; etcd has no checks",
        Workload::Handshake => "new TLS connections per second, each a full handshake (no resumption) and one request",
        Workload::Consul => {
            "Consul wakes every blocking query on any write in the datacenter: one wake-up per waiter per change"
        }
        Workload::Xds => {
            "1,000 ADS streams of one service: one endpoint change → p99 commit-to-push ≤ 50 ms, ≤ 100 ms to ACK; \
             ≤ 30 KiB per idle stream"
        }
        Workload::Reconnect | Workload::Evacuation | Workload::Expiry | Workload::Hotcold => {
            crate::storms::anchor(workload)
        }
        Workload::Scale => {
            "how cost grows with size (SPEC K1, R5): fill rate, registration p50/p99, RSS per endpoint, restart \
             and a new member's catch-up at each --endpoints size"
        }
        Workload::Mirror => {
            "10,000 mirrored endpoints under 100 changes/s: mirror lag p99 (source commit → visible in the \
             importing region) and memory per mirrored endpoint (SPEC G2)"
        }
        Workload::Soak => {
            "a 3-node cluster under a steady mix with a leader change every few minutes: RSS, files and \
             threads per node each minute (flat after warm-up), nothing acknowledged lost (SPEC R5, R6)"
        }
        Workload::Convergence => {
            "10,000 watch clients of one service: p50/p99/p999 commit→applied (the server's ledger) \
             and commit→DNS-answer per change"
        }
    }
}

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LatencySummary {
    /// Median.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Largest.
    pub max_ms: f64,
    /// Mean.
    pub mean_ms: f64,
    /// For closed-loop request workloads: the 99th percentile corrected for coordinated
    /// omission ([`Histogram::corrected`], the expected interval being the mean latency, a
    /// worker's own cadence): what a caller arriving at a steady rate would have seen.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p99_corrected_ms: Option<f64>,
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1_000.0
}

impl LatencySummary {
    /// The summary of `histogram`; `None` when it is empty.
    pub fn of(histogram: &Histogram) -> Option<LatencySummary> {
        Some(LatencySummary {
            p50_ms: ms(histogram.quantile(0.50)?),
            p99_ms: ms(histogram.quantile(0.99)?),
            max_ms: ms(histogram.max()?),
            mean_ms: ms(histogram.mean()?),
            p99_corrected_ms: None,
        })
    }

    /// The summary of a closed-loop run's latencies, with the corrected p99.
    pub fn of_closed_loop(histogram: &Histogram) -> Option<LatencySummary> {
        let mut summary = LatencySummary::of(histogram)?;
        let corrected = histogram.corrected(histogram.mean()?);
        summary.p99_corrected_ms = corrected.quantile(0.99).map(ms);
        Some(summary)
    }
}

/// Server memory before and after opening idle watchers.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MemorySummary {
    /// Watch streams open when `rss_after_bytes` was read.
    pub watchers: u64,
    /// Server RSS before opening them.
    pub rss_before_bytes: u64,
    /// Server RSS with all of them open and idle.
    pub rss_after_bytes: u64,
    /// Growth divided by `watchers` (0 if RSS shrank).
    pub per_watcher_bytes: f64,
}

impl MemorySummary {
    /// The per-watcher growth from two RSS readings.
    pub fn new(watchers: u64, rss_before_bytes: u64, rss_after_bytes: u64) -> MemorySummary {
        let growth = rss_after_bytes.saturating_sub(rss_before_bytes);
        MemorySummary {
            watchers,
            rss_before_bytes,
            rss_after_bytes,
            per_watcher_bytes: if watchers == 0 {
                0.0
            } else {
                growth as f64 / watchers as f64
            },
        }
    }
}

/// One system's figures for one workload.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SystemResult {
    /// Which system.
    pub system: System,
    /// Operations attempted (requests; for fanout, expected deliveries; for watchers, streams).
    pub requests: u64,
    /// Operations that failed (error status, transport error, timeout, missed delivery).
    pub errors: u64,
    /// Wall time of the measured phase.
    #[serde(serialize_with = "as_secs")]
    pub elapsed: Duration,
    /// Successful operations per second of `elapsed`.
    pub throughput_per_s: f64,
    /// Latency of successful operations.
    pub latency: Option<LatencySummary>,
    /// For the watchers workload.
    pub memory: Option<MemorySummary>,
    /// CPU the system under test used in the measured phase, in cores (CPU s ÷ wall s), when
    /// its PID is known: on a machine shared with the load generator this says who was busy.
    pub server_cores: Option<f64>,
    /// CPU the load generator (this process) used in the measured phase, in cores.
    pub client_cores: Option<f64>,
    /// Anything the reader should know (e.g. why a figure is missing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// For the checks workload.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checks: Option<ChecksSummary>,
    /// For the consul workload.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consul: Option<ConsulSummary>,
    /// For the xds workload.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub xds: Option<XdsSummary>,
    /// For the convergence workload.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub convergence: Option<ConvergenceSummary>,
    /// For the storm workloads (reconnect, evacuation, expiry, hotcold).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub storm: Option<StormSummary>,
    /// For the scale workload.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale: Option<ScaleSummary>,
}

impl SystemResult {
    /// The figures of a request workload.
    pub fn from_requests(system: System, requests: u64, errors: u64, elapsed: Duration, ok: &Histogram) -> Self {
        let secs = elapsed.as_secs_f64();
        SystemResult {
            system,
            requests,
            errors,
            elapsed,
            throughput_per_s: if secs > 0.0 { ok.count() as f64 / secs } else { 0.0 },
            latency: LatencySummary::of(ok),
            memory: None,
            server_cores: None,
            client_cores: None,
            note: None,
            checks: None,
            consul: None,
            xds: None,
            convergence: None,
            storm: None,
            scale: None,
        }
    }
}

/// One workload: its target and each system's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkloadReport {
    /// Which workload.
    pub workload: Workload,
    /// The issue's target (for Muster).
    pub target: Target,
    /// Figures per system, Muster first.
    pub results: Vec<SystemResult>,
    /// Muster's figure divided by etcd's, on the figure the target judges.
    pub ratio_muster_to_etcd: Option<f64>,
    /// Whether Muster meets the target (reported, never asserted).
    pub target_met: Option<bool>,
    /// Systems skipped and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
    /// The 1-minute load average when the workload ended (over its run, roughly): on a shared
    /// machine it tells how much else competed with the figures.
    pub load_average_at_end: Option<f64>,
}

impl WorkloadReport {
    /// Computes the ratio and the verdict from `results`.
    pub fn new(workload: Workload, results: Vec<SystemResult>, skipped: Vec<String>) -> WorkloadReport {
        let target = Target::for_workload(workload);
        let figure = |system| {
            results
                .iter()
                .find(|r| r.system == system)
                .and_then(|r| target.figure(r))
        };
        let muster = figure(System::Muster);
        let ratio = match (muster, figure(System::Etcd)) {
            (Some(m), Some(e)) if e > 0.0 => Some(m / e),
            _ => None,
        };
        WorkloadReport {
            workload,
            target,
            target_met: muster.map(|m| target.is_met(m)),
            results,
            ratio_muster_to_etcd: ratio,
            skipped,
            load_average_at_end: None,
        }
    }
}

/// Where a system under test was.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SystemInfo {
    /// Which system.
    pub system: System,
    /// Its base URL.
    pub url: String,
    /// Whether the bench started it.
    pub spawned: bool,
    /// Its PID, when known (needed for memory figures).
    pub pid: Option<u32>,
}

/// Everything one run measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// The resolved flags.
    pub plan: Plan,
    /// The systems loaded.
    pub systems: Vec<SystemInfo>,
    /// CPUs of this machine (shared by the load generator and the systems under test).
    pub cpus: usize,
    /// The 1-minute load average when the run started: other work on the machine skews
    /// every figure.
    pub load_average_at_start: Option<f64>,
    /// One entry per workload run.
    pub workloads: Vec<WorkloadReport>,
}

/// Serializes a duration as fractional seconds.
pub(crate) fn as_secs<S: Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_f64(duration.as_secs_f64())
}

#[cfg(test)]
#[path = "report_tests.rs"]
mod tests;
