//! What a follower hands to the leader besides writes (those the consensus layer forwards):
//! lease renewals and TTL check reports, whose deadlines live in the leader's memory only
//! (SPEC R4, issue 7 item 6).
//!
//! ```text
//!  client ──renew──▶ follower ──POST /app/renew + secret──▶ leader's cluster listener
//!                                                             └─▶ deadline moves there
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use axum::http::StatusCode;
use muster_consensus::{CallError, PeerClient};
use muster_core::api::{CheckReportReply, CheckReportRequest, ErrorBody, LeaseReply};
use muster_core::{InstanceId, Label, LeaseId, ServiceKey};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::ApiError;

/// How long a forwarded renewal may take: well inside any TTL (at least 1 s).
const FORWARD_TIMEOUT: Duration = Duration::from_millis(800);

/// A renewal forwarded to the leader.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RenewForward {
    pub(crate) tenant: Label,
    pub(crate) id: LeaseId,
}

/// A TTL report forwarded to the leader, whose checker holds the TTL deadlines.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ReportForward {
    pub(crate) key: ServiceKey,
    pub(crate) instance: InstanceId,
    pub(crate) request: CheckReportRequest,
}

/// The way to the other members' cluster listeners (the consensus layer's peer client).
pub(crate) struct ClusterLink {
    client: PeerClient,
}

impl ClusterLink {
    pub(crate) fn new(peers: BTreeMap<u64, String>, secret: String) -> ClusterLink {
        ClusterLink {
            client: PeerClient::new(secret, peers),
        }
    }

    /// Renews on the leader `leader`.
    pub(crate) async fn renew(&self, leader: Option<u64>, forward: &RenewForward) -> Result<LeaseReply, ApiError> {
        self.call(leader, "/app/renew", forward).await
    }

    /// Hands a TTL check's report to the leader's checker.
    pub(crate) async fn report(
        &self,
        leader: Option<u64>,
        forward: &ReportForward,
    ) -> Result<CheckReportReply, ApiError> {
        self.call(leader, "/app/check", forward).await
    }

    async fn call<B: Serialize, R: DeserializeOwned>(
        &self,
        leader: Option<u64>,
        path: &str,
        forward: &B,
    ) -> Result<R, ApiError> {
        let no_leader = || ApiError::no_quorum("no leader is known to hand this to; retry");
        let addr = leader
            .and_then(|id| self.client.dial_address(id))
            .ok_or_else(no_leader)?;
        match self.client.post(addr, path, forward, FORWARD_TIMEOUT).await {
            Ok(reply) => Ok(reply),
            // The leader's refusal (e.g. lease_not_found), passed on with its code.
            Err(CallError::Refused { status, body }) => {
                let refusal: ErrorBody = serde_json::from_slice(&body).map_err(|_| no_leader())?;
                let status = StatusCode::from_u16(status).map_err(|_| no_leader())?;
                Err(ApiError::relayed(status, refusal))
            }
            Err(CallError::Unreachable(_)) => Err(no_leader()),
        }
    }
}
