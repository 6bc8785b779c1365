//! The hotcold workload (SPEC K1 "fair scheduling between hot and cold services"): one hot
//! service written as fast as the server takes it must not delay a cold service's update.
//!
//! ```text
//!  --cold-services services, one endpoint and one watcher each; the hot service with 10
//!  watchers that read and discard (so its fan-out costs the server, not this process)
//!  quiet phase: every 100 ms one cold service changes (50 times)
//!  hot phase:   the same, with 16 connections rewriting the hot service in a closed loop
//!  figures per phase: cold change sent → its watcher received the revision, and its
//!  commit (sent → reply), the watch queue peak; the hot writes per second
//! ```
//! A fair server delivers a cold update about when its commit returns in both phases: the
//! update may wait for a commit behind hot writes (one log, shared fsyncs), never behind
//! the hot service's fan-out.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use std::time::{Duration, Instant};

use hyper::Method;
use muster_core::api::WriteReply;
use serde::Serialize;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::stream::{Receipt, Target, discard, open_receipt_watchers};
use super::{
    Poller, Storm, StormSummary, closed_until, first_at_or_after, register_all, revision_of, row, setup_failed,
};
use crate::client::Http;
use crate::clock::now;
use crate::histogram::Histogram;
use crate::render::{format_ms, latency_text, thousands};
use crate::report::{LatencySummary, SystemResult};
use crate::requests::Names;
use crate::{BenchError, Plan, Workload};

/// Watchers of the hot service: enough that its fan-out is real work for the server, few
/// enough that discarding their bytes costs this process little.
pub(crate) const HOT_WATCHERS: usize = 10;
/// Connections writing the hot service: a deep enough closed loop to fill commit batches.
const HOT_CONNECTIONS: usize = 16;
/// The hot writers rewrite this many instances in turn, so the hot service stays bounded.
const HOT_INSTANCES: u64 = 1_000;
/// One cold change every 100 ms: far apart enough that a change's delivery never waits for
/// the previous one's.
const COLD_INTERVAL: Duration = Duration::from_millis(100);
/// The hot load runs this long before the first cold change of its phase: the server's
/// queues and batches reach their steady state.
const HOT_WARMUP: Duration = Duration::from_millis(500);
/// A cold delivery later than this after its change's reply counts as missed.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(5);
/// The hot load's own bound, against a stalled run: far above two phases.
const HOT_MAX_DURATION: Duration = Duration::from_secs(120);

/// One phase's cold deliveries.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HotColdPhase {
    /// Cold changes committed.
    pub changes: u64,
    /// Of them, not received by their watcher in time (or not committed).
    pub missed: u64,
    /// Change sent → its watcher received its revision.
    pub delivery: Option<LatencySummary>,
    /// Change sent → its reply (the commit, shared with the hot writes).
    pub commit: Option<LatencySummary>,
    /// Reply → received, 0 when the update arrived before the reply (the usual case: the
    /// server appends to the watch logs as it applies, before it answers): how far delivery
    /// trails the commit the caller saw.
    pub after_reply: Option<LatencySummary>,
    /// Peak `muster_watch_queued_frames` in the phase.
    pub queued_frames_peak: Option<u64>,
}

/// What the hotcold workload measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HotColdSummary {
    /// Cold services, one watcher each.
    pub cold_services: u64,
    /// Cold watchers that opened.
    pub cold_watchers_opened: u64,
    /// Watchers of the hot service.
    pub hot_watchers: u64,
    /// Cold changes per phase, 100 ms apart.
    pub changes_per_phase: u64,
    /// Without the hot load.
    pub quiet: HotColdPhase,
    /// With it.
    pub hot: HotColdPhase,
    /// Hot writes committed during the hot phase.
    pub hot_writes: u64,
    /// Hot writes that failed.
    pub hot_errors: u64,
    /// Hot writes per second.
    pub hot_writes_per_s: f64,
    /// The hot writes' latency (closed loop, with the corrected p99).
    pub hot_latency: Option<LatencySummary>,
    /// Hot-phase cold p99 delivery ÷ quiet-phase: near 1 when scheduling is fair.
    pub p99_ratio: Option<f64>,
    /// The load average at the workload's start and end.
    #[serde(flatten)]
    pub load: crate::LoadSpan,
}

/// The ratio of two phases' p99s, when both exist and the quiet one is above zero.
pub(crate) fn p99_ratio(hot: Option<LatencySummary>, quiet: Option<LatencySummary>) -> Option<f64> {
    match (hot, quiet) {
        (Some(hot), Some(quiet)) if quiet.p99_ms > 0.0 => Some(hot.p99_ms / quiet.p99_ms),
        _ => None,
    }
}

