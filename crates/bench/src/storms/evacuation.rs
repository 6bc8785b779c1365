//! The evacuation workload (SPEC K1, L6): a zone evacuation changes many endpoints together.
//!
//! ```text
//!  --fleet endpoints, 100 per service, zones a/b/c at 30/35/35% within every service
//!  watchers round-robin over the services (one each by default), every one at its snapshot
//!  t0: drain every zone-a endpoint (POST .../drain), open loop: drain i is due at
//!      t0 + i ÷ (0.3 × fleet) s, at most 512 in flight; "30% in one second"
//!  figures: drains accepted per second, t0 → last drain committed, drain sent → each watcher
//!           of its service received an update of the drain's revision or later (coalescing
//!           may merge several drains into one update), the watch queue gauges' peaks
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::Method;
use muster_core::api::{DrainRequest, RegisterRequest, WriteReply};
use muster_core::{Incarnation, LocalitySpec};
use serde::Serialize;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::stream::{Receipt, Target, open_receipt_watchers};
use super::{
    Poller, Storm, StormSummary, complete, first_at_or_after, metrics, ms_between, register_all, row, setup_failed,
};
use crate::clock::now;
use crate::driver::closed_loop;
use crate::histogram::Histogram;
use crate::render::{format_ms, latency_text, mib_text, thousands};
use crate::report::{LatencySummary, SystemResult};
use crate::requests::Names;
use crate::{BenchError, Plan, Workload};

/// Endpoints per service: a service of a hundred replicas, 30 of them in the drained zone.
const ENDPOINTS_PER_SERVICE: usize = 100;
/// The drained fraction: one zone of three, sized 30% (SPEC H5's brake fraction: an
/// evacuation is exactly the load the brake allows).
const DRAINED_FRACTION: f64 = 0.3;
/// Drains in flight at most: at 30,000 drains in one second and ~10 ms per committed batch,
/// 300 are in flight at once; 512 leaves room without opening a connection per drain.
const CONCURRENCY: usize = 512;
/// A watcher's update later than this after the last drain's reply counts as missed.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(10);

/// The services a fleet of `fleet` endpoints spreads over.
pub(crate) fn services_of(fleet: usize) -> usize {
    fleet.div_ceil(ENDPOINTS_PER_SERVICE)
}

/// Endpoint `n`'s service and zone: service `n mod services`; its place in the service,
/// `n div services`, picks the zone, 6 of every 20 places in `zone-a` (30%), 7 in each of
/// `zone-b` and `zone-c`.
pub(crate) fn placement(n: usize, services: usize) -> (usize, &'static str) {
    let zone = match (n / services) % 20 {
        0..6 => "zone-a",
        6..13 => "zone-b",
        _ => "zone-c",
    };
    (n % services, zone)
}

/// What the evacuation workload measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvacuationSummary {
    /// Endpoints registered.
    pub fleet: u64,
    /// Services they spread over.
    pub services: u64,
    /// Watchers, round-robin over the services.
    pub watchers: u64,
    /// Of them, the ones that opened.
    pub watchers_opened: u64,
    /// Drains sent: every `zone-a` endpoint.
    pub drains: u64,
    /// The paced rate: 30% of the fleet per second.
    pub target_per_s: f64,
    /// Drains the server committed.
    pub accepted: u64,
    /// Drains it refused or that failed.
    pub refused: u64,
    /// The first refusal's message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_refusal: Option<String>,
    /// Accepted drains per second, first send → last reply.
    pub accepted_per_s: f64,
    /// t0 → the last drain's reply (committed).
    pub last_commit_ms: f64,
    /// The most a drain was sent after its due time: above a few ms, the client (in-flight
    /// bound or CPU) could not keep the pace and the storm was stretched.
    pub max_send_lag_ms: f64,
    /// Drain sent → its reply.
    pub drain_reply: Option<LatencySummary>,
    /// Deliveries expected (accepted drains × their service's watchers).
    pub deliveries: u64,
    /// Of them, not received within 10 s of the last reply.
    pub missed: u64,
    /// Drain sent → its service's watcher received the drain's revision or a later one.
    pub delivery: Option<LatencySummary>,
    /// t0 → the last watcher had every drain of its service.
    pub all_delivered_ms: Option<f64>,
    /// Peak `muster_watch_queued_frames` during the storm (polled every 20 ms).
    pub queued_frames_peak: Option<u64>,
    /// Peak `muster_watch_outstanding_bytes`.
    pub outstanding_bytes_peak: Option<u64>,
    /// Watchers told to resync during the storm (`muster_watch_resyncs_total`).
    pub resyncs: Option<u64>,
    /// The server's RSS peak during the storm.
    pub rss_peak_bytes: Option<u64>,
    /// The load average at the workload's start and end.
    #[serde(flatten)]
    pub load: crate::LoadSpan,
}

