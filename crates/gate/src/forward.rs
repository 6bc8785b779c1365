//! The one way to the leader for what only the leader answers (SPEC R4): lease renewals, TTL
//! check reports and in-flight reports, whose deadlines and decisions live in the leader's
//! engine. Writes are forwarded by the consensus layer instead.
//!
//! ```text
//!  client ──renew / check / in-flight──▶ follower ──POST /app/leader {LeaderCall} + secret──▶
//!         leader's cluster listener ──▶ the same handler the leader runs for its own clients
//! ```
//!
//! [`Gate::on_leader`](crate::Gate::on_leader) is the one decision point: on the leader (or a single node) the request is
//! answered here; on a follower it is sent, as a [`LeaderCall`], to the leader it knows.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use muster_consensus::{CallError, PeerClient};
use muster_core::api::{CheckReportRequest, ErrorBody, InFlightRequest};
use muster_core::{InstanceId, Label, LeaseId, ServiceKey};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use muster_http::error::ApiError;

/// How long a forwarded request may take: well inside any TTL (at least 1 s).
const FORWARD_TIMEOUT: Duration = Duration::from_millis(800);

/// The cluster listener's path for every [`LeaderCall`].
pub const LEADER_PATH: &str = "/app/leader";

/// A request only the leader answers.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LeaderCall {
    /// Renew a lease: its deadline is the leader's.
    Renew {
        /// The tenant that owns the lease.
        tenant: Label,
        /// The lease.
        id: LeaseId,
    },
    /// A TTL check's report: the leader's checker holds the TTL deadlines.
    Report {
        /// The service.
        key: ServiceKey,
        /// The instance.
        instance: InstanceId,
        /// The report.
        request: CheckReportRequest,
    },
    /// Requests in flight: zero ends a drain's grace, which the leader ends.
    InFlight {
        /// The service.
        key: ServiceKey,
        /// The instance.
        instance: InstanceId,
        /// The report.
        request: InFlightRequest,
    },
}

/// The way to the other members' cluster listeners (the consensus layer's peer client).
pub struct ClusterLink {
    client: PeerClient,
    /// The cluster's mutual TLS, when configured: a join challenge goes over it too.
    pub tls: Option<Arc<muster_tls::ClientConfig>>,
}

impl ClusterLink {
    /// A link to `peers` (id to address), proving membership with `secret`, over `tls`
    /// when the cluster runs mutual TLS.
    #[must_use]
    pub fn new(
        peers: BTreeMap<u64, String>,
        secret: muster_core::Secret,
        tls: Option<Arc<muster_tls::ClientConfig>>,
    ) -> ClusterLink {
        ClusterLink {
            client: PeerClient::new(secret, peers, tls.clone()),
            tls,
        }
    }

    /// Sends `call` to the leader `leader`.
    pub async fn to_leader<R: DeserializeOwned>(&self, leader: Option<u64>, call: &LeaderCall) -> Result<R, ApiError> {
        let no_leader = || ApiError::no_quorum("no leader is known to hand this to; retry");
        let addr = leader
            .and_then(|id| self.client.dial_address(id))
            .ok_or_else(no_leader)?;
        match self.client.post(addr, LEADER_PATH, call, FORWARD_TIMEOUT).await {
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
