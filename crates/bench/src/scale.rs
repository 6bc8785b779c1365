//! The scale workload: how cost grows with size (SPEC K1, R5). One server is grown to each
//! `--endpoints` size in turn, and at each size the bench measures what the next endpoint,
//! a restart and a new member cost there.
//!
//! ```text
//!  spawn a one-member cluster (node 1, --peers 1=self, a cluster secret: it can grow)
//!   for each size N (ascending):
//!     fill      concurrent PUTs of new instances up to N, 1,000 per service  ─▶ fill rate
//!     probe     a bounded closed-loop run of new registrations     ─▶ p50, p99, p99 CO
//!     memory    VmRSS of the server                                 ─▶ RSS, bytes/endpoint
//!     catch-up  start node k, POST /v1/cluster/members; until it has applied the leader's
//!               index and serves the last service's set             ─▶ time, snapshot or log
//!               then DELETE the member and stop it (one voter again)
//!     restart   SIGTERM, start again on the same data dir and ports; until ready and the
//!               last service reads whole at its revision            ─▶ after a clean stop
//!               SIGKILL, the same                                   ─▶ after kill -9
//! ```
//!
//! # Cost model
//! A node keeps the registry in memory and its durable state is a snapshot plus the log after
//! it. A restart reads the snapshot and replays at most [`SNAPSHOT_EVERY`] entries (a clean
//! stop writes no snapshot of its own, so both restarts replay the same tail; the clean one
//! differs by the graceful stop before it). A new member gets the leader's snapshot once the
//! log before it is purged, which openraft does up to 1,000 entries (its
//! `max_in_snapshot_log_to_keep`, not a `muster serve` setting) short of the snapshot; a
//! younger log is replayed to it instead. Each size's row says which happened.
//!
//! This module is the pure part (sizes, figures, the server's config); the I/O shell is in
//! `scale/run.rs` and `scale/member.rs`, the table in `scale/table.rs`.

mod member;
mod run;
mod table;

use serde::Serialize;

use crate::report::LatencySummary;

pub(crate) use run::{scale, soak_cluster};
pub(crate) use table::scale_notes;

/// Instances per service while filling: a large deployment's replica count, so 1,000,000
/// endpoints are 1,000 services, a tenth of the default `services_per_tenant`, and no service
/// comes near the default `endpoints_per_service` (50,000).
pub(crate) const ENDPOINTS_PER_SERVICE: u64 = 1_000;

/// Log entries between snapshots on the scale server (the server's default is 10,000). The
/// fill's group commit puts ~55 registrations in one entry (release, 128 connections:
/// 110,000 endpoints were 1,994 entries, 1,010,131 were 16,940), so a default server first
/// snapshots near 550,000 endpoints. At 1,000 a snapshot comes every ~55,000 endpoints and a
/// restart replays at most 1,000 entries; a new member installs a snapshot once the log is
/// past 2,000 entries (the 1,000 openraft keeps before a snapshot), which the fill reaches
/// just past 110,000 endpoints: 1,000,000 take the snapshot path, 100,000 still the log.
/// Lower would snapshot a large registry more often than the fill can afford (a snapshot of
/// 10^6 endpoints is 400 MiB of JSON).
pub(crate) const SNAPSHOT_EVERY: u64 = 1_000;

/// The largest fleet size: the fill's addresses (`10.x.y.z` from 24 bits of the endpoint's
/// number, see `Names::endpoint`) stay distinct up to 16.7 M, and 10 M endpoints are the
/// default `services_per_tenant` (10,000) of 1,000 each.
pub const MAX_SIZE: u64 = 10_000_000;

/// Sizes of a full run: two decades, in about 20 s in release (10^6 more: 2.5 min).
const DEFAULT_SIZES: [u64; 2] = [10_000, 100_000];

/// `--quick`: two small sizes, the whole workload in a few seconds in release.
const QUICK_SIZES: [u64; 2] = [2_000, 10_000];

