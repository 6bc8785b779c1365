//! `GET /v1/metrics` (and `/metrics`): the Prometheus text exposition (format 0.0.4, the one
//! `promtool check metrics` lints and every Prometheus scrapes) of what an operator watches
//! (SPEC O1, E2), encoded by the `prometheus-client` crate.
//!
//! ```text
//!  apply path ──judged──▶ MetricsObserver ──▶ registrations, fenced, expiries   (by tenant)
//!  handlers ──▶ renewals (lease_routes), denials (App::denied / unauthenticated),
//!               commit latency (App::propose), watch connects/resumes/compactions (watch),
//!               blocking queries (reads)
//!  leader task ──▶ health transitions, held expiries, checker load (CheckerStats)
//!  scrape ──▶ a Registry built for this scrape: the live counters above, gauges read now
//!             (revision, apply lag, leader, watch backlog, DNS answers), and only the
//!             tenants the caller may see (SPEC S3) ──▶ prometheus_text::encode
//! ```
//!
//! # Why a registry per scrape
//! The counters live here, as plain handles (`Counter`, `Histogram`: an `Arc` around
//! atomics) or as [`TenantCounters`]; a scrape registers clones of them in a fresh
//! `Registry` (no global state: several servers in one process, as in the tests and the
//! simulation, never mix). Building it costs a few dozen small allocations per scrape; what
//! it buys is that the rows by tenant and by service are filtered to what the caller may see,
//! which a shared registry could not do.
//!
//! # Labels (SPEC O1)
//! Only bounded ones: `tenant` (bounded by [`tenants::MAX_TENANTS`]), `outcome` / `command`
//! (fixed lists), `from` / `to` (serving states), `rcode`, `api`, and `service` on
//! `muster_protection_active` (only services self-preservation protects now). Never an
//! endpoint, instance, address or revision.
//!
//! Counters are registered without the `_total` suffix (the encoder appends it) and help texts
//! without their final period (the registry, and [`sorted::Sorted`], append it).

mod observer;
mod sorted;
mod tenants;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use muster_core::{ErrorCode, Label, Rejection, ServingState};
use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

pub(crate) use observer::MetricsObserver;
use sorted::{Row, Sorted};
pub(crate) use tenants::TenantCounters;

use crate::app::App;
use crate::auth::Caller;

/// The checker's counters (kept by the leader task), shared with the metrics handler.
#[derive(Debug, Default)]
pub(crate) struct CheckerStats {
    /// Endpoints with checks.
    pub(crate) endpoints: AtomicU64,
    /// Probes started since the server started.
    pub(crate) probes: AtomicU64,
    /// Probes running now.
    pub(crate) in_flight: AtomicU64,
    /// Serving states proposed (threshold crossings).
    pub(crate) proposals: AtomicU64,
    /// Removals held by self-preservation.
    pub(crate) held: AtomicU64,
}

/// Blocking queries of one API: how they ended and how many wait now.
#[derive(Debug, Default)]
pub(crate) struct BlockingStats {
    /// Returned because what they watch changed.
    pub(crate) changed: AtomicU64,
    /// Returned when their wait ran out with nothing changed.
    pub(crate) timed_out: AtomicU64,
    /// Returned early because the server is stopping.
    pub(crate) stopped: AtomicU64,
    /// Waiting now.
    pub(crate) waiting: AtomicU64,
}

/// How a blocking query ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woken {
    /// What it watches changed.
    Changed,
    /// Its wait ran out.
    TimedOut,
    /// The server is stopping.
    Stopped,
}

