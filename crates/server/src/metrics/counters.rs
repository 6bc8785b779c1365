//! The counters the server keeps for `/v1/metrics` (SPEC O1): each is a plain handle
//! (`Counter`, `Histogram`) or [`TenantCounters`], counted where the event happens and
//! registered afresh by every scrape (`render`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use muster_core::{ErrorCode, Rejection, ServingState};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use super::sorted::Row;
use super::tenants::TenantCounters;
use muster_gate::parked::BlockingStats;

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
    pub(in crate::metrics) const NAMES: [&str; 3] = ["ok", "lease_not_found", "no_quorum"];
}

/// Outcomes of an expiry, in [`Metrics::expiries`].
pub(crate) mod expiry {
    /// An endpoint was removed because its lease expired.
    pub(crate) const EXPIRED: usize = 0;
    /// A lease expiry held back by self-preservation.
    pub(crate) const HELD: usize = 1;
    pub(in crate::metrics) const NAMES: [&str; 2] = ["expired", "held"];
}

impl muster_api::Meter for Metrics {
    fn renewed(&self, tenant: &muster_core::Label, outcome: muster_api::Renewal) {
        let outcome = match outcome {
            muster_api::Renewal::Ok => renewal::OK,
            muster_api::Renewal::LeaseNotFound => renewal::LEASE_NOT_FOUND,
            muster_api::Renewal::NoQuorum => renewal::NO_QUORUM,
        };
        self.renewals.add(Some(tenant), outcome, 1);
    }

    fn watch_began(&self, began: muster_api::WatchBegan) {
        match began {
            muster_api::WatchBegan::Connected => {
                self.watch.connects.inc();
            }
            muster_api::WatchBegan::Resumed => {
                self.watch.connects.inc();
                self.watch.resumes.inc();
            }
            muster_api::WatchBegan::Compacted => {
                self.watch.compactions.inc();
            }
        }
    }
}

impl muster_gate::Meter for Metrics {
    fn denied(&self, tenant: Option<&muster_core::Label>, code: ErrorCode) {
        let kind = match code {
            ErrorCode::Unauthenticated => denial::UNAUTHENTICATED,
            _ => denial::PERMISSION_DENIED,
        };
        self.denials.add(tenant, kind, 1);
    }

    fn committed(&self, seconds: f64) {
        self.commit_latency.observe(seconds);
    }
}

/// Kinds of denial, in [`Metrics::denials`].
pub(crate) mod denial {
    /// A token without the right (403).
    pub(crate) const PERMISSION_DENIED: usize = 0;
    /// No valid credentials (401).
    pub(crate) const UNAUTHENTICATED: usize = 1;
    pub(in crate::metrics) const NAMES: [&str; 2] = ["permission_denied", "unauthenticated"];
}

/// The commands a fenced rejection can refuse, in [`Metrics::fenced`].
pub(crate) mod fenced {
    pub(crate) const REGISTER: usize = 0;
    pub(crate) const SET_SERVING: usize = 1;
    pub(crate) const DRAIN: usize = 2;
    pub(crate) const DEREGISTER: usize = 3;
    pub(in crate::metrics) const NAMES: [&str; 4] = ["register", "set_serving", "drain", "deregister"];
}

/// Outcomes of a registration, in [`Metrics::registrations`]: applied, unchanged (a retry of
/// what is already committed), or refused with the refusal's code.
pub(super) fn registration_outcomes() -> impl Iterator<Item = &'static str> {
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
    pub(crate) blocking_native: Arc<BlockingStats>,
    /// The Consul-compatible listener's blocking queries: the Consul handlers count here
    /// (`begin`/`end`), reported with `api="consul"`.
    pub(crate) blocking_consul: Arc<BlockingStats>,
    /// Serving states the checker proposed, by the state it found ([`FROM_STATES`]) and the
    /// state it proposed ([`ServingState::ALL`]).
    transitions: [[AtomicU64; ServingState::ALL.len()]; FROM_STATES],
    /// The checker's load.
    pub(crate) checker: CheckerStats,
    /// DNS answers, from the live zone (counted whether or not DNS listens).
    pub(super) dns: Arc<muster_dns::LiveZone>,
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
            blocking_native: Arc::default(),
            blocking_consul: Arc::default(),
            transitions: Default::default(),
            checker: CheckerStats::default(),
            dns,
        }
    }

    /// Counts a serving state the checker proposed over the one the registry holds.
    pub(crate) fn transition(&self, from: Option<ServingState>, to: ServingState) {
        let index = |state: ServingState| ServingState::ALL.iter().position(|s| *s == state).unwrap_or(0);
        let from = from.map_or(ServingState::ALL.len(), index);
        self.transitions[from][index(to)].fetch_add(1, Ordering::Relaxed);
    }

    /// The transitions counted, as rows labelled `from` and `to`.
    pub(super) fn transition_rows(&self) -> Vec<Row> {
        let mut rows = Vec::new();
        for (from, row) in self.transitions.iter().enumerate() {
            let from = ServingState::ALL.get(from).map_or("absent", |state| state.as_str());
            for (to, count) in ServingState::ALL.iter().zip(row) {
                let count = count.load(Ordering::Relaxed);
                if count > 0 {
                    rows.push((vec![("from", from.to_owned()), ("to", to.as_str().to_owned())], count));
                }
            }
        }
        rows
    }
}

/// The states a transition can start from: every state, then `absent` (the endpoint was gone
/// from the registry when the checker proposed).
const FROM_STATES: usize = ServingState::ALL.len() + 1;
