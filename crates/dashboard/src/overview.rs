//! `GET /v1/overview[?stream=true]`: every namespace the caller may read, with its services'
//! endpoint counts per serving state, revisions, watchers and protection (the dashboard's
//! first view, SPEC U2).
//!
//! ```text
//!  registry (one read): namespaces ─▶ services the caller may read ─▶ counts per state
//!  hub: watchers per service and per namespace     engine: protected services (one lock)
//!                           └──────────────┬──────────────┘
//!                                          ▼
//!  {"revision", "namespaces": [{"tenant","namespace","watchers","services": [...]}]}
//! ```
//!
//! A view over the same registry snapshots every other path reads (STYLE.md rule 10): no
//! copy of state is kept for it. Filtering follows a namespace listing: a service the caller
//! may not read is left out, and a namespace with none left goes too (SPEC S3).
//!
//! # Lock order
//! The protected set is read from the leader engine first, then the registry: the engine's
//! lock is never taken under the registry's (see `Gate::with_engine`). Watchers are counted
//! after the registry read, from the hub's own lock.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use muster_auth::Verb;
use muster_core::{Label, Revision, ServiceKey, ServingState};
use muster_registry::Scope;
use serde::{Deserialize, Serialize};

use muster_gate::Caller;
use muster_gate::Gate;
use muster_gate::live;
use muster_http::error::ApiError;
use muster_http::extract::QueryParams;

/// The query of `GET /v1/overview`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct OverviewQuery {
    /// Stream the overview as NDJSON: a line at once, then one whenever it changed.
    #[serde(default)]
    stream: bool,
}

/// The reply of `GET /v1/overview`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct OverviewReply {
    /// The registry's revision the overview was read at.
    #[schema(value_type = u64)]
    pub revision: Revision,
    /// The namespaces holding services the caller may read, sorted.
    pub namespaces: Vec<NamespaceOverview>,
}

/// One namespace in the overview.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NamespaceOverview {
    /// The tenant.
    #[schema(value_type = String)]
    pub tenant: Label,
    /// The namespace.
    #[schema(value_type = String)]
    pub namespace: Label,
    /// Watch streams open on the whole namespace.
    pub watchers: usize,
    /// Its services the caller may read, sorted by name.
    pub services: Vec<ServiceOverview>,
}

/// One service in the overview.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ServiceOverview {
    /// The service.
    #[schema(value_type = String)]
    pub service: Label,
    /// The revision of its last change.
    #[schema(value_type = u64)]
    pub revision: Revision,
    /// Its endpoints.
    pub endpoints: usize,
    /// Its endpoints per serving state; every state is present, zeros included.
    #[schema(value_type = BTreeMap<String, usize>)]
    pub states: BTreeMap<ServingState, usize>,
    /// Watch streams open on this service alone (namespace watches are counted on the
    /// namespace).
    pub watchers: usize,
    /// Whether self-preservation holds removals from it now (SPEC H5).
    pub protection_active: bool,
}

/// Every serving state, in the order the overview's columns show them.
pub const STATES: [ServingState; 6] = [
    ServingState::Ready,
    ServingState::Degraded,
    ServingState::Starting,
    ServingState::Draining,
    ServingState::NotServing,
    ServingState::Unknown,
];

/// `GET /v1/overview`.
pub async fn overview(
    State(gate): State<Arc<Gate>>,
    caller: Caller,
    QueryParams(query): QueryParams<OverviewQuery>,
) -> Response {
    let reader = Arc::clone(&gate);
    let streamed = caller.clone();
    live::once_or_stream(
        &gate,
        &streamed,
        query.stream,
        move || {
            serde_json::to_value(read(&reader, &caller))
                .map_err(|e| ApiError::new(muster_core::ErrorCode::Internal, e.to_string()))
        },
        None,
    )
}

/// The overview as `caller` may see it now.
pub fn read(gate: &Gate, caller: &Caller) -> OverviewReply {
    let protected: BTreeSet<ServiceKey> = gate.protected().into_iter().collect();
    let now_ms = gate.clock.unix_now_ms();
    let (revision, mut namespaces) = gate.read(|registry| {
        let namespaces: Vec<NamespaceOverview> = registry
            .namespace_keys()
            .filter_map(|namespace| {
                let services: Vec<ServiceOverview> = registry
                    .listed_services(namespace, now_ms)
                    .iter()
                    .filter(|snapshot| caller.may(snapshot.key(), Verb::Read))
                    .map(|snapshot| {
                        let mut states: BTreeMap<ServingState, usize> = STATES.iter().map(|s| (*s, 0)).collect();
                        for endpoint in snapshot.iter() {
                            *states.entry(endpoint.serving).or_default() += 1;
                        }
                        ServiceOverview {
                            service: snapshot.key().service.clone(),
                            revision: snapshot.revision(),
                            endpoints: snapshot.len(),
                            states,
                            watchers: 0,
                            protection_active: protected.contains(snapshot.key()),
                        }
                    })
                    .collect();
                (!services.is_empty()).then(|| NamespaceOverview {
                    tenant: namespace.tenant.clone(),
                    namespace: namespace.namespace.clone(),
                    watchers: 0,
                    services,
                })
            })
            .collect();
        (registry.revision(), namespaces)
    });
    for namespace in &mut namespaces {
        let key = muster_core::NamespaceKey {
            tenant: namespace.tenant.clone(),
            namespace: namespace.namespace.clone(),
        };
        namespace.watchers = gate.watchers(&Scope::Namespace(key));
        for service in &mut namespace.services {
            let key = ServiceKey {
                tenant: namespace.tenant.clone(),
                namespace: namespace.namespace.clone(),
                service: service.service.clone(),
            };
            service.watchers = gate.watchers(&Scope::Service(key));
        }
    }
    OverviewReply { revision, namespaces }
}
