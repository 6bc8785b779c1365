//! The shell around [`muster_convergence::Ledger`] (SPEC O3): the ledger under its lock, the
//! clock it is read with, the latency histogram and refusal counter the metrics register,
//! the apply path's changes and the sweeper.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use muster_consensus::ApplyObserver;
use muster_convergence::{Ledger, LedgerConfig, Query, ReportError};
use muster_core::convergence::{
    AppliedRevision, ClientId, Cohort, ConvergenceReply, ConvergenceReport, DeliveryPath, ReportReply,
};
use muster_core::{Label, Revision, ServiceKey};
use muster_registry::{Applied, Registry};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use muster_gate::clock::ServerClock;

/// How often long-silent subscribers are forgotten: a sweep walks every subscriber under
/// the ledger's lock (which the apply path also takes), and forgetting is due only after
/// `forget_after_ms` (10 min), so every 10 s is plenty.
const SWEEP_EVERY: Duration = Duration::from_secs(10);

/// The `path` label of the latency histogram.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PathLabel {
    path: &'static str,
}

/// The ledger, the clock it is read with, and the aggregate metrics.
pub struct Convergence {
    ledger: Mutex<Ledger>,
    clock: ServerClock,
    /// The DNS listener as a subscriber of its tenant's services, when DNS is on.
    dns: Option<(ClientId, Label)>,
    /// Commit→applied seconds by delivery path (SPEC O3), for `/v1/metrics`.
    pub latency: Family<PathLabel, Histogram>,
    /// Reports refused (bounds, permissions, revisions this node has not reached); a body
    /// that does not parse is refused before it reaches here.
    pub refused: Counter,
}

/// Latency buckets: 1 ms doubling to about 32 s (a loopback delivery to a subscriber that
/// took half a minute).
fn latency_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(0.001, 2.0, 16)
}

impl Convergence {
    /// A ledger with `config`; `dns` names the DNS listener and its tenant when it runs.
    pub fn new(config: LedgerConfig, clock: ServerClock, dns: Option<(ClientId, Label)>) -> Convergence {
        Convergence {
            ledger: Mutex::new(Ledger::new(config)),
            clock,
            dns,
            latency: Family::new_with_constructor(|| Histogram::new(latency_buckets())),
            refused: Counter::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a report over `path`, and its latencies in the histogram.
    pub fn report(&self, path: DeliveryPath, report: &ConvergenceReport) -> Result<usize, ReportError> {
        let now = self.clock.unix_now_ms();
        let outcome = self.lock().report(path, report, now);
        let outcome = outcome.inspect_err(|_| {
            self.refused.inc();
        })?;
        let histogram = self.latency.get_or_create(&PathLabel { path: path.as_str() });
        for latency in outcome.latencies_ms {
            histogram.observe(latency as f64 / 1_000.0);
        }
        Ok(outcome.accepted)
    }

    /// An xDS client acknowledged `services`' endpoints at `revision` (SPEC D5): it applied
    /// them. `node` is its node id; `zone` its locality, counted as the cohort `zone=…`.
    pub fn xds_acked(&self, node: &str, zone: Option<&str>, services: Vec<ServiceKey>, revision: Revision) {
        let Ok(client_id) = ClientId::new(format!("xds:{node}")) else {
            return;
        };
        let cohort = zone.and_then(|zone| Cohort::new(format!("zone={zone}")).ok());
        let received_unix_ms = self.clock.unix_now_ms();
        let applied = services
            .into_iter()
            .map(|service| AppliedRevision {
                service,
                revision,
                received_unix_ms,
            })
            .collect();
        let report = ConvergenceReport {
            client_id,
            cohort,
            applied,
        };
        if let Err(error) = self.report(DeliveryPath::Xds, &report) {
            tracing::debug!(node, %error, "xDS acknowledgement not counted for convergence");
        }
    }

    /// The summary of `key` against `query`; `current` is its last change.
    /// The apply path takes the ledger's lock under the registry's write lock: only a copy
    /// is taken under it, the summary (sorting every sample) is built after.
    pub fn summary(&self, key: &ServiceKey, current: Revision, query: &Query) -> ConvergenceReply {
        let copy = self.lock().copy(key);
        copy.summary(current, query, self.clock.unix_now_ms())
    }

    /// Whether anything is known of `key`'s subscribers.
    pub(crate) fn knows(&self, key: &ServiceKey) -> bool {
        self.lock().tracks(key)
    }

    /// Aggregates for the metrics.
    pub fn totals(&self, current: impl Fn(&ServiceKey) -> Option<Revision>) -> muster_convergence::Totals {
        self.lock().totals(self.clock.unix_now_ms(), current)
    }

    /// How often a subscriber should report while calm, and when it counts as silent.
    pub fn reply_for(&self, accepted: usize) -> ReportReply {
        let config = *self.lock().config();
        ReportReply {
            accepted,
            report_every_ms: config.report_every_ms,
            silent_after_ms: config.silent_after_ms,
        }
    }

    /// xDS streams open now follow what they ACKed: calm, they are live (an ACK comes only
    /// after a change).
    fn xds_alive(&self, followed: Vec<(String, Vec<ServiceKey>)>) {
        let now = self.clock.unix_now_ms();
        let mut ledger = self.lock();
        for (node, services) in followed {
            if let Ok(client) = ClientId::new(format!("xds:{node}")) {
                ledger.touch(&client, DeliveryPath::Xds, &services, now);
            }
        }
    }
}

/// Forgets long-silent subscribers and keeps the subscribers `alive` names live (open xDS
/// streams: each node id and the services it follows), until the server stops. Every
/// `silent_after_ms / 3` (at most `SWEEP_EVERY`, 10 s), so a calm xDS stream never looks silent.
pub async fn run_sweeper(
    convergence: Arc<Convergence>,
    alive: impl Fn() -> Vec<(String, Vec<ServiceKey>)> + Send + 'static,
    mut stopping: tokio::sync::watch::Receiver<bool>,
) {
    let silent_after = Duration::from_millis(convergence.lock().config().silent_after_ms);
    let mut ticker = tokio::time::interval(SWEEP_EVERY.min(silent_after / 3).max(Duration::from_millis(100)));
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stopping.wait_for(|stopping| *stopping) => return,
        }
        convergence.xds_alive(alive());
        convergence.lock().sweep(convergence.clock.unix_now_ms());
    }
}

impl ApplyObserver for Convergence {
    fn applied(&self, _registry: &Registry, applied: &Applied) {
        if applied.updates.is_empty() && applied.released.is_empty() {
            return;
        }
        let now = self.clock.unix_now_ms();
        let mut ledger = self.lock();
        for update in &applied.updates {
            ledger.changed(&update.key, applied.revision, now);
        }
        for key in &applied.released {
            ledger.released(key);
        }
        // The DNS listener answers from the live zone, which folds this change in at its
        // next query: it has applied the revision now (SPEC O3 "commit→DNS").
        if let Some((dns, tenant)) = &self.dns {
            let applied_here: Vec<AppliedRevision> = applied
                .updates
                .iter()
                .filter(|update| update.key.tenant == *tenant)
                .map(|update| AppliedRevision {
                    service: update.key.clone(),
                    revision: applied.revision,
                    received_unix_ms: now,
                })
                .collect();
            if !applied_here.is_empty() {
                let report = ConvergenceReport {
                    client_id: dns.clone(),
                    cohort: None,
                    applied: applied_here,
                };
                // Past the bounds the DNS listener is simply not counted.
                let _ = ledger.report(DeliveryPath::Dns, &report, now);
            }
        }
    }

    fn reset(&self, _registry: &Registry) {}
}
