//! The exceptional-load workloads (SPEC K1, W3, W4; control-plane-state "Size the exceptional
//! paths"): the loads normal churn hides, each its own opt-in workload, Muster only, each on
//! a server of its own that it starts (`--spawn`), may restart, and stops.
//!
//! ```text
//!  reconnect:  N watchers ─ kill -9, restart on the same data dir ─▶ all resume at once
//!  evacuation: fleet over 3 zones ─ one zone (30%) drained in one second ─▶ watchers
//!  expiry:     L leases ─ expire in the same second ─▶ deletes; an unrelated writer beside
//!  hotcold:    one hot service written flat out ─ beside ─▶ cold services' updates
//! ```
//! Each prints its figures in a typed summary ([`StormSummary`]) with the load average at
//! its start and end: these runs saturate a small machine, and the figures only mean
//! something next to how busy it was.

use std::time::Duration;

use serde::Serialize;

use crate::client::Http;
use crate::driver::Outcome;
use crate::report::{System, SystemResult, WorkloadReport};
use crate::spawn::{Spawned, spawn_muster};
use crate::{BenchArgs, BenchError, Plan, Workload};

mod evacuation;
mod expiry;
mod hotcold;
mod measure;
mod reconnect;
mod stream;

pub use evacuation::EvacuationSummary;
pub use expiry::ExpirySummary;
pub use hotcold::{HotColdPhase, HotColdSummary};
pub use reconnect::ReconnectSummary;

pub(crate) use measure::{
    Poller, Sample, closed_until, first_at_or_after, metrics, ms_between, revision, revision_of, tcp_counters,
};

/// The storm workloads, in running order.
const WORKLOADS: [Workload; 4] = [
    Workload::Reconnect,
    Workload::Evacuation,
    Workload::Expiry,
    Workload::Hotcold,
];

/// `--fleet` of a full run: the issue's zone-evacuation scale.
const DEFAULT_FLEET: usize = 100_000;
/// `--quick`: a twentieth, registered in well under a second.
const QUICK_FLEET: usize = 5_000;
/// `--leases` of a full expiry run.
const DEFAULT_EXPIRING_LEASES: usize = 50_000;
/// `--quick`: registered in about a second even by a debug build.
const QUICK_EXPIRING_LEASES: usize = 2_000;
/// The expiry workload's lease TTL: longer than registering every leased endpoint takes
/// (50,000 in about 3 s in release), so none expires before the burst of renewals that
/// aligns them all; the run then waits one TTL for the storm.
const DEFAULT_EXPIRY_TTL_MS: u64 = 20_000;
/// `--quick`: 2,000 leased registrations take under 2 s even in debug.
const QUICK_EXPIRY_TTL_MS: u64 = 5_000;
/// `--cold-services` of a full hotcold run.
const DEFAULT_COLD_SERVICES: usize = 1_000;
/// `--quick`: a fifth.
const QUICK_COLD_SERVICES: usize = 200;
/// Cold changes per hotcold phase: 50 at 100 ms, 5 s a phase, enough for a p99 of 50.
const DEFAULT_COLD_CHANGES: usize = 50;
/// `--quick`: 20 per phase, 2 s each.
const QUICK_COLD_CHANGES: usize = 20;
/// The server's default cap on one principal's watch streams (`max_watches_per_principal`):
/// every watcher of the bench is the same anonymous principal.
const MAX_WATCHERS: usize = 16_384;
/// Endpoints at most in one run's tenant: the default quota is 1,000,000 per tenant.
const MAX_FLEET: usize = 900_000;
/// Expiring leases at most: each takes 110 ⁄ 30 endpoints with its service's durable ones
/// (see `expiry`), inside the 1,000,000-endpoint tenant quota.
const MAX_EXPIRING_LEASES: usize = 250_000;
/// Cold services at most: the tenant quota is 10,000 services.
const MAX_COLD_SERVICES: usize = 9_000;

/// The storm workloads' own flags, flattened into `muster bench`'s ([`BenchArgs`]); the
/// shared `--watchers` and `--leases` stay there.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct StormArgs {
    /// Endpoints of the evacuation workload, over 3 zones [default: 100000; --quick: 5000].
    #[arg(long, value_name = "N")]
    pub fleet: Option<usize>,
    /// Cold services of the hotcold workload, one watcher each [default: 1000; --quick: 200].
    #[arg(long, value_name = "N")]
    pub cold_services: Option<usize>,
}

/// The storm workloads' sizes, resolved (`--quick` changes the defaults; flags win).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StormPlan {
    /// Endpoints of the evacuation workload.
    pub fleet: usize,
    /// Its watchers, round-robin over its services (one per service unless `--watchers`).
    pub evacuation_watchers: usize,
    /// Leases of the expiry workload, one endpoint each.
    pub expiry_leases: usize,
    /// Their TTL.
    pub expiry_ttl_ms: u64,
    /// Cold services of the hotcold workload.
    pub cold_services: usize,
    /// Cold changes per hotcold phase.
    pub cold_changes: usize,
}

