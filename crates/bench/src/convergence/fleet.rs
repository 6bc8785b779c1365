//! The convergence workload's I/O shell: the fleet of resolvers, the changes, the DNS probe
//! and the reads of `GET /v1/convergence/...`. The figures are summarised by
//! [`ConvergenceSummary`](super::ConvergenceSummary).
//!
//! Every resolver has its own [`Client`], so its own connection pool: one connection holds
//! its watch and a second carries its reports (a pooled keep-alive connection), which is what
//! a fleet of separate processes costs the server.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use muster_client::convergence::{ClientId, Cohort, ConvergenceQuery, ConvergenceReply};
use muster_client::{Client, Incarnation, InstanceId, Registration, Resolver, ResolverConfig, Revision, ServiceKey};
use tokio::net::UdpSocket;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::{
    ChangeProbe, ConvergenceSummary, DNS_DOMAIN, DNS_TENANT, DnsProbeError, FleetFigures, MAX_CHANGES, all_applied,
    answer_holds, change_ip, dns_name, dns_query, live_watchers,
};
use crate::clock::{now, tokio_now};
use crate::codec::parse_load_average;
use crate::meter::CpuMeter;
use crate::report::SystemResult;
use crate::workloads::Subject;
use crate::{BenchError, Plan, Workload};

/// The namespace of the watched service.
const NAMESPACE: &str = "bench";
/// Resolvers opening at once: far below the listen backlog (`somaxconn`, 4,096 here), so no
/// SYN is dropped and retried a second later; each also opens its report connection soon
/// after its first frame.
const OPEN_CONCURRENCY: usize = 256;
/// How long one resolver may take to its first view: its watch's own opening bound.
const FIRST_VIEW_TIMEOUT: Duration = Duration::from_secs(30);
/// How long opening the whole fleet may take: 10,000 open in well under a minute on loopback.
const OPEN_TIMEOUT: Duration = Duration::from_secs(180);
/// How long the server may take to count every opened resolver live: each reports within its
/// report interval (250 ms) of its first frame, so a few seconds; a minute is a stall.
const LIVE_TIMEOUT: Duration = Duration::from_secs(60);
/// How often the summary is read while waiting for the fleet to be live.
const LIVE_POLL: Duration = Duration::from_millis(250);
/// How long one change may take to be applied by every live subscriber (the brief's bound).
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the summary is read while a change spreads: it sets only how soon the wait ends
/// (and the resolution of `all_applied_ms`), not the ledger's latency figures. Each read
/// copies and sorts every kept sample (up to 16 × the fleet) under the ledger's lock, which
/// the apply path and every report also take: at 50 ms a 9,000-client run stalled the server
/// (writes of seconds), so no more often than clients report (250 ms).
const CONVERGE_POLL: Duration = Duration::from_millis(250);
/// A DNS answer with the new IP later than this after the write is counted as missed: the
/// listener folds the change in at its next query, so this is a thousand times the expected.
const DNS_TIMEOUT: Duration = Duration::from_secs(5);
/// One query's wait for its answer before the next is sent (a datagram lost on loopback).
const DNS_ANSWER_TIMEOUT: Duration = Duration::from_millis(100);
/// How long stopping the fleet may take: each stop only waits for its task to let go.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// Descriptors beyond two per client: the bench's own sockets, the runtime, and the reserve
/// of a spawned server that inherits the limit.
const DESCRIPTOR_SLACK: u64 = 1_024;

/// The descriptors a run of `watchers` clients wants (a watch and a report connection each).
pub(crate) fn descriptors_wanted(watchers: usize) -> u64 {
    2 * watchers as u64 + DESCRIPTOR_SLACK
}

/// The clients a descriptor limit of `limit` holds, the inverse of [`descriptors_wanted`].
pub(crate) fn clients_within(limit: u64) -> u64 {
    limit.saturating_sub(DESCRIPTOR_SLACK) / 2
}

