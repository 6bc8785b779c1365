//! The soak workload (SPEC R5, R6): a spawned 3-node cluster under a steady mix for
//! `--duration`, its memory per node printed every minute, and at the end the client's own
//! history checked against what every node serves.
//!
//! ```text
//!  spawn node 1, join nodes 2 and 3 (voters)
//!  for --duration, at once:
//!    writer    registrations on a renewed lease; one in twenty on a 2 s lease nobody renews
//!              (expiries); one in seven a drain with a 1 s grace of an earlier instance; past
//!              WINDOW instances the oldest is deregistered (the registry stays bounded)
//!    renewer   the shared lease, every second
//!    watchers  WATCHERS streams, each resuming by revision on the next node every 20-40 s
//!    leader    every LEADER_EVERY: the leader stopped (SIGTERM) and started again
//!    sampler   every minute: RSS, open files, sockets and threads of each node, printed
//!  then: writes stop, every node reaches one revision, leases run out, and each node's sets
//!  are held against the record: nothing acknowledged lost, nothing removed still there
//! ```
//!
//! A write whose outcome the client never learned (the node went down mid-request) is
//! marked uncertain and left out of the check, as a real client would have to. Muster only,
//! `--spawn` only.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use hyper::{Method, StatusCode};
use serde_json::json;
use tokio::sync::watch;

use crate::client::Http;
use crate::clock::now;
use crate::histogram::Histogram;

/// A node of the soak's cluster, started by the caller (`scale::member::Member`): the soak
/// only talks to it over HTTP, reads its memory and restarts it.
pub(crate) trait SoakNode: Send {
    /// Its node id.
    fn id(&self) -> u64;
    /// Its HTTP base URL.
    fn url(&self) -> String;
    /// Its PID now.
    fn pid(&self) -> u32;
    /// Stops it with SIGTERM and starts it again on the same data dir; resolves once it is
    /// ready and names a leader.
    fn restart(&mut self) -> Pin<Box<dyn Future<Output = Result<(), SoakError>> + Send + '_>>;
}

/// Why a soak ended early or failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SoakError {
    /// The cluster did not do what the soak asked of it (grant, elect, restart, converge).
    #[error("the cluster: {0}")]
    Cluster(String),
    /// A node's answer could not be read.
    #[error("a node's answer: {0}")]
    Answer(String),
    /// A node serves something the client's record says it must not, or lacks what it must.
    #[error("the history check failed: {0}")]
    History(String),
}

/// What the soak measured, for the caller's report.
pub(crate) struct Soaked {
    /// Writes sent, and those not done.
    pub(crate) writes: u64,
    pub(crate) errors: u64,
    /// Latency of the writes done.
    pub(crate) latency: Histogram,
    /// The figures, as one line.
    pub(crate) note: String,
}

/// The cluster's config: snapshots often enough that a soak takes many (and purges the log),
/// and the registry's two tables bounded by a window, not a size, set so that both are full
/// within the 5-minute warm-up: 20,000 revisions of history (about 3 minutes of this load;
/// the default 100,000 takes 16) and fences kept 2 minutes (24 h by default). Growth after
/// the warm-up is then what no bound holds (DECISIONS "Soak").
pub(crate) const CONFIG: &str = "snapshot_every = 5000\ndns_enabled = false\n\n[consul]\nenabled = false\n\n\
                                 [registry]\nhistory_revisions = 20000\nfence_retention_ms = 120000\n";