impl BlockingStats {
    /// Counts a query that starts waiting; [`BlockingStats::end`] counts how it ended.
    pub(crate) fn begin(&self) {
        self.waiting.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts how a query [`BlockingStats::begin`] counted ended.
    pub(crate) fn end(&self, woken: Woken) {
        self.waiting.fetch_sub(1, Ordering::Relaxed);
        let counter = match woken {
            Woken::Changed => &self.changed,
            Woken::TimedOut => &self.timed_out,
            Woken::Stopped => &self.stopped,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// Watch streams' events that the hub does not count itself.
#[derive(Debug, Default)]
pub(crate) struct WatchCounters {
    /// Streams opened.
    pub(crate) connects: Counter,
    /// Streams opened with `from_revision` and replayed from history.
    pub(crate) resumes: Counter,
    /// Streams refused because `from_revision` is older than the history kept.
    pub(crate) compactions: Counter,
}

/// Outcomes of a renewal, in [`Metrics::renewals`].
pub(crate) mod renewal {
    /// The deadline moved.
    pub(crate) const OK: usize = 0;
    /// No such lease (expired or revoked).
    pub(crate) const LEASE_NOT_FOUND: usize = 1;
    /// This node could not confirm it leads a quorum.
    pub(crate) const NO_QUORUM: usize = 2;
    pub(super) const NAMES: [&str; 3] = ["ok", "lease_not_found", "no_quorum"];
}

/// Outcomes of an expiry, in [`Metrics::expiries`].
pub(crate) mod expiry {
    /// An endpoint was removed because its lease expired.
    pub(crate) const EXPIRED: usize = 0;
    /// A lease expiry held back by self-preservation.
    pub(crate) const HELD: usize = 1;
    pub(super) const NAMES: [&str; 2] = ["expired", "held"];
}

/// Kinds of denial, in [`Metrics::denials`].
pub(crate) mod denial {
    /// A token without the right (403).
    pub(crate) const PERMISSION_DENIED: usize = 0;
    /// No valid credentials (401).
    pub(crate) const UNAUTHENTICATED: usize = 1;
    pub(super) const NAMES: [&str; 2] = ["permission_denied", "unauthenticated"];
}

/// The commands a fenced rejection can refuse, in [`Metrics::fenced`].
pub(crate) mod fenced {
    pub(crate) const REGISTER: usize = 0;
    pub(crate) const SET_SERVING: usize = 1;
    pub(crate) const DRAIN: usize = 2;
    pub(crate) const DEREGISTER: usize = 3;
    pub(super) const NAMES: [&str; 4] = ["register", "set_serving", "drain", "deregister"];
}

/// Outcomes of a registration, in [`Metrics::registrations`]: applied, unchanged (a retry of
/// what is already committed), or refused with the refusal's code.
fn registration_outcomes() -> impl Iterator<Item = &'static str> {
    ["ok", "unchanged"]
        .into_iter()
        .chain(ErrorCode::ALL.iter().map(|code| code.as_str()))
}

/// The outcome number of a registration refused with `rejection`.
pub(crate) fn registration_refused(rejection: &Rejection) -> usize {
    let code = rejection.error_code();
    2 + ErrorCode::ALL.iter().position(|c| *c == code).unwrap_or(0)
}

/// Commit latency buckets: 0.5 ms doubling to about 8 s. A single node's fsync is about a
/// millisecond, a cluster's round trip a few more; a write fails at 5 s
/// (`muster_consensus` `WRITE_TIMEOUT`), so the last bucket holds only failures' neighbours.
fn commit_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(0.000_5, 2.0, 15)
}

/// Every counter the server keeps for `/v1/metrics`; the gauges are read at each scrape.
pub(crate) struct Metrics {
    /// Times the leader this node knows changed (to another node or to none).
    pub(crate) leader_changes: Counter,
    /// Seconds from a write accepted on this node to its commit (applied here).
    pub(crate) commit_latency: Histogram,
    /// Registrations by tenant and outcome.
    pub(crate) registrations: TenantCounters,
    /// Lease renewals by tenant and outcome ([`renewal`]), counted on the node that renews.
    pub(crate) renewals: TenantCounters,
    /// Expired endpoints and held expiries by tenant ([`expiry`]).
    pub(crate) expiries: TenantCounters,
    /// Stale-incarnation refusals (SPEC L2) by tenant and command ([`fenced`]).
    pub(crate) fenced: TenantCounters,
    /// Refused requests by tenant ([`denial`]).
    pub(crate) denials: TenantCounters,
    /// Watch stream events.
    pub(crate) watch: WatchCounters,
    /// The native API's blocking queries (`?index=`).
    pub(crate) blocking_native: BlockingStats,
    /// The Consul-compatible listener's blocking queries: the Consul handlers count here
    /// (`begin`/`end`), reported with `api="consul"`.
    pub(crate) blocking_consul: BlockingStats,
    /// Serving states the checker proposed, by the state it found ([`FROM_STATES`]) and the
    /// state it proposed ([`ALL_STATES`]).
    transitions: [[AtomicU64; ALL_STATES.len()]; FROM_STATES],
    /// The checker's load.
    pub(crate) checker: CheckerStats,
    /// DNS answers, from the live zone (counted whether or not DNS listens).
    dns: Arc<muster_dns::LiveZone>,
}

impl Metrics {
    /// Fresh counters; DNS queries are read from `dns`.
    pub(crate) fn new(dns: Arc<muster_dns::LiveZone>) -> Metrics {
        Metrics {
            leader_changes: Counter::default(),
            commit_latency: Histogram::new(commit_buckets()),
            registrations: TenantCounters::new(registration_outcomes()),
            renewals: TenantCounters::new(renewal::NAMES),
            expiries: TenantCounters::new(expiry::NAMES),
            fenced: TenantCounters::new(fenced::NAMES),
            denials: TenantCounters::new(denial::NAMES),
            watch: WatchCounters::default(),
            blocking_native: BlockingStats::default(),
            blocking_consul: BlockingStats::default(),
            transitions: Default::default(),
            checker: CheckerStats::default(),
            dns,
        }
    }

    /// Counts a serving state the checker proposed over the one the registry holds.
    pub(crate) fn transition(&self, from: Option<ServingState>, to: ServingState) {
        let index = |state: ServingState| ALL_STATES.iter().position(|s| *s == state).unwrap_or(0);
        let from = from.map_or(ALL_STATES.len(), index);
        self.transitions[from][index(to)].fetch_add(1, Ordering::Relaxed);
    }

    /// The transitions counted, as rows labelled `from` and `to`.
    fn transition_rows(&self) -> Vec<Row> {
        let mut rows = Vec::new();
        for (from, row) in self.transitions.iter().enumerate() {
            let from = ALL_STATES.get(from).map_or("absent", |state| state_name(*state));
            for (to, count) in ALL_STATES.iter().zip(row) {
                let count = count.load(Ordering::Relaxed);
                if count > 0 {
                    rows.push((
                        vec![("from", from.to_owned()), ("to", state_name(*to).to_owned())],
                        count,
                    ));
                }
            }
        }
        rows
    }
}

/// Every serving state, in the API's order.
pub(crate) const ALL_STATES: [ServingState; 6] = [
    ServingState::Starting,
    ServingState::Ready,
    ServingState::Degraded,
    ServingState::Draining,
    ServingState::NotServing,
    ServingState::Unknown,
];

/// The states a transition can start from: every state, then `absent` (the endpoint was gone
/// from the registry when the checker proposed).
const FROM_STATES: usize = ALL_STATES.len() + 1;

/// A serving state as the API spells it.
pub(crate) fn state_name(state: ServingState) -> &'static str {
    match state {
        ServingState::Starting => "starting",
        ServingState::Ready => "ready",
        ServingState::Degraded => "degraded",
        ServingState::Draining => "draining",
        ServingState::NotServing => "not_serving",
        ServingState::Unknown => "unknown",
    }
}

/// Who may see which rows of a scrape.
struct Visibility<'a> {
    caller: &'a Caller,
}