impl HotColdSummary {
    /// The notes under the table.
    pub(crate) fn notes(&self) -> String {
        let latency = |summary| latency_text(summary, "none");
        let phase = |name: &str, p: &HotColdPhase| {
            format!(
                "hotcold: {name}: {} cold changes, {} missed: delivery {}; commit (sent → reply) {}; after the reply {}; \
                 queue peak {} frames\n",
                p.changes,
                p.missed,
                latency(p.delivery),
                latency(p.commit),
                latency(p.after_reply),
                p.queued_frames_peak.map_or_else(|| "?".to_owned(), thousands),
            )
        };
        let ratio = |r: Option<f64>| r.map_or_else(|| "?".to_owned(), |r| format!("{r:.2}×"));
        format!(
            "hotcold: {} cold services ({} watchers open), a hot service with {} watchers; {} changes per phase, one per {}\n\
             {}{}hotcold: hot writes {} ({}/s, {} failed), latency {}; cold delivery p99 hot ÷ quiet {}; \
             {}\n",
            thousands(self.cold_services),
            thousands(self.cold_watchers_opened),
            self.hot_watchers,
            self.changes_per_phase,
            format_ms(COLD_INTERVAL.as_secs_f64() * 1_000.0),
            phase("quiet", &self.quiet),
            phase("hot", &self.hot),
            thousands(self.hot_writes),
            thousands(self.hot_writes_per_s.round() as u64),
            thousands(self.hot_errors),
            latency(self.hot_latency),
            ratio(self.p99_ratio),
            self.load.text(),
        )
    }
}

/// One cold change as committed: its watcher, when sent and answered, its revision.
struct Change {
    watcher: usize,
    sent: Instant,
    replied: Instant,
    revision: u64,
}

/// A phase's cold deliveries from its changes and each watcher's receipts.
fn phase_figures(
    changes: &[Change],
    failed: u64,
    receipts: &[Vec<(u64, Instant)>],
    queued_frames_peak: Option<u64>,
) -> HotColdPhase {
    let (mut delivery, mut commit, mut after_reply, mut missed) =
        (Histogram::new(), Histogram::new(), Histogram::new(), failed);
    for change in changes {
        commit.record(change.replied - change.sent);
        match first_at_or_after(&receipts[change.watcher], change.revision) {
            Some(at) if at.saturating_duration_since(change.replied) <= DELIVERY_TIMEOUT => {
                delivery.record(at.saturating_duration_since(change.sent));
                after_reply.record(at.saturating_duration_since(change.replied));
            }
            _ => missed += 1,
        }
    }
    HotColdPhase {
        changes: changes.len() as u64,
        missed,
        delivery: LatencySummary::of(&delivery),
        commit: LatencySummary::of(&commit),
        after_reply: LatencySummary::of(&after_reply),
        queued_frames_peak,
    }
}

/// Collects receipts into `receipts` until `until`.
async fn collect(inbox: &mut mpsc::UnboundedReceiver<Receipt>, receipts: &mut [Vec<(u64, Instant)>], until: Instant) {
    let until = tokio::time::Instant::from_std(until);
    while let Ok(Some(receipt)) = tokio::time::timeout_at(until, inbox.recv()).await {
        if let Receipt::Update { watcher, revision, at } = receipt {
            receipts[watcher].push((revision, at));
        }
    }
}

/// Runs one phase of cold changes (`offset` keeps its endpoints distinct from the other's).
async fn cold_phase(
    http: &Http,
    tenant: &str,
    plan: &Plan,
    inbox: &mut mpsc::UnboundedReceiver<Receipt>,
    receipts: &mut [Vec<(u64, Instant)>],
    offset: u64,
) -> (Vec<Change>, u64) {
    let (names, services) = (Names::new(0, 1), plan.storms.cold_services);
    let (mut changes, mut failed) = (Vec::new(), 0);
    let start = now();
    for k in 0..plan.storms.cold_changes {
        // 7,919 is prime: k ↦ service is one to one while changes are fewer than services.
        let watcher = (k * 7_919) % services;
        let path = format!("/v1/registry/{tenant}/hotcold/c-{watcher}/i-0");
        let (_, body) = names.muster_register(offset + k as u64);
        let sent = now();
        let reply = http.send_ok(Method::PUT, &path, Some(body)).await;
        let replied = now();
        match reply
            .ok()
            .and_then(|body| serde_json::from_slice::<WriteReply>(&body).ok())
        {
            Some(reply) => changes.push(Change {
                watcher,
                sent,
                replied,
                revision: reply.revision.0,
            }),
            None => failed += 1,
        }
        collect(inbox, receipts, start + COLD_INTERVAL * (k as u32 + 1)).await;
    }
    let last = changes.last().map_or_else(now, |c| c.replied);
    let pending = |receipts: &[Vec<(u64, Instant)>]| {
        changes
            .iter()
            .any(|c| first_at_or_after(&receipts[c.watcher], c.revision).is_none())
    };
    while pending(receipts) && now() < last + DELIVERY_TIMEOUT {
        collect(inbox, receipts, now() + COLD_INTERVAL).await;
    }
    (changes, failed)
}