/// Services the writer spreads its instances over.
const SERVICES: u64 = 16;
/// Live instances at most: past it the oldest one is deregistered.
const WINDOW: u64 = 2_000;
/// Watch streams, each over one service.
const WATCHERS: u64 = 8;
/// The writer's pace: one operation each.
const PACE: Duration = Duration::from_millis(10);
/// The shared lease's TTL; renewed every second.
const LEASE_TTL_MS: u64 = 10_000;
/// The TTL of the leases nobody renews.
const SHORT_TTL_MS: u64 = 2_000;
/// The longest between two leader changes; a short soak has five.
const LEADER_EVERY: Duration = Duration::from_secs(180);
/// How often memory is printed: each node's median RSS over the minute.
const SAMPLE_EVERY: Duration = Duration::from_secs(60);
/// How often RSS is read for that median. A snapshot being built holds a transient copy for
/// a second or two (the state's encoding, up to tens of MiB), which one reading a minute would
/// report as growth whenever it happened to land on one; the median over the minute is what
/// the node holds, and the minute's highest reading is printed beside it.
const RSS_EVERY: Duration = Duration::from_secs(5);
/// Where the soak writes.
const NAMESPACE: &str = "/v1/registry/default/soak";

/// What the client last learned of an instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Registered on the renewed lease and not removed: every node must serve it.
    Present,
    /// Deregistered, drained past its grace, or on a lease nobody renews: no node may.
    Absent,
    /// The last write's outcome is unknown: not judged.
    Uncertain,
}

/// How a write ended, as the client saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Acknowledged (or already so).
    Done,
    /// Refused with a 4xx: nothing changed.
    Refused,
    /// No answer, or a 5xx: it may or may not have been applied.
    Unknown,
}

/// The client's record, shared by the writer and the final check.
#[derive(Default)]
struct History {
    expect: BTreeMap<u64, Expect>,
    writes: u64,
    errors: u64,
    /// Writes not done, by method and status ("no answer" without one).
    failures: BTreeMap<String, u64>,
    latency: Histogram,
}

/// One memory sample of one node.
#[derive(Debug, Clone, Copy)]
struct Sample {
    minute: u64,
    node: u64,
    /// The median of the minute's readings, and the highest.
    rss_kib: u64,
    rss_max_kib: u64,
    /// Open descriptors other than sockets (the data dir's files, the runtime's own), and
    /// sockets: these come and go with the soak's own connections (watchers move every
    /// 20-40 s), so a leak shows in `files` and in a trend of `sockets`, not in one reading.
    files: u64,
    sockets: u64,
    threads: u64,
}

