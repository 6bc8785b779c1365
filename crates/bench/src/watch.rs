//! The watch workloads, run as one phase per system because both need the same N open
//! streams: open N idle watches of one service (watchers: server RSS growth ÷ N), then
//! commit changes one at a time and time each delivery (fanout).
//!
//! ```text
//!  open N streams (≤ OPEN_CONCURRENCY connecting at once) ──▶ all saw a first frame
//!    ──▶ settle, read VmRSS ──▶ for each change: t0 = now; write → revision R
//!          every watcher: update frame with revision R at t ──▶ latency t − t0
//! ```
//!
//! Each watcher owns its own HTTP/1.1 connection (hyper's `client::conn`, no pool): a watch
//! holds its connection for its whole life, so a pool would only add bookkeeping, and one
//! task per watcher drives both the connection and the body, so aborting it closes the socket.
//! With `--watch-connections N` (Muster only) the streams share N HTTP/2 connections
//! instead, round-robin, each opened by its first watcher (SPEC W3's multiplexed watches).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::Connection;
use hyper::client::conn::http2;
use hyper::{Method, Request};
use hyper_util::rt::{TokioExecutor, TokioIo};
use muster_core::api::WriteReply;
use tokio::net::TcpStream;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;

use crate::clock::{now, tokio_now};
use crate::codec::{EtcdReply, EtcdStreamLine, FrameHead, Lines, parse_vm_rss};
use crate::histogram::Histogram;
use crate::meter::CpuMeter;
use crate::report::{LatencySummary, MemorySummary, System, SystemResult};
use crate::requests::{FANOUT_SERVICE, Names};
use crate::workloads::Subject;
use crate::{BenchError, Plan, Workload};

/// Connections being opened at once: far below the listen backlog (`somaxconn`, 4,096 here),
/// so no SYN is dropped and retried a second later, which would look like slow delivery.
pub(crate) const OPEN_CONCURRENCY: usize = 256;
/// How long opening every watcher may take: 10,000 streams open in a few seconds.
pub(crate) const OPEN_TIMEOUT: Duration = Duration::from_secs(120);
/// After the last stream opened, let the server finish its per-stream setup (first progress
/// timers, buffers) before reading RSS.
const SETTLE: Duration = Duration::from_secs(1);
/// A delivery later than this after its write is counted as missed: 100× the target p99.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(5);

/// What one watch phase measured.
#[derive(Debug, Default)]
pub(crate) struct WatchFigures {
    /// The fanout workload's figures.
    pub(crate) fanout: Option<SystemResult>,
    /// The watchers (memory) workload's figures.
    pub(crate) watchers: Option<SystemResult>,
    /// Why the watchers workload was skipped.
    pub(crate) memory_skipped: Option<String>,
}

/// What a watcher tells the phase.
enum Signal {
    /// The stream is open and its first frame arrived (or it failed to open).
    Opened(Result<(), String>),
    /// An update for this revision arrived at this instant.
    Delivered(u64, Instant),
}

/// The streams Muster takes on one HTTP/2 connection at once (`muster-http`'s accept loop).
const SERVER_STREAMS_PER_CONNECTION: usize = 1024;

/// How to open one watch stream.
#[derive(Clone)]
struct WatchRequest {
    system: System,
    target: Target,
    method: Method,
    path: String,
    body: Bytes,
    /// The HTTP/2 connections shared, and this watcher's turn among them.
    shared: Option<(Arc<Shared>, usize)>,
}

/// HTTP/2 connections shared by the watchers, each opened by the first watcher on it; the
/// tasks driving them end with the phase (when the last watcher drops its handle).
struct Shared {
    connections: Vec<tokio::sync::OnceCell<http2::SendRequest<Full<Bytes>>>>,
    drivers: std::sync::Mutex<JoinSet<()>>,
}

impl Shared {
    fn new(connections: usize) -> Shared {
        Shared {
            connections: (0..connections).map(|_| tokio::sync::OnceCell::new()).collect(),
            drivers: std::sync::Mutex::new(JoinSet::new()),
        }
    }