impl EvacuationSummary {
    /// The notes under the table.
    pub(crate) fn notes(&self) -> String {
        let latency = |summary| latency_text(summary, "none");
        let gauge = |v: Option<u64>| v.map_or_else(|| "not exposed".to_owned(), thousands);
        format!(
            "evacuation: {} endpoints over {} services in 3 zones; {} of {} watchers open; {} zone-a drains paced at {}/s\n\
             evacuation: {} accepted, {} refused{}: {}/s accepted; last committed {} after t0; drain reply {}; \
             sends at most {} behind schedule\n\
             evacuation: delivery (drain sent → watcher has its revision) {} over {} deliveries, {} missed; \
             all delivered {} after t0\n\
             evacuation: watch queue peak {} frames, {} bytes; {} resyncs; server RSS peak {}; {}\n",
            thousands(self.fleet),
            thousands(self.services),
            thousands(self.watchers_opened),
            thousands(self.watchers),
            thousands(self.drains),
            thousands(self.target_per_s as u64),
            thousands(self.accepted),
            thousands(self.refused),
            self.first_refusal
                .as_ref()
                .map_or_else(String::new, |why| format!(" (first: {why})")),
            thousands(self.accepted_per_s.round() as u64),
            format_ms(self.last_commit_ms),
            latency(self.drain_reply),
            format_ms(self.max_send_lag_ms),
            latency(self.delivery),
            thousands(self.deliveries),
            thousands(self.missed),
            self.all_delivered_ms.map_or_else(|| "never".to_owned(), format_ms),
            gauge(self.queued_frames_peak),
            gauge(self.outstanding_bytes_peak),
            self.resyncs.map_or_else(|| "?".to_owned(), thousands),
            mib_text(self.rss_peak_bytes),
            self.load.text(),
        )
    }
}

/// One drain as sent.
#[derive(Debug, Clone)]
pub(crate) struct Drained {
    /// Its service.
    pub(crate) service: usize,
    /// When it was sent.
    pub(crate) sent: Instant,
    /// The revision it committed at.
    pub(crate) revision: u64,
}

/// Each watcher's delivery of each committed drain of its service: drain sent → the first
/// update of its revision or later. Returns the latencies, the deliveries missing, and the
/// last delivery's instant. `receipts[w]` is watcher `w`'s (revision, arrival) in order;
/// `service_of(w)` its service.
pub(crate) fn deliveries(
    drains: &[Drained],
    receipts: &[Vec<(u64, Instant)>],
    service_of: impl Fn(usize) -> usize,
    services: usize,
) -> (Histogram, u64, Option<Instant>) {
    let mut by_service: Vec<Vec<usize>> = vec![Vec::new(); services];
    for w in 0..receipts.len() {
        by_service[service_of(w)].push(w);
    }
    let (mut latencies, mut missed, mut last) = (Histogram::new(), 0, None::<Instant>);
    for drain in drains {
        for &w in &by_service[drain.service] {
            match first_at_or_after(&receipts[w], drain.revision) {
                Some(at) => {
                    latencies.record(at.saturating_duration_since(drain.sent));
                    last = Some(last.map_or(at, |last| last.max(at)));
                }
                None => missed += 1,
            }
        }
    }
    (latencies, missed, last)
}

