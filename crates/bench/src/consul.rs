//! The `consul` workload (opt-in; SPEC E1, "Performance"): blocking queries on the
//! Consul-compatible API at Consul's scale, and who wakes when one service changes.
//!
//! ```text
//!  register --consul-services services (one instance each) through PUT /v1/agent/service/register
//!  one waiter per service: GET /v1/health/service/<s>?index=I&wait=5m, again at the new index
//!  wait until every waiter is parked (the server's blocking-query gauge, else a settle pause)
//!  each second, --changes times: register one more instance in the next service
//!    count the waiters that returned with a higher index in that second (wake-ups)
//!    latency: change sent → that service's waiter back
//!    server CPU in that second (/proc/PID/stat)
//! ```
//! Consul's model wakes every blocking query in the datacenter on any write: N wake-ups per
//! change for N waiters. Muster's index is the revision of the result, so only the changed
//! service's waiter should wake: the report gives the median wake-ups per change, the ratio
//! to N, and the median server CPU per second. Counted on the client (a return with a
//! higher index); the server's own count of changed-blocking-query returns
//! (`muster_blocking_queries_total{api="consul",outcome="changed"}` on `/v1/metrics`), when
//! it is there, is reported beside it. Muster only: etcd has no Consul API.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::{HeaderMap, Method};
use serde::Serialize;
use serde_json::json;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::client::Http;
use crate::clock::{now, tokio_now};
use crate::codec::parse_metric;
use crate::driver::closed_loop;
use crate::histogram::Histogram;
use crate::meter::{CpuMeter, cpu_seconds};
use crate::report::{System, SystemResult};
use crate::{BenchError, Plan, Workload};

/// The issue's rate: one change per second.
const CHANGE_INTERVAL: Duration = Duration::from_secs(1);
/// Each blocking query's wait: far longer than any run, so no waiter times out and every
/// return is a wake-up (Consul's default is 5 minutes, its maximum 10).
const BLOCKING_WAIT: &str = "5m";
/// The client's bound on one blocking query: its wait, Consul's jitter (wait/16) and room.
const BLOCKING_TIMEOUT: Duration = Duration::from_secs(5 * 60 + 60);
/// Setup (registrations, first reads, parking every waiter) is bounded by count, with this
/// time bound only as a guard against a stalled server.
const SETUP_TIMEOUT: Duration = Duration::from_secs(120);
/// Without the server's gauge of waiting queries: time for the last waiters' requests to
/// reach the server and park after they were sent.
const SETTLE: Duration = Duration::from_secs(2);
/// How often the gauge is read while waiting for every waiter to park.
const PARK_POLL: Duration = Duration::from_millis(100);

/// What the consul workload measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConsulSummary {
    /// Services, one blocking query each.
    pub services: u64,
    /// Changes made, one per second, each to one service.
    pub changes: u64,
    /// Blocking queries that returned with a higher index in each change's second.
    pub wakeups_per_change: Vec<u64>,
    /// Their median.
    pub median_wakeups_per_change: f64,
    /// What Consul's model costs: every waiter wakes on every change.
    pub consul_model_wakeups_per_change: u64,
    /// The median divided by Consul's figure (1 ÷ services when only the changed
    /// service's waiter wakes).
    pub ratio_to_consul_model: f64,
    /// Changes whose service's waiter did not come back within its second.
    pub missed: u64,
    /// The server's count of blocking queries returned because their result changed,
    /// over the changes, when its metrics have it.
    pub server_wakeups: Option<u64>,
    /// The server's CPU in each second of changes, in cores.
    pub server_cores_per_second: Vec<f64>,
    /// Their median.
    pub median_server_cores: Option<f64>,
}

impl ConsulSummary {
    /// The figures from the raw counts.
    pub fn new(
        services: u64,
        wakeups_per_change: Vec<u64>,
        missed: u64,
        server_wakeups: Option<u64>,
        server_cores_per_second: Vec<f64>,
    ) -> ConsulSummary {
        let median_wakeups = median(&wakeups_per_change.iter().map(|&n| n as f64).collect::<Vec<_>>()).unwrap_or(0.0);
        ConsulSummary {
            services,
            changes: wakeups_per_change.len() as u64,
            median_wakeups_per_change: median_wakeups,
            consul_model_wakeups_per_change: services,
            ratio_to_consul_model: if services == 0 {
                0.0
            } else {
                median_wakeups / services as f64
            },
            wakeups_per_change,
            missed,
            server_wakeups,
            median_server_cores: median(&server_cores_per_second),
            server_cores_per_second,
        }
    }
}

