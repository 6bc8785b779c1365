//! Proof of membership before the leader dials a new member (SPEC S6, R).
//!
//! Adding a member makes the leader replicate to it: every request it sends there carries
//! the cluster secret (and the registry's whole state). Before, `POST /v1/cluster/members`
//! with any address made the leader send both to that address. Now the candidate must first
//! prove it already holds the secret, and the leader sends nothing secret until it has:
//!
//! ```text
//!  operator ──POST /v1/cluster/members {id, addr}──▶ leader
//!  leader ──GET http://addr/join/proof?nonce=N  (no secret)──▶ candidate
//!  candidate ◀── {node_id, addr, proof = HMAC-SHA256(secret, "muster-join-v1" N id addr)}
//!  leader: node_id = id, and the proof is that of (N, id, addr)? ─no─▶ 409 membership_refused
//!          │ yes                                                       (nothing sent, nothing changed)
//!          ▼
//!  add_learner(id, addr) ──▶ replication (with the secret) ──▶ voter
//! ```
//!
//! # Why a challenge, and why it holds without TLS
//! - The nonce is fresh (32 random bytes per attempt), so a proof seen once cannot be
//!   replayed to a later attempt.
//! - The proof binds the candidate's id and the very address the leader is asked to dial.
//!   A candidate answers only for its *own* id and advertised address, so an attacker at
//!   `evil:1` who relays the nonce to a genuine member gets a proof of
//!   (N, that member's id, that member's address), which does not verify for `evil:1`. And
//!   asking to add a genuine member at its genuine address only ever makes the leader dial
//!   that member.
//! - The proof is an HMAC, so neither the candidate's answer nor the leader's question
//!   reveals the secret, and the compare is constant-time (`ring::hmac::verify`).
//! - Nothing here needs a secure channel; TLS with mutual authentication on the cluster
//!   transport (when configured) adds a second, independent factor.
//!
//! # Correctness
//! - The leader sends nothing carrying the secret to `addr` unless [`challenge`] returned
//!   `Ok` for exactly that `(id, addr)`.
//! - [`JoinKey::answer`] never reveals anything but an HMAC bound to this node's own id and
//!   advertised address.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use muster_core::ErrorCode;
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};

use muster_http::error::ApiError;
use muster_http::extract::QueryParams;

/// The candidate's route on its cluster listener: the only one that needs no secret.
pub(crate) const PROOF_PATH: &str = "/join/proof";

/// Domain separation: a proof for joining is never valid as anything else.
const CONTEXT: &[u8] = b"muster-join-v1";

/// Nonce length: 256 bits, so no two attempts ever share one.
const NONCE_BYTES: usize = 32;

/// How long the candidate may take to answer: it is a local computation and one round trip;
/// 5 s tolerates a loaded node and still answers the operator promptly.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// The largest answer read: the JSON of an id, an address and a 64-digit proof.
const MAX_ANSWER_BYTES: usize = 1024;

/// What a node proves with: its id, its advertised cluster address, the secret's key.
pub(crate) struct JoinKey {
    id: u64,
    addr: String,
    key: hmac::Key,
}

/// The candidate's answer.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct JoinProof {
    /// The candidate's node id.
    pub(crate) node_id: u64,
    /// Its advertised cluster address.
    pub(crate) addr: String,
    /// `HMAC-SHA256(secret, CONTEXT ‖ nonce ‖ id ‖ addr)`, hex.
    pub(crate) proof: String,
}

/// The challenge's query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProofQuery {
    nonce: String,
}

fn message(nonce: &[u8], id: u64, addr: &str) -> Vec<u8> {
    // Lengths before variable parts, so no two (nonce, id, addr) share a message.
    let mut message = Vec::with_capacity(CONTEXT.len() + nonce.len() + addr.len() + 24);
    message.extend_from_slice(CONTEXT);
    message.extend_from_slice(&(nonce.len() as u64).to_be_bytes());
    message.extend_from_slice(nonce);
    message.extend_from_slice(&id.to_be_bytes());
    message.extend_from_slice(addr.as_bytes());
    message
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| text.get(i..i + 2).and_then(|pair| u8::from_str_radix(pair, 16).ok()))
        .collect()
}

impl JoinKey {
    /// The key of node `id`, advertised at `addr`, in a cluster with `secret`.
    pub(crate) fn new(id: u64, addr: String, secret: &str) -> JoinKey {
        JoinKey {
            id,
            addr,
            key: hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes()),
        }
    }

    /// This node's answer to `nonce`: always for its own id and address.
    pub(crate) fn answer(&self, nonce: &[u8]) -> JoinProof {
        let tag = hmac::sign(&self.key, &message(nonce, self.id, &self.addr));
        JoinProof {
            node_id: self.id,
            addr: self.addr.clone(),
            proof: hex(tag.as_ref()),
        }
    }

    /// Whether `proof` shows its sender holds the secret and is node `id` at `addr`.
    pub(crate) fn verifies(&self, nonce: &[u8], id: u64, addr: &str, proof: &JoinProof) -> bool {
        let Some(tag) = unhex(&proof.proof) else { return false };
        proof.node_id == id && hmac::verify(&self.key, &message(nonce, id, addr), &tag).is_ok()
    }
}