/// Runs the workload on `storm`'s server.
pub(crate) async fn evacuation(storm: Storm, plan: &Plan) -> Result<SystemResult, BenchError> {
    let fail = |detail: String| setup_failed(Workload::Evacuation, detail);
    let Storm {
        server,
        http,
        tenant,
        load_at_start,
    } = storm;
    let fleet = plan.storms.fleet;
    let services = services_of(fleet);
    let instance_path = move |tenant: &str, n: usize| {
        let (service, _) = placement(n, services);
        format!("/v1/registry/{tenant}/evac/s-{service}/e-{n}")
    };
    let (names, registering) = (Names::new(0, 1), tenant.clone());
    register_all(
        Workload::Evacuation,
        "registering the fleet",
        &http,
        fleet as u64,
        move |n| {
            let n = n as usize;
            let mut endpoint = names.endpoint(n as u64);
            endpoint.locality = LocalitySpec {
                zone: Some(placement(n, services).1.to_owned()),
                ..LocalitySpec::default()
            };
            let request = RegisterRequest {
                incarnation: Incarnation(1),
                endpoint,
                lease: None,
                expected_revision: None,
            };
            // A plain struct of strings and numbers: its encoding cannot fail.
            let body = serde_json::to_vec(&request).unwrap_or_default();
            (instance_path(&registering, n), body.into())
        },
    )
    .await?;

    let watchers = plan.storms.evacuation_watchers;
    let target = Target::resolve(&server.url).await.map_err(fail)?;
    let mut tasks = JoinSet::new();
    let paths = (0..watchers).map(|w| format!("/v1/watch/{tenant}/evac/s-{}", w % services));
    let (mut inbox, opened) = open_receipt_watchers(&target, paths, &mut tasks).await;
    let mut receipts: Vec<Vec<(u64, Instant)>> = vec![Vec::new(); watchers];
    let [resyncs_before] = metrics(&http, ["muster_watch_resyncs_total"]).await;

    let drained: Vec<usize> = (0..fleet).filter(|&n| placement(n, services).1 == "zone-a").collect();
    let rate = fleet as f64 * DRAINED_FRACTION;
    let drain_http = crate::client::Http::new(&server.url, CONCURRENCY);
    // Every connection the drains will use opened beforehand: opened during the storm, 512
    // connects at once overflow the server's accept queue and wait a second for the
    // kernel's SYN retry, which would stretch the storm by the retransmission timer.
    let warm = drain_http.clone();
    let warmed = closed_loop(CONCURRENCY, super::SETUP_TIMEOUT, (CONCURRENCY * 4) as u64, move |_| {
        let http = warm.clone();
        async move { http.send_ok(Method::GET, "/v1/status", None).await.map(drop) }
    })
    .await;
    complete(
        Workload::Evacuation,
        "opening the drain connections",
        &warmed,
        (CONCURRENCY * 4) as u64,
    )?;
    let in_flight = Arc::new(Semaphore::new(CONCURRENCY));
    let poller = Poller::start(server.pid, Some(crate::client::Http::new(&server.url, 1)));
    let body: bytes::Bytes = serde_json::to_vec(&DrainRequest {
        incarnation: Incarnation(1),
        reason: "zone-a evacuation".into(),
        expected_revision: None,
        grace_ms: None,
    })
    .map_err(|err| fail(err.to_string()))?
    .into();
    let t0 = now();
    let mut sends = JoinSet::new();
    let mut max_lag = Duration::ZERO;
    for (i, &n) in drained.iter().enumerate() {
        let due = t0 + Duration::from_secs_f64(i as f64 / rate);
        tokio::time::sleep_until(tokio::time::Instant::from_std(due)).await;
        let Ok(permit) = Arc::clone(&in_flight).acquire_owned().await else {
            break;
        };
        let (http, body) = (drain_http.clone(), body.clone());
        let path = format!("{}/drain", instance_path(&tenant, n));
        let sent = now();
        max_lag = max_lag.max(sent.saturating_duration_since(due));
        sends.spawn(async move {
            let reply = http.send_ok(Method::POST, &path, Some(body)).await;
            let done = now();
            drop(permit);
            let revision = reply.and_then(|body| {
                serde_json::from_slice::<WriteReply>(&body)
                    .map(|reply| reply.revision.0)
                    .map_err(|err| err.to_string())
            });
            (placement(n, services).0, sent, done, revision)
        });
    }
    let (mut committed, mut replies) = (Vec::with_capacity(drained.len()), Histogram::new());
    let (mut refused, mut first_refusal, mut last_reply) = (0u64, None, t0);
    while let Some(joined) = sends.join_next().await {
        let Ok((service, sent, done, revision)) = joined else {
            refused += 1;
            continue;
        };
        last_reply = last_reply.max(done);
        match revision {
            Ok(revision) => {
                replies.record(done - sent);
                committed.push(Drained {
                    service,
                    sent,
                    revision,
                });
            }
            Err(why) => {
                refused += 1;
                first_refusal.get_or_insert(why);
            }
        }
    }

    // Receipts until every watcher has its service's last drain, or the timeout.
    let mut needed = vec![0u64; services];
    for drain in &committed {
        needed[drain.service] = needed[drain.service].max(drain.revision);
    }
    let mut waiting: usize = (0..watchers).filter(|w| needed[w % services] > 0).count();
    let deadline = tokio::time::Instant::from_std(last_reply + DELIVERY_TIMEOUT);
    let mut drain_receipt = |receipt: Receipt, waiting: &mut usize| {
        if let Receipt::Update { watcher, revision, at } = receipt {
            let need = needed[watcher % services];
            let before = receipts[watcher].last().map_or(0, |(r, _)| *r);
            receipts[watcher].push((revision, at));
            if need > 0 && before < need && revision >= need {
                *waiting -= 1;
            }
        }
    };
    while waiting > 0 {
        match tokio::time::timeout_at(deadline, inbox.recv()).await {
            Ok(Some(receipt)) => drain_receipt(receipt, &mut waiting),
            _ => break,
        }
    }
    while let Ok(receipt) = inbox.try_recv() {
        drain_receipt(receipt, &mut waiting);
    }
    let peaks = poller.finish().await;
    let [resyncs_after] = metrics(&http, ["muster_watch_resyncs_total"]).await;
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    drop(server);

    let (latencies, missed, last_delivery) = deliveries(&committed, &receipts, |w| w % services, services);
    let accepted = committed.len() as u64;
    let first_send = committed.iter().map(|d| d.sent).min().unwrap_or(t0);
    let span = last_reply.saturating_duration_since(first_send).as_secs_f64();
    let expected = latencies.count() + missed;
    let summary = EvacuationSummary {
        fleet: fleet as u64,
        services: services as u64,
        watchers: watchers as u64,
        watchers_opened: opened,
        drains: drained.len() as u64,
        target_per_s: rate,
        accepted,
        refused,
        first_refusal,
        accepted_per_s: if span > 0.0 { accepted as f64 / span } else { 0.0 },
        last_commit_ms: ms_between(t0, last_reply),
        max_send_lag_ms: max_lag.as_secs_f64() * 1_000.0,
        drain_reply: LatencySummary::of(&replies),
        deliveries: expected,
        missed,
        delivery: LatencySummary::of(&latencies),
        all_delivered_ms: last_delivery.filter(|_| missed == 0).map(|at| ms_between(t0, at)),
        queued_frames_peak: peaks.queued_frames,
        outstanding_bytes_peak: peaks.outstanding_bytes,
        resyncs: resyncs_after
            .zip(resyncs_before)
            .map(|(after, before)| (after - before).max(0.0) as u64),
        rss_peak_bytes: peaks.rss_bytes,
        load: crate::LoadSpan::since(load_at_start),
    };
    let mut result = row(
        drained.len() as u64,
        refused,
        last_reply.saturating_duration_since(first_send),
        &replies,
        StormSummary::Evacuation(summary),
    );
    result.latency = LatencySummary::of(&latencies);
    result.note = Some(
        "requests = drains; throughput = drains accepted per second; latency = drain sent → watcher received it"
            .to_owned(),
    );
    Ok(result)
}

#[cfg(test)]
#[path = "evacuation_tests.rs"]
mod tests;
