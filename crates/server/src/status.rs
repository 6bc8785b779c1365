//! `GET /v1/status`: the node's identity, leader, revision and readiness, and whether the
//! replicated registry policy matches this node's config file.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use muster_core::api::StatusReply;

use crate::app::App;
use crate::policy;

/// `GET /v1/status`.
pub(crate) async fn status(State(app): State<Arc<App>>) -> Json<StatusReply> {
    let node = app.node.status();
    Json(StatusReply {
        node_id: node.node_id,
        leader: node.leader,
        revision: node.revision,
        applied_index: node.applied_index,
        uptime_ms: app.clock.now_ms(),
        ready: app.is_ready(),
        protected_services: app.protected().iter().map(ToString::to_string).collect(),
        last_leader_contact_ms: app.node.leader_contact_age_ms(),
        policy: Some(app.node.read(|registry| policy::status(registry, &app.config_policy))),
    })
}
