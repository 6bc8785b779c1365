//! The xDS control plane's wiring (SPEC D5): its `[xds]` section, `GET /v1/xds/clients`, and
//! what this node serves beside the registry. The server itself is `muster_xds::server`
//! (feature `xds`), an adapter over the gate.

pub(crate) mod config;

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use muster_core::xds_view::ClientsPage;
use muster_gate::Caller;

use crate::app::App;

/// `GET /v1/xds/clients`: every open stream whose every name the caller may read, and per
/// resource what it was sent and acknowledged (SPEC S3, D5).
#[cfg(feature = "xds")]
pub(crate) async fn clients(State(app): State<Arc<App>>, caller: Caller) -> Json<ClientsPage> {
    Json(app.xds.page(&caller))
}

/// `GET /v1/xds/clients` in a build without xDS: no streams.
#[cfg(not(feature = "xds"))]
pub(crate) async fn clients(State(app): State<Arc<App>>, _caller: Caller) -> Json<ClientsPage> {
    Json(ClientsPage {
        revision: app.gate.read(muster_registry::Registry::revision).0,
        clients: Vec::new(),
    })
}

/// What this node serves beside the registry (`muster_xds::server::Serving`): a federated
/// region's failover tiers (`muster_federation`'s `tiers`), and the convergence ledger.
#[cfg(feature = "xds")]
pub(crate) struct Serving {
    pub(crate) federation: Option<Arc<muster_federation::Federation>>,
    pub(crate) convergence: Arc<crate::convergence::Convergence>,
}

#[cfg(feature = "xds")]
impl muster_xds::server::Serving for Serving {
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
