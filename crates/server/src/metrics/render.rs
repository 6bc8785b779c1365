//! One scrape: a `Registry` built for it from the live counters, the gauges read now, and the
//! rows the caller may see (see the parent module's "Why a registry per scrape").
//!
//! # What a caller sees (SPEC S3)
//! | series | shown to |
//! |---|---|
//! A scrape needs a `metrics` right (an operator's token has every one); then:
//!
//! | series | shown to |
//! |---|---|
//! | the node's own state (revision, applied index, apply lag, leader), as `/v1/status` gives anyone | every caller with a `metrics` right |
//! | a row of one service (`protection_active`, `xds_subscribers*`) | a caller whose `metrics` right covers that service |
//! | a row of one tenant (`registrations`, `denials`, ...; `xds_streams` counts) | a caller with `metrics` on every service of that tenant |
//! | figures over every tenant together (watches, convergence, blocking queries, checks, DNS, commit latency, xDS responses) and rows of no tenant | an operator or unrestricted caller |

use std::sync::atomic::{AtomicU64, Ordering};

use muster_core::{Label, ServiceKey};
use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use super::sorted::{Row, Sorted};
use super::tenants::TenantCounters;
use crate::app::App;
use muster_gate::Caller;

/// Who may see which rows of a scrape: an operator (or anyone, with authentication off)
/// every row; a tenant's token, which reached the scrape with some `metrics` right, the rows
/// of its tenant as a whole when the right covers every service of it, and the rows of each
/// service it covers.
struct Visibility<'a> {
    caller: &'a Caller,
}

impl Visibility<'_> {
    /// Rows of one tenant.
    fn sees(&self, tenant: &Label) -> bool {
        self.sees_all()
            || self
                .caller
                .check(&muster_auth::Request {
                    tenant: Some(tenant),
                    scope: muster_auth::Scope::EveryService,
                    verb: muster_auth::Verb::Metrics,
                })
                .is_ok()
    }

    /// Rows of one service.
    fn reads(&self, key: &ServiceKey) -> bool {
        self.sees_all() || self.caller.may(key, muster_auth::Verb::Metrics)
    }

    /// Figures over every tenant together, rows of no tenant or past the tenant bound: only
    /// for callers who see every tenant (an operator, or authentication off).
    fn sees_all(&self) -> bool {
        self.caller.sees_every_tenant()
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
    let mut registry = Registry::with_prefix("muster");

    // Consensus.
    let node = app.gate.status();
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
    if visibility.sees_all() {
        // Its count is every tenant's writes.
        registry.register(
            "commit_latency_seconds",
            "Seconds from a write accepted on this node to its commit",
            metrics.commit_latency.clone(),
        );
    }

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

    if visibility.sees_all() {
        every_tenant(app, &mut registry);
    }
    // Service names only of the services the caller may read (SPEC S3); `protected` is
    // sorted.
    let protected = app
        .gate
        .protected()
        .into_iter()
        .filter(|key| visibility.reads(key))
        .map(|key| (vec![("service", key.to_string())], 1))
        .collect();
    registry.register_collector(Sorted::gauge(
        "protection_active",
        "Self-preservation holds removals from this service",
        protected,
    ));

    #[cfg(feature = "xds")]
    xds(app, &visibility, &mut registry);

    let mut out = String::new();
    prometheus_text::encode(&mut out, &registry).expect("writing to a String cannot fail");
    out
}