/// The probe at each size registers at most this many, or a tenth of the size if more: enough
/// for a p99, while the fleet grows by at most 10 % past the size it is measured at.
const MIN_PROBE_REGISTRATIONS: u64 = 1_000;

/// Why `--endpoints` names no run of sizes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SizesError {
    /// No size at all.
    #[error("--endpoints: give at least one fleet size, e.g. 10000,100000")]
    Empty,
    /// A size that is not a whole number (with an optional `k` or `m`).
    #[error("--endpoints: '{0}' is not a number of endpoints (e.g. 10000, 100k, 1m)")]
    NotANumber(String),
    /// A size of zero.
    #[error("--endpoints: a fleet size must be at least 1")]
    Zero,
    /// A size not above the one before it: the fleet only grows.
    #[error("--endpoints: sizes must ascend (the fleet only grows), but {next} follows {previous}")]
    NotAscending {
        /// The size before.
        previous: u64,
        /// The size after it.
        next: u64,
    },
    /// A size past [`MAX_SIZE`].
    #[error("--endpoints: {0} is past the largest size the bench can name, {MAX_SIZE}")]
    TooLarge(u64),
}

/// Parses `10000,100000,1m`: sizes separated by commas, each a whole number, `_` allowed
/// between digits, with an optional `k` (×1,000) or `m` (×1,000,000); strictly ascending.
pub fn parse_sizes(text: &str) -> Result<Vec<u64>, SizesError> {
    let mut sizes: Vec<u64> = Vec::new();
    for item in text.split(',').map(str::trim) {
        if item.is_empty() {
            if text.trim().is_empty() {
                return Err(SizesError::Empty);
            }
            return Err(SizesError::NotANumber(item.to_owned()));
        }
        let lower = item.to_ascii_lowercase();
        let (digits, scale) = match lower.strip_suffix('k') {
            Some(digits) => (digits, 1_000),
            None => match lower.strip_suffix('m') {
                Some(digits) => (digits, 1_000_000),
                None => (lower.as_str(), 1),
            },
        };
        let not_a_number = || SizesError::NotANumber(item.to_owned());
        if digits.is_empty() || digits.starts_with('_') || !digits.chars().all(|c| c.is_ascii_digit() || c == '_') {
            return Err(not_a_number());
        }
        let size = digits
            .replace('_', "")
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(scale))
            .ok_or(SizesError::TooLarge(u64::MAX))?;
        if size == 0 {
            return Err(SizesError::Zero);
        }
        if size > MAX_SIZE {
            return Err(SizesError::TooLarge(size));
        }
        if let Some(&previous) = sizes.last()
            && size <= previous
        {
            return Err(SizesError::NotAscending { previous, next: size });
        }
        sizes.push(size);
    }
    Ok(sizes)
}

/// The scale workload's own flag, flattened into `muster bench`'s ([`crate::BenchArgs`]).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ScaleArgs {
    /// Fleet sizes the scale workload grows its server to and measures at, ascending
    /// (`10000,100000,1m`; `k` and `m` suffixes) [default: 10000,100000; --quick: 2000,10000].
    #[arg(long, value_name = "LIST")]
    pub endpoints: Option<String>,
}

/// The plan's sizes: `--endpoints` if given, else the default (or `--quick`'s).
pub(crate) fn resolve_sizes(flag: Option<&str>, quick: bool) -> Result<Vec<u64>, SizesError> {
    match flag {
        Some(text) => parse_sizes(text),
        None if quick => Ok(QUICK_SIZES.to_vec()),
        None => Ok(DEFAULT_SIZES.to_vec()),
    }
}

/// Registrations the probe at `size` may make: a tenth of it, at least 1,000.
pub(crate) fn probe_budget(size: u64) -> u64 {
    (size / 10).max(MIN_PROBE_REGISTRATIONS)
}

