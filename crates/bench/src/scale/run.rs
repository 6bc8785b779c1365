//! The scale workload's I/O shell: grow the server to each size, measure there (see the
//! module docs of `scale` for the sequence), and hand the figures to the pure summary.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper::Method;
use muster_core::api::AddMemberRequest;

use super::member::{FullSet, Member, full_set, status};
use super::{
    CatchUpPath, ENDPOINTS_PER_SERVICE, SNAPSHOT_EVERY, ScaleSize, ScaleSummary, millis, probe_budget, server_config,
    service_of,
};
use crate::client::Http;
use crate::clock::now;
use crate::driver::{Outcome, closed_loop};
use crate::histogram::Histogram;
use crate::report::{LatencySummary, System, SystemResult};
use crate::requests::Names;
use crate::spawn::Stop;
use crate::watch::rss_of;
use crate::{BenchError, LoadSpan, Plan, Workload, load_average};

/// Concurrent registrations while filling: group commit puts up to this many in one log
/// entry, so the fill runs near the server's write throughput; twice the probe's default 64.
const FILL_CONNECTIONS: usize = 128;
/// A guard on one fill, far above its expected time (890,000 endpoints took 107 s in
/// release on two shared cores): a stalled server cannot hold the run.
const FILL_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// The probe's time bound at each size: ~10^4 registrations in release, enough for a p99.
const PROBE_DURATION: Duration = Duration::from_secs(2);
/// A new process answers `/v1/status` (and node 1 leads) in about a second; 60 s allows for
/// a debug build on a busy machine.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// A guard on a restart or a catch-up: at 10^6 endpoints a restart took 6 s and a new
/// member's snapshot install 15 s in release.
const RECOVERY_TIMEOUT: Duration = Duration::from_secs(10 * 60);
/// A catch-up whose applied index does not move for this long is stuck (a payload the new
/// member cannot take within openraft's RPC timeout is resent forever); a snapshot of 10^6
/// endpoints (400 MiB) was installed in 15 s.
const STALL_TIMEOUT: Duration = Duration::from_secs(120);
/// How long removing the new member again may take: one membership change, milliseconds.
const REMOVE_TIMEOUT: Duration = Duration::from_secs(60);
/// The grown node's id; new members are 2, 3, … (one per size, never reused).
const LEADER_ID: u64 = 1;

/// Endpoints registered so far: fill and probe registrations take numbers from `next` on.
#[derive(Debug, Default)]
struct Fleet {
    /// The next endpoint number.
    next: u64,
    /// Registrations that succeeded.
    registered: u64,
}

impl Fleet {
    fn add(&mut self, outcome: &Outcome) {
        self.next += outcome.requests;
        self.registered += outcome.requests - outcome.errors;
    }
}

fn setup_failed(detail: String) -> BenchError {
    BenchError::Setup {
        system: System::Muster.name(),
        workload: Workload::Scale.name(),
        detail,
    }
}

/// Registers `count` new endpoints from number `first` on, `connections` at a time, for at
/// most `bound`.
async fn register(
    http: &Http,
    names: &Arc<Names>,
    first: u64,
    count: u64,
    connections: usize,
    bound: Duration,
) -> Outcome {
    let (http, names) = (http.clone(), Arc::clone(names));
    closed_loop(connections, bound, count, move |ticket| {
        let (http, names) = (http.clone(), Arc::clone(&names));
        async move {
            let n = first + ticket;
            let (path, body) = names.muster_register_in(&service_of(n), &format!("i-{n}"), n);
            http.send_ok(Method::PUT, &path, Some(body)).await.map(drop)
        }
    })
    .await
}

