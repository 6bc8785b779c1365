//! The expiry workload (SPEC K1, L3): lease-renewal jitter lost after a restart, so many
//! leases expire in the same second, while an unrelated client keeps writing.
//!
//! ```text
//!  services of 110 endpoints: 80 durable, 30 on a lease each (--leases leases in all)
//!  one burst of renewals (64 connections) aligns every deadline within the burst's spread
//!  a namespace watcher from the current revision; an unrelated writer (4 connections,
//!  closed loop, another namespace) from the burst's end
//!  first deadline = burst start + TTL, last = burst end + TTL: every lease expires in there
//!  figures: last deadline → the watcher saw every `lease_expired` delete, each delete after
//!           its lease's deadline, revisions the expiry took, the unrelated writes' p50/p99
//!           during the storm against before it
//! ```
//! Why 80 durable endpoints beside 30 leased ones: self-preservation (SPEC H5) lets at most
//! 30% of a service leave within 60 s, so a service made only of expiring endpoints would
//! keep 70% of them serving by design. At 30 of 110 (27%) every lease may go at once, and
//! the run measures the expiry path, not the brake.

use std::sync::atomic::{AtomicBool, Ordering};

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use hyper::Method;
use muster_core::Incarnation;
use muster_core::api::{LeaseRequest, RegisterRequest, WriteReply};
use serde::Serialize;
use tokio::sync::mpsc;

use super::stream::{Kind, Target, WithEvents, watch as watch_stream};
use super::{
    Sample, Storm, StormSummary, closed_until, complete, ms_between, register_all, revision, revision_of, row,
    setup_failed,
};
use crate::client::Http;
use crate::clock::now;
use crate::driver::closed_loop;
use crate::histogram::Histogram;
use crate::render::{format_ms, latency_text, thousands};
use crate::report::{LatencySummary, SystemResult};
use crate::requests::Names;
use crate::{BenchError, Plan, Workload};

/// Leased endpoints per expiring service.
const LEASED_PER_SERVICE: usize = 30;
/// Durable endpoints beside them (module docs: 30 of 110 stays under the 30% brake).
const DURABLE_PER_SERVICE: usize = 80;
/// The unrelated writer's connections: a steady client, not a second storm.
const UNRELATED_CONNECTIONS: usize = 4;
/// The unrelated writer rewrites this many instances in turn, so its service stays small.
const UNRELATED_INSTANCES: u64 = 1_000;
/// `rev_before` is read this long before the first deadline: after every setup write, and
/// before the leader's first expiry tick (100 ms ticks) can fall due.
const BEFORE_MARGIN: Duration = Duration::from_millis(300);
/// Every lease should be gone within this after the last deadline; past it the run reports
/// how many were left.
const EXPIRY_TIMEOUT: Duration = Duration::from_secs(60);
/// The unrelated writer's own bound, against a stalled run: the TTL's wait and the expiry
/// timeout fit well inside.
const UNRELATED_MAX: Duration = Duration::from_secs(300);

/// The unrelated writes of one phase.
#[derive(Debug, Default)]
pub(crate) struct Phase {
    pub(crate) latencies: Histogram,
    pub(crate) writes: u64,
    pub(crate) errors: u64,
}

/// Splits `samples` by send time: before `storm` (from the first sample), and from `storm`
/// to `end`; later ones are in neither.
pub(crate) fn phases(samples: &[Sample], storm: Instant, end: Instant) -> (Phase, Phase) {
    let (mut before, mut during) = (Phase::default(), Phase::default());
    for sample in samples {
        let phase = if sample.sent < storm {
            &mut before
        } else if sample.sent <= end {
            &mut during
        } else {
            continue;
        };
        phase.writes += 1;
        match sample.revision {
            Some(_) => phase.latencies.record(sample.latency),
            None => phase.errors += 1,
        }
    }
    (before, during)
}

/// Revisions in `(before, after]` the unrelated writes took.
pub(crate) fn unrelated_in(samples: &[Sample], before: u64, after: u64) -> u64 {
    samples
        .iter()
        .filter(|s| s.revision.is_some_and(|r| r > before && r <= after))
        .count() as u64
}

