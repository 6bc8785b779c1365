//! The node-to-node listener (SPEC R): openraft's RPCs, forwarded writes and followers'
//! read-index requests (R3), on their own address, each request authenticated with the
//! cluster secret (SPEC R1).
//!
//! ```text
//!  peer ──POST /raft/{append|vote|snapshot|propose|read_index} + x-muster-cluster-secret──▶ Node::rpc
//!        (JSON bodies; a snapshot chunk raw behind a JSON head: `snapshot_frame`)
//!  follower ──POST /app/leader {renew | report | in_flight}──▶ answered here (only while
//!                                             leading; else no_quorum) — see `forward`
//!  leader ──GET /join/proof?nonce=N (no secret)──▶ this node's proof it holds the secret (`join`)
//!        wrong or missing secret: 401 unauthenticated, nothing done, no byte of body read,
//!        the denial audited with the peer's address (SPEC S4)
//! ```
//!
//! The secret is checked by a layer in front of every route, before any extractor runs
//! (SPEC S6): a peer that does not know it cannot make this node buffer a 64 MiB body, or
//! even wait for one. The compare is constant-time ([`Node::accepts_secret`]).

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use std::sync::Arc;

use muster_consensus::{Rpc, SECRET_HEADER, SNAPSHOT_CHUNK_BYTES, WIRE_HEADER, WIRE_VERSION};

use crate::app::App;
use crate::join::{self, JoinKey, PROOF_PATH};
use muster_api::renew_here;
use muster_gate::audit::Denial;
use muster_gate::forward::{LEADER_PATH, LeaderCall};
use muster_http::error::ApiError;
use muster_http::peer::Peer;

/// The largest node-to-node request (`muster_consensus::append_pacer`): an append of many
/// batched entries, which the sender keeps to an eighth of it, or a snapshot chunk, which
/// travels raw (`muster_consensus::snapshot_frame`): its [`SNAPSHOT_CHUNK_BYTES`] and a head
/// of a few hundred bytes.
const MAX_RPC_BYTES: usize = muster_consensus::append_pacer::MAX_RPC_BYTES;

// A full snapshot chunk and its head (far below 64 KiB) fit in one request.
const _: () = assert!(SNAPSHOT_CHUNK_BYTES + 64 * 1024 <= MAX_RPC_BYTES as u64);

/// The cluster listener's routes.
pub(crate) fn router(app: Arc<App>, join: Arc<JoinKey>) -> Router {
    // The join proof is the one route without the secret: a candidate proves it holds the
    // secret by answering it (`join`), before the leader sends it anything.
    let proof = Router::new().route(PROOF_PATH, get(join::proof)).with_state(join);
    Router::new()
        .route("/raft/{rpc}", post(rpc))
        .route(LEADER_PATH, post(leader_call))
        .layer(DefaultBodyLimit::max(MAX_RPC_BYTES))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&app),
            authenticate_first,
        ))
        .with_state(app)
        .merge(proof)
}

/// Refuses a request without the cluster secret before its body is read: the handlers
/// behind it read bodies, this layer only the head. Then refuses a message in a node-to-node
/// encoding newer than this build reads (SPEC R7), and names this build's on every reply.
async fn authenticate_first(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    let peer = request.extensions().get::<Peer>();
    if let Err(refused) = authenticate(&app, peer, request.uri().path(), request.headers()) {
        return refused.into_response();
    }
    let wire = request.headers().get(WIRE_HEADER).map(|value| value.as_bytes());
    let mut response = match muster_consensus::readable_wire(wire) {
        Ok(_) => next.run(request).await,
        Err(refused) => ApiError::bad_request(refused.to_string()).into_response(),
    };
    response
        .headers_mut()
        .insert(WIRE_HEADER, header::HeaderValue::from(WIRE_VERSION));
    response
}

fn authenticate(app: &App, peer: Option<&Peer>, resource: &str, headers: &HeaderMap) -> Result<(), ApiError> {
    let secret = headers
        .get(SECRET_HEADER)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    if app.node.accepts_secret(secret) {
        return Ok(());
    }
    let reason = format!("node-to-node requests need the cluster secret in {SECRET_HEADER}");
    app.gate.audit().denied(Denial {
        principal: None,
        tenant: None,
        key: None,
        verb: "cluster".to_owned(),
        resource: format!("POST {resource}"),
        code: muster_core::ErrorCode::Unauthenticated,
        reason: if secret.is_empty() {
            format!("no cluster secret in {SECRET_HEADER}")
        } else {
            format!("a wrong cluster secret in {SECRET_HEADER}")
        },
        source: peer.map(|peer| peer.addr),
        at_ms: app.gate.clock.unix_now_ms(),
    });
    Err(ApiError::new(muster_core::ErrorCode::Unauthenticated, reason))
}

/// A request a follower forwarded (`forward`): answered by the same code the leader runs for
/// its own clients; only while leading.
async fn leader_call(State(app): State<Arc<App>>, body: Bytes) -> Response {
    let call = match serde_json::from_slice::<LeaderCall>(&body) {
        Ok(call) => call,
        Err(error) => return ApiError::bad_request(format!("not a leader call: {error}")).into_response(),
    };
    if !app.gate.is_leader() {
        return ApiError::no_quorum("this node no longer leads; retry").into_response();
    }
    let answer = match call {
        LeaderCall::Renew { tenant, id } => renew_here(&app.native, &tenant, id).map(|r| axum::Json(r).into_response()),
        LeaderCall::Report { key, instance, request } => app
            .gate
            .ttl_report(key, instance, request)
            .await
            .map(|r| axum::Json(r).into_response()),
        LeaderCall::InFlight { key, instance, request } => app
            .gate
            .in_flight(key, instance, request)
            .await
            .map(|r| axum::Json(r).into_response()),
    };
    answer.unwrap_or_else(IntoResponse::into_response)
}

async fn rpc(State(app): State<Arc<App>>, Path(segment): Path<String>, body: Bytes) -> Response {
    let node = &app.node;
    let Some(rpc) = Rpc::from_segment(&segment) else {
        return ApiError::not_found(format!("no cluster RPC '{segment}'")).into_response();
    };
    match node.rpc(rpc, &body).await {
        Ok(reply) => ([(header::CONTENT_TYPE, "application/json")], reply).into_response(),
        Err(message) => ApiError::bad_request(message).into_response(),
    }
}
