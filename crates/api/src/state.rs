//! The handlers' state and what the wiring gives it: a [`Meter`], the blocking queries'
//! counters and a [`Federated`] view.

use std::sync::Arc;

use muster_core::federation::{FailoverDecision, MirroredSet};
use muster_core::{Label, ServiceKey, ServiceSnapshot};
use muster_gate::Gate;
use muster_gate::parked::BlockingStats;
use muster_registry::{Registry, RegistryConfig};

/// How a renewal on this node ended (SPEC L3), for the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    /// The deadline moved.
    Ok,
    /// No such lease (expired or revoked).
    LeaseNotFound,
    /// This node could not confirm it leads a quorum.
    NoQuorum,
}

/// How a watch stream began (SPEC W1, W2), for the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchBegan {
    /// Opened from the current state.
    Connected,
    /// Opened with `from_revision` and replayed from history.
    Resumed,
    /// Refused: `from_revision` is older than the history kept.
    Compacted,
}

/// What the native API counts, kept by the wiring's metrics.
pub trait Meter: Send + Sync {
    /// A renewal on this node for `tenant` ended with `outcome`.
    fn renewed(&self, tenant: &Label, outcome: Renewal);
    /// A watch stream began (or was refused for compacted history).
    fn watch_began(&self, began: WatchBegan);
}

/// A federated region's view of a covered service (SPEC G1, G2), given by the wiring.
pub trait Federated: Send + Sync {
    /// The peer regions' mirrored sets of `key`, and the failover decision for it, beside
    /// `local` (this region's set) at wall-clock `now_ms`.
    fn parts(
        &self,
        registry: &Registry,
        key: &ServiceKey,
        local: Option<&ServiceSnapshot>,
        now_ms: u64,
    ) -> (Vec<MirroredSet>, Option<FailoverDecision>);
}

/// The native API handlers' state.
pub struct Native {
    pub(crate) gate: Arc<Gate>,
    pub(crate) meter: Arc<dyn Meter>,
    /// The native blocking queries (`?index=`), shared with the metrics.
    pub(crate) blocking: Arc<BlockingStats>,
    pub(crate) federation: Option<Arc<dyn Federated>>,
    /// This node's config file's `[registry]` section: only the initial policy; `status`
    /// reports how the replicated policy differs from it.
    pub(crate) config_policy: RegistryConfig,
    /// Which revision every subscriber applied (SPEC O3).
    pub(crate) convergence: Arc<crate::convergence::Convergence>,
    /// Whole-set reads' endpoints, encoded once per service revision.
    pub(crate) read_cache: crate::read_cache::ReadCache,
}

impl Native {
    /// The handlers' state over `gate`.
    pub fn new(
        gate: Arc<Gate>,
        meter: Arc<dyn Meter>,
        blocking: Arc<BlockingStats>,
        federation: Option<Arc<dyn Federated>>,
        config_policy: RegistryConfig,
        convergence: Arc<crate::convergence::Convergence>,
    ) -> Native {
        Native {
            gate,
            meter,
            blocking,
            federation,
            config_policy,
            convergence,
            read_cache: crate::read_cache::ReadCache::default(),
        }
    }

    /// The authority a write speaks with (SPEC L5): the caller's role, narrowed by
    /// `X-Muster-Actor`, or the route's `default` capped at it; a widening header is a `403`
    /// on the audit trail. `resource` names the request.
    pub(crate) fn speaking_as(
        &self,
        caller: &muster_gate::Caller,
        peer: Option<&muster_http::peer::Peer>,
        headers: &axum::http::HeaderMap,
        default: muster_core::Actor,
        resource: impl FnOnce() -> String,
    ) -> Result<muster_core::Actor, muster_http::error::ApiError> {
        let asked = muster_http::extract::actor(headers)?;
        self.gate.speaking_as(caller, peer, asked, default, resource)
    }
}