/// What the expiry workload measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExpirySummary {
    /// Leases, one endpoint each.
    pub leases: u64,
    /// Services they are in.
    pub services: u64,
    /// Leased endpoints per service.
    pub leased_per_service: u64,
    /// Durable endpoints per service beside them.
    pub durable_per_service: u64,
    /// The leases' TTL.
    pub ttl_ms: u64,
    /// The renewal burst's length: the spread of the deadlines.
    pub deadline_spread_ms: f64,
    /// Leases already gone at the burst (renewal refused).
    pub expired_before_burst: u64,
    /// `lease_expired` deletes the watcher saw.
    pub gone: u64,
    /// First deadline → the first delete seen.
    pub first_gone_ms: Option<f64>,
    /// Last deadline (every lease due) → the last delete seen; `None` if not all went.
    pub all_gone_ms: Option<f64>,
    /// Each delete seen after its lease's deadline (renewal reply + TTL).
    pub after_deadline: Option<LatencySummary>,
    /// The server's revision just before the first deadline.
    pub revision_before: u64,
    /// Just after the last delete.
    pub revision_after: Option<u64>,
    /// Unrelated writes committed in between.
    pub unrelated_in_range: u64,
    /// Revisions the expiry took: after − before − unrelated.
    pub expiry_revisions: Option<u64>,
    /// Distinct revisions of the `lease_expired` updates the watcher saw.
    pub expiry_update_revisions: u64,
    /// Unrelated writes before the storm (burst end → first deadline).
    pub unrelated_before: Option<LatencySummary>,
    /// And during it (first deadline → last delete).
    pub unrelated_during: Option<LatencySummary>,
    /// Unrelated writes per second before the storm.
    pub unrelated_before_per_s: f64,
    /// And during it.
    pub unrelated_during_per_s: f64,
    /// Unrelated writes that failed, in either phase.
    pub unrelated_errors: u64,
    /// The load average at the workload's start and end.
    #[serde(flatten)]
    pub load: crate::LoadSpan,
}

impl ExpirySummary {
    /// The notes under the table.
    pub(crate) fn notes(&self) -> String {
        let latency = |summary| latency_text(summary, "none");
        let opt_ms = |v: Option<f64>| v.map_or_else(|| "never".to_owned(), format_ms);
        format!(
            "expiry: {} leases over {} services ({} leased + {} durable each), TTL {}; deadlines spread over {} \
             (the renewal burst); {} already gone at the burst\n\
             expiry: {} of {} deletes seen; first {} after the first deadline; all {} after the last deadline; \
             each after its deadline {}\n\
             expiry: revisions {} → {}: {} unrelated, {} for the expiry ({} distinct in its updates)\n\
             expiry: unrelated writes before the storm {} ({}/s), during it {} ({}/s); {} failed; \
             {}\n",
            thousands(self.leases),
            thousands(self.services),
            self.leased_per_service,
            self.durable_per_service,
            format_ms(self.ttl_ms as f64),
            format_ms(self.deadline_spread_ms),
            thousands(self.expired_before_burst),
            thousands(self.gone),
            thousands(self.leases),
            opt_ms(self.first_gone_ms),
            opt_ms(self.all_gone_ms),
            latency(self.after_deadline),
            self.revision_before,
            self.revision_after.map_or_else(|| "?".to_owned(), |r| r.to_string()),
            thousands(self.unrelated_in_range),
            self.expiry_revisions.map_or_else(|| "?".to_owned(), thousands),
            thousands(self.expiry_update_revisions),
            latency(self.unrelated_before),
            thousands(self.unrelated_before_per_s.round() as u64),
            latency(self.unrelated_during),
            thousands(self.unrelated_during_per_s.round() as u64),
            thousands(self.unrelated_errors),
            self.load.text(),
        )
    }
}

/// The unrelated writer: a closed loop on `UNRELATED_CONNECTIONS` connections until `stop`.
async fn unrelated(http: Http, tenant: String, stop: Arc<AtomicBool>) -> Vec<Sample> {
    let names = Arc::new(Names::new(0, 1));
    let tenant = Arc::new(tenant);
    closed_until(UNRELATED_CONNECTIONS, stop, UNRELATED_MAX, move |n| {
        let (http, tenant, names) = (http.clone(), Arc::clone(&tenant), Arc::clone(&names));
        async move {
            let path = format!("/v1/registry/{tenant}/bench/unrelated/u-{}", n % UNRELATED_INSTANCES);
            let (_, body) = names.muster_register(n);
            revision_of(http.send_ok(Method::PUT, &path, Some(body)).await)
        }
    })
    .await
}

/// A delete the namespace watcher saw: the lease's number, the update's revision, when.
type Gone = (usize, u64, Instant);