    /// The sender of connection `turn % N`, connected with prior knowledge on first use.
    async fn sender(&self, target: &Target, turn: usize) -> Result<http2::SendRequest<Full<Bytes>>, String> {
        let cell = &self.connections[turn % self.connections.len()];
        let sender = cell
            .get_or_try_init(|| async {
                let tcp = TcpStream::connect(target.addr)
                    .await
                    .map_err(|err| format!("connect: {err}"))?;
                tcp.set_nodelay(true).map_err(|err| err.to_string())?;
                let (sender, connection) = http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
                    .await
                    .map_err(|err| format!("HTTP/2 handshake: {err}"))?;
                let mut drivers = self.drivers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                drivers.spawn(async move {
                    let _ = connection.await;
                });
                Ok::<_, String>(sender)
            })
            .await?;
        Ok(sender.clone())
    }
}

/// The server's resident memory, in bytes.
pub(crate) fn rss_of(pid: u32) -> Result<u64, String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).map_err(|err| format!("pid {pid}: {err}"))?;
    parse_vm_rss(&status).ok_or_else(|| format!("pid {pid} has no VmRSS"))
}

/// Where watch streams connect: the address and `Host` of an `http://host:port` base URL.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    addr: SocketAddr,
    host: String,
}

impl Target {
    /// The address of an `http://host:port` base URL.
    pub(crate) async fn resolve(base: &str) -> Result<Target, String> {
        let host = base
            .strip_prefix("http://")
            .ok_or_else(|| format!("{base}: only http:// URLs are supported"))?
            .trim_end_matches('/');
        let addr = tokio::net::lookup_host(host)
            .await
            .map_err(|err| format!("{host}: {err}"))?
            .next()
            .ok_or_else(|| format!("{host}: no address"))?;
        Ok(Target {
            addr,
            host: host.to_owned(),
        })
    }
}

/// An open stream: its body, and the connection that must be polled for the body to move.
pub(crate) type Opened = (Incoming, Pin<Box<Connection<TokioIo<TcpStream>, Full<Bytes>>>>);

/// Connects its own HTTP/1.1 connection to `target` (calling `on_connect` once the TCP
/// handshake is done) and sends `method path` with `body` (JSON when not empty); a non-2xx
/// reply is an error with its status.
pub(crate) async fn open(
    target: &Target,
    method: Method,
    path: &str,
    body: Bytes,
    on_connect: impl FnOnce(Instant),
) -> Result<Opened, String> {
    let tcp = TcpStream::connect(target.addr)
        .await
        .map_err(|err| format!("connect: {err}"))?;
    on_connect(now());
    tcp.set_nodelay(true).map_err(|err| err.to_string())?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(|err| format!("handshake: {err}"))?;
    let mut connection = Box::pin(connection);
    let mut builder = Request::builder()
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, &target.host);
    if !body.is_empty() {
        builder = builder.header(hyper::header::CONTENT_TYPE, "application/json");
    }
    let request = builder.body(Full::new(body)).map_err(|err| err.to_string())?;
    let response = tokio::select! {
        response = sender.send_request(request) => response.map_err(|err| format!("request: {err}"))?,
        ended = &mut connection => return Err(format!("connection closed: {ended:?}")),
    };
    if !response.status().is_success() {
        return Err(format!("HTTP {}", response.status()));
    }
    Ok((response.into_body(), connection))
}

/// Runs one watcher until its stream ends or the task is aborted.
async fn watcher(request: WatchRequest, signals: mpsc::UnboundedSender<Signal>, opening: Arc<Semaphore>) {
    let permit = opening.acquire_owned().await;
    let mut opened = Some(permit);
    let result = stream(&request, &signals, &mut opened).await;
    if opened.is_some() {
        // Failed before its first frame: the phase is waiting for this watcher's verdict.
        let _ = signals.send(Signal::Opened(Err(result
            .err()
            .unwrap_or_else(|| "stream ended".into()))));
    }
}