/// Runs the soak for `duration` on `members`, a running 3-node cluster.
pub(crate) async fn soak(mut members: Vec<Box<dyn SoakNode>>, duration: Duration) -> Result<Soaked, SoakError> {
    let load_at_start = crate::load::load_average();
    let urls: Vec<String> = members.iter().map(|m| m.url()).collect();
    let clients = Arc::new(urls.iter().map(|url| Http::new(url, 4)).collect::<Vec<_>>());
    let lease = grant(&clients, LEASE_TTL_MS).await?;
    let history = Arc::new(Mutex::new(History::default()));
    let (stop, stopping) = watch::channel(false);
    let watch_stats = Arc::new(Mutex::new(WatchStats::default()));

    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(writer(
        Arc::clone(&clients),
        lease,
        Arc::clone(&history),
        stopping.clone(),
    ));
    tasks.spawn(renewer(Arc::clone(&clients), lease, stopping.clone()));
    for k in 0..WATCHERS {
        tasks.spawn(watcher(urls.clone(), k, Arc::clone(&watch_stats), stopping.clone()));
    }
    let started = now();
    let leader_every = LEADER_EVERY.min(duration / 5).max(Duration::from_secs(10));
    let (mut next_change, mut next_sample, mut next_rss) = (started + leader_every, started, started);
    let (mut samples, mut leader_changes) = (Vec::new(), 0_u64);
    let mut readings: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    while now() - started < duration {
        if now() >= next_rss {
            for member in &members {
                readings.entry(member.id()).or_default().push(rss_kib(member.pid()));
            }
            // From now, not from the missed tick: a restart that held the loop is not made up
            // for with a burst of readings of the fresh process.
            next_rss = now() + RSS_EVERY;
        }
        if now() >= next_sample {
            let minute = (now() - started).as_secs() / 60;
            let line = sample(&members, minute, &mut readings, &mut samples);
            tracing::info!("soak: minute {minute}: {line}");
            eprintln!("soak: minute {minute}: {line}");
            while next_sample <= now() {
                next_sample += SAMPLE_EVERY;
            }
        }
        if now() >= next_change {
            change_leader(&mut members).await?;
            leader_changes += 1;
            next_change += leader_every;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let minute = duration.as_secs().div_ceil(60);
    let line = sample(&members, minute, &mut readings, &mut samples);
    eprintln!("soak: end: {line}");
    stop.send_replace(true);
    while tasks.join_next().await.is_some() {}

    converge(&clients).await?;
    // The unrenewed leases and the drains' graces run out, then every node is read. Expiries
    // may be held back by self-preservation (at most 30% of a service a minute, SPEC H5):
    // read again until nothing removed is served, for up to two of its windows.
    tokio::time::sleep(Duration::from_millis(SHORT_TTL_MS + 3_000)).await;
    let history = std::mem::take(&mut *history.lock().unwrap_or_else(PoisonError::into_inner));
    let settle = now();
    let verdict = loop {
        converge(&clients).await?;
        let verdict = check(&clients, &history.expect).await?;
        if !verdict.contains("STILL") || now() - settle > Duration::from_secs(130) {
            break verdict;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    let watches = *watch_stats.lock().unwrap_or_else(PoisonError::into_inner);
    let note = format!(
        "3 nodes, {:.0} s, load {} at start; {} writes ({} not done: {:?}), {} leader changes; \
         history: {verdict}; watches: {} resumes, {} snapshots on a resume, {} ended by an error, {} opens \
         refused by a node that was down; \
         memory by node: {}",
        duration.as_secs_f64(),
        load_at_start.map_or_else(|| "?".to_owned(), |l| format!("{l:.2}")),
        history.writes,
        history.errors,
        history.failures,
        leader_changes,
        watches.resumes,
        watches.resnapshots,
        watches.refused,
        watches.unopened,
        curve(&samples),
    );
    if verdict.contains("LOST") || verdict.contains("STILL") {
        return Err(SoakError::History(note));
    }
    Ok(Soaked {
        writes: history.writes,
        errors: history.errors,
        latency: history.latency,
        note,
    })
}

/// Grants a lease of `ttl_ms` on whichever node answers.
async fn grant(clients: &[Http], ttl_ms: u64) -> Result<u64, SoakError> {
    let body = Bytes::from(json!({ "ttl_ms": ttl_ms }).to_string());
    let (reply, _) = on_any(clients, 0, Method::POST, "/v1/leases/default", Some(body)).await;
    match reply {
        Some((status, body)) if status.is_success() => serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["lease"]["id"].as_u64())
            .ok_or_else(|| SoakError::Answer(format!("a lease grant: {}", String::from_utf8_lossy(&body)))),
        other => Err(SoakError::Cluster(format!(
            "no node granted the soak's lease: {other:?}"
        ))),
    }
}

/// Sends to node `first`, and on a transport error or 5xx to the next, once around. The
/// answer, and whether an earlier attempt's outcome went unknown (it may have been applied
/// although a later node refused).
async fn on_any(
    clients: &[Http],
    first: usize,
    method: Method,
    path: &str,
    body: Option<Bytes>,
) -> (Option<(StatusCode, Bytes)>, bool) {
    let mut last = None;
    for i in 0..clients.len() {
        let client = &clients[(first + i) % clients.len()];
        match client.send(method.clone(), path, body.clone()).await {
            Ok((status, reply)) if !status.is_server_error() => return (Some((status, reply)), i > 0),
            Ok(answer) => last = Some(answer),
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (last, true)
}

fn instance_path(n: u64) -> String {
    format!("{NAMESPACE}/svc-{}/i-{n}", n % SERVICES)
}

fn registration(n: u64, lease: serde_json::Value) -> Bytes {
    let ip = format!("10.{}.{}.{}", n / 62_500 % 250, n / 250 % 250, n % 250 + 1);
    let endpoint = json!({"addresses": [{"ip": ip}], "ports": [{"name": "http", "port": 8080, "protocol": "http"}]});
    Bytes::from(json!({"incarnation": 1, "endpoint": endpoint, "lease": lease}).to_string())
}

/// The writer: one operation per [`PACE`] until stopped.
async fn writer(clients: Arc<Vec<Http>>, lease: u64, history: Arc<Mutex<History>>, stopping: watch::Receiver<bool>) {
    let mut n = 0_u64;
    while !*stopping.borrow() {
        let unrenewed = n % 20 == 19;
        let lease_request = match unrenewed {
            true => json!({ "ttl_ms": SHORT_TTL_MS }),
            false => json!({ "id": lease }),
        };
        let mut ops = vec![(n, Method::PUT, instance_path(n), Some(registration(n, lease_request)))];
        let expect_after = |done: bool, op: &Method| match (done, op, unrenewed) {
            (false, _, _) => Expect::Uncertain,
            (true, &Method::PUT, false) => Expect::Present,
            (true, _, _) => Expect::Absent,
        };
        if n % 7 == 3 && n >= 7 {
            let drained = n - 7;
            let body = json!({"incarnation": 1, "reason": "soak", "grace_ms": 1_000}).to_string();
            ops.push((
                drained,
                Method::POST,
                format!("{}/drain", instance_path(drained)),
                Some(Bytes::from(body)),
            ));
        }
        if n >= WINDOW {
            let path = format!("{}?incarnation=1", instance_path(n - WINDOW));
            ops.push((n - WINDOW, Method::DELETE, path, None));
        }
        for (instance, method, path, body) in ops {
            let sent = now();
            let (reply, was_unknown) =
                on_any(&clients, instance as usize % clients.len(), method.clone(), &path, body).await;
            let mut history = history.lock().unwrap_or_else(PoisonError::into_inner);
            history.writes += 1;
            let known = history.expect.get(&instance).copied();
            let outcome = match &reply {
                Some((status, _)) if status.is_success() => {
                    history.latency.record(now() - sent);
                    Outcome::Done
                }
                // Removing what is already gone, or draining what a lease already took.
                Some((StatusCode::NOT_FOUND, _)) if method != Method::PUT => Outcome::Done,
                Some((status, _)) if status.is_client_error() => Outcome::Refused,
                _ => Outcome::Unknown,
            };
            if outcome != Outcome::Done {
                history.errors += 1;
                let why = reply.map_or_else(|| "no answer".to_owned(), |(status, _)| status.as_u16().to_string());
                *history.failures.entry(format!("{method} {why}")).or_default() += 1;
            }
            // Once uncertain, always: a write that timed out may still commit after a later
            // one was answered. A refusal changed nothing.
            let next = match (known, outcome) {
                (Some(Expect::Uncertain), _) => Expect::Uncertain,
                (_, Outcome::Unknown) => Expect::Uncertain,
                // An earlier node may have applied it before a later one refused it.
                (_, Outcome::Refused) if was_unknown => Expect::Uncertain,
                (known, Outcome::Refused) => known.unwrap_or(Expect::Absent),
                (_, Outcome::Done) => expect_after(true, &method),
            };
            history.expect.insert(instance, next);
        }
        n += 1;
        tokio::time::sleep(PACE).await;
    }
}

/// Renews the shared lease every second on whichever node answers.
async fn renewer(clients: Arc<Vec<Http>>, lease: u64, mut stopping: watch::Receiver<bool>) {
    let path = format!("/v1/leases/default/{lease}/renew");
    loop {
        let _ = on_any(&clients, 0, Method::PUT, &path, None).await;
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = stopping.changed() => return,
        }
    }
}

/// What the watchers saw.
#[derive(Debug, Default, Clone, Copy)]
struct WatchStats {
    resumes: u64,
    /// Snapshots on a resume (0 expected: history covers 20-40 s).
    resnapshots: u64,
    /// Streams ended by an error frame (they start over with a snapshot).
    refused: u64,
    /// Streams that could not be opened (the node was down): resumed on the next one.
    unopened: u64,
}

/// One watcher of `svc-{k}`: streams for 20-40 s, then resumes by revision on the next node.
async fn watcher(urls: Vec<String>, k: u64, stats: Arc<Mutex<WatchStats>>, mut stopping: watch::Receiver<bool>) {
    let mut revision: Option<u64> = None;
    let mut node = k as usize;
    let path = format!("/v1/watch/default/soak/svc-{k}");
    while !*stopping.borrow() {
        let http = Http::new(&urls[node % urls.len()], 1);
        let query = revision.map_or_else(String::new, |r| format!("?from_revision={r}"));
        let resumed = revision.is_some();
        let seen = Arc::new(Mutex::new((revision, 0_u64, false)));
        let on_line = {
            let seen = Arc::clone(&seen);
            move |line: &[u8]| {
                let Ok(frame) = serde_json::from_slice::<serde_json::Value>(line) else {
                    return;
                };
                let kind = frame["type"].as_str().unwrap_or_default();
                let mut seen = seen.lock().unwrap_or_else(PoisonError::into_inner);
                match kind {
                    "snapshot" if resumed => seen.1 += 1,
                    "error" | "resync" => seen.2 = true,
                    _ => {}
                }
                if let Some(r) = frame["revision"].as_u64().filter(|_| kind != "error") {
                    seen.0 = Some(seen.0.map_or(r, |s| s.max(r)));
                }
            }
        };
        let lasting = Duration::from_secs(20 + (k * 7 + revision.unwrap_or(0)) % 20);
        let stream = format!("{path}{query}");
        let opened = tokio::select! {
            ended = http.stream_lines(&stream, on_line) => ended.is_ok(),
            () = tokio::time::sleep(lasting) => true,
            _ = stopping.changed() => true,
        };
        let (last, resnapshots, refused) = *seen.lock().unwrap_or_else(PoisonError::into_inner);
        {
            let mut stats = stats.lock().unwrap_or_else(PoisonError::into_inner);
            stats.resumes += u64::from(resumed);
            stats.resnapshots += resnapshots;
            stats.refused += u64::from(refused);
            stats.unopened += u64::from(!opened);
        }
        // A refused resume starts over with a snapshot (e.g. a node still catching up).
        revision = if refused { None } else { last };
        node += 1;
    }
}

/// Stops the leader (SIGTERM) and starts it again; returns once the restarted node is ready
/// and names a leader.
async fn change_leader(members: &mut [Box<dyn SoakNode>]) -> Result<(), SoakError> {
    let mut leader = None;
    let asked = now();
    while leader.is_none() && now() - asked < Duration::from_secs(30) {
        for member in members.iter() {
            if let Some(named) = leader_of(&Http::new(&member.url(), 1)).await {
                leader = Some(named);
                break;
            }
        }
        if leader.is_none() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let leader = leader.ok_or_else(|| SoakError::Cluster("no node named a leader within 30 s".into()))?;
    let member = members
        .iter_mut()
        .find(|m| m.id() == leader)
        .ok_or_else(|| SoakError::Cluster(format!("the leader {leader} is not a member")))?;
    member.restart().await
}

/// The leader a node names, from its `/v1/status`.
async fn leader_of(http: &Http) -> Option<u64> {
    status_field(http, "leader").await
}

/// A number field of a node's `/v1/status`, if it answers one.
async fn status_field(http: &Http, field: &str) -> Option<u64> {
    let body = http.send_ok(Method::GET, "/v1/status", None).await.ok()?;
    serde_json::from_slice::<serde_json::Value>(&body).ok()?[field].as_u64()
}

/// A process's resident memory in KiB, from `/proc`.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:")?.trim().strip_suffix("kB")?.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Samples every node's memory (the median and highest of `readings`, which it empties; a
/// reading now if there are none), files and threads; returns them as one line.
fn sample(
    members: &[Box<dyn SoakNode>],
    minute: u64,
    readings: &mut BTreeMap<u64, Vec<u64>>,
    samples: &mut Vec<Sample>,
) -> String {
    let mut line = Vec::new();
    for member in members {
        let pid = member.pid();
        let mut minute_rss = readings.remove(&member.id()).unwrap_or_default();
        if minute_rss.is_empty() {
            minute_rss.push(rss_kib(pid));
        }
        let (rss_kib, rss_max_kib) = median_and_max(&mut minute_rss);
        let (files, sockets) = descriptors(pid);
        let threads = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Threads:").and_then(|v| v.trim().parse().ok()))
            })
            .unwrap_or(0);
        samples.push(Sample {
            minute,
            node: member.id(),
            rss_kib,
            rss_max_kib,
            files,
            sockets,
            threads,
        });
        line.push(format!(
            "node {} {:.1} MiB (median; highest {:.1}), {files} files, {sockets} sockets, {threads} threads",
            member.id(),
            rss_kib as f64 / 1024.0,
            rss_max_kib as f64 / 1024.0
        ));
    }
    line.join("; ")
}

/// A process's open descriptors: (files and others, sockets).
fn descriptors(pid: u32) -> (u64, u64) {
    let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return (0, 0);
    };
    entries.flatten().fold((0, 0), |(files, sockets), entry| {
        match std::fs::read_link(entry.path()).is_ok_and(|to| to.to_string_lossy().starts_with("socket:")) {
            true => (files, sockets + 1),
            false => (files + 1, sockets),
        }
    })
}

/// The median (the upper one of an even count) and the highest of `values`; (0, 0) if none.
fn median_and_max(values: &mut [u64]) -> (u64, u64) {
    values.sort_unstable();
    (
        values.get(values.len() / 2).copied().unwrap_or(0),
        values.last().copied().unwrap_or(0),
    )
}

/// The RSS curve of each node (the median MiB of each minute), its growth after the warm-up
/// (5 minutes, or 1 in a run under 10), its highest reading, its open files and threads at
/// the warm-up's end and last, and the range of its sockets after the warm-up.
fn curve(samples: &[Sample]) -> String {
    let nodes: BTreeSet<u64> = samples.iter().map(|s| s.node).collect();
    let last_minute = samples.iter().map(|s| s.minute).max().unwrap_or(0);
    let warm = if last_minute >= 10 { 5 } else { 1.min(last_minute) };
    nodes
        .iter()
        .map(|node| {
            let mine: Vec<&Sample> = samples.iter().filter(|s| s.node == *node).collect();
            let points: Vec<String> = mine
                .iter()
                .map(|s| format!("{}:{:.0}", s.minute, s.rss_kib as f64 / 1024.0))
                .collect();
            let (Some(first), Some(last)) = (mine.first(), mine.last()) else {
                return format!("node {node}: no samples");
            };
            let warmed = mine.iter().find(|s| s.minute >= warm).copied().unwrap_or(first);
            let after: Vec<u64> = mine.iter().filter(|s| s.minute >= warm).map(|s| s.sockets).collect();
            let growth = Some(warmed).filter(|warmed| warmed.rss_kib > 0).map_or_else(
                || "?".to_owned(),
                |warmed| format!("{:+.1}%", (last.rss_kib as f64 / warmed.rss_kib as f64 - 1.0) * 100.0),
            );
            let highest = mine.iter().map(|s| s.rss_max_kib).max().unwrap_or(0);
            format!(
                "node {node} [min:median MiB] {} (growth after minute {warm}: {growth}; highest reading {:.0} MiB; \
                 files {}→{}, threads {}→{}, sockets {}–{} after minute {warm})",
                points.join(" "),
                highest as f64 / 1024.0,
                warmed.files,
                last.files,
                warmed.threads,
                last.threads,
                after.iter().min().unwrap_or(&0),
                after.iter().max().unwrap_or(&0),
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Waits until every node answers at one revision.
async fn converge(clients: &[Http]) -> Result<(), SoakError> {
    let started = now();
    loop {
        let mut revisions = BTreeSet::new();
        for client in clients {
            revisions.insert(status_field(client, "revision").await);
        }
        if revisions.len() == 1 && !revisions.contains(&None) {
            return Ok(());
        }
        if now() - started > Duration::from_secs(120) {
            return Err(SoakError::Cluster(format!(
                "the nodes did not reach one revision within 120 s: {revisions:?}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Holds every node's sets against the record; the verdict as one phrase.
async fn check(clients: &[Http], expect: &BTreeMap<u64, Expect>) -> Result<String, SoakError> {
    let mut lost = BTreeSet::new();
    let mut still = BTreeSet::new();
    for client in clients {
        let mut served = BTreeSet::new();
        for k in 0..SERVICES {
            let path = format!("{NAMESPACE}/svc-{k}?consistency=stale");
            let (status, body) = client.send(Method::GET, &path, None).await.map_err(SoakError::Answer)?;
            if status == StatusCode::NOT_FOUND {
                continue;
            }
            if status != StatusCode::OK {
                return Err(SoakError::Answer(format!("{}{path}: HTTP {status}", client.base())));
            }
            let reply: serde_json::Value =
                serde_json::from_slice(&body).map_err(|err| SoakError::Answer(format!("{path}: {err} ({status})")))?;
            for endpoint in reply["endpoints"].as_array().into_iter().flatten() {
                if let Some(n) = endpoint["instance"]
                    .as_str()
                    .and_then(|i| i.strip_prefix("i-")?.parse().ok())
                {
                    served.insert(n);
                }
            }
        }
        for (n, expected) in expect {
            match expected {
                Expect::Present if !served.contains(n) => {
                    lost.insert(*n);
                }
                Expect::Absent if served.contains(n) => {
                    still.insert(*n);
                }
                _ => {}
            }
        }
        still.extend(served.iter().filter(|n| !expect.contains_key(n)));
    }
    let count = |e: Expect| expect.values().filter(|v| **v == e).count();
    let mut verdict = format!(
        "{} present and {} absent held against every node ({} uncertain, not judged)",
        count(Expect::Present),
        count(Expect::Absent),
        count(Expect::Uncertain)
    );
    if !lost.is_empty() {
        verdict.push_str(&format!(
            "; LOST {} (e.g. {:?})",
            lost.len(),
            lost.iter().take(5).collect::<Vec<_>>()
        ));
    }
    if !still.is_empty() {
        verdict.push_str(&format!(
            "; STILL SERVED {} (e.g. {:?})",
            still.len(),
            still.iter().take(5).collect::<Vec<_>>()
        ));
    }
    Ok(verdict)
}

#[cfg(test)]
mod tests {
    use super::median_and_max;

    #[test]
    fn a_minute_s_memory_is_its_median_reading_so_one_transient_is_not_growth() {
        // Twelve readings, one landing on a snapshot's transient copy.
        let mut minute = [
            70_000, 70_100, 69_900, 70_050, 110_000, 70_000, 70_020, 69_980, 70_010, 70_000, 70_030, 70_060,
        ];
        assert_eq!(median_and_max(&mut minute), (70_020, 110_000));
        assert_eq!(median_and_max(&mut [5]), (5, 5));
        assert_eq!(median_and_max(&mut []), (0, 0));
    }
}
