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

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use muster_consensus::SECRET_HEADER;
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

/// The way to the other members' cluster listeners.
pub(crate) struct ClusterLink {
    peers: BTreeMap<u64, String>,
    secret: String,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl ClusterLink {
    pub(crate) fn new(peers: BTreeMap<u64, String>, secret: String) -> ClusterLink {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(FORWARD_TIMEOUT));
        ClusterLink {
            peers,
            secret,
            client: Client::builder(TokioExecutor::new()).build(connector),
        }
    }

    /// Renews on the leader `leader`.
    pub(crate) async fn renew(&self, leader: Option<u64>, forward: &RenewForward) -> Result<LeaseReply, ApiError> {
        self.call(leader, "renew", forward).await
    }

    /// Hands a TTL check's report to the leader's checker.
    pub(crate) async fn report(
        &self,
        leader: Option<u64>,
        forward: &ReportForward,
    ) -> Result<CheckReportReply, ApiError> {
        self.call(leader, "check", forward).await
    }

    async fn call<B: Serialize, R: DeserializeOwned>(
        &self,
        leader: Option<u64>,
        what: &str,
        forward: &B,
    ) -> Result<R, ApiError> {
        let no_leader = || ApiError::no_quorum("no leader is known to hand this to; retry");
        let addr = leader.and_then(|id| self.peers.get(&id)).ok_or_else(no_leader)?;
        let body = serde_json::to_vec(forward).map_err(|e| ApiError::bad_request(e.to_string()))?;
        let request = Request::builder()
            .method(Method::POST)
            .uri(format!("http://{addr}/app/{what}"))
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header(SECRET_HEADER, &self.secret)
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        let exchange = async {
            let response = self.client.request(request).await.ok()?;
            let status = response.status();
            let bytes = response.into_body().collect().await.ok()?.to_bytes();
            Some((status, bytes))
        };
        let (status, bytes) = tokio::time::timeout(FORWARD_TIMEOUT, exchange)
            .await
            .ok()
            .flatten()
            .ok_or_else(no_leader)?;
        if status == StatusCode::OK {
            return serde_json::from_slice(&bytes).map_err(|_| no_leader());
        }
        // The leader's refusal (e.g. lease_not_found), passed on with its code.
        let refusal: ErrorBody = serde_json::from_slice(&bytes).map_err(|_| no_leader())?;
        Err(ApiError::relayed(status, refusal))
    }
}