/// Opens one stream on the shared HTTP/2 connection of `turn`.
async fn open_shared(request: &WatchRequest, shared: &Shared, turn: usize) -> Result<Incoming, String> {
    let mut sender = shared.sender(&request.target, turn).await?;
    let uri = format!("http://{}{}", request.target.host, request.path);
    let request = Request::builder()
        .method(request.method.clone())
        .uri(uri)
        .body(Full::new(request.body.clone()))
        .map_err(|err| err.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|err| format!("request: {err}"))?;
    if !response.status().is_success() {
        return Err(format!("HTTP {}", response.status()));
    }
    Ok(response.into_body())
}

async fn stream<P>(
    request: &WatchRequest,
    signals: &mpsc::UnboundedSender<Signal>,
    opened: &mut Option<P>,
) -> Result<(), String> {
    let (mut body, mut connection) = match &request.shared {
        Some((shared, turn)) => (open_shared(request, shared, *turn).await?, None),
        None => {
            let (body, connection) = open(
                &request.target,
                request.method.clone(),
                &request.path,
                request.body.clone(),
                |_| {},
            )
            .await?;
            (body, Some(connection))
        }
    };
    let mut lines = Lines::default();
    loop {
        let frame = tokio::select! {
            frame = body.frame() => frame,
            _ = async { connection.as_mut().expect("guarded").await }, if connection.is_some() => return Ok(()),
        };
        let Some(frame) = frame else { return Ok(()) };
        let at = now();
        let frame = frame.map_err(|err| format!("body: {err}"))?;
        let Ok(data) = frame.into_data() else { continue };
        lines.push(&data, |line| {
            match request.system {
                System::Muster | System::MusterTls => {
                    let head: FrameHead = serde_json::from_slice(line).map_err(|err| format!("frame: {err}"))?;
                    match (head.kind.as_str(), head.revision) {
                        ("update", Some(revision)) => {
                            let _ = signals.send(Signal::Delivered(revision, at));
                        }
                        ("error" | "resync" | "closing", _) => return Err(format!("stream ended with {}", head.kind)),
                        _ => {}
                    }
                }
                System::Etcd => {
                    let line: EtcdStreamLine = serde_json::from_slice(line).map_err(|err| format!("line: {err}"))?;
                    if let Some(error) = line.error {
                        return Err(format!("watch error: {error}"));
                    }
                    if let Some(result) = line.result
                        && !result.events.is_empty()
                        && let Some(header) = result.header
                    {
                        let _ = signals.send(Signal::Delivered(header.revision, at));
                    }
                }
            }
            if opened.take().is_some() {
                let _ = signals.send(Signal::Opened(Ok(())));
            }
            Ok(())
        })?;
    }
}

/// Commits fanout change `k` and returns its revision.
async fn commit(subject: &Subject, names: &Names, k: u64) -> Result<u64, String> {
    let instance = format!("c-{k}");
    match subject.system {
        System::Muster | System::MusterTls => {
            let (path, body) = names.muster_register_in(FANOUT_SERVICE, &instance, 1_000 + k);
            let body = subject.http.send_ok(Method::PUT, &path, Some(body)).await?;
            let reply: WriteReply = serde_json::from_slice(&body).map_err(|err| err.to_string())?;
            Ok(reply.revision.0)
        }
        System::Etcd => {
            let body = names.etcd_put_in(FANOUT_SERVICE, &instance, 1_000 + k);
            let body = subject.http.send_ok(Method::POST, "/v3/kv/put", Some(body)).await?;
            let reply: EtcdReply = serde_json::from_slice(&body).map_err(|err| err.to_string())?;
            Ok(reply.header.revision)
        }
    }
}