impl Default for StormPlan {
    /// The sizes of a full run.
    fn default() -> Self {
        StormPlan {
            fleet: DEFAULT_FLEET,
            evacuation_watchers: evacuation::services_of(DEFAULT_FLEET),
            expiry_leases: DEFAULT_EXPIRING_LEASES,
            expiry_ttl_ms: DEFAULT_EXPIRY_TTL_MS,
            cold_services: DEFAULT_COLD_SERVICES,
            cold_changes: DEFAULT_COLD_CHANGES,
        }
    }
}

impl StormPlan {
    /// The sizes `args` asks for, each checked against the server's default quotas.
    pub(crate) fn resolve(args: &BenchArgs) -> Result<StormPlan, BenchError> {
        let pick = |quick, full| if args.quick { quick } else { full };
        let fleet = args.storm.fleet.unwrap_or(pick(QUICK_FLEET, DEFAULT_FLEET));
        let plan = StormPlan {
            fleet,
            evacuation_watchers: args.watchers.unwrap_or(evacuation::services_of(fleet)),
            expiry_leases: args
                .leases
                .unwrap_or(pick(QUICK_EXPIRING_LEASES, DEFAULT_EXPIRING_LEASES)),
            expiry_ttl_ms: if args.quick {
                QUICK_EXPIRY_TTL_MS
            } else {
                DEFAULT_EXPIRY_TTL_MS
            },
            cold_services: args
                .storm
                .cold_services
                .unwrap_or(pick(QUICK_COLD_SERVICES, DEFAULT_COLD_SERVICES)),
            cold_changes: pick(QUICK_COLD_CHANGES, DEFAULT_COLD_CHANGES),
        };
        for (name, value, max) in [
            ("--fleet", plan.fleet, MAX_FLEET),
            ("--cold-services", plan.cold_services, MAX_COLD_SERVICES),
        ] {
            if value == 0 || value > max {
                return Err(BenchError::Usage(format!("{name} must be 1 to {max}, got {value}")));
            }
        }
        Ok(plan)
    }
}

/// Checks what the storm workloads in `plan` need: `--spawn`, and sizes within the quotas
/// of the server they start.
pub(crate) fn check(args: &BenchArgs, plan: &Plan) -> Result<(), BenchError> {
    let storms: Vec<&str> = WORKLOADS
        .iter()
        .filter(|w| plan.workloads.contains(w))
        .map(|w| w.name())
        .collect();
    if storms.is_empty() {
        return Ok(());
    }
    if !args.spawn {
        return Err(BenchError::Usage(format!(
            "--workloads {} needs --spawn: it starts, restarts and stops a server of its own",
            storms.join(",")
        )));
    }
    let wants = |workload| plan.workloads.contains(&workload);
    if wants(Workload::Reconnect) && (plan.watchers > MAX_WATCHERS || plan.services > MAX_COLD_SERVICES) {
        return Err(BenchError::Usage(format!(
            "reconnect: --watchers must be at most {MAX_WATCHERS} (the server's cap per principal) and \
             --services at most {MAX_COLD_SERVICES}, got {} and {}",
            plan.watchers, plan.services
        )));
    }
    let storm = &plan.storms;
    if wants(Workload::Evacuation) && storm.evacuation_watchers > MAX_WATCHERS {
        return Err(BenchError::Usage(format!(
            "evacuation: --watchers must be at most {MAX_WATCHERS}, got {}",
            storm.evacuation_watchers
        )));
    }
    if wants(Workload::Expiry) && storm.expiry_leases > MAX_EXPIRING_LEASES {
        return Err(BenchError::Usage(format!(
            "expiry: --leases must be at most {MAX_EXPIRING_LEASES} (the tenant's endpoint quota), got {}",
            storm.expiry_leases
        )));
    }
    Ok(())
}

/// One storm workload's figures, under the workload's name in the JSON report.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StormSummary {
    /// The reconnect workload.
    Reconnect(ReconnectSummary),
    /// The evacuation workload.
    Evacuation(EvacuationSummary),
    /// The expiry workload.
    Expiry(ExpirySummary),
    /// The hotcold workload.
    Hotcold(HotColdSummary),
}

impl StormSummary {
    /// The notes under the table.
    pub(crate) fn notes(&self) -> String {
        match self {
            StormSummary::Reconnect(summary) => summary.notes(),
            StormSummary::Evacuation(summary) => summary.notes(),
            StormSummary::Expiry(summary) => summary.notes(),
            StormSummary::Hotcold(summary) => summary.notes(),
        }
    }
}

/// What the report quotes beside each storm workload.
pub(crate) fn anchor(workload: Workload) -> &'static str {
    match workload {
        Workload::Reconnect => {
            "control-plane recovery reconnects every watcher: all resume by revision while history covers them"
        }
        Workload::Evacuation => "a zone evacuation changes many endpoints together: 30% of the fleet in one second",
        Workload::Expiry => "lease-renewal jitter lost after a restart: many leases expire in the same second",
        Workload::Hotcold => "fair queues: one hot service must not delay unrelated services' updates",
        _ => "",
    }
}