impl Visibility<'_> {
    fn sees(&self, tenant: &Label) -> bool {
        self.caller.sees_tenant(tenant)
    }

    /// Rows of no tenant or past the tenant bound: only for callers who see every tenant.
    fn sees_all(&self) -> bool {
        self.caller.confined_to().is_none()
    }
}

/// `counters`' rows the caller may see, labelled `tenant` and `label`, sorted by tenant.
fn tenant_rows(counters: &TenantCounters, label: &'static str, visibility: &Visibility<'_>) -> Vec<Row> {
    counters
        .rows(|t| visibility.sees(t), visibility.sees_all())
        .into_iter()
        .map(|(tenant, outcome, count)| (vec![("tenant", tenant), (label, outcome.to_owned())], count))
        .collect()
}

fn gauge(value: u64) -> ConstGauge<i64> {
    ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX))
}

fn counter(value: u64) -> ConstCounter<u64> {
    ConstCounter::new(value)
}

/// The exposition for `caller`.
pub(crate) fn render(app: &App, caller: &Caller) -> String {
    let metrics = &app.metrics;
    let visibility = Visibility { caller };
    let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
    let mut registry = Registry::with_prefix("muster");

    // Consensus.
    let node = app.node.status();
    registry.register("revision", "The registry's revision", gauge(node.revision.0));
    registry.register(
        "applied_index",
        "The index of the last log entry this node applied",
        gauge(node.applied_index),
    );
    registry.register(
        "apply_lag",
        "Log entries this node holds but has not applied (committed minus applied, at most)",
        gauge(app.node.log_index().saturating_sub(node.applied_index)),
    );
    registry.register(
        "leader_present",
        "1 when this node knows a leader, else 0",
        gauge(u64::from(node.leader.is_some())),
    );
    registry.register(
        "leader",
        "1 when this node is the leader, else 0",
        gauge(u64::from(node.leader == Some(node.node_id))),
    );
    registry.register(
        "leader_changes",
        "Times the leader this node knows changed",
        metrics.leader_changes.clone(),
    );
    registry.register(
        "commit_latency_seconds",
        "Seconds from a write accepted on this node to its commit",
        metrics.commit_latency.clone(),
    );

    // Writes by tenant.
    registry.register_collector(Sorted::counter(
        "registrations",
        "Registrations applied, by tenant and outcome (ok, unchanged, or the refusal's code)",
        tenant_rows(&metrics.registrations, "outcome", &visibility),
    ));
    registry.register_collector(Sorted::counter(
        "renewals",
        "Lease renewals on this node, by tenant and outcome",
        tenant_rows(&metrics.renewals, "outcome", &visibility),
    ));
    registry.register_collector(Sorted::counter(
        "expiries",
        "Endpoints removed by lease expiry (expired) and expiries held by self-preservation (held), by tenant",
        tenant_rows(&metrics.expiries, "outcome", &visibility),
    ));
    registry.register_collector(Sorted::counter(
        "fenced_rejections",
        "Commands refused for a stale incarnation, by tenant and command",
        tenant_rows(&metrics.fenced, "command", &visibility),
    ));
    registry.register_collector(Sorted::counter(
        "denials",
        "Requests refused by authentication or authorisation, by tenant and outcome",
        tenant_rows(&metrics.denials, "outcome", &visibility),
    ));

    // Watches.
    let watch = app.hub.stats();
    registry.register("watchers", "Watch streams open", gauge(watch.watchers as u64));
    registry.register(
        "watch_queued_frames",
        "Frames open watch streams have yet to send",
        gauge(watch.queued_frames as u64),
    );
    registry.register(
        "watch_outstanding_bytes",
        "Bytes of frames held for watch streams that have yet to send them",
        gauge(watch.outstanding_bytes as u64),
    );
    registry.register("watch_resyncs", "Watchers told to resync", counter(watch.resyncs));
    registry.register(
        "watch_slow_consumers",
        "Watchers cut off for falling a whole log behind (each then resyncs)",
        counter(watch.slow_consumers),
    );
    registry.register("watch_connects", "Watch streams opened", metrics.watch.connects.clone());
    registry.register(
        "watch_resumes",
        "Watch streams resumed from a revision (from_revision)",
        metrics.watch.resumes.clone(),
    );
    registry.register(
        "watch_compactions",
        "Watch resumes refused because the revision is older than the history kept",
        metrics.watch.compactions.clone(),
    );

    // Blocking queries.
    let mut blocking = Vec::new();
    let mut waiting = Vec::new();
    for (api, stats) in [
        ("native", &metrics.blocking_native),
        ("consul", &metrics.blocking_consul),
    ] {
        for (outcome, count) in [
            ("changed", &stats.changed),
            ("timeout", &stats.timed_out),
            ("stopping", &stats.stopped),
        ] {
            blocking.push((
                vec![("api", api.to_owned()), ("outcome", outcome.to_owned())],
                load(count),
            ));
        }
        waiting.push((vec![("api", api.to_owned())], load(&stats.waiting)));
    }
    registry.register_collector(Sorted::counter(
        "blocking_queries",
        "Blocking queries returned, by API and why (changed, timeout, stopping)",
        blocking,
    ));
    registry.register_collector(Sorted::gauge(
        "blocking_queries_waiting",
        "Blocking queries waiting now, by API",
        waiting,
    ));

    // Health checks.
    let checker = &metrics.checker;
    registry.register_collector(Sorted::counter(
        "health_transitions",
        "Serving states the checker proposed, by the state found and the state proposed",
        metrics.transition_rows(),
    ));
    registry.register(
        "checker_endpoints",
        "Endpoints with health checks",
        gauge(load(&checker.endpoints)),
    );
    registry.register(
        "checker_probes",
        "Health probes started",
        counter(load(&checker.probes)),
    );
    registry.register(
        "checker_in_flight",
        "Health probes running",
        gauge(load(&checker.in_flight)),
    );
    registry.register(
        "checker_proposals",
        "Serving states the checker proposed (threshold crossings only)",
        counter(load(&checker.proposals)),
    );
    registry.register(
        "checker_held",
        "Removals held by self-preservation",
        counter(load(&checker.held)),
    );
    // Service names only of the tenants the caller may see (SPEC S3); `protected` is sorted.
    let protected = app
        .protected()
        .into_iter()
        .filter(|key| visibility.sees(&key.tenant))
        .map(|key| (vec![("service", key.to_string())], 1))
        .collect();
    registry.register_collector(Sorted::gauge(
        "protection_active",
        "Self-preservation holds removals from this service",
        protected,
    ));

    // DNS.
    let dns = metrics
        .dns
        .stats()
        .counts()
        .map(|(rcode, count)| (vec![("rcode", rcode.to_owned())], count))
        .collect();
    registry.register_collector(Sorted::counter(
        "dns_queries",
        "DNS packets answered, by response code (dropped: not answered)",
        dns,
    ));

    let mut out = String::new();
    prometheus_text::encode(&mut out, &registry).expect("writing to a String cannot fail");
    out
}

/// `GET /v1/metrics` and `GET /metrics`.
pub(crate) async fn metrics(State(app): State<Arc<App>>, caller: Caller) -> impl IntoResponse {
    let out = render(&app, &caller);
    ([(header::CONTENT_TYPE, prometheus_text::CONTENT_TYPE)], out)
}

/// Counts leader changes until the node stops (a task of its own, started with the server).
pub(crate) async fn follow_leader(app: Arc<App>) {
    let mut known = app.node.status().leader;
    let mut stopping = app.stopping();
    loop {
        tokio::select! {
            changed = app.node.leader_change(known) => match changed {
                Ok(leader) => {
                    app.metrics.leader_changes.inc();
                    known = leader;
                }
                Err(_) => return,
            },
            _ = stopping.wait_for(|stopping| *stopping) => return,
        }
    }
}

#[cfg(test)]
#[path = "exposition_tests.rs"]
mod exposition_tests;
