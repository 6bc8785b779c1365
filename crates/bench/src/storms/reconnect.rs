//! The reconnect workload (SPEC K1 "jittered reconnects", W3 resume): control-plane recovery
//! reconnects every watcher at once.
//!
//! ```text
//!  --services services × 10 endpoints ─▶ --watchers streams, round-robin, all at revision R
//!  SIGKILL the server ─▶ start it on the same data dir and ports ─▶ ready
//!  every watcher at once: GET /v1/watch/...?from_revision=<its last revision>
//!    first frame: update/progress = resumed by revision; snapshot = re-listed;
//!                 error{compacted} = history lost; anything else = refused
//!  figures: go → first frame per watcher (all live again = the last), the counts above,
//!           the new server's RSS (VmRSS polled) and its own connect/resume counters
//! ```
//! History outlives a restart (the registry's state, with its retained changes, is rebuilt
//! from the log), so every watcher should resume: a snapshot or `compacted` here is a server
//! defect, reported by count.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinSet;

use super::stream::{Head, Target, watch as watch_stream, watch_timed};
use super::{Poller, Storm, StormSummary, metrics, ms_between, register_all, revision, row, setup_failed};
use crate::client::Http;
use crate::clock::{now, tokio_now};
use crate::histogram::Histogram;
use crate::report::{LatencySummary, SystemResult};
use crate::requests::Names;
use crate::watch::{OPEN_CONCURRENCY, OPEN_TIMEOUT};
use crate::{BenchError, Plan, Workload};

#[path = "reconnect_summary.rs"]
mod summary;

pub use summary::ReconnectSummary;
pub(crate) use summary::{Resumption, Tally};

/// Endpoints per watched service: a snapshot with some content, so a re-listing would cost
/// something visible, while resuming costs nothing.
const ENDPOINTS_PER_SERVICE: usize = 10;
/// After the last stream opened, before reading RSS: the server's per-stream setup settles.
const SETTLE: Duration = Duration::from_secs(1);
/// Every stream notices the SIGKILL (a reset) well within this.
const LOST_TIMEOUT: Duration = Duration::from_secs(10);
/// Every watcher must be back within this after the restart, or it counts as failed.
const RECONNECT_TIMEOUT: Duration = Duration::from_secs(60);
/// RSS is polled this long after the last watcher is back: the storm's allocations (replay
/// buffers, connection state) peak around the last accepts, not after.
const STORM_TAIL: Duration = Duration::from_millis(500);

/// What a watcher tells the workload.
enum Signal {
    /// Its first frame arrived with this revision (or it failed before one).
    Opened(Result<u64, String>),
    /// Its stream ended (the server was killed).
    Lost,
    /// Its first frame after the restart, or why there was none; when its TCP connection was
    /// established (if it was) and when the frame came.
    Back(Result<Resumption, String>, Option<Instant>, Instant),
}

/// One watcher: watch until the stream ends, then, once released, resume from the last
/// revision it saw.
async fn watcher(
    target: Target,
    path: String,
    signals: mpsc::UnboundedSender<Signal>,
    opening: Arc<Semaphore>,
    mut go: watch::Receiver<bool>,
) {
    let mut permit = Some(opening.acquire_owned().await);
    let mut last = None::<u64>;
    let result = watch_stream(&target, &path, |head: Head, _| {
        if let Some(revision) = head.revision {
            last = Some(last.map_or(revision, |seen| seen.max(revision)));
        }
        if permit.take().is_some() {
            let _ = signals.send(Signal::Opened(
                last.ok_or_else(|| "a first frame without a revision".into()),
            ));
        }
    })
    .await;
    let Some(from) = last.filter(|_| permit.is_none()) else {
        if permit.is_some() {
            let why = result
                .err()
                .unwrap_or_else(|| "the stream ended before its first frame".into());
            let _ = signals.send(Signal::Opened(Err(why)));
        }
        return;
    };
    let _ = signals.send(Signal::Lost);
    if go.wait_for(|go| *go).await.is_err() {
        return;
    }
    let (mut first, connected) = (true, std::sync::OnceLock::new());
    let resume = format!("{path}?from_revision={from}");
    let result = watch_timed(
        &target,
        &resume,
        |at| {
            let _ = connected.set(at);
        },
        |head: Head, at| {
            if std::mem::take(&mut first) {
                let _ = signals.send(Signal::Back(Ok(Resumption::of(&head)), connected.get().copied(), at));
            }
        },
    )
    .await;
    if first {
        let why = result
            .err()
            .unwrap_or_else(|| "the stream ended before its first frame".into());
        let _ = signals.send(Signal::Back(Err(why), connected.get().copied(), now()));
    }
}