/// The figures over every tenant together: watches, convergence, blocking queries, health
/// checks, DNS. Only for callers who see every tenant.
fn every_tenant(app: &App, registry: &mut Registry) {
    let metrics = &app.metrics;
    let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
    // Watches.
    let watch = app.gate.watch_stats();
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

    // Admission (SPEC W4, S6): what every listener's callers hold, and what was refused.
    let admission = app.gate.admission_report();
    registry.register_collector(Sorted::gauge(
        "admission_held",
        "Streams and parked queries open, by kind (watch, live, xds, parked)",
        muster_gate::Hold::ALL
            .into_iter()
            .map(|hold| (vec![("kind", hold.as_str().to_owned())], admission.held.of(hold) as u64))
            .collect(),
    ));
    registry.register(
        "admission_xds_names",
        "xDS resource names subscribed, every stream together",
        gauge(admission.held.names as u64),
    );
    registry.register_collector(Sorted::counter(
        "admission_refused",
        "Streams, subscriptions and parked queries refused, by the budget that refused",
        muster_gate::Budget::ALL
            .into_iter()
            .zip(admission.refused)
            .map(|(budget, refused)| (vec![("budget", budget.as_str().to_owned())], refused))
            .collect(),
    ));
    registry.register(
        "write_rate_refused",
        "Writes refused for their principal's rate (write_rate_per_principal), with authentication on",
        counter(app.gate.writes_rate_limited()),
    );

    // Convergence (SPEC O3): aggregates over every service, never a client id.
    let convergence = &app.convergence;
    let totals = app
        .gate
        .read(|registry| convergence.totals(|key| registry.snapshot(key).map(|s| s.revision())));
    registry.register(
        "convergence_subscribers",
        "Live subscribers (client and service pairs, the DNS listener not counted) reporting what they applied",
        gauge(totals.live as u64),
    );
    registry.register(
        "convergence_behind",
        "Live subscribers behind their service's last change",
        gauge(totals.behind as u64),
    );
    registry.register(
        "convergence_silent",
        "Subscribers that stopped reporting and are not yet forgotten",
        gauge(totals.silent as u64),
    );
    registry.register(
        "convergence_services",
        "Services with reporting subscribers",
        gauge(totals.services as u64),
    );
    registry.register(
        "convergence_apply_latency_seconds",
        "Seconds from this node's commit of a change to a subscriber receiving it, by delivery path (watch: reported receipt, xds: ACK); the DNS listener applies at commit (muster bench measures the answer)",
        convergence.latency.clone(),
    );
    registry.register(
        "convergence_reports_refused",
        "Convergence reports refused (bounds, permissions)",
        convergence.refused.clone(),
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
            ("gone", &stats.gone),
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
        "Blocking queries ended, by API and why (changed, timeout, stopping, gone: the client hung up)",
        blocking,
    ));
    registry.register_collector(Sorted::gauge(
        "blocking_queries_waiting",
        "Blocking queries waiting now, by API",
        waiting,
    ));
    registry.register_collector(Sorted::counter(
        "blocking_wakeups",
        "Times a waiting Consul blocking query was woken by a change of what it watches (its \
         service, or its namespace): one per change per waiter of that service only",
        vec![(vec![("api", "consul".to_owned())], app.consul_stats.counts().wakeups)],
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
}

/// The xDS control plane (SPEC D5, O2): streams, responses, refusals, and per service how
/// many subscribers acknowledged its latest revision. No client ids as labels.
#[cfg(feature = "xds")]
fn xds(app: &App, visibility: &Visibility<'_>, registry: &mut Registry) {
    // The streams `/v1/xds/clients` lists to this caller.
    let streams = app
        .xds
        .streams(|tenant| visibility.sees(tenant), |key| visibility.reads(key));
    registry.register_collector(Sorted::gauge(
        "xds_streams",
        "Open xDS (ADS) streams, by protocol variant",
        vec![
            (vec![("protocol", "sotw".to_owned())], streams[0]),
            (vec![("protocol", "delta".to_owned())], streams[1]),
        ],
    ));
    // Responses and NACKs are not per tenant: only callers who see every tenant see them.
    if visibility.sees_all() {
        registry.register(
            "xds_watched_services",
            "Services some xDS stream watches or lists, each with its cached resources",
            gauge(app.xds.watched() as u64),
        );
        let counts = app.xds.counts();
        let rows = |pick: fn(&(muster_xds::Kind, u64, u64)) -> u64| {
            counts
                .iter()
                .map(|row| (vec![("type", row.0.as_str().to_owned())], pick(row)))
                .collect()
        };
        registry.register_collector(Sorted::counter(
            "xds_responses",
            "xDS responses sent, by resource type",
            rows(|row| row.1),
        ));
        registry.register_collector(Sorted::counter(
            "xds_nacks",
            "xDS responses a client refused (NACK), by resource type",
            rows(|row| row.2),
        ));
    }
    let mut subscribers = Vec::new();
    let mut at_latest = Vec::new();
    for (key, (all, latest)) in app.xds.convergence() {
        if !visibility.reads(&key) {
            continue;
        }
        let labels = vec![
            ("tenant", key.tenant.as_str().to_owned()),
            ("namespace", key.namespace.as_str().to_owned()),
            ("service", key.service.as_str().to_owned()),
        ];
        subscribers.push((labels.clone(), all));
        at_latest.push((labels, latest));
    }
    registry.register_collector(Sorted::gauge(
        "xds_subscribers",
        "xDS streams subscribed to a service's endpoints (EDS)",
        subscribers,
    ));
    registry.register_collector(Sorted::gauge(
        "xds_subscribers_at_latest",
        "xDS streams that acknowledged the service's latest revision",
        at_latest,
    ));
}
