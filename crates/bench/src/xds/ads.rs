//! The xds workload's I/O shell: the ADS streams (envoy-types' generated tonic client, as a
//! proxyless gRPC client speaks it), the endpoint changes, and the reads of
//! `GET /v1/xds/clients`. The figures are summarised by [`XdsSummary`](super::XdsSummary).
//!
//! Every stream owns its own tonic `Channel`, that is its own HTTP/2 connection, unless
//! `--xds-connections` says fewer: a gRPC client opens one connection per channel and a
//! proxyless client has one channel per target, so one connection per stream is what a
//! fleet of callers costs the server.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use envoy_types::pb::google::protobuf::{Struct, Value, value::Kind};
use hyper::Method;
use muster_core::api::WriteReply;
use serde::Deserialize;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;
use tonic::transport::{Channel, Endpoint};

use super::{ChangeFigures, XdsSummary};
use crate::clock::{now, tokio_now};
use crate::histogram::Histogram;
use crate::meter::CpuMeter;
use crate::report::{MemorySummary, SystemResult};
use crate::requests::Names;
use crate::watch::rss_of;
use crate::workloads::Subject;
use crate::{BenchError, Plan, Workload};

/// The type URL of EDS, the one type the streams subscribe to.
const EDS: &str = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";
/// The watched service, in the run's tenant and the bench namespace: `xds.bench`.
const SERVICE: &str = "xds";
/// Streams connecting at once: far below the listen backlog (`somaxconn`, 4,096 here), so no
/// SYN is dropped and retried a second later.
const OPEN_CONCURRENCY: usize = 64;
/// How long opening every stream may take: 1,000 connect in a few seconds.
const OPEN_TIMEOUT: Duration = Duration::from_secs(120);
/// One TCP connect on loopback.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// After the last stream opened, let the server finish its per-stream setup before RSS.
const SETTLE: Duration = Duration::from_secs(1);
/// The earliest next change after a write (the pace, one every 250 ms to 1 s): long
/// enough that one change has converged before the next, so changes do not queue.
const CHANGE_INTERVAL: Duration = Duration::from_millis(500);
/// A push or ACK later than this after its write counts as missed: 100× the push target.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(5);
/// How often `/v1/xds/clients` is read while waiting for every ACK. The ACK instants come
/// from the ledger's `age_ms`, so this sets only how soon the wait ends, not the figure.
const LEDGER_POLL: Duration = Duration::from_millis(20);

/// What a stream tells the workload.
enum Signal {
    /// The first assignment arrived (or the stream failed before it).
    Opened(Result<(), String>),
    /// A response with this version arrived at this instant.
    Pushed(u64, Instant),
    /// An open stream ended.
    Ended(String),
}

/// `GET /v1/xds/clients`, the fields the workload reads.
#[derive(Debug, Deserialize)]
struct ClientsPage {
    clients: Vec<ClientEntry>,
}

#[derive(Debug, Deserialize)]
struct ClientEntry {
    node_id: String,
    #[serde(default)]
    resources: Vec<ResourceEntry>,
}

#[derive(Debug, Deserialize)]
struct ResourceEntry {
    #[serde(rename = "type")]
    kind: String,
    resource: String,
    acked_revision: Option<u64>,
    age_ms: Option<u64>,
}

fn node(names: &Names, i: usize) -> Node {
    Node {
        id: node_id(names, i),
        cluster: "muster-bench".to_owned(),
        // The run's tenant (SPEC D5: node metadata names it when no token does).
        metadata: Some(Struct {
            fields: HashMap::from([(
                "tenant".to_owned(),
                Value {
                    kind: Some(Kind::StringValue(names.tenant.clone())),
                },
            )]),
        }),
        ..Node::default()
    }
}

fn node_id(names: &Names, i: usize) -> String {
    format!("bench-{}-{i}", names.run)
}

fn request(node: Option<Node>, resource: &str, version: &str, nonce: &str) -> DiscoveryRequest {
    DiscoveryRequest {
        version_info: version.to_owned(),
        node,
        resource_names: vec![resource.to_owned()],
        type_url: EDS.to_owned(),
        response_nonce: nonce.to_owned(),
        ..DiscoveryRequest::default()
    }
}

/// One stream: subscribe, then ACK every response and report its version.
async fn stream(
    channel: Channel,
    node: Node,
    resource: Arc<str>,
    signals: mpsc::UnboundedSender<Signal>,
    opening: Arc<Semaphore>,
) {
    let mut permit = Some(opening.acquire_owned().await);
    let result = run_stream(channel, node, &resource, &signals, &mut permit).await;
    let verdict = result.err().unwrap_or_else(|| "the stream ended".to_owned());
    let _ = signals.send(if permit.is_some() {
        Signal::Opened(Err(verdict))
    } else {
        Signal::Ended(verdict)
    });
}