/// The median (the mean of the middle two for an even count); `None` when empty.
pub(crate) fn median(values: &[f64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

/// A waiter came back with a higher index.
struct Wake {
    service: usize,
    at: Instant,
}

fn service_name(run: &str, i: usize) -> String {
    format!("consul-{run}-{i}")
}

fn register_body(name: &str, id: &str, port: u64) -> bytes::Bytes {
    json!({"Name": name, "ID": id, "Address": "127.0.0.1", "Port": port})
        .to_string()
        .into()
}

fn index_of(headers: &HeaderMap) -> Result<u64, String> {
    headers
        .get("x-consul-index")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("no X-Consul-Index in {headers:?}"))
}

/// The server's (waiting, changed) blocking-query figures for the Consul API, if exposed.
async fn server_counts(native: &Http) -> (Option<f64>, Option<f64>) {
    let Ok(body) = native.send_ok(Method::GET, "/v1/metrics", None).await else {
        return (None, None);
    };
    let text = String::from_utf8_lossy(&body);
    (
        parse_metric(&text, "muster_blocking_queries_waiting", &[("api", "consul")]),
        parse_metric(
            &text,
            "muster_blocking_queries_total",
            &[("api", "consul"), ("outcome", "changed")],
        ),
    )
}

/// One service's waiter: blocking queries back to back, a [`Wake`] for each higher index.
async fn waiter(consul: Http, service: usize, path: String, mut index: u64, wakes: mpsc::UnboundedSender<Wake>) {
    loop {
        let query = format!("{path}?index={index}&wait={BLOCKING_WAIT}");
        let Ok((status, headers, _)) = consul.send_full(Method::GET, &query, None, BLOCKING_TIMEOUT).await else {
            return;
        };
        let Ok(next) = index_of(&headers) else { return };
        if !status.is_success() {
            return;
        }
        if next > index {
            let _ = wakes.send(Wake { service, at: now() });
        }
        index = next;
    }
}

/// Runs the workload against Muster's Consul listener at `consul_url` (`native`: its
/// native API, for metrics).
pub(crate) async fn consul(
    native: &Http,
    consul_url: &str,
    pid: Option<u32>,
    plan: &Plan,
    run: &str,
) -> Result<SystemResult, BenchError> {
    let setup_failed = |detail: String| BenchError::Setup {
        system: System::Muster.name(),
        workload: Workload::Consul.name(),
        detail,
    };
    let services = plan.consul_services;
    let http = Http::new(consul_url, plan.connections);
    let run: Arc<str> = run.into();

    let (registrar, names) = (http.clone(), Arc::clone(&run));
    let registered = closed_loop(plan.connections, SETUP_TIMEOUT, services as u64, move |n| {
        let (http, run) = (registrar.clone(), Arc::clone(&names));
        async move {
            let name = service_name(&run, n as usize);
            let body = register_body(&name, &format!("{name}-0"), 8_000);
            http.send_ok(Method::PUT, "/v1/agent/service/register", Some(body))
                .await
                .map(drop)
        }
    })
    .await;
    if registered.errors > 0 || registered.requests < services as u64 {
        return Err(setup_failed(format!(
            "registered {} of {services} services; first error: {}",
            registered.requests - registered.errors,
            registered.first_error.as_deref().unwrap_or("none (timed out)")
        )));
    }

    // Each waiter starts from the index of its first read.
    let (wakes_tx, mut wakes) = mpsc::unbounded_channel();
    let mut waiters = JoinSet::new();
    for i in 0..services {
        let path = format!("/v1/health/service/{}", service_name(&run, i));
        let (_, headers, _) = http
            .send_full(Method::GET, &path, None, SETUP_TIMEOUT)
            .await
            .map_err(setup_failed)?;
        let index = index_of(&headers).map_err(setup_failed)?;
        waiters.spawn(waiter(http.clone(), i, path, index, wakes_tx.clone()));
    }
    drop(wakes_tx);
    let (waiting_before, changed_before) = server_counts(native).await;
    if waiting_before.is_some() {
        let deadline = tokio_now() + SETUP_TIMEOUT;
        while server_counts(native).await.0.unwrap_or(0.0) < services as f64 && tokio_now() < deadline {
            tokio::time::sleep(PARK_POLL).await;
        }
    } else {
        tokio::time::sleep(SETTLE).await;
    }
    // Wake-ups before the first change (there should be none) are not counted.
    while wakes.try_recv().is_ok() {}

    let meter = CpuMeter::start(pid);
    let stat = pid.map(|pid| format!("/proc/{pid}/stat"));
    let mut cpu_mark = stat.as_deref().and_then(cpu_seconds).map(|cpu| (cpu, now()));
    let mut cores_per_second = Vec::new();
    let mut wakeups_per_change = Vec::with_capacity(plan.changes);
    let mut pending: HashMap<usize, Instant> = HashMap::new();
    let mut latencies = Histogram::new();
    let (mut missed, mut change_error) = (0u64, None);
    let start = now();
    for k in 0..plan.changes {
        // Spread the changes over the services (7,919 is prime, so k ↦ service is one to one
        // while there are fewer changes than services).
        let service = (k * 7_919) % services;
        let name = service_name(&run, service);
        let sent = now();
        let tick = tokio::time::Instant::from_std(sent + CHANGE_INTERVAL);
        let body = register_body(&name, &format!("{name}-c{k}"), 9_000 + k as u64);
        match http
            .send_ok(Method::PUT, "/v1/agent/service/register", Some(body))
            .await
        {
            Ok(_) => {
                pending.insert(service, sent);
            }
            Err(err) => {
                change_error.get_or_insert(err);
            }
        }
        let mut woken = 0;
        while let Ok(Some(wake)) = tokio::time::timeout_at(tick, wakes.recv()).await {
            woken += 1;
            if let Some(sent) = pending.remove(&wake.service) {
                latencies.record(wake.at.saturating_duration_since(sent));
            }
        }
        wakeups_per_change.push(woken);
        if pending.remove(&service).is_some() {
            missed += 1;
        }
        if let (Some(path), Some((cpu, at))) = (stat.as_deref(), cpu_mark)
            && let Some(cpu_now) = cpu_seconds(path)
        {
            let wall = (now() - at).as_secs_f64();
            if wall > 0.0 {
                cores_per_second.push((cpu_now - cpu) / wall);
            }
            cpu_mark = Some((cpu_now, now()));
        }
    }
    let elapsed = now() - start;
    let (_, changed_after) = server_counts(native).await;
    waiters.abort_all();
    while waiters.join_next().await.is_some() {}

    let server_wakeups = match (changed_before, changed_after) {
        (Some(before), Some(after)) => Some((after - before).max(0.0) as u64),
        _ => None,
    };
    let summary = ConsulSummary::new(
        services as u64,
        wakeups_per_change,
        missed,
        server_wakeups,
        cores_per_second,
    );
    let mut result = SystemResult::from_requests(System::Muster, plan.changes as u64, missed, elapsed, &latencies);
    meter.finish(&mut result);
    result.note = Some(format!(
        "latency = change sent → its service's blocking query back{}",
        change_error.map_or_else(String::new, |err| format!("; first failed change: {err}"))
    ));
    result.consul = Some(summary);
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_takes_the_middle_or_the_mean_of_the_middle_two() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
    }

    #[test]
    fn one_wakeup_per_change_is_a_thousandth_of_consuls_model_at_a_thousand_services() {
        let summary = ConsulSummary::new(1_000, vec![1, 1, 2, 1, 1], 0, Some(5), vec![0.02, 0.01, 0.03]);
        assert_eq!(summary.changes, 5);
        assert_eq!(summary.median_wakeups_per_change, 1.0);
        assert_eq!(summary.consul_model_wakeups_per_change, 1_000);
        assert_eq!(summary.ratio_to_consul_model, 0.001);
        assert_eq!(summary.median_server_cores, Some(0.02));
    }

    #[test]
    fn waking_every_waiter_is_a_ratio_of_one() {
        let summary = ConsulSummary::new(1_000, vec![1_000, 1_000, 999], 0, None, vec![]);
        assert_eq!(summary.ratio_to_consul_model, 1.0);
        assert_eq!(summary.median_server_cores, None);
    }
}