/// The tenant's endpoint quota for a run up to `largest`: the largest size and its probe,
/// plus one probe more, so no registration of the run meets the quota (the default,
/// 1,000,000, would refuse the probe at 1,000,000).
pub(crate) fn tenant_quota(largest: u64) -> u64 {
    largest + 2 * probe_budget(largest)
}

/// The service endpoint `n` of the fill belongs to.
pub(crate) fn service_of(n: u64) -> String {
    format!("svc-{}", n / ENDPOINTS_PER_SERVICE)
}

/// The scale server's config file: the raised endpoint quota, [`SNAPSHOT_EVERY`], and no
/// DNS or Consul listener (two ports fewer to keep across restarts; neither is measured).
pub(crate) fn server_config(largest: u64) -> String {
    let quota = tenant_quota(largest);
    let services = quota.div_ceil(ENDPOINTS_PER_SERVICE).max(10_000);
    format!(
        "snapshot_every = {SNAPSHOT_EVERY}\ndns_enabled = false\n\n[consul]\nenabled = false\n\n\
         [registry.quotas]\nendpoints_per_tenant = {quota}\nservices_per_tenant = {services}\n"
    )
}

/// Log entries openraft keeps before a snapshot when it purges the log after it
/// (`max_in_snapshot_log_to_keep`: `muster serve` sets `keep_after_snapshot` to
/// `snapshot_every` + 1,000, so the log reaches back past the previous snapshot).
pub(crate) const KEPT_BEFORE_SNAPSHOT: u64 = SNAPSHOT_EVERY + 1_000;

/// How a new member caught up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CatchUpPath {
    /// It installed the leader's snapshot: the log's start was purged.
    Snapshot,
    /// The leader sent it the whole log.
    Log,
}

impl CatchUpPath {
    /// The path a new member must take when the leader's snapshot covers `snapshot_index`:
    /// the log up to [`KEPT_BEFORE_SNAPSHOT`] entries short of it is purged, so past that
    /// index entry 1 is gone and only the snapshot can start the new member.
    pub fn of(snapshot_index: Option<u64>) -> CatchUpPath {
        match snapshot_index {
            Some(index) if index > KEPT_BEFORE_SNAPSHOT => CatchUpPath::Snapshot,
            _ => CatchUpPath::Log,
        }
    }
}

/// The log index a snapshot file covers, from its head (`{"meta":{"last_log_id":{...,
/// "index":N}`: the metadata is serialized first); `None` if the head does not say.
pub(crate) fn snapshot_index(head: &str) -> Option<u64> {
    let after = &head[head.find("\"last_log_id\":{")?..];
    let digits = &after[after.find("\"index\":")? + "\"index\":".len()..];
    let end = digits.find(|c: char| !c.is_ascii_digit()).unwrap_or(digits.len());
    digits[..end].parse().ok()
}

/// Milliseconds of a duration.
pub(crate) fn millis(duration: std::time::Duration) -> f64 {
    duration.as_secs_f64() * 1_000.0
}

