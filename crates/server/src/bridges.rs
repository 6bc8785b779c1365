//! What one adapter needs of another, given by the wiring: adapters never depend on one
//! another (DECISIONS "Structure"), so each says what it needs as a trait and this module
//! answers it with the other's parts.
//!
//! - [`FederatedReads`]: the native API's `?federation=true` reads (`muster_api::Federated`)
//!   from federation's mirrors and failover decisions (SPEC G1, G2).
//! - `XdsServing`: what the xDS server serves beside the registry
//!   (`muster_xds::server::Serving`): federation's failover tiers, and the convergence
//!   ledger its acknowledgements go to (SPEC G2, O3).

use std::sync::Arc;

use muster_core::federation::{FailoverDecision, MirroredSet};
use muster_core::{ServiceKey, ServiceSnapshot};
use muster_federation::Federation;
use muster_registry::Registry;

/// Federation's answer to the native API's federated reads.
pub(crate) struct FederatedReads(pub(crate) Arc<Federation>);

impl muster_api::Federated for FederatedReads {
    fn parts(
        &self,
        registry: &Registry,
        key: &ServiceKey,
        local: Option<&ServiceSnapshot>,
        now_ms: u64,
    ) -> (Vec<MirroredSet>, Option<FailoverDecision>) {
        muster_federation::federated_parts(&self.0, registry, key, local, now_ms)
    }
}

/// What this node serves beside the registry (`muster_xds::server::Serving`): a federated
/// region's failover tiers (`muster_federation`'s `tiers`), and the convergence ledger.
#[cfg(feature = "xds")]
pub(crate) struct XdsServing {
    pub(crate) federation: Option<Arc<muster_federation::Federation>>,
    pub(crate) convergence: Arc<muster_api::convergence::Convergence>,
}

#[cfg(feature = "xds")]
impl muster_xds::server::Serving for XdsServing {
    fn served(
        &self,
        registry: &muster_registry::Registry,
        key: &muster_core::ServiceKey,
        now_ms: u64,
    ) -> Option<Arc<muster_core::ServiceSnapshot>> {
        match &self.federation {
            Some(federation) => federation.served(registry, key, now_ms),
            None => registry.snapshot(key),
        }
    }

    fn acked_as(&self, key: &muster_core::ServiceKey, acked: muster_core::Revision) -> Option<muster_core::Revision> {
        match &self.federation {
            Some(federation) => federation.acked_as(key, acked),
            None => Some(acked),
        }
    }

    fn converged(
        &self,
        node: &str,
        zone: Option<&str>,
        services: Vec<muster_core::ServiceKey>,
        revision: muster_core::Revision,
    ) {
        self.convergence.xds_acked(node, zone, services, revision);
    }
}
