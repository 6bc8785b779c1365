//! The mirror workload (SPEC G2): how far behind its source a federated region's mirror is,
//! and what a mirrored endpoint costs the importing region.
//!
//! ```text
//!  spawn region a; fill --mirror-endpoints endpoints into namespace `mirror`, 1,000 a service
//!  spawn region b: [federation] region "b", peer "a", import "mirror/*"
//!    until b's status counts every endpoint          ─▶ initial sync time, b's RSS growth ÷ N
//!  open loop at --mirror-rate changes/s for --duration: one endpoint's serving state flips
//!    a's reply gives the change's revision r at t0; b's status is polled every POLL
//!    the first poll that shows the service at source revision ≥ r at t1 ─▶ lag t1 − t0
//! ```
//! The lag includes up to one poll interval and the poll's own request: an upper bound on
//! what a caller of region b would see. Muster only.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::Method;
use muster_core::federation::FederationStatusReply;
use serde_json::json;
use tokio::sync::Mutex;

use crate::client::Http;
use crate::clock::now;
use crate::histogram::Histogram;
use crate::report::{System, SystemResult};
use crate::spawn::{spawn_muster, spawn_muster_with};
use crate::watch::rss_of;
use crate::{BenchError, Workload};

/// Endpoints of a full run: the issue's 10,000 mirrored endpoints.
pub(crate) const DEFAULT_ENDPOINTS: u64 = 10_000;
/// `--quick`: a tenth.
pub(crate) const QUICK_ENDPOINTS: u64 = 1_000;
/// Changes per second of a full run: the issue's 100.
pub(crate) const DEFAULT_RATE: u64 = 100;
/// Endpoints per service (as the scale workload's fill).
const PER_SERVICE: u64 = 1_000;
/// How often region b's status is read while changes run.
const POLL: Duration = Duration::from_millis(2);
/// The longest a change may take to show in region b before it counts as lost.
const LOST_AFTER: Duration = Duration::from_secs(10);
/// The namespace mirrored.
const NAMESPACE: &str = "mirror";

fn fail(detail: String) -> BenchError {
    BenchError::Setup {
        system: "muster",
        workload: "mirror",
        detail,
    }
}

fn instance_path(n: u64) -> String {
    format!("/v1/registry/default/{NAMESPACE}/svc-{}/ep-{n}", n / PER_SERVICE)
}

