//! `GET /v1/deadlines/{tenant}/{namespace}/{service}[?stream=true]`: when each endpoint's
//! lease expires unless renewed (the dashboard's lease countdown, SPEC U2).
//!
//! Lease deadlines are not in the endpoint records (DESIGN "Leases off the log": a renewal
//! moves a deadline in the leader engine's memory and writes nothing), so the snapshot and
//! watch replies cannot carry them without a log write per renewal. This route reads them
//! where they live instead:
//!
//! ```text
//!  registry: the service's endpoints ─▶ lease id, TTL ─┐
//!  leader engine: LeaseDeadlines (monotonic ms) ───────┴─▶ deadline_unix_ms (server clock)
//! ```
//!
//! Only the leader knows deadlines: another node answers `deadline_unix_ms: null` and
//! `leader: false`. With `stream=true` a line follows each renewal (the deadline moved),
//! within `live::DEFAULT_INTERVAL`.
//!
//! # Lock order
//! `Gate::with_engine` takes the engine's lock, then reads the registry: the one order.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use muster_core::{ErrorCode, InstanceId, LeaseId, ServiceKey};
use serde::{Deserialize, Serialize};

use muster_gate::Caller;
use muster_gate::Gate;
use muster_gate::live;
use muster_http::error::ApiError;
use muster_http::extract::{QueryParams, Segments};

/// The query of `GET /v1/deadlines/{tenant}/{namespace}/{service}`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct DeadlinesQuery {
    /// Stream as NDJSON: a line at once, then one whenever a deadline moved.
    #[serde(default)]
    stream: bool,
}

/// The reply of `GET /v1/deadlines/{tenant}/{namespace}/{service}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DeadlinesReply {
    /// Whether this node leads, so its deadlines are the ones in force.
    pub leader: bool,
    /// The service's endpoints that hold a lease, by instance.
    pub endpoints: Vec<EndpointDeadline>,
}

/// One endpoint's lease and its deadline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EndpointDeadline {
    /// The instance.
    #[schema(value_type = String)]
    pub instance: InstanceId,
    /// Its lease.
    #[schema(value_type = u64)]
    pub lease: LeaseId,
    /// The lease's TTL.
    pub ttl_ms: u64,
    /// When it expires unless renewed, in Unix milliseconds on the server's clock; `null` on
    /// a node that does not lead.
    pub deadline_unix_ms: Option<u64>,
}

/// `GET /v1/deadlines/{tenant}/{namespace}/{service}`.
pub async fn deadlines(
    State(gate): State<Arc<Gate>>,
    caller: Caller,
    segments: Segments,
    QueryParams(query): QueryParams<DeadlinesQuery>,
) -> Result<Response, ApiError> {
    let key = segments.service()?;
    let reader = Arc::clone(&gate);
    Ok(live::once_or_stream(
        &gate,
        &caller,
        query.stream,
        move || {
            serde_json::to_value(read(&reader, &key)).map_err(|e| ApiError::new(ErrorCode::Internal, e.to_string()))
        },
        None,
    ))
}

/// The deadlines of `key`'s leased endpoints now.
pub fn read(gate: &Gate, key: &ServiceKey) -> DeadlinesReply {
    gate.inspect_engine(|engine, registry, _| {
        let endpoints = registry
            .snapshot(key)
            .map(|snapshot| {
                snapshot
                    .iter()
                    .filter_map(|endpoint| {
                        let lease = endpoint.lease?;
                        let ttl_ms = registry.lease(lease).map_or(0, |l| l.ttl_ms);
                        Some(EndpointDeadline {
                            instance: endpoint.instance.clone(),
                            lease,
                            ttl_ms,
                            deadline_unix_ms: engine.leases().deadline(lease).map(|at| gate.clock.unix_ms(at)),
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        DeadlinesReply {
            leader: engine.is_leading(),
            endpoints,
        }
    })
}