/// The figures at one fleet size.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScaleSize {
    /// The size asked for (`--endpoints`).
    pub size: u64,
    /// Endpoints in the registry when the figures below were read (the size and the probe's
    /// registrations, less failures).
    pub endpoints: u64,
    /// Services they are spread over.
    pub services: u64,
    /// Registrations the fill made to reach the size from the previous one.
    pub filled: u64,
    /// Fill registrations that failed.
    pub fill_errors: u64,
    /// How long the fill took, seconds.
    pub fill_seconds: f64,
    /// Successful fill registrations per second.
    pub fill_per_s: f64,
    /// Registrations of the probe.
    pub probe_requests: u64,
    /// Probe registrations that failed.
    pub probe_errors: u64,
    /// Registration latency at this size (the probe's), with the CO-corrected p99.
    pub registration: Option<LatencySummary>,
    /// Server RSS at this size.
    pub rss_bytes: Option<u64>,
    /// RSS growth since the empty server, per endpoint.
    pub bytes_per_endpoint: Option<f64>,
    /// The leader's applied log index at this size (entries; several registrations each).
    pub log_index: Option<u64>,
    /// The leader's snapshot file (`snapshot.json`) at this size, bytes; `None`: none yet.
    pub snapshot_bytes: Option<u64>,
    /// The log index that snapshot covers.
    pub snapshot_index: Option<u64>,
    /// SIGTERM → the process exited (the graceful stop).
    pub stop_ms: Option<f64>,
    /// Start after a clean stop → ready and the last service read whole at its revision.
    pub restart_after_stop_ms: Option<f64>,
    /// The same after SIGKILL.
    pub restart_after_kill_ms: Option<f64>,
    /// `POST /v1/cluster/members` sent → it returned (the new node is a voter).
    pub member_added_ms: Option<f64>,
    /// `POST /v1/cluster/members` sent → the new node applied the leader's index and serves
    /// the last service's set.
    pub catch_up_ms: Option<f64>,
    /// How it caught up.
    pub catch_up_path: Option<CatchUpPath>,
    /// The load average when this size started and when it ended.
    #[serde(flatten)]
    pub load: crate::LoadSpan,
    /// What went wrong or is worth knowing at this size.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl ScaleSize {
    /// A size with nothing measured yet.
    pub fn new(size: u64) -> ScaleSize {
        ScaleSize {
            size,
            endpoints: 0,
            services: 0,
            filled: 0,
            fill_errors: 0,
            fill_seconds: 0.0,
            fill_per_s: 0.0,
            probe_requests: 0,
            probe_errors: 0,
            registration: None,
            rss_bytes: None,
            bytes_per_endpoint: None,
            log_index: None,
            snapshot_bytes: None,
            snapshot_index: None,
            stop_ms: None,
            restart_after_stop_ms: None,
            restart_after_kill_ms: None,
            member_added_ms: None,
            catch_up_ms: None,
            catch_up_path: None,
            load: crate::LoadSpan::default(),
            notes: Vec::new(),
        }
    }

    /// Records the fill: `attempted` registrations, `errors` of them failed, in `elapsed`.
    pub fn set_fill(&mut self, attempted: u64, errors: u64, elapsed: std::time::Duration) {
        self.filled = attempted;
        self.fill_errors = errors;
        self.fill_seconds = elapsed.as_secs_f64();
        let ok = attempted.saturating_sub(errors);
        self.fill_per_s = if self.fill_seconds > 0.0 {
            ok as f64 / self.fill_seconds
        } else {
            0.0
        };
    }

    /// Records the memory: RSS now, against the empty server's.
    pub fn set_memory(&mut self, rss_bytes: u64, baseline_bytes: Option<u64>) {
        self.rss_bytes = Some(rss_bytes);
        self.bytes_per_endpoint = baseline_bytes
            .filter(|_| self.endpoints > 0)
            .map(|baseline| rss_bytes.saturating_sub(baseline) as f64 / self.endpoints as f64);
    }
}

/// The scale workload's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScaleSummary {
    /// The scale server's HTTP API.
    pub url: String,
    /// Its PID at the first start (each restart gets a new one).
    pub pid: u32,
    /// Instances per service in the fill.
    pub endpoints_per_service: u64,
    /// Log entries between snapshots on the scale server.
    pub snapshot_every: u64,
    /// Concurrent registrations of the fill.
    pub fill_connections: usize,
    /// Concurrent registrations of the probe (`--connections`).
    pub probe_connections: usize,
    /// The probe's time bound per size, seconds.
    pub probe_seconds: f64,
    /// Server RSS before the fill.
    pub baseline_rss_bytes: Option<u64>,
    /// One entry per size, ascending.
    pub sizes: Vec<ScaleSize>,
    /// Why the run ended before its last size (the sizes after it were not measured).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
}

#[cfg(test)]
#[path = "scale_tests.rs"]
mod tests;