/// Starts resolver `i` (its own client, id `bench-i`, cohort `zone=a`/`zone=b` alternating)
/// and returns it once it has a first view.
async fn open_one(base: Arc<str>, key: ServiceKey, i: usize, opening: Arc<Semaphore>) -> Result<Resolver, String> {
    let _permit = opening.acquire_owned().await.map_err(|err| err.to_string())?;
    let id = ClientId::new(format!("bench-{i}")).map_err(|err| err.to_string())?;
    let cohort = Cohort::new(if i.is_multiple_of(2) { "zone=a" } else { "zone=b" }).map_err(|err| err.to_string())?;
    let client = Client::builder(base.to_string())
        .client_id(id)
        .cohort(cohort)
        .build()
        .map_err(|err| err.to_string())?;
    let resolver = Resolver::start(client, key, ResolverConfig::default());
    let mut views = resolver.subscribe();
    match tokio::time::timeout(FIRST_VIEW_TIMEOUT, views.wait_for(|view| view.resume_from().is_some())).await {
        Ok(Ok(_)) => Ok(resolver),
        Ok(Err(_)) => Err("the resolver stopped before its first view".to_owned()),
        Err(_) => Err(format!("no first view within {FIRST_VIEW_TIMEOUT:?}")),
    }
}

/// Registers change `k`'s endpoint (instance `c-k`, IP [`change_ip`]) and returns its revision.
async fn register(admin: &Client, key: &ServiceKey, k: u64) -> Result<Revision, String> {
    let instance = InstanceId::new(&format!("c-{k}")).map_err(|err| err.to_string())?;
    let registration = Registration::new(Incarnation(1))
        .address(change_ip(k).to_string())
        .port("http", 8080);
    admin
        .register(key, &instance, registration)
        .await
        .map(|reply| reply.revision)
        .map_err(|err| err.to_string())
}

/// Queries `name` back to back until an answer holds `ip`; the time from `start` to that
/// answer, or `None` past [`DNS_TIMEOUT`] (with the first error seen).
async fn probe_dns(
    socket: &UdpSocket,
    name: &str,
    ip: Ipv4Addr,
    start: std::time::Instant,
    next_id: &mut u16,
) -> (Option<Duration>, Option<String>) {
    let mut buffer = vec![0u8; 4_096];
    let mut first_error = None;
    while now() - start < DNS_TIMEOUT {
        *next_id = next_id.wrapping_add(1);
        let id = *next_id;
        let query = match dns_query(id, name) {
            Ok(query) => query,
            Err(err) => return (None, Some(err.to_string())),
        };
        if let Err(err) = socket.send(&query).await {
            first_error.get_or_insert(format!("send: {err}"));
            continue;
        }
        // Answers to earlier queries (late ones) are skipped until this one's arrives.
        let deadline = tokio_now() + DNS_ANSWER_TIMEOUT;
        loop {
            let received = match tokio::time::timeout_at(deadline, socket.recv(&mut buffer)).await {
                Ok(Ok(n)) => n,
                Ok(Err(err)) => {
                    first_error.get_or_insert(format!("receive: {err}"));
                    break;
                }
                Err(_) => break,
            };
            match answer_holds(&buffer[..received], id, ip) {
                Ok(true) => return (Some(now() - start), first_error),
                Ok(false) => break,
                Err(DnsProbeError::OtherId { .. }) => {}
                Err(err) => {
                    first_error.get_or_insert(err.to_string());
                    break;
                }
            }
        }
    }
    (None, first_error)
}

/// Reads the summary until `done` holds for it, or `bound` passes; the last reply read.
async fn poll_until(
    admin: &Client,
    key: &ServiceKey,
    query: &ConvergenceQuery,
    bound: Duration,
    every: Duration,
    done: impl Fn(&ConvergenceReply) -> bool,
) -> (bool, Option<ConvergenceReply>, Option<String>) {
    let deadline = now() + bound;
    let (mut last, mut error) = (None, None);
    loop {
        match admin.convergence(key, query).await {
            Ok(reply) => {
                let finished = done(&reply);
                last = Some(reply);
                if finished {
                    return (true, last, error);
                }
            }
            Err(err) => {
                error.get_or_insert(err.to_string());
            }
        }
        if now() >= deadline {
            return (false, last, error);
        }
        tokio::time::sleep(every).await;
    }
}

