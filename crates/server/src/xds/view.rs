//! The shape of `GET /v1/xds/clients` (SPEC D5, O2), in every build: without the `xds`
//! feature the route answers with no clients.

use serde::Serialize;

/// Which variant of the protocol a stream speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = XdsProtocol)]
#[cfg_attr(
    not(feature = "xds"),
    allow(dead_code, reason = "no streams without the xds feature")
)]
pub(crate) enum Protocol {
    /// State of the world.
    Sotw,
    /// Incremental.
    Delta,
}

#[cfg(feature = "xds")]
impl Protocol {
    /// The name on the wire and in the metrics.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Protocol::Sotw => "sotw",
            Protocol::Delta => "delta",
        }
    }
}

/// Every open xDS stream of the tenants the caller sees.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct ClientsPage {
    /// The registry's revision now.
    pub(crate) revision: u64,
    /// The streams, oldest first.
    pub(crate) clients: Vec<ClientView>,
}

/// One open stream.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct ClientView {
    /// The server's number for the stream.
    pub(crate) stream: u64,
    /// The client's `node.id`.
    pub(crate) node_id: String,
    /// The client's `node.cluster`.
    pub(crate) cluster: String,
    /// The tenant whose services it sees.
    pub(crate) tenant: String,
    /// State of the world or Delta.
    pub(crate) protocol: Protocol,
    /// The client's address.
    pub(crate) peer: Option<String>,
    /// How long the stream has been open.
    pub(crate) connected_ms: u64,
    /// What it subscribes to, with what it was sent and acknowledged.
    pub(crate) resources: Vec<ResourceView>,
}

/// One resource on one stream.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct ResourceView {
    /// `listener`, `route`, `cluster` or `endpoint`.
    #[serde(rename = "type")]
    pub(crate) kind: &'static str,
    /// The xDS type URL.
    pub(crate) type_url: &'static str,
    /// The resource's name (`<service>.<namespace>`).
    pub(crate) resource: String,
    /// The revision last sent.
    pub(crate) sent_revision: Option<u64>,
    /// The revision last acknowledged (null until the first ACK).
    pub(crate) acked_revision: Option<u64>,
    /// For `endpoint`: the service's revision now; an ACK of it means the client converged.
    pub(crate) latest_revision: Option<u64>,
    /// Milliseconds since the last ACK.
    pub(crate) age_ms: Option<u64>,
    /// Responses holding it that the client refused.
    pub(crate) nacks: u64,
    /// The last refusal.
    pub(crate) last_nack: Option<NackView>,
}

/// A refused response.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct NackView {
    /// The refused revision.
    pub(crate) revision: u64,
    /// The client's reason.
    pub(crate) message: String,
    /// Milliseconds since.
    pub(crate) age_ms: u64,
}