/// Opens `plan.watchers` streams on one service; then, as asked, reads the server's memory
/// and runs the fanout changes.
pub(crate) async fn watch_phase(
    subject: &Subject,
    plan: &Plan,
    names: &Arc<Names>,
    fanout: bool,
    memory: bool,
) -> Result<WatchFigures, BenchError> {
    let setup_failed = |detail: String| BenchError::Setup {
        system: subject.system.name(),
        workload: if fanout {
            Workload::Fanout.name()
        } else {
            Workload::Watchers.name()
        },
        detail,
    };
    let mut figures = WatchFigures::default();
    // A watched service with one endpoint: every watcher starts from a real snapshot.
    commit(subject, names, 0).await.map_err(setup_failed)?;
    let target = Target::resolve(subject.http.base()).await.map_err(setup_failed)?;
    let (method, path, body) = match subject.system {
        System::Muster | System::MusterTls => (Method::GET, names.muster_watch(FANOUT_SERVICE), Bytes::new()),
        System::Etcd => (Method::POST, "/v3/watch".to_owned(), names.etcd_watch(FANOUT_SERVICE)),
    };
    let shared = match (plan.watch_connections, subject.system) {
        (None, _) => None,
        (Some(connections), System::Muster) => {
            let connections = connections.clamp(1, plan.watchers.max(1));
            let needed = plan.watchers.div_ceil(SERVER_STREAMS_PER_CONNECTION);
            if connections < needed {
                return Err(setup_failed(format!(
                    "--watch-connections {connections}: {} watchers need at least {needed} (the server takes {SERVER_STREAMS_PER_CONNECTION} streams on a connection)",
                    plan.watchers
                )));
            }
            Some(Arc::new(Shared::new(connections)))
        }
        (Some(_), system) => {
            return Err(setup_failed(format!(
                "--watch-connections: for plain Muster only (HTTP/2 with prior knowledge), not {}",
                system.name()
            )));
        }
    };
    let request = WatchRequest {
        system: subject.system,
        target,
        method,
        path,
        body,
        shared: None,
    };
    let pid = match (memory, subject.pid) {
        (true, Some(pid)) => Some(pid),
        (true, None) => {
            figures.memory_skipped = Some(format!(
                "for {}: its PID is unknown (use --spawn{} or --{}-pid)",
                subject.system.name(),
                if subject.system == System::Etcd { "-etcd" } else { "" },
                if subject.system == System::Etcd {
                    "etcd"
                } else {
                    "server"
                },
            ));
            None
        }
        (false, _) => None,
    };
    let rss_before = pid.map(rss_of).transpose().map_err(setup_failed)?;

    let (signals, mut inbox) = mpsc::unbounded_channel();
    let opening = Arc::new(Semaphore::new(OPEN_CONCURRENCY));
    let mut watchers = JoinSet::new();
    let open_start = now();
    for turn in 0..plan.watchers {
        let mut request = request.clone();
        request.shared = shared.as_ref().map(|shared| (Arc::clone(shared), turn));
        watchers.spawn(watcher(request, signals.clone(), Arc::clone(&opening)));
    }
    drop(signals);
    let mut deliveries: HashMap<u64, Vec<Instant>> = HashMap::new();
    let (mut open, mut failed, mut first_error) = (0u64, 0u64, None);
    let deadline = tokio_now() + OPEN_TIMEOUT;
    while open + failed < plan.watchers as u64 {
        match tokio::time::timeout_at(deadline, inbox.recv()).await {
            Ok(Some(Signal::Opened(Ok(())))) => open += 1,
            Ok(Some(Signal::Opened(Err(err)))) => {
                failed += 1;
                first_error.get_or_insert(err);
            }
            Ok(Some(Signal::Delivered(revision, at))) => deliveries.entry(revision).or_default().push(at),
            Ok(None) | Err(_) => break,
        }
    }
    let open_time = now() - open_start;
    let not_opened = plan.watchers as u64 - open;
    let opened_note = format!(
        "{} of {} streams opened in {:.2} s{}",
        open,
        plan.watchers,
        open_time.as_secs_f64(),
        first_error
            .as_ref()
            .map_or_else(String::new, |err| format!("; first failure: {err}")),
    );

    if let (Some(pid), Some(before)) = (pid, rss_before) {
        tokio::time::sleep(SETTLE).await;
        let after = rss_of(pid).map_err(setup_failed)?;
        let mut result = SystemResult::from_requests(
            subject.system,
            plan.watchers as u64,
            not_opened,
            open_time,
            &Histogram::new(),
        );
        result.memory = Some(MemorySummary::new(open, before, after));
        result.note = Some(opened_note.clone());
        figures.watchers = Some(result);
    }

    if fanout {
        let mut sent_at: Vec<(u64, Instant)> = Vec::with_capacity(plan.changes);
        let mut writes = Histogram::new();
        let mut write_error = None;
        let meter = CpuMeter::start(subject.pid);
        // The server's RSS with every stream open, and its peak while the changes fan out.
        let rss_open = subject.pid.and_then(|pid| rss_of(pid).ok());
        let poller = subject.pid.map(|pid| crate::storms::Poller::start(pid, None));
        let start = now();
        for k in 0..plan.changes as u64 {
            let sent = now();
            let revision = match commit(subject, names, k + 1).await {
                Ok(revision) => revision,
                Err(err) => {
                    write_error.get_or_insert(err);
                    continue;
                }
            };
            writes.record(now() - sent);
            sent_at.push((revision, sent));
            let deadline = tokio::time::Instant::from_std(sent + DELIVERY_TIMEOUT);
            while deliveries.get(&revision).map_or(0, Vec::len) < open as usize {
                match tokio::time::timeout_at(deadline, inbox.recv()).await {
                    Ok(Some(Signal::Delivered(revision, at))) => deliveries.entry(revision).or_default().push(at),
                    Ok(Some(Signal::Opened(_))) => {}
                    Ok(None) | Err(_) => break,
                }
            }
            tokio::time::sleep(plan.change_interval).await;
        }
        // Late deliveries that are already queued still count if within the timeout.
        while let Ok(signal) = inbox.try_recv() {
            if let Signal::Delivered(revision, at) = signal {
                deliveries.entry(revision).or_default().push(at);
            }
        }
        let elapsed = now() - start;
        let rss_peak = match poller {
            Some(poller) => poller.finish().await.rss_bytes,
            None => None,
        };
        let rss_note = match subject.pid {
            Some(_) => format!(
                "; server RSS {} with the streams open, peak {} during the changes",
                crate::render::mib_text(rss_open),
                crate::render::mib_text(rss_peak)
            ),
            None => String::new(),
        };
        let mut latencies = Histogram::new();
        for (revision, sent) in &sent_at {
            for at in deliveries.get(revision).into_iter().flatten() {
                let latency = at.saturating_duration_since(*sent);
                if latency <= DELIVERY_TIMEOUT {
                    latencies.record(latency);
                }
            }
        }
        let expected = plan.watchers as u64 * plan.changes as u64;
        let mut result = SystemResult::from_requests(
            subject.system,
            expected,
            expected.saturating_sub(latencies.count()),
            elapsed,
            &latencies,
        );
        let writes_note = LatencySummary::of(&writes).map_or_else(String::new, |w| {
            format!("; commits: p50 {:.2} ms, max {:.2} ms", w.p50_ms, w.max_ms)
        });
        // SPEC K1: what one delivered update costs the server, from its rusage over the phase
        // (the commits and the idle progress frames between changes included).
        let cpu_note = match (meter.server_seconds(), latencies.count()) {
            (Some(seconds), delivered) if delivered > 0 => format!(
                "; server CPU {:.2} µs per delivered update",
                seconds * 1e6 / delivered as f64
            ),
            _ => String::new(),
        };
        meter.finish(&mut result);
        result.note = Some(format!(
            "{opened_note}{writes_note}{cpu_note}{rss_note}{}",
            write_error.map_or_else(String::new, |err| format!("; first failed commit: {err}"))
        ));
        figures.fanout = Some(result);
    }
    watchers.abort_all();
    while watchers.join_next().await.is_some() {}
    Ok(figures)
}
