//! The `checks` workload (SPEC H, "Performance"): the server's health checker at fleet scale,
//! and how fast each check kind detects a failure against its configured bound.
//!
//! ```text
//!  bench process                                   muster serve (spawned, CPU metered)
//!  ─────────────                                   ───────────────────────────────────
//!  HTTP target (counts probes per second) ◀─probe─ checker: --checks endpoints, 10 s interval
//!  register N endpoints ──────────────────────────▶
//!  measure: probes per second at the target, server CPU over --check-window
//!
//!  detection, per kind (http, tcp, grpc, ttl), --detection-samples times:
//!    register one endpoint (1 s interval, 500 ms timeout, fall 3; ttl: 1 s) in a new service
//!    ─▶ ready ─▶ break the target at t0 ─▶ poll until not_serving at t1 ─▶ t1 − t0 vs bound
//! ```
//!
//! Each detection sample gets its own service: self-preservation lets one of a one-endpoint
//! service's removals through per window, and a bench must not measure the brake. Detection
//! runs while the fleet's checks keep running.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::StreamBody;
use hyper::body::Frame;
use hyper::service::service_fn;
use hyper::{Method, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::Plan;
use crate::clock::now;
use crate::driver::closed_loop;
use crate::meter::CpuMeter;
use crate::report::{System, SystemResult};
use crate::workloads::Subject;

/// The fleet's check interval: the issue's 10 s (1,000 probes/s for 10,000 endpoints).
const FLEET_INTERVAL: Duration = Duration::from_secs(10);
/// Services the fleet spreads over (100 endpoints each at the default scale).
const FLEET_SERVICES: u64 = 100;
/// The detection checks: probe every second, 500 ms timeout, fail after 3 failures.
const DETECT_INTERVAL_MS: u64 = 1_000;
const DETECT_TIMEOUT_MS: u64 = 500;
const DETECT_FALL: u64 = 3;
/// The checker's default jitter: ± 10% of the interval.
const JITTER: f64 = 0.1;
/// How often the bench polls an endpoint's state while waiting for a transition: the
/// resolution of the detection figures.
const POLL: Duration = Duration::from_millis(10);
/// What a TTL detection may take beyond the TTL for the commit of the change.
const TTL_COMMIT_ALLOWANCE_MS: f64 = 50.0;
/// The longest wait for any one transition before the sample counts as failed.
const TRANSITION_TIMEOUT: Duration = Duration::from_secs(30);

/// Probe rate and CPU of the fleet, and detection per kind.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChecksSummary {
    /// Endpoints with an HTTP check.
    pub endpoints: u64,
    /// Their check interval, in seconds.
    pub interval_s: f64,
    /// The expected probes per second: endpoints ÷ interval.
    pub expected_per_s: f64,
    /// Probes the target received in each whole second of the window.
    pub per_second: Vec<u64>,
    /// The largest relative distance of one second's count from the expected rate.
    pub max_deviation: f64,
    /// Detection latency per check kind.
    pub detection: Vec<DetectionSummary>,
}

/// How fast one kind of check detected a broken target.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DetectionSummary {
    /// `http`, `tcp`, `grpc` or `ttl`.
    pub kind: &'static str,
    /// Latencies measured, in milliseconds (failed samples are left out and counted).
    pub latencies_ms: Vec<f64>,
    /// Samples that did not complete.
    pub failed: u64,
    /// The configured bound: (interval + jitter) × fall + timeout; for TTL, the TTL plus one
    /// poll of the bench and 50 ms for the commit.
    pub bound_ms: f64,
}