async fn run_stream<P>(
    channel: Channel,
    node: Node,
    resource: &str,
    signals: &mpsc::UnboundedSender<Signal>,
    opened: &mut Option<P>,
) -> Result<(), String> {
    let mut client = AggregatedDiscoveryServiceClient::new(channel);
    let (requests, inbox) = mpsc::unbounded_channel();
    requests
        .send(request(Some(node), resource, "", ""))
        .map_err(|err| err.to_string())?;
    let outbound = futures_util::stream::unfold(inbox, |mut inbox| async move {
        inbox.recv().await.map(|request| (request, inbox))
    });
    let mut responses = client
        .stream_aggregated_resources(outbound)
        .await
        .map_err(|status| format!("open: {status}"))?
        .into_inner();
    loop {
        let response: DiscoveryResponse = responses
            .message()
            .await
            .map_err(|status| format!("stream: {status}"))?
            .ok_or("the server closed the stream")?;
        let at = now();
        // gRPC clients send the node on the first request only.
        let ack = request(None, resource, &response.version_info, &response.nonce);
        requests.send(ack).map_err(|err| err.to_string())?;
        if response.type_url != EDS || response.resources.len() != 1 {
            return Err(format!(
                "expected one {EDS}, got {} of {}",
                response.resources.len(),
                response.type_url
            ));
        }
        let version = response
            .version_info
            .parse()
            .map_err(|_| format!("version_info {:?} is not a revision", response.version_info))?;
        if opened.take().is_some() {
            let _ = signals.send(Signal::Opened(Ok(())));
        } else {
            let _ = signals.send(Signal::Pushed(version, at));
        }
    }
}

/// Registers instance `instance` of the watched service; its revision.
async fn commit(subject: &Subject, names: &Names, instance: &str, n: u64) -> Result<u64, String> {
    let (path, body) = names.muster_register_in(SERVICE, instance, n);
    let body = subject.http.send_ok(Method::PUT, &path, Some(body)).await?;
    let reply: WriteReply = serde_json::from_slice(&body).map_err(|err| err.to_string())?;
    Ok(reply.revision.0)
}

/// Reads the ledger until every stream of this run acknowledged `revision` (or the bound);
/// each ACK's instant (reply received − `age_ms`) relative to `sent`, and whether all came.
async fn acks(
    subject: &Subject,
    names: &Names,
    resource: &str,
    open: usize,
    revision: u64,
    sent: Instant,
) -> (Histogram, bool) {
    let prefix = format!("bench-{}-", names.run);
    let deadline = tokio::time::Instant::from_std(sent + DELIVERY_TIMEOUT);
    loop {
        let body = subject.http.send_ok(Method::GET, "/v1/xds/clients", None).await;
        let read_at = now();
        let mut histogram = Histogram::new();
        if let Ok(page) = body.and_then(|b| serde_json::from_slice::<ClientsPage>(&b).map_err(|e| e.to_string())) {
            for client in page.clients.iter().filter(|c| c.node_id.starts_with(&prefix)) {
                let acked = client.resources.iter().find(|r| {
                    r.kind == "endpoint" && r.resource == resource && r.acked_revision.is_some_and(|a| a >= revision)
                });
                if let Some(age) = acked.and_then(|r| r.age_ms) {
                    let at = read_at.checked_sub(Duration::from_millis(age)).unwrap_or(read_at);
                    histogram.record(at.saturating_duration_since(sent));
                }
            }
        }
        let all = histogram.count() >= open as u64;
        if all || tokio_now() >= deadline {
            return (histogram, all);
        }
        tokio::time::sleep(LEDGER_POLL).await;
    }
}

