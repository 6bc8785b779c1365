//! `GET /v1/status`: the node's identity, leader, revision and readiness, and whether the
//! replicated registry policy matches this node's config file. A node whose storage failed
//! is not ready and says why in `fatal` (its server is stopping).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use muster_core::api::StatusReply;

use crate::Native;
use crate::policy;
use muster_gate::Caller;

/// `GET /v1/status`.
/// Open (readiness probes need no token), so it names only the services the caller may
/// read: none for an anonymous caller when authentication is on (SPEC S3).
pub async fn status(State(app): State<Arc<Native>>, caller: Caller) -> Json<StatusReply> {
    let node = app.gate.status();
    Json(StatusReply {
        node_id: node.node_id,
        leader: node.leader,
        revision: node.revision,
        applied_index: node.applied_index,
        uptime_ms: app.gate.clock.now_ms(),
        ready: app.gate.is_ready() && node.fatal.is_none(),
        protected_services: app
            .gate
            .protected()
            .iter()
            .filter(|key| caller.sees_every_tenant() || caller.may(key, muster_auth::Verb::Read))
            .map(ToString::to_string)
            .collect(),
        last_leader_contact_ms: app.gate.leader_contact_age_ms(),
        fatal: node.fatal.map(|fatal| format!("storage: {fatal}")),
        policy: Some(app.gate.read(|registry| policy::status(registry, &app.config_policy))),
        // Totals over every tenant: only for a caller that sees them all (SPEC S3).
        admission: caller.sees_every_tenant().then(|| app.gate.admission_status()),
        format: Some(muster_core::api::FormatStatus {
            cluster: app.gate.format(),
            node: muster_core::FORMAT,
        }),
    })
}
