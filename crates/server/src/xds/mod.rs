//! The xDS control plane's wiring (SPEC D5): its `[xds]` section and `GET /v1/xds/clients`.
//! The server itself is `muster_xds::server` (feature `xds`), an adapter over the gate; what
//! it serves beside the registry is `bridges::XdsServing`.

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