/// Runs the scale workload with `bin` over `plan.endpoints`; every server it started is
/// stopped when this returns.
pub(crate) async fn scale(bin: &Path, plan: &Plan, run_id: u64) -> Result<SystemResult, BenchError> {
    let started = now();
    let largest = plan.endpoints.last().copied().unwrap_or_default();
    let config = server_config(largest);
    let mut leader = Member::start(bin, LEADER_ID, None, &config)?;
    leader
        .wait_until(|s| s.ready && s.leader == Some(LEADER_ID), None, START_TIMEOUT, None)
        .await
        .map_err(|detail| BenchError::Spawn { what: "muster", detail })?;
    let names = Arc::new(Names::new(run_id, 1));
    let mut summary = ScaleSummary {
        url: leader.url(),
        pid: leader.pid(),
        endpoints_per_service: ENDPOINTS_PER_SERVICE,
        snapshot_every: SNAPSHOT_EVERY,
        fill_connections: FILL_CONNECTIONS,
        probe_connections: plan.connections,
        probe_seconds: PROBE_DURATION.as_secs_f64(),
        baseline_rss_bytes: rss_of(leader.pid()).ok(),
        sizes: Vec::new(),
        stopped: None,
    };
    let mut fleet = Fleet::default();
    let (mut requests, mut errors) = (0, 0);
    let mut last_probe = Histogram::new();
    for (index, &size) in plan.endpoints.iter().enumerate() {
        let mut row = ScaleSize::new(size);
        let load_at_start = load_average();
        let http = Http::new(&leader.url(), FILL_CONNECTIONS.max(plan.connections));
        let wanted = size.saturating_sub(fleet.registered);
        let fill = register(&http, &names, fleet.next, wanted, FILL_CONNECTIONS, FILL_TIMEOUT).await;
        fleet.add(&fill);
        row.set_fill(fill.requests, fill.errors, fill.elapsed);
        if let Some(error) = &fill.first_error {
            row.notes.push(format!("fill: first error: {error}"));
        }
        let probe = register(
            &http,
            &names,
            fleet.next,
            probe_budget(size),
            plan.connections,
            PROBE_DURATION,
        )
        .await;
        fleet.add(&probe);
        (row.probe_requests, row.probe_errors) = (probe.requests, probe.errors);
        row.registration = LatencySummary::of_closed_loop(&probe.latencies);
        if let Some(error) = &probe.first_error {
            row.notes.push(format!("probe: first error: {error}"));
        }
        row.endpoints = fleet.registered;
        row.services = fleet.next.div_ceil(ENDPOINTS_PER_SERVICE);
        if let Ok(rss) = rss_of(leader.pid()) {
            row.set_memory(rss, summary.baseline_rss_bytes);
        }
        row.log_index = status(&http).await.map(|s| s.applied_index);
        if let Some((bytes, index)) = leader.snapshot() {
            (row.snapshot_bytes, row.snapshot_index) = (Some(bytes), index);
        }
        let last = names.muster_snapshot(&service_of(fleet.next.saturating_sub(1)));
        let full = full_set(&http, last).await.map_err(setup_failed)?;
        drop(http);
        // A member that never caught up leaves a cluster of two that cannot commit (nor
        // remove it), and a server that did not come back has nothing to grow: either ends
        // the run with the sizes measured so far.
        let id = LEADER_ID + 1 + index as u64;
        let mut stopped = catch_up(bin, &leader, &config, id, &full, &mut row)
            .await
            .map_err(|why| format!("catch-up at {size} endpoints: {why}"))
            .err();
        if stopped.is_none() {
            stopped = restarts(&mut leader, &full, &mut row)
                .await
                .map_err(|why| format!("restart at {size} endpoints: {why}"))
                .err();
        }
        row.load = LoadSpan::since(load_at_start);
        requests += fill.requests + probe.requests;
        errors += fill.errors + probe.errors;
        last_probe = probe.latencies;
        summary.sizes.push(row);
        if stopped.is_some() {
            summary.stopped = stopped;
            break;
        }
    }
    let mut result = SystemResult::from_requests(System::Muster, requests, errors, now() - started, &last_probe);
    result.latency = LatencySummary::of_closed_loop(&last_probe);
    result.note = Some(format!(
        "latency: the probe at the largest size; requests: every fill and probe registration; server {} (pid {} at first)",
        summary.url, summary.pid
    ));
    result.scale = Some(summary);
    Ok(result)
}

/// Stops the leader with SIGTERM, then SIGKILL, starting it again after each, and times
/// both into `row`.
async fn restarts(leader: &mut Member, full: &FullSet, row: &mut ScaleSize) -> Result<(), String> {
    for how in [Stop::Term, Stop::Kill] {
        let stopped = leader.restart(how).await.map_err(|err| err.to_string())?;
        let ready = leader
            .wait_until(|s| s.ready, Some(full), RECOVERY_TIMEOUT, None)
            .await?;
        match how {
            Stop::Term => (row.stop_ms, row.restart_after_stop_ms) = (Some(millis(stopped)), Some(millis(ready))),
            Stop::Kill => row.restart_after_kill_ms = Some(millis(ready)),
        }
    }
    Ok(())
}

