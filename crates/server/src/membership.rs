//! `GET /v1/cluster`, and adding and removing members (SPEC R): membership changes are
//! Raft's own (joint consensus in openraft), asked of the leader; another node answers
//! `not_leader` naming it.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use muster_core::address::host_port;
use muster_core::api::{AddMemberRequest, ClusterMember, ClusterReply};

use crate::app::App;
use crate::join;
use muster_http::error::ApiError;
use muster_http::extract::{JsonBody, QueryParams};

fn reply(app: &App) -> ClusterReply {
    let status = app.gate.status();
    ClusterReply {
        node_id: status.node_id,
        leader: status.leader,
        members: app
            .node
            .members()
            .into_iter()
            .map(|m| ClusterMember {
                id: m.id,
                addr: m.addr,
                voter: m.voter,
            })
            .collect(),
    }
}

/// The query of `GET /v1/cluster`.
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct ClusterQuery {
    /// Stream as NDJSON (the dashboard, SPEC U2): a line at once, then one on change. Each
    /// line is the reply plus this node's `revision`, `applied_index` and
    /// `last_leader_contact_ms` (as in `GET /v1/status`).
    #[serde(default)]
    stream: bool,
}

/// `GET /v1/cluster[?stream=true]`.
pub(crate) async fn status(
    State(app): State<Arc<App>>,
    caller: muster_gate::Caller,
    QueryParams(query): QueryParams<ClusterQuery>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    if !query.stream {
        return Json(reply(&app)).into_response();
    }
    let reader = Arc::clone(&app);
    muster_gate::live::changes_stream(
        &app.gate,
        &caller,
        muster_gate::live::DEFAULT_INTERVAL,
        move || {
            let mut line = serde_json::to_value(reply(&reader))
                .map_err(|e| ApiError::new(muster_core::ErrorCode::Internal, e.to_string()))?;
            let node = reader.node.status();
            line["revision"] = serde_json::json!(node.revision);
            line["applied_index"] = serde_json::json!(node.applied_index);
            line["last_leader_contact_ms"] = serde_json::json!(reader.node.leader_contact_age_ms());
            Ok(line)
        },
        None,
    )
}

/// `POST /v1/cluster/members`: returns once the node is a voter. The candidate must first
/// answer the join challenge (`join`): 409 `membership_refused` otherwise, with nothing
/// sent to it and nothing changed.
pub(crate) async fn add(
    State(app): State<Arc<App>>,
    JsonBody(request): JsonBody<AddMemberRequest>,
) -> Result<Json<ClusterReply>, ApiError> {
    if host_port(&request.addr).is_none() || request.id == 0 {
        return Err(ApiError::bad_request(format!(
            "a member is an id above 0 and a host:port, got {} at '{}'",
            request.id, request.addr
        )));
    }
    // The candidate proves it holds the cluster secret before the leader sends it anything
    // that carries it (SPEC S6; see `join`). A node that does not lead refuses before
    // dialling anyone: asking openraft on a node about to lead would add the learner unproven.
    if !app.gate.is_leader() {
        return Err(muster_consensus::ConsensusError::NotLeader(app.gate.status().leader).into());
    }
    let Some(link) = app.wiring.cluster() else {
        return Err(ApiError::new(
            muster_core::ErrorCode::MembershipRefused,
            "a single node has no cluster secret, so no member can prove it belongs; \
             start a cluster with --peers and --cluster-secret",
        ));
    };
    let join = app.join.as_ref().expect("a cluster has a join key");
    join::challenge(join, link.tls.clone(), request.id, &request.addr).await?;
    // A build that cannot apply the registry's format would stop at, or misread, the first
    // entry it does not know (architecture.md "Formats and versions"): it is not added.
    let format = app.gate.format();
    if format > muster_core::FIRST_FORMAT {
        let theirs = app
            .node
            .format_of(request.id, &request.addr, std::time::Duration::from_secs(1))
            .await;
        if theirs.is_none_or(|theirs| theirs < format) {
            let theirs = theirs.map_or_else(|| "did not say".to_owned(), |f| format!("applies format {f}"));
            return Err(ApiError::new(
                muster_core::ErrorCode::MembershipRefused,
                format!(
                    "node {}'s build {theirs}, and the registry is at format {format}: start it on a build as new as the cluster's",
                    request.id
                ),
            ));
        }
    }
    app.node.add_member(request.id, &request.addr).await?;
    Ok(Json(reply(&app)))
}

/// `DELETE /v1/cluster/members/{id}`.
pub(crate) async fn remove(State(app): State<Arc<App>>, Path(id): Path<u64>) -> Result<Json<ClusterReply>, ApiError> {
    app.node.remove_member(id).await?;
    Ok(Json(reply(&app)))
}