/// Runs the workload against the xDS listener at `addr` (the server's HTTP API in `subject`).
pub(crate) async fn xds(
    subject: &Subject,
    addr: SocketAddr,
    plan: &Plan,
    names: &Names,
) -> Result<SystemResult, BenchError> {
    let setup_failed = |detail: String| BenchError::Setup {
        system: subject.system.name(),
        workload: Workload::Xds.name(),
        detail,
    };
    // Each stream holds a connection.
    let descriptors = crate::limits::raise_descriptor_limit(0);
    let resource: Arc<str> = format!("{SERVICE}.{}", names.namespace).into();
    commit(subject, names, "x-0", 0).await.map_err(setup_failed)?;
    let rss_before = subject.pid.map(rss_of).transpose().map_err(setup_failed)?;

    let streams = plan.xds_streams;
    let connections = plan.xds_connections.unwrap_or(streams).clamp(1, streams);
    let endpoint = Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|err| setup_failed(err.to_string()))?
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true);
    // Lazy channels connect on the first request, inside each stream's opening permit.
    let channels: Vec<Channel> = (0..connections).map(|_| endpoint.connect_lazy()).collect();
    let (signals, mut inbox) = mpsc::unbounded_channel();
    let opening = Arc::new(Semaphore::new(OPEN_CONCURRENCY));
    let mut tasks = JoinSet::new();
    let open_start = now();
    for i in 0..streams {
        tasks.spawn(stream(
            channels[i % connections].clone(),
            node(names, i),
            Arc::clone(&resource),
            signals.clone(),
            Arc::clone(&opening),
        ));
    }
    drop(channels);
    drop(signals);
    let (mut open, mut failed, mut first_error) = (0usize, 0usize, None);
    let deadline = tokio_now() + OPEN_TIMEOUT;
    while open + failed < streams {
        match tokio::time::timeout_at(deadline, inbox.recv()).await {
            Ok(Some(Signal::Opened(Ok(())))) => open += 1,
            Ok(Some(Signal::Opened(Err(err)) | Signal::Ended(err))) => {
                failed += 1;
                first_error.get_or_insert(err);
            }
            Ok(Some(Signal::Pushed(..))) => {}
            Ok(None) | Err(_) => break,
        }
    }
    let open_time = now() - open_start;
    let rss = match (subject.pid, rss_before) {
        (Some(pid), Some(before)) => {
            tokio::time::sleep(SETTLE).await;
            Some((before, rss_of(pid).map_err(setup_failed)?))
        }
        _ => None,
    };

    let meter = CpuMeter::start(subject.pid);
    let start = now();
    let mut changes = Vec::with_capacity(plan.changes);
    let (mut write_error, mut ended) = (None, 0usize);
    for k in 1..=plan.changes as u64 {
        let sent = now();
        let revision = match commit(subject, names, &format!("x-{k}"), k).await {
            Ok(revision) => revision,
            Err(err) => {
                write_error.get_or_insert(err);
                continue;
            }
        };
        let reply_ms = (now() - sent).as_secs_f64() * 1_000.0;
        let mut push = Histogram::new();
        let mut arrivals = Vec::with_capacity(open);
        let deadline = tokio::time::Instant::from_std(sent + DELIVERY_TIMEOUT);
        while push.count() < (open - ended.min(open)) as u64 {
            match tokio::time::timeout_at(deadline, inbox.recv()).await {
                Ok(Some(Signal::Pushed(version, at))) if version >= revision => {
                    push.record(at.saturating_duration_since(sent));
                    arrivals.push(at);
                }
                Ok(Some(Signal::Ended(err))) => {
                    ended += 1;
                    first_error.get_or_insert(err);
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
        let (ack, all_acked) = acks(subject, names, &resource, open, revision, sent).await;
        // The first stream's push is the nearest the bench sees to the commit itself.
        let mut fanout = Histogram::new();
        if let Some(first) = arrivals.iter().min() {
            for at in &arrivals {
                fanout.record(at.saturating_duration_since(*first));
            }
        }
        changes.push(ChangeFigures {
            revision,
            reply_ms,
            push,
            fanout,
            ack,
            all_acked,
        });
        tokio::time::sleep_until(tokio::time::Instant::from_std(sent + CHANGE_INTERVAL)).await;
    }
    let elapsed = now() - start;
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}

    let summary = XdsSummary::new(streams as u64, open as u64, connections as u64, &changes, rss);
    let mut pushes = Histogram::new();
    for change in &changes {
        pushes.merge(&change.push);
    }
    let expected = open as u64 * plan.changes as u64;
    let mut result = SystemResult::from_requests(
        subject.system,
        expected,
        expected.saturating_sub(pushes.count()),
        elapsed,
        &pushes,
    );
    meter.finish(&mut result);
    if let Some((before, after)) = rss {
        result.memory = Some(MemorySummary::new(open as u64, before, after));
    }
    result.note = Some(format!(
        "{open} of {streams} ADS streams (EDS {resource}) over {connections} HTTP/2 connections opened in {:.2} s \
         (descriptor limit {}); latency = write sent → the stream's push{}{}",
        open_time.as_secs_f64(),
        descriptors.map_or_else(|| "unlimited".to_owned(), |d| d.to_string()),
        first_error.map_or_else(String::new, |err| format!("; first stream failure: {err}")),
        write_error.map_or_else(String::new, |err| format!("; first failed change: {err}")),
    ));
    result.xds = Some(summary);
    Ok(result)
}