/// A storm workload's server and client.
pub(crate) struct Storm {
    /// The server this workload started (and may restart).
    pub(crate) server: Spawned,
    /// A client of it.
    pub(crate) http: Http,
    /// Its tenant: `bench-<run>`, a tenant's quotas to itself.
    pub(crate) tenant: String,
    /// The 1-minute load average when the workload started.
    pub(crate) load_at_start: Option<f64>,
}

/// Connections the setups (registrations) use: the request workloads' default.
pub(crate) const SETUP_CONNECTIONS: usize = 64;
/// Setups are bounded by count, with this time bound only against a stalled server.
pub(crate) const SETUP_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs every storm workload `plan` names, each on a fresh server, appending its report.
pub(crate) async fn run(args: &BenchArgs, plan: &Plan, reports: &mut Vec<WorkloadReport>) -> Result<(), BenchError> {
    for workload in WORKLOADS.into_iter().filter(|w| plan.workloads.contains(w)) {
        let mut skipped = Vec::new();
        if args.etcd.is_some() || args.spawn_etcd {
            skipped.push("etcd: the storm workloads are Muster's own paths".to_owned());
        }
        let watchers = match workload {
            Workload::Reconnect => plan.watchers,
            Workload::Evacuation => plan.storms.evacuation_watchers,
            Workload::Hotcold => plan.storms.cold_services + hotcold::HOT_WATCHERS,
            _ => 1,
        };
        // Before spawning: the server inherits the limit; a stream costs one on each side.
        crate::limits::raise_descriptor_limit(watchers as u64 + 4_096);
        let load_at_start = crate::load_average();
        let bin = match &args.muster_bin {
            Some(bin) => bin.clone(),
            None => std::env::current_exe().map_err(|err| BenchError::Spawn {
                what: "muster",
                detail: format!("cannot find this executable ({err}); pass --muster-bin"),
            })?,
        };
        tracing::info!(workload = workload.name(), "starting a server of its own");
        let (server, _) = spawn_muster(&bin, false, false).await?;
        let storm = Storm {
            http: Http::new(&server.url, SETUP_CONNECTIONS),
            server,
            tenant: crate::requests::Names::new(crate::clock::run_id(), 1).tenant,
            load_at_start,
        };
        tracing::info!(workload = workload.name(), "running");
        let result = match workload {
            Workload::Reconnect => reconnect::reconnect(storm, plan).await?,
            Workload::Evacuation => evacuation::evacuation(storm, plan).await?,
            Workload::Expiry => expiry::expiry(storm, plan).await?,
            _ => hotcold::hotcold(storm, plan).await?,
        };
        crate::finished(reports, WorkloadReport::new(workload, vec![result], skipped));
    }
    Ok(())
}

/// Registers `count` durable endpoints, `n` as `request(n)` (its path and body) with
/// `PUT`, on [`SETUP_CONNECTIONS`] connections: a setup step, so an error naming `what`
/// unless every one succeeded.
pub(crate) async fn register_all<R>(
    workload: Workload,
    what: &str,
    http: &Http,
    count: u64,
    request: R,
) -> Result<(), BenchError>
where
    R: Fn(u64) -> (String, bytes::Bytes) + Send + Sync + 'static,
{
    let (http, request) = (http.clone(), std::sync::Arc::new(request));
    let outcome = crate::driver::closed_loop(SETUP_CONNECTIONS, SETUP_TIMEOUT, count, move |n| {
        let (http, (path, body)) = (http.clone(), request(n));
        async move { http.send_ok(hyper::Method::PUT, &path, Some(body)).await.map(drop) }
    })
    .await;
    complete(workload, what, &outcome, count)
}

/// A setup step's error unless it ran every one of its `wanted` operations.
pub(crate) fn complete(workload: Workload, what: &str, outcome: &Outcome, wanted: u64) -> Result<(), BenchError> {
    if outcome.errors == 0 && outcome.requests == wanted {
        return Ok(());
    }
    Err(setup_failed(
        workload,
        format!(
            "{what}: {} of {wanted} failed or did not run; first error: {}",
            wanted - (outcome.requests - outcome.errors),
            outcome.first_error.as_deref().unwrap_or("none (timed out)"),
        ),
    ))
}

/// A storm workload's setup failure.
pub(crate) fn setup_failed(workload: Workload, detail: String) -> BenchError {
    BenchError::Setup {
        system: System::Muster.name(),
        workload: workload.name(),
        detail,
    }
}

/// A workload's result row: `requests` operations, `errors` of them failed, over `elapsed`,
/// `ok` per second, the latency `latency` judges, the summary beside it.
pub(crate) fn row(
    requests: u64,
    errors: u64,
    elapsed: Duration,
    latency: &crate::Histogram,
    summary: StormSummary,
) -> SystemResult {
    let mut result = SystemResult::from_requests(System::Muster, requests, errors, elapsed, latency);
    result.storm = Some(summary);
    result
}

#[cfg(test)]
#[path = "storms/tests.rs"]
mod tests;