/// The convergence workload against `subject` (Muster), its DNS listener at `dns` if known.
pub(crate) async fn convergence(
    subject: &Subject,
    dns: Option<SocketAddr>,
    plan: &Plan,
    run: &str,
) -> Result<SystemResult, BenchError> {
    let setup_failed = |detail: String| BenchError::Setup {
        system: subject.system.name(),
        workload: Workload::Convergence.name(),
        detail,
    };
    let service = format!("conv-{run}");
    let key = ServiceKey::new(DNS_TENANT, NAMESPACE, &service).map_err(|err| setup_failed(err.to_string()))?;
    let base: Arc<str> = subject.http.base().into();
    let admin = Client::builder(base.to_string())
        .report_applied(false)
        .build()
        .map_err(|err| setup_failed(err.to_string()))?;
    // A service with one endpoint: every resolver starts from a real snapshot.
    register(&admin, &key, 0).await.map_err(setup_failed)?;
    let descriptor_limit = crate::limits::raise_descriptor_limit(descriptors_wanted(plan.watchers));

    // The fleet.
    let opening = Arc::new(Semaphore::new(OPEN_CONCURRENCY));
    let mut starting = JoinSet::new();
    let open_start = now();
    for i in 0..plan.watchers {
        starting.spawn(open_one(Arc::clone(&base), key.clone(), i, Arc::clone(&opening)));
    }
    let mut resolvers = Vec::with_capacity(plan.watchers);
    let (mut failed, mut first_failure) = (0usize, None);
    let deadline = tokio_now() + OPEN_TIMEOUT;
    while let Ok(Some(joined)) = tokio::time::timeout_at(deadline, starting.join_next()).await {
        match joined {
            Ok(Ok(resolver)) => resolvers.push(resolver),
            Ok(Err(err)) => {
                failed += 1;
                first_failure.get_or_insert(err);
            }
            Err(err) => {
                failed += 1;
                first_failure.get_or_insert(err.to_string());
            }
        }
    }
    starting.abort_all();
    let opened = resolvers.len();
    let (all_live, reply, live_error) = poll_until(
        &admin,
        &key,
        &ConvergenceQuery::default(),
        LIVE_TIMEOUT,
        LIVE_POLL,
        |reply| live_watchers(reply) >= opened,
    )
    .await;
    let open_s = (now() - open_start).as_secs_f64();
    let live_before = reply.as_ref().map_or(0, live_watchers);
    let mut notes = vec![format!(
        "{opened} of {} resolvers opened, {live_before} counted live by the server in {open_s:.2} s (descriptor limit {})",
        plan.watchers,
        descriptor_limit.map_or_else(|| "unlimited".to_owned(), |d| d.to_string()),
    )];
    let wanted = descriptors_wanted(plan.watchers);
    if let Some(limit) = descriptor_limit.filter(|limit| *limit < wanted) {
        notes.push(format!(
            "the descriptor limit {limit} is below the {wanted} this scale wants (two connections per client, \
             here and in the server; raising the hard limit needs CAP_SYS_RESOURCE): about {} clients fit",
            clients_within(limit)
        ));
    }
    if let Some(err) = &first_failure {
        notes.push(format!("{failed} failed to open, the first: {err}"));
    }
    if !all_live {
        notes.push(format!(
            "not every resolver was counted live within {LIVE_TIMEOUT:?}{}",
            live_error.map_or_else(String::new, |err| format!(" (read error: {err})"))
        ));
    }

    // The changes, one at a time.
    let changes = plan.changes.min(MAX_CHANGES);
    if changes < plan.changes {
        notes.push(format!(
            "{} changes asked, {changes} run: the server's ledger keeps the last {MAX_CHANGES}",
            plan.changes
        ));
    }
    let name = dns_name(&service, NAMESPACE, DNS_DOMAIN);
    let dns_socket = match dns {
        Some(addr) => {
            let socket = UdpSocket::bind(("127.0.0.1", 0))
                .await
                .map_err(|err| setup_failed(format!("DNS probe socket: {err}")))?;
            socket
                .connect(addr)
                .await
                .map_err(|err| setup_failed(format!("DNS probe socket: {err}")))?;
            Some(socket)
        }
        None => None,
    };
    let dns_skipped = dns_socket
        .is_none()
        .then(|| "the server's DNS listener is unknown (use --spawn, or --dns ADDR)".to_owned());
    let mut probes = Vec::with_capacity(changes);
    let (mut write_error, mut dns_error, mut converge_error) = (None, None, None);
    let mut next_id = 0u16;
    let meter = CpuMeter::start(subject.pid);
    let changes_start = now();
    for k in 1..=changes as u64 {
        let sent = now();
        let revision = match register(&admin, &key, k).await {
            Ok(revision) => revision,
            Err(err) => {
                write_error.get_or_insert(err);
                continue;
            }
        };
        let returned = now();
        let query = ConvergenceQuery {
            revision: Some(revision),
            ..ConvergenceQuery::default()
        };
        let dns_probe = async {
            match &dns_socket {
                Some(socket) => probe_dns(socket, &name, change_ip(k), returned, &mut next_id).await,
                None => (None, None),
            }
        };
        let converged = poll_until(&admin, &key, &query, CONVERGE_TIMEOUT, CONVERGE_POLL, all_applied);
        let ((dns_latency, dns_err), (done, _, poll_err)) = tokio::join!(dns_probe, converged);
        let converged_at = now();
        if let Some(err) = dns_err {
            dns_error.get_or_insert(err);
        }
        if let Some(err) = poll_err {
            converge_error.get_or_insert(err);
        }
        let ms = |d: Duration| d.as_secs_f64() * 1_000.0;
        probes.push(ChangeProbe {
            revision: revision.0,
            reply_ms: ms(returned - sent),
            dns_ms: dns_latency.map(ms),
            all_applied_ms: done.then(|| ms(converged_at - returned)),
        });
        tokio::time::sleep(plan.change_interval).await;
    }
    let elapsed = now() - changes_start;
    let load_average_at_end = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| parse_load_average(&text));
    let last_query = ConvergenceQuery {
        revision: probes.last().map(|probe| Revision(probe.revision)),
        ..ConvergenceQuery::default()
    };
    let last = admin
        .convergence(&key, &last_query)
        .await
        .map_err(|err| setup_failed(format!("reading the summary after the last change: {err}")))?;
    let mut result = SystemResult::from_requests(
        subject.system,
        changes as u64,
        0,
        elapsed,
        &crate::histogram::Histogram::new(),
    );
    meter.finish(&mut result);
    for (what, error) in [
        ("first failed write", write_error),
        ("first DNS probe error", dns_error),
        ("first failed summary read", converge_error),
    ] {
        if let Some(error) = error {
            notes.push(format!("{what}: {error}"));
        }
    }
    let fleet = FleetFigures {
        service: key.to_string(),
        watchers: plan.watchers as u64,
        opened: opened as u64,
        open_s,
        live_before,
        descriptor_limit,
        changes_asked: plan.changes,
    };
    let summary = ConvergenceSummary::new(fleet, &probes, &last, dns_skipped, load_average_at_end);
    result.errors = (changes - probes.len()) as u64 + summary.changes_not_converged as u64 + summary.dns_missed as u64;
    result.note = Some(notes.join("; "));
    result.convergence = Some(summary);
    // Stopped before the server is: a resolver whose server vanishes first logs a lost
    // watch. Every client's tasks and connections end with its resolver.
    let mut stopping = JoinSet::new();
    for resolver in resolvers {
        stopping.spawn(resolver.stop());
    }
    let _ = tokio::time::timeout(STOP_TIMEOUT, stopping.join_all()).await;
    Ok(result)
}