/// Starts node `id`, adds it to `leader`'s cluster, times its catch-up into `row`, and
/// removes and stops it again.
async fn catch_up(
    bin: &Path,
    leader: &Member,
    config: &str,
    id: u64,
    full: &FullSet,
    row: &mut ScaleSize,
) -> Result<(), String> {
    let (mut joiner, added) = join(bin, leader, config, id).await.map_err(|err| err.to_string())?;
    // The catch-up is timed from the add's start, as the add is.
    let start = now() - added;
    let http = Http::new(&leader.url(), 1);
    row.member_added_ms = Some(millis(added));
    let target = status(&http)
        .await
        .map(|s| s.applied_index)
        .ok_or("the leader did not answer /v1/status after the add")?;
    joiner
        .wait_until(
            |s| s.applied_index >= target,
            Some(full),
            RECOVERY_TIMEOUT,
            Some(STALL_TIMEOUT),
        )
        .await?;
    row.catch_up_ms = Some(millis(now() - start));
    let path = CatchUpPath::of(row.snapshot_index);
    row.catch_up_path = Some(path);
    if path == CatchUpPath::Snapshot && joiner.snapshot().is_none() {
        row.notes.push(format!(
            "catch-up: node {id} holds no snapshot, though the leader's log was purged"
        ));
    }
    let (code, _, reply) = http
        .send_full(
            Method::DELETE,
            &format!("/v1/cluster/members/{id}"),
            None,
            REMOVE_TIMEOUT,
        )
        .await?;
    if !code.is_success() {
        return Err(format!(
            "removing node {id}: HTTP {code}: {}",
            String::from_utf8_lossy(&reply)
        ));
    }
    Ok(())
}

/// Starts node `id` and adds it to `leader`'s cluster as a voter; returns it and how long the
/// add took (its catch-up as a learner included). A catch-up that stalls ends the wait.
pub(crate) async fn join(bin: &Path, leader: &Member, config: &str, id: u64) -> Result<(Member, Duration), BenchError> {
    let fail = |detail: String| BenchError::Spawn { what: "muster", detail };
    let mut joiner = Member::start(bin, id, Some(leader), config)?;
    joiner
        .wait_until(|_| true, None, START_TIMEOUT, None)
        .await
        .map_err(fail)?;
    let http = Http::new(&leader.url(), 1);
    let request = AddMemberRequest {
        id,
        addr: joiner.cluster_addr().to_string(),
    };
    let body = Bytes::from(serde_json::to_vec(&request).unwrap_or_default());
    let start = now();
    // The add returns once the new node is a voter, having caught up as a learner: waited
    // for beside its progress, so a catch-up that stalls ends the wait, not a timeout.
    let adding = http.clone();
    let add = tokio::spawn(async move {
        adding
            .send_full(Method::POST, "/v1/cluster/members", Some(body), RECOVERY_TIMEOUT)
            .await
    });
    let waited = joiner
        .wait_until(|_| add.is_finished(), None, RECOVERY_TIMEOUT, Some(STALL_TIMEOUT))
        .await;
    if let Err(why) = waited {
        add.abort();
        return Err(fail(format!("adding node {id}: {why}")));
    }
    let (code, _, reply) = add
        .await
        .map_err(|err| fail(err.to_string()))?
        .map_err(|err| fail(format!("adding node {id}: {err}")))?;
    if !code.is_success() {
        return Err(fail(format!(
            "adding node {id}: HTTP {code}: {}",
            String::from_utf8_lossy(&reply)
        )));
    }
    Ok((joiner, now() - start))
}

/// The soak workload (`crate::soak`) on a 3-node cluster started here: node 1, then 2 and 3
/// joined as voters.
pub(crate) async fn soak_cluster(bin: &Path, duration: Duration) -> Result<SystemResult, BenchError> {
    let fail = |detail: String| BenchError::Setup {
        system: "muster",
        workload: "soak",
        detail,
    };
    let config = crate::soak::CONFIG;
    let mut first = Member::start(bin, 1, None, config)?;
    first
        .wait_until(|s| s.ready && s.leader == Some(1), None, START_TIMEOUT, None)
        .await
        .map_err(fail)?;
    let mut joined = Vec::new();
    for id in [2, 3] {
        joined.push(join(bin, &first, config, id).await?.0);
    }
    let mut members: Vec<Box<dyn crate::soak::SoakNode>> = vec![Box::new(first)];
    members.extend(
        joined
            .into_iter()
            .map(|m| Box::new(m) as Box<dyn crate::soak::SoakNode>),
    );
    let started = now();
    let soaked = crate::soak::soak(members, duration)
        .await
        .map_err(|err| fail(err.to_string()))?;
    Ok(SystemResult {
        note: Some(soaked.note),
        ..SystemResult::from_requests(
            System::Muster,
            soaked.writes,
            soaked.errors,
            now() - started,
            &soaked.latency,
        )
    })
}