/// Runs the workload on `storm`'s server.
pub(crate) async fn hotcold(storm: Storm, plan: &Plan) -> Result<SystemResult, BenchError> {
    let fail = |detail: String| setup_failed(Workload::Hotcold, detail);
    let Storm {
        server,
        http,
        tenant,
        load_at_start,
    } = storm;
    let services = plan.storms.cold_services;
    let names = Arc::new(Names::new(0, 1));
    let (registering, nm) = (tenant.clone(), Arc::clone(&names));
    register_all(
        Workload::Hotcold,
        "registering the cold services",
        &http,
        services as u64,
        move |s| {
            let (_, body) = nm.muster_register(s);
            (format!("/v1/registry/{registering}/hotcold/c-{s}/i-0"), body)
        },
    )
    .await?;
    let (_, body) = names.muster_register(0);
    http.send_ok(
        Method::PUT,
        &format!("/v1/registry/{tenant}/hotcold/hot/h-0"),
        Some(body),
    )
    .await
    .map_err(fail)?;

    let target = Target::resolve(&server.url).await.map_err(fail)?;
    let mut tasks = JoinSet::new();
    let paths = (0..services).map(|s| format!("/v1/watch/{tenant}/hotcold/c-{s}"));
    let (mut inbox, opened) = open_receipt_watchers(&target, paths, &mut tasks).await;
    for _ in 0..HOT_WATCHERS {
        let (target, path) = (target.clone(), format!("/v1/watch/{tenant}/hotcold/hot"));
        tasks.spawn(async move {
            let _ = discard(&target, &path).await;
        });
    }
    let mut receipts: Vec<Vec<(u64, Instant)>> = vec![Vec::new(); services];
    let cold = Http::new(&server.url, 1);
    let gauges = || Poller::start(server.pid, Some(Http::new(&server.url, 1)));

    let poller = gauges();
    let (quiet_changes, quiet_failed) = cold_phase(&cold, &tenant, plan, &mut inbox, &mut receipts, 1 << 20).await;
    let quiet_peaks = poller.finish().await;

    let stop = Arc::new(AtomicBool::new(false));
    let (hot_http, hot_tenant, nm) = (
        Http::new(&server.url, HOT_CONNECTIONS),
        Arc::new(tenant.clone()),
        Arc::clone(&names),
    );
    let hot = tokio::spawn(closed_until(
        HOT_CONNECTIONS,
        Arc::clone(&stop),
        HOT_MAX_DURATION,
        move |n| {
            let (http, tenant, names) = (hot_http.clone(), Arc::clone(&hot_tenant), Arc::clone(&nm));
            async move {
                let path = format!("/v1/registry/{tenant}/hotcold/hot/h-{}", n % HOT_INSTANCES);
                let (_, body) = names.muster_register(n);
                revision_of(http.send_ok(Method::PUT, &path, Some(body)).await)
            }
        },
    ));
    let hot_start = now();
    tokio::time::sleep(HOT_WARMUP).await;
    let poller = gauges();
    let (hot_changes, hot_failed) = cold_phase(&cold, &tenant, plan, &mut inbox, &mut receipts, 1 << 21).await;
    let hot_peaks = poller.finish().await;
    stop.store(true, Ordering::Relaxed);
    let hot_elapsed = now() - hot_start;
    let samples = hot
        .await
        .map_err(|err| fail(format!("the hot writers failed: {err}")))?;
    let mut hot_latencies = Histogram::new();
    for sample in samples.iter().filter(|s| s.revision.is_some()) {
        hot_latencies.record(sample.latency);
    }
    let hot_errors = samples.len() as u64 - hot_latencies.count();
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    drop(server);

    let quiet = phase_figures(&quiet_changes, quiet_failed, &receipts, quiet_peaks.queued_frames);
    let hot_phase = phase_figures(&hot_changes, hot_failed, &receipts, hot_peaks.queued_frames);
    let summary = HotColdSummary {
        cold_services: services as u64,
        cold_watchers_opened: opened,
        hot_watchers: HOT_WATCHERS as u64,
        changes_per_phase: plan.storms.cold_changes as u64,
        p99_ratio: p99_ratio(hot_phase.delivery, quiet.delivery),
        quiet,
        hot_writes: hot_latencies.count(),
        hot_errors,
        hot_writes_per_s: hot_latencies.count() as f64 / hot_elapsed.as_secs_f64(),
        hot_latency: LatencySummary::of_closed_loop(&hot_latencies),
        hot: hot_phase.clone(),
        load: crate::LoadSpan::since(load_at_start),
    };
    let mut result = row(
        hot_latencies.count(),
        hot_errors,
        hot_elapsed,
        &hot_latencies,
        StormSummary::Hotcold(summary),
    );
    result.latency = hot_phase.delivery;
    result.requests = hot_phase.changes + hot_phase.missed;
    result.errors = hot_phase.missed;
    result.note = Some(
        "requests = cold changes under the hot load; throughput = hot writes per second; \
         latency = cold change sent → its watcher received it, under the hot load"
            .to_owned(),
    );
    Ok(result)
}

#[cfg(test)]
#[path = "hotcold_tests.rs"]
mod tests;
