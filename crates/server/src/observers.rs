//! Everything derived from the registry hears of each apply, in one order, under the
//! registry's write lock (each must be quick). The order is this struct's: its fields are
//! the stages, and [`Observers::each`] is the only place that walks them.
//!
//! ```text
//!  apply ─▶ dns ─▶ convergence ─▶ hub ─▶ leader ─▶ policy ─▶ audit ─▶ tokens ─▶ metrics
//!                                                   ─▶ endpoint_log ─▶ consul? ─▶ xds?
//! ```
//!
//! Where the order matters, the stage says why: the DNS zone and the convergence ledger
//! learn of a change before any watcher (the hub) can hear of it, so a fast client that
//! reads DNS or reports its convergence after a watch frame always finds the change.

use std::sync::Arc;

use muster_consensus::{ApplyObserver, Judged};
use muster_registry::{Applied, Registry};

use crate::dns::DnsFeed;
use crate::endpoint_log::EndpointLog;
use crate::leader::LeaderFeed;
use crate::metrics::MetricsObserver;
use muster_api::PolicyWatch;
use muster_api::convergence::Convergence;
use muster_consul::waiters::Waiters;
use muster_gate::TokenWatch;
use muster_gate::audit::AuditLog;
use muster_hub::WatchHub;

/// The apply path's stages, in the order they run.
pub(crate) struct Observers {
    /// The DNS zone: answers the change before any watcher hears of it.
    pub(crate) dns: DnsFeed,
    /// The convergence ledger (SPEC O3): a change is in it before any watcher can hear of
    /// it, so a fast subscriber's report always finds the change it measures.
    pub(crate) convergence: Arc<Convergence>,
    /// The watch streams (SPEC W1–W3).
    pub(crate) hub: Arc<WatchHub>,
    /// The leader's duties (lease deadlines, the checker's targets).
    pub(crate) leader: Arc<LeaderFeed>,
    /// The replicated policy, when it changes.
    pub(crate) policy: PolicyWatch,
    /// The audit trail's mutations (SPEC S4).
    pub(crate) audit: Arc<AuditLog>,
    /// The token table: open streams re-check their tokens.
    pub(crate) tokens: TokenWatch,
    /// The metrics' counters.
    pub(crate) metrics: MetricsObserver,
    /// Each endpoint's transitions, for the dashboard.
    pub(crate) endpoint_log: EndpointLog,
    /// The Consul API's blocking queries, when it is enabled.
    pub(crate) consul: Option<Arc<Waiters>>,
    /// The xDS hub (its resource cache and the streams' wake-ups), when xDS is enabled.
    #[cfg(feature = "xds")]
    pub(crate) xds: Option<Arc<muster_xds::server::XdsHub>>,
}

impl Observers {
    /// Calls `stage` on every stage, in order.
    fn each(&self, mut stage: impl FnMut(&dyn ApplyObserver)) {
        stage(&self.dns);
        stage(&*self.convergence);
        stage(&*self.hub);
        stage(&*self.leader);
        stage(&self.policy);
        stage(&*self.audit);
        stage(&self.tokens);
        stage(&self.metrics);
        stage(&self.endpoint_log);
        if let Some(consul) = &self.consul {
            stage(&**consul);
        }
        #[cfg(feature = "xds")]
        if let Some(xds) = &self.xds {
            stage(&**xds);
        }
    }
}

impl ApplyObserver for Observers {
    fn applied(&self, registry: &Registry, applied: &Applied) {
        self.each(|stage| stage.applied(registry, applied));
    }

    fn judged(&self, judged: &Judged<'_>) {
        self.each(|stage| stage.judged(judged));
    }

    fn reset(&self, registry: &Registry) {
        self.each(|stage| stage.reset(registry));
    }
}