/// `GET /join/proof?nonce=HEX` on the cluster listener: this node's proof.
pub(crate) async fn proof(
    State(key): State<Arc<JoinKey>>,
    QueryParams(query): QueryParams<ProofQuery>,
) -> Result<Json<JoinProof>, ApiError> {
    let nonce = unhex(&query.nonce)
        .filter(|nonce| nonce.len() == NONCE_BYTES)
        .ok_or_else(|| ApiError::bad_request(format!("nonce: {NONCE_BYTES} bytes in hex")))?;
    Ok(Json(key.answer(&nonce)))
}

/// The refusal: the same words whatever went wrong, so the API is no oracle of which
/// addresses answer (the reason goes to the log).
fn refused(addr: &str, why: impl std::fmt::Display) -> ApiError {
    tracing::info!(%addr, %why, "join candidate refused");
    ApiError::new(
        ErrorCode::MembershipRefused,
        format!(
            "{addr} did not prove it holds the cluster secret; nothing was sent to it. Start the \
             new node with the cluster's secret and this address as its own, then add it again"
        ),
    )
}

/// Challenges the candidate `id` at `addr` (the leader's side): `Ok` only when it proved it
/// holds the secret for exactly that id and address. Nothing sent carries the secret.
/// With the cluster's mutual TLS (`tls`) the challenge goes over it, as every node-to-node
/// request does.
pub(crate) async fn challenge(
    key: &JoinKey,
    tls: Option<std::sync::Arc<muster_tls::ClientConfig>>,
    id: u64,
    addr: &str,
) -> Result<(), ApiError> {
    let mut nonce = [0_u8; NONCE_BYTES];
    SystemRandom::new()
        .fill(&mut nonce)
        .map_err(|_| ApiError::unavailable("no randomness for a join challenge"))?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let url = format!("{scheme}://{addr}{PROOF_PATH}?nonce={}", hex(&nonce));
    let connector = match tls {
        Some(tls) => muster_tls::Connector::new(Some(tls), ANSWER_TIMEOUT).tls_only(),
        None => muster_tls::Connector::new(None, ANSWER_TIMEOUT),
    };
    let client = Client::builder(TokioExecutor::new()).build::<_, Empty<Bytes>>(connector);
    let uri: hyper::Uri = url.parse().map_err(|e| refused(addr, format!("bad address: {e}")))?;
    let exchange = async {
        let response = client
            .get(uri)
            .await
            .map_err(|e| refused(addr, format!("unreachable: {e}")))?;
        if !response.status().is_success() {
            return Err(refused(addr, format!("answered {}", response.status())));
        }
        let body = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await
            .map_err(|e| refused(addr, format!("answer unreadable: {e}")))?
            .to_bytes();
        serde_json::from_slice::<JoinProof>(&body).map_err(|e| refused(addr, format!("not a proof: {e}")))
    };
    let answer = tokio::time::timeout(ANSWER_TIMEOUT, exchange)
        .await
        .map_err(|_| refused(addr, format!("no answer within {} s", ANSWER_TIMEOUT.as_secs())))??;
    if key.verifies(&nonce, id, addr, &answer) {
        return Ok(());
    }
    Err(refused(
        addr,
        format!(
            "its proof is not that of node {id} at {addr} (it says node {})",
            answer.node_id
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "a-cluster-secret-of-some-length";

    #[test]
    fn a_proof_verifies_only_for_the_nonce_id_and_address_it_was_made_for() {
        let candidate = JoinKey::new(4, "10.0.0.4:7101".into(), SECRET);
        let leader = JoinKey::new(1, "10.0.0.1:7101".into(), SECRET);
        let nonce = [7_u8; NONCE_BYTES];
        let proof = candidate.answer(&nonce);
        assert!(leader.verifies(&nonce, 4, "10.0.0.4:7101", &proof));
        assert!(!leader.verifies(&[8_u8; NONCE_BYTES], 4, "10.0.0.4:7101", &proof));
        assert!(!leader.verifies(&nonce, 5, "10.0.0.4:7101", &proof));
        // Trace: an attacker at evil:1 relays the leader's nonce to genuine node 4 and hands
        // back its proof; it does not verify for evil:1.
        assert!(!leader.verifies(&nonce, 4, "evil:1", &proof));
    }

    #[test]
    fn a_node_without_the_secret_cannot_prove_membership() {
        let impostor = JoinKey::new(4, "evil:1".into(), "a-guess-at-the-secret-value");
        let leader = JoinKey::new(1, "10.0.0.1:7101".into(), SECRET);
        let nonce = [1_u8; NONCE_BYTES];
        assert!(!leader.verifies(&nonce, 4, "evil:1", &impostor.answer(&nonce)));
    }

    #[test]
    fn hex_round_trips_and_refuses_odd_or_non_hex_text() {
        assert_eq!(unhex(&hex(&[0, 1, 0xab, 0xff])), Some(vec![0, 1, 0xab, 0xff]));
        assert_eq!(unhex("abc"), None);
        assert_eq!(unhex("zz"), None);
    }
}