/// Runs the workload against Muster.
pub(crate) async fn checks(subject: &Subject, plan: &Plan, run_id: u64) -> SystemResult {
    let fleet = Target::start().await;
    let started = now();
    let endpoints = plan.checks as u64;
    let http = subject.http.clone();
    let url = format!("http://{}/healthz", fleet.addr);
    let registered = closed_loop(plan.connections, Duration::from_secs(120), endpoints, move |n| {
        let (http, url) = (http.clone(), url.clone());
        async move {
            let path = format!("/v1/registry/bench/checks/c{run_id}-{}/i{n}", n % FLEET_SERVICES);
            let body = registration(json!({"url": url, "interval_ms": millis(FLEET_INTERVAL), "timeout_ms": 2_000}));
            http.send_ok(Method::PUT, &path, Some(body)).await.map(drop)
        }
    })
    .await;
    let mut result = SystemResult::from_requests(
        System::Muster,
        0,
        registered.errors,
        Duration::ZERO,
        &Default::default(),
    );
    if registered.errors > 0 || registered.requests < endpoints {
        result.note = Some(format!(
            "registering the fleet failed: {}",
            registered.first_error.unwrap_or_else(|| "timed out".into())
        ));
        return result;
    }
    // A second for the last registrations to reach the checker, then whole seconds only.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let first = (now() - started).as_secs() + 1;
    let meter = CpuMeter::start(subject.pid);
    let window = plan.check_window.as_secs().max(1);
    tokio::time::sleep(Duration::from_secs(first) + Duration::from_secs(window) - (now() - started)).await;
    meter.finish(&mut result);
    let per_second = fleet.counts(first, first + window);
    let expected = endpoints as f64 / FLEET_INTERVAL.as_secs_f64();
    let probes: u64 = per_second.iter().sum();
    let max_deviation = per_second
        .iter()
        .map(|count| (*count as f64 - expected).abs() / expected)
        .fold(0.0, f64::max);
    result.requests = probes;
    result.elapsed = Duration::from_secs(window);
    result.throughput_per_s = probes as f64 / window as f64;

    let mut detection = Vec::new();
    for kind in ["http", "tcp", "grpc", "ttl"] {
        detection.push(detect(subject, kind, plan.detection_samples, run_id).await);
    }
    fleet.stop();
    result.checks = Some(ChecksSummary {
        endpoints,
        interval_s: FLEET_INTERVAL.as_secs_f64(),
        expected_per_s: expected,
        per_second,
        max_deviation,
        detection,
    });
    result
}

fn millis(duration: Duration) -> u64 {
    duration.as_millis() as u64
}

/// A registration body with one check.
fn registration(check: Value) -> Bytes {
    let body = json!({
        "incarnation": 1,
        "endpoint": {"addresses": [{"ip": "127.0.0.1"}], "checks": [check]},
    });
    Bytes::from(body.to_string())
}

/// Measures `samples` detections of one kind.
async fn detect(subject: &Subject, kind: &'static str, samples: usize, run_id: u64) -> DetectionSummary {
    let interval = DETECT_INTERVAL_MS as f64;
    // A TTL deadline fires at the TTL; the bench then sees the committed change within one
    // poll, after one commit (an fsync of the group commit: a few ms, 50 ms allowed).
    let bound_ms = if kind == "ttl" {
        interval + POLL.as_millis() as f64 + TTL_COMMIT_ALLOWANCE_MS
    } else {
        (interval * (1.0 + JITTER)) * DETECT_FALL as f64 + DETECT_TIMEOUT_MS as f64
    };
    let mut summary = DetectionSummary {
        kind,
        latencies_ms: Vec::new(),
        failed: 0,
        bound_ms,
    };
    for sample in 0..samples {
        match detect_once(
            subject,
            kind,
            &format!("/v1/registry/bench/detect/{kind}-{sample}-{run_id}/d0"),
        )
        .await
        {
            Ok(latency) => summary.latencies_ms.push(latency.as_secs_f64() * 1_000.0),
            Err(why) => {
                tracing::warn!(kind, sample, %why, "detection sample failed");
                summary.failed += 1;
            }
        }
    }
    summary
}

async fn detect_once(subject: &Subject, kind: &str, path: &str) -> Result<Duration, String> {
    let http = &subject.http;
    let check = |url: String| json!({"url": url, "interval_ms": DETECT_INTERVAL_MS, "timeout_ms": DETECT_TIMEOUT_MS, "rise": 1, "fall": DETECT_FALL});
    let service = path.rsplit_once('/').map_or(path, |(service, _)| service);
    let wait = |state: &'static str| until_state(subject, service, state);
    match kind {
        "http" => {
            let target = Target::start().await;
            http.send_ok(
                Method::PUT,
                path,
                Some(registration(check(format!("http://{}/healthz", target.addr)))),
            )
            .await?;
            wait("ready").await?;
            target.mode.store(FAIL, Ordering::Relaxed);
            let t0 = now();
            wait("not_serving").await?;
            target.stop();
            Ok(now() - t0)
        }
        "tcp" => {
            let listener = TcpListener::bind("127.0.0.1:0").await.map_err(|e| e.to_string())?;
            let addr = listener.local_addr().map_err(|e| e.to_string())?;
            let accept = tokio::spawn(async move { while listener.accept().await.is_ok() {} });
            http.send_ok(Method::PUT, path, Some(registration(check(format!("tcp://{addr}")))))
                .await?;
            wait("ready").await?;
            accept.abort();
            let _ = accept.await;
            let t0 = now();
            wait("not_serving").await?;
            Ok(now() - t0)
        }
        "grpc" => {
            let (addr, status, server) = grpc_target().await?;
            http.send_ok(
                Method::PUT,
                path,
                Some(registration(check(format!("grpc://{addr}/bench.v1.Bench")))),
            )
            .await?;
            wait("ready").await?;
            status.store(GRPC_NOT_SERVING, Ordering::Relaxed);
            let t0 = now();
            wait("not_serving").await?;
            server.abort();
            Ok(now() - t0)
        }
        _ => {
            http.send_ok(
                Method::PUT,
                path,
                Some(registration(json!({"ttl_ms": DETECT_INTERVAL_MS}))),
            )
            .await?;
            let report = Bytes::from(json!({"incarnation": 1, "status": "pass"}).to_string());
            http.send_ok(Method::PUT, &format!("{path}/check"), Some(report))
                .await?;
            // The report's reply comes after its change committed: silence starts here.
            let t0 = now();
            wait("not_serving").await?;
            Ok(now() - t0)
        }
    }
}