/// Runs the workload on `storm`'s server.
pub(crate) async fn expiry(storm: Storm, plan: &Plan) -> Result<SystemResult, BenchError> {
    let fail = |detail: String| setup_failed(Workload::Expiry, detail);
    let Storm {
        server,
        http,
        tenant,
        load_at_start,
    } = storm;
    let (leases, ttl_ms) = (plan.storms.expiry_leases, plan.storms.expiry_ttl_ms);
    let ttl = Duration::from_millis(ttl_ms);
    let services = leases.div_ceil(LEASED_PER_SERVICE);
    let names = Arc::new(Names::new(0, 1));
    let shared = Arc::new(tenant.clone());

    let durable = (services * DURABLE_PER_SERVICE) as u64;
    let (t, nm) = (Arc::clone(&shared), Arc::clone(&names));
    register_all(
        Workload::Expiry,
        "registering the durable endpoints",
        &http,
        durable,
        move |j| {
            let service = j as usize / DURABLE_PER_SERVICE;
            let (_, body) = nm.muster_register(j);
            (format!("/v1/registry/{t}/expiry/x-{service}/d-{j}"), body)
        },
    )
    .await?;

    let ids = Arc::new(Mutex::new(vec![0u64; leases]));
    let (registrar, t, nm, granted) = (http.clone(), Arc::clone(&shared), Arc::clone(&names), Arc::clone(&ids));
    let outcome = closed_loop(
        super::SETUP_CONNECTIONS,
        super::SETUP_TIMEOUT,
        leases as u64,
        move |i| {
            let (http, tenant, names, granted) =
                (registrar.clone(), Arc::clone(&t), Arc::clone(&nm), Arc::clone(&granted));
            async move {
                let service = i as usize / LEASED_PER_SERVICE;
                let path = format!("/v1/registry/{tenant}/expiry/x-{service}/l-{i}");
                let request = RegisterRequest {
                    incarnation: Incarnation(1),
                    endpoint: names.endpoint(1 << 23 | i),
                    lease: Some(LeaseRequest::Grant { ttl_ms }),
                    expected_revision: None,
                };
                let body = serde_json::to_vec(&request).map_err(|err| err.to_string())?;
                let reply = http.send_ok(Method::PUT, &path, Some(body.into())).await?;
                let reply: WriteReply = serde_json::from_slice(&reply).map_err(|err| err.to_string())?;
                let id = reply.lease.ok_or("a leased registration's reply has no lease")?.id.0;
                granted.lock().unwrap_or_else(PoisonError::into_inner)[i as usize] = id;
                Ok(())
            }
        },
    )
    .await;
    complete(
        Workload::Expiry,
        "registering the leased endpoints",
        &outcome,
        leases as u64,
    )?;
    let ids: Arc<Vec<u64>> = Arc::new(std::mem::take(&mut *ids.lock().unwrap_or_else(PoisonError::into_inner)));

    // The watcher, from the current revision: no snapshot of the whole namespace.
    let from = revision(&http).await.map_err(fail)?;
    let target = Target::resolve(&server.url).await.map_err(fail)?;
    let (gone_tx, mut gone_rx) = mpsc::unbounded_channel::<Option<Gone>>();
    let path = format!("/v1/watch/{tenant}/expiry?from_revision={from}");
    let watcher = tokio::spawn(async move {
        let mut first = true;
        watch_stream(&target, &path, |frame: WithEvents, at| {
            if std::mem::take(&mut first) {
                let _ = gone_tx.send(None);
            }
            if let (Kind::Update, Some(revision)) = (frame.kind, frame.revision) {
                for event in &frame.events {
                    let lease = event
                        .instance
                        .as_deref()
                        .and_then(|i| i.strip_prefix("l-")?.parse().ok());
                    if let (Some(lease), Some("lease_expired")) = (lease, event.reason.as_deref()) {
                        let _ = gone_tx.send(Some((lease, revision, at)));
                    }
                }
            }
        })
        .await
    });
    match tokio::time::timeout(super::SETUP_TIMEOUT, gone_rx.recv()).await {
        Ok(Some(None)) => {}
        _ => return Err(fail("the namespace watcher did not open".into())),
    }

    // The burst: every deadline set again within its spread.
    let renewed = Arc::new(Mutex::new(vec![None::<Instant>; leases]));
    let (renewer, t, lease_ids, marks) = (
        http.clone(),
        Arc::clone(&shared),
        Arc::clone(&ids),
        Arc::clone(&renewed),
    );
    let burst_start = now();
    let outcome = closed_loop(
        super::SETUP_CONNECTIONS,
        super::SETUP_TIMEOUT,
        leases as u64,
        move |i| {
            let (http, tenant, ids, marks) = (
                renewer.clone(),
                Arc::clone(&t),
                Arc::clone(&lease_ids),
                Arc::clone(&marks),
            );
            async move {
                let path = format!("/v1/leases/{tenant}/{}/renew", ids[i as usize]);
                http.send_ok(Method::PUT, &path, None).await?;
                marks.lock().unwrap_or_else(PoisonError::into_inner)[i as usize] = Some(now());
                Ok(())
            }
        },
    )
    .await;
    let burst_end = now();
    let renewed = std::mem::take(&mut *renewed.lock().unwrap_or_else(PoisonError::into_inner));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = tokio::spawn(unrelated(
        Http::new(&server.url, UNRELATED_CONNECTIONS),
        tenant.clone(),
        Arc::clone(&stop),
    ));
    let (first_deadline, last_deadline) = (burst_start + ttl, burst_end + ttl);
    tokio::time::sleep_until(tokio::time::Instant::from_std(first_deadline - BEFORE_MARGIN)).await;
    let revision_before = revision(&http).await.map_err(fail)?;

    let mut seen = vec![false; leases];
    let (mut gone, mut lateness, mut revisions) = (0u64, Histogram::new(), std::collections::BTreeSet::new());
    let (mut first_gone, mut last_gone) = (None, None::<Instant>);
    let expected = leases as u64 - outcome.errors;
    let deadline = tokio::time::Instant::from_std(last_deadline + EXPIRY_TIMEOUT);
    while gone < expected {
        let Ok(Some(Some((lease, revision, at)))) = tokio::time::timeout_at(deadline, gone_rx.recv()).await else {
            break;
        };
        if lease >= leases || std::mem::replace(&mut seen[lease], true) {
            continue;
        }
        gone += 1;
        revisions.insert(revision);
        first_gone.get_or_insert(at);
        last_gone = Some(last_gone.map_or(at, |last| last.max(at)));
        if let Some(renewed) = renewed[lease] {
            lateness.record(at.saturating_duration_since(renewed + ttl));
        }
    }
    let storm_end = if gone == expected { last_gone } else { None };
    let revision_after = revision(&http).await.ok();
    let phase_end = storm_end.unwrap_or_else(now);
    stop.store(true, Ordering::Relaxed);
    let samples = writer.await.unwrap_or_default();
    watcher.abort();
    drop(server);

    let (before, during) = phases(&samples, first_deadline, phase_end);
    let per_s = |phase: &Phase, from: Instant, to: Instant| {
        let secs = to.saturating_duration_since(from).as_secs_f64();
        if secs > 0.0 {
            phase.latencies.count() as f64 / secs
        } else {
            0.0
        }
    };
    let writer_start = samples.iter().map(|s| s.sent).min().unwrap_or(burst_end);
    let in_range = revision_after.map_or(0, |after| unrelated_in(&samples, revision_before, after));
    let summary = ExpirySummary {
        leases: leases as u64,
        services: services as u64,
        leased_per_service: LEASED_PER_SERVICE as u64,
        durable_per_service: DURABLE_PER_SERVICE as u64,
        ttl_ms,
        deadline_spread_ms: ms_between(burst_start, burst_end),
        expired_before_burst: outcome.errors,
        gone,
        first_gone_ms: first_gone.map(|at| ms_between(first_deadline, at)),
        all_gone_ms: storm_end.map(|at| ms_between(last_deadline, at)),
        after_deadline: LatencySummary::of(&lateness),
        revision_before,
        revision_after,
        unrelated_in_range: in_range,
        expiry_revisions: revision_after.map(|after| after.saturating_sub(revision_before).saturating_sub(in_range)),
        expiry_update_revisions: revisions.len() as u64,
        unrelated_before: LatencySummary::of_closed_loop(&before.latencies),
        unrelated_during: LatencySummary::of_closed_loop(&during.latencies),
        unrelated_before_per_s: per_s(&before, writer_start, first_deadline),
        unrelated_during_per_s: per_s(&during, first_deadline, phase_end),
        unrelated_errors: before.errors + during.errors,
        load: crate::LoadSpan::since(load_at_start),
    };
    let mut result = row(
        leases as u64,
        leases as u64 - gone,
        phase_end.saturating_duration_since(first_deadline),
        &lateness,
        StormSummary::Expiry(summary),
    );
    result.note = Some(
        "requests = leases; throughput = deletes seen per second from the first deadline; \
         latency = delete seen after its lease's deadline"
            .to_owned(),
    );
    Ok(result)
}

#[cfg(test)]
#[path = "expiry_tests.rs"]
mod tests;