/// Runs the workload on `storm`'s server, restarting it once.
pub(crate) async fn reconnect(storm: Storm, plan: &Plan) -> Result<SystemResult, BenchError> {
    let fail = |detail: String| setup_failed(Workload::Reconnect, detail);
    let Storm {
        server,
        http,
        tenant,
        load_at_start,
    } = storm;
    let (services, watchers) = (plan.services, plan.watchers);
    let names = Arc::new(Names::new(0, services));
    let wanted = (services * ENDPOINTS_PER_SERVICE) as u64;
    let (registering, nm) = (tenant.clone(), Arc::clone(&names));
    register_all(
        Workload::Reconnect,
        "registering the watched services",
        &http,
        wanted,
        move |n| {
            let (_, body) = nm.muster_register(n);
            (
                format!("/v1/registry/{registering}/storm/r-{}/i-{n}", n % nm.services),
                body,
            )
        },
    )
    .await?;
    let revision_before = revision(&http).await.map_err(fail)?;

    let target = Target::resolve(&server.url).await.map_err(fail)?;
    let (signals, mut inbox) = mpsc::unbounded_channel();
    let (go, released) = watch::channel(false);
    let opening = Arc::new(Semaphore::new(OPEN_CONCURRENCY));
    let mut tasks = JoinSet::new();
    for i in 0..watchers {
        let path = format!("/v1/watch/{tenant}/storm/r-{}", i % services);
        tasks.spawn(watcher(
            target.clone(),
            path,
            signals.clone(),
            Arc::clone(&opening),
            released.clone(),
        ));
    }
    drop(signals);
    let (mut opened, mut at_latest, mut tally) = (0u64, 0u64, Tally::default());
    let mut open_failure = None;
    let deadline = tokio_now() + OPEN_TIMEOUT;
    for _ in 0..watchers {
        match tokio::time::timeout_at(deadline, inbox.recv()).await {
            Ok(Some(Signal::Opened(Ok(revision)))) => {
                opened += 1;
                at_latest += u64::from(revision == revision_before);
            }
            Ok(Some(Signal::Opened(Err(why)))) => {
                open_failure.get_or_insert(format!("opening: {why}"));
            }
            _ => break,
        }
    }
    tokio::time::sleep(SETTLE).await;
    let rss_before_kill = crate::watch::rss_of(server.pid).ok();

    let killed = now();
    let server = server.restart().await?;
    let restart_ms = ms_between(killed, now());
    let http = Http::new(&server.url, 1);
    let poller = Poller::start(server.pid, None);
    let rss_at_ready = crate::watch::rss_of(server.pid).ok();
    let revision_after_restart = revision(&http).await.ok();
    let mut lost = 0u64;
    let deadline = tokio_now() + LOST_TIMEOUT;
    while lost < opened {
        match tokio::time::timeout_at(deadline, inbox.recv()).await {
            Ok(Some(Signal::Lost)) => lost += 1,
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break,
        }
    }

    let tcp_before = super::tcp_counters();
    let released_at = now();
    let _ = go.send(true);
    let (mut latencies, mut connect_times, mut resume_times) = (Histogram::new(), Histogram::new(), Histogram::new());
    let mut last_back = None;
    let deadline = tokio_now() + RECONNECT_TIMEOUT;
    let mut back = 0u64;
    while back < lost {
        let Ok(Some(signal)) = tokio::time::timeout_at(deadline, inbox.recv()).await else {
            break;
        };
        if let Signal::Back(how, connected, at) = signal {
            back += 1;
            if how.is_ok() {
                latencies.record(at.saturating_duration_since(released_at));
                if let Some(connected) = connected {
                    connect_times.record(connected.saturating_duration_since(released_at));
                    resume_times.record(at.saturating_duration_since(connected));
                }
                last_back = Some(last_back.map_or(at, |last: Instant| last.max(at)));
            }
            tally.count(how);
        }
    }
    let storm_time = now() - released_at;
    let tcp_after = super::tcp_counters();
    let delta = |i: usize| Some(tcp_after[i]?.saturating_sub(tcp_before[i]?));
    tokio::time::sleep(STORM_TAIL).await;
    let peaks = poller.finish().await;
    let [connects, resumes, compactions] = metrics(
        &http,
        [
            "muster_watch_connects_total",
            "muster_watch_resumes_total",
            "muster_watch_compactions_total",
        ],
    )
    .await;
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    drop(server);

    tally.failed += lost - back;
    let all_back_live = tally.live() == lost && lost > 0;
    let summary = ReconnectSummary {
        watchers: watchers as u64,
        services: services as u64,
        endpoints_per_service: ENDPOINTS_PER_SERVICE as u64,
        opened,
        at_latest,
        revision: revision_before,
        revision_after_restart,
        rss_before_kill_bytes: rss_before_kill,
        restart_ms,
        lost,
        resumed: tally.resumed,
        snapshots: tally.snapshots,
        compacted: tally.compacted,
        refused: tally.refused,
        failed: tally.failed,
        first_failure: tally.first_failure.clone().or(open_failure),
        all_live_ms: last_back
            .filter(|_| all_back_live)
            .map(|last| ms_between(released_at, last)),
        reconnect: LatencySummary::of(&latencies),
        connect: LatencySummary::of(&connect_times),
        resume: LatencySummary::of(&resume_times),
        rss_at_ready_bytes: rss_at_ready,
        rss_peak_bytes: peaks.rss_bytes,
        server_connects: connects.map(|v| v as u64),
        server_resumes: resumes.map(|v| v as u64),
        server_compactions: compactions.map(|v| v as u64),
        listen_overflows: delta(0),
        syn_retransmits: delta(1),
        load: crate::LoadSpan::since(load_at_start),
    };
    let mut result = row(
        lost,
        lost - tally.live(),
        storm_time,
        &latencies,
        StormSummary::Reconnect(summary),
    );
    result.note = Some("requests = streams reconnecting; latency = go (server ready) → first frame".to_owned());
    Ok(result)
}

#[cfg(test)]
#[path = "reconnect_tests.rs"]
mod tests;
