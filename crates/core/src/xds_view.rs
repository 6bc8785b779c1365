//! The shape of `GET /v1/xds/clients` (SPEC D5, O2): every open xDS stream, what it
//! subscribes to and what it was sent and acknowledged. In every build of the server:
//! without its `xds` feature the route answers with no clients.

use serde::{Deserialize, Serialize};

/// Which variant of the protocol a stream speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = XdsProtocol))]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// State of the world.
    Sotw,
    /// Incremental.
    Delta,
}

impl Protocol {
    /// The name on the wire and in the metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Sotw => "sotw",
            Protocol::Delta => "delta",
        }
    }
}

/// Every open xDS stream of the tenants the caller sees.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ClientsPage {
    /// The registry's revision now.
    pub revision: u64,
    /// The streams, oldest first.
    pub clients: Vec<ClientView>,
}

/// One open stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ClientView {
    /// The server's number for the stream.
    pub stream: u64,
    /// The client's `node.id`.
    pub node_id: String,
    /// The client's `node.cluster`.
    pub cluster: String,
    /// The tenant whose services it sees.
    pub tenant: String,
    /// State of the world or Delta.
    pub protocol: Protocol,
    /// The client's address.
    pub peer: Option<String>,
    /// How long the stream has been open.
    pub connected_ms: u64,
    /// What it subscribes to, with what it was sent and acknowledged.
    pub resources: Vec<ResourceView>,
}

/// One resource on one stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ResourceView {
    /// `listener`, `route`, `cluster` or `endpoint`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The xDS type URL.
    pub type_url: String,
    /// The resource's name (`<service>.<namespace>`).
    pub resource: String,
    /// The revision last sent.
    pub sent_revision: Option<u64>,
    /// The revision last acknowledged (null until the first ACK).
    pub acked_revision: Option<u64>,
    /// For `endpoint`: the service's revision now; an ACK of it means the client converged.
    pub latest_revision: Option<u64>,
    /// Milliseconds since the last ACK.
    pub age_ms: Option<u64>,
    /// Responses holding it that the client refused.
    pub nacks: u64,
    /// The last refusal.
    pub last_nack: Option<NackView>,
}

/// A refused response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NackView {
    /// The refused revision.
    pub revision: u64,
    /// The client's reason.
    pub message: String,
    /// Milliseconds since.
    pub age_ms: u64,
}