fn registration(n: u64, state: &str) -> Bytes {
    let ip = format!("10.{}.{}.{}", (n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff);
    Bytes::from(
        json!({"incarnation": 1, "endpoint": {"addresses": [{"ip": ip}],
            "ports": [{"name": "http", "port": 8080, "protocol": "http"}], "serving": state}})
        .to_string(),
    )
}

/// Source revisions region b's status shows, by service name.
async fn mirrored(http: &Http) -> Result<HashMap<String, u64>, String> {
    let body = http.send_ok(Method::GET, "/v1/federation/status", None).await?;
    let status: FederationStatusReply = serde_json::from_slice(&body).map_err(|err| err.to_string())?;
    let mut revisions = HashMap::new();
    let mut endpoints = 0;
    for import in status.peers.iter().flat_map(|p| &p.imports) {
        for service in &import.services {
            endpoints += service.endpoints;
            revisions.insert(service.service.service.to_string(), service.source_revision.0);
        }
    }
    revisions.insert(String::new(), endpoints as u64);
    Ok(revisions)
}

/// Runs the workload: `endpoints` mirrored, `rate` changes a second for `duration`.
pub(crate) async fn mirror(
    bin: &std::path::Path,
    endpoints: u64,
    rate: u64,
    duration: Duration,
) -> Result<SystemResult, BenchError> {
    let load_at_start = crate::load::load_average();
    let (a, _) = spawn_muster(bin, false, false).await?;
    let a_http = Http::new(&a.url, 64);
    let empty_rss = rss_of(a.pid).map_err(fail)?;
    crate::storms::register_all(Workload::Mirror, "mirror fill", &a_http, endpoints, |n| {
        (instance_path(n), registration(n, "ready"))
    })
    .await?;
    let config = format!(
        "[federation]\nregion = \"b\"\nheartbeat_ms = 100\n\n[[federation.peer]]\nname = \"a\"\nurl = \"{}\"\nimport = [\"{NAMESPACE}/*\"]\n",
        a.url
    );
    let started = now();
    let (b, _) = spawn_muster_with(bin, false, false, &config).await?;
    let b_http = Http::new(&b.url, 4);
    loop {
        if mirrored(&b_http).await.ok().and_then(|m| m.get("").copied()) == Some(endpoints) {
            break;
        }
        if started.elapsed() > Duration::from_secs(120) {
            return Err(fail("region b did not mirror every endpoint within 120 s".into()));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let initial_sync = started.elapsed();
    let b_rss = rss_of(b.pid).map_err(fail)?;
    // Changes: open loop at `rate`, each recorded as (service, revision, committed at).
    let changes = (rate * duration.as_secs()).max(1);
    let pending: Arc<Mutex<Vec<(String, u64, Instant)>>> = Arc::default();
    let poller = {
        let (pending, b_http) = (Arc::clone(&pending), b_http.clone());
        tokio::spawn(async move {
            let mut histogram = Histogram::new();
            let (mut seen, mut lost) = (0u64, 0u64);
            let deadline = now() + duration + LOST_AFTER;
            while now() < deadline && seen + lost < changes {
                if let Ok(revisions) = mirrored(&b_http).await {
                    let now = now();
                    pending.lock().await.retain(|(service, revision, at)| {
                        if revisions.get(service).is_some_and(|r| r >= revision) {
                            histogram.record(now - *at);
                            seen += 1;
                            false
                        } else if now - *at > LOST_AFTER {
                            lost += 1;
                            false
                        } else {
                            true
                        }
                    });
                }
                tokio::time::sleep(POLL).await;
            }
            (histogram, seen, lost)
        })
    };
    let begin = now();
    let mut errors = 0u64;
    for i in 0..changes {
        let due = begin + Duration::from_secs_f64(i as f64 / rate as f64);
        tokio::time::sleep_until(due.into()).await;
        let n = (i * 7_919) % endpoints;
        let state = if (i / endpoints).is_multiple_of(2) {
            "degraded"
        } else {
            "ready"
        };
        let body = Bytes::from(json!({"incarnation": 1, "state": state, "reason": "mirror bench"}).to_string());
        match crate::storms::revision_of(
            a_http
                .send_ok(Method::PUT, &format!("{}/serving", instance_path(n)), Some(body))
                .await,
        ) {
            Ok(revision) => {
                let service = format!("svc-{}", n / PER_SERVICE);
                pending.lock().await.push((service, revision, now()));
            }
            Err(_) => errors += 1,
        }
    }
    let elapsed = begin.elapsed();
    let (histogram, seen, lost) = poller.await.map_err(|err| fail(err.to_string()))?;
    let per_endpoint = b_rss.saturating_sub(empty_rss) as f64 / endpoints as f64;
    let load = crate::load::LoadSpan::since(load_at_start);
    let note = format!(
        "{endpoints} endpoints mirrored from region a to b; initial sync {} ms; region b RSS {:.1} MiB, \
         {per_endpoint:.0} B per mirrored endpoint over an empty server's {:.1} MiB; {seen} of {changes} \
         changes seen in b at {rate}/s, {lost} not within {} s; lag = a's reply → b's status shows it \
         (polled every {} ms); {}",
        initial_sync.as_millis(),
        b_rss as f64 / 1_048_576.0,
        empty_rss as f64 / 1_048_576.0,
        LOST_AFTER.as_secs(),
        POLL.as_millis(),
        load.text(),
    );
    Ok(SystemResult {
        note: Some(note),
        ..SystemResult::from_requests(System::Muster, changes, errors + lost, elapsed, &histogram)
    })
}