/// Polls the one-endpoint service until its endpoint is in `state`.
async fn until_state(subject: &Subject, service: &str, state: &str) -> Result<(), String> {
    let deadline = now() + TRANSITION_TIMEOUT;
    loop {
        let body = subject.http.send_ok(Method::GET, service, None).await?;
        let reply: Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
        if reply["endpoints"][0]["serving"] == state {
            return Ok(());
        }
        if now() > deadline {
            return Err(format!("not {state} within {TRANSITION_TIMEOUT:?}: {reply}"));
        }
        tokio::time::sleep(POLL).await;
    }
}

const PASS: u8 = 0;
const FAIL: u8 = 1;

/// An HTTP/1.1 health endpoint on loopback: answers 200 (or 503 once failing), one request
/// per connection as the checker makes them, counting requests per second since start.
struct Target {
    addr: SocketAddr,
    mode: Arc<AtomicU8>,
    counts: Arc<Mutex<Vec<u64>>>,
    task: JoinHandle<()>,
}

impl Target {
    async fn start() -> Target {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
        let addr = listener.local_addr().expect("a bound address");
        let mode = Arc::new(AtomicU8::new(PASS));
        let counts = Arc::new(Mutex::new(Vec::new()));
        let (m, c, started) = (Arc::clone(&mode), Arc::clone(&counts), now());
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let (mode, counts) = (Arc::clone(&m), Arc::clone(&c));
                tokio::spawn(async move {
                    let mut request = Vec::with_capacity(256);
                    let mut buf = [0_u8; 512];
                    while !request.ends_with(b"\r\n\r\n") && request.len() < 8192 {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                    }
                    count(&counts, started);
                    let reply: &[u8] = if mode.load(Ordering::Relaxed) == PASS {
                        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok"
                    } else {
                        b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                    };
                    let _ = stream.write_all(reply).await;
                });
            }
        });
        Target {
            addr,
            mode,
            counts,
            task,
        }
    }

    /// Requests in each second `from..to` since the target started.
    fn counts(&self, from: u64, to: u64) -> Vec<u64> {
        let counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        (from..to)
            .map(|second| counts.get(second as usize).copied().unwrap_or(0))
            .collect()
    }

    fn stop(&self) {
        self.task.abort();
    }
}

fn count(counts: &Mutex<Vec<u64>>, started: Instant) {
    let second = (now() - started).as_secs() as usize;
    let mut counts = counts.lock().unwrap_or_else(PoisonError::into_inner);
    if counts.len() <= second {
        counts.resize(second + 1, 0);
    }
    counts[second] += 1;
}

const GRPC_SERVING: u64 = 1;
const GRPC_NOT_SERVING: u64 = 2;

/// A `grpc.health.v1.Health/Check` server on loopback answering with `status`, over h2c.
async fn grpc_target() -> Result<(SocketAddr, Arc<AtomicU64>, JoinHandle<()>), String> {
    let listener = TcpListener::bind("127.0.0.1:0").await.map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let status = Arc::new(AtomicU64::new(GRPC_SERVING));
    let shared = Arc::clone(&status);
    let server = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let status = Arc::clone(&shared);
            tokio::spawn(async move {
                let service = service_fn(move |_request| {
                    let code = status.load(Ordering::Relaxed);
                    async move {
                        // HealthCheckResponse { status = code }: field 1, varint (codes < 128).
                        let message = [0x08, code as u8];
                        let mut framed = vec![0, 0, 0, 0, message.len() as u8];
                        framed.extend_from_slice(&message);
                        let mut trailers = hyper::HeaderMap::new();
                        trailers.insert("grpc-status", hyper::header::HeaderValue::from_static("0"));
                        let frames = vec![
                            Ok::<_, Infallible>(Frame::data(Bytes::from(framed))),
                            Ok(Frame::trailers(trailers)),
                        ];
                        let body = StreamBody::new(futures_util::stream::iter(frames));
                        Ok::<_, Infallible>(
                            Response::builder()
                                .header("content-type", "application/grpc")
                                .body(body)
                                .expect("a valid response"),
                        )
                    }
                });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tcp), service)
                    .await;
            });
        }
    });
    Ok((addr, status, server))
}
