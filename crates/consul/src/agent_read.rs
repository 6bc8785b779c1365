//! The agent's own view: `GET /v1/agent/services`, `/v1/agent/service/<id>`,
//! `/v1/agent/checks` and `/v1/agent/self`, shaped as Go's `api` package decodes them
//! (`map[string]*AgentService`, `map[string]*AgentCheck`, `map[string]map[string]interface{}`).
//!
//! The agent is the node that answers, and every endpoint of the placement's namespace is one
//! of its services (the Consul view has one node, `super`'s docs). What the caller may not
//! read is left out, as Consul's ACL filtering does. Each check carries its endpoint's
//! status (`status` module: one serving state per endpoint, not one verdict per check), its
//! `Output` is the reason the state was last set, and a draining endpoint shows Consul's
//! critical `_service_maintenance:<id>` check. `?filter=` expressions and hash-based blocking
//! on `/v1/agent/service/<id>` (`?hash=`) are not supported: the answer comes at once, with
//! its `ContentHash`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, RawQuery, State};
use axum::{Extension, Json};
use muster_auth::Verb;
use muster_core::{CheckKind, Endpoint, ServiceKey};
use serde::Serialize;
use serde_json::{Value, json};

use super::ConsulView;
use super::agent_lookup::{self, Found};
use super::agent_map::{WARNING_WEIGHT_LABEL, check_ids, check_label, meta, service_id, tags};
use super::error::ConsulError;
use super::status::{CheckStatus, MAINTENANCE_NAME, check_status, in_maintenance, maintenance_check_id};
use super::token::{ConsulCaller, query_pairs};
use crate::app::ConsulApp;

/// The Consul version `/v1/agent/self` reports: the API level this adapter follows (clients
/// such as Nomad compare it with the features they need).
const CONSUL_VERSION: &str = "1.17.0";

/// `Weights` of an `AgentService`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
struct Weights {
    passing: u32,
    warning: u32,
}

/// Go's `api.AgentService`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct AgentService {
    #[serde(rename = "ID")]
    id: String,
    service: String,
    tags: Vec<String>,
    meta: BTreeMap<String, String>,
    port: u16,
    address: String,
    weights: Weights,
    enable_tag_override: bool,
    content_hash: String,
    datacenter: String,
}

/// Go's `api.AgentCheck`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct AgentCheck {
    node: String,
    #[serde(rename = "CheckID")]
    check_id: String,
    name: String,
    status: &'static str,
    notes: String,
    output: String,
    #[serde(rename = "ServiceID")]
    service_id: String,
    service_name: String,
    service_tags: Vec<String>,
    #[serde(rename = "Type")]
    kind: &'static str,
    /// Go's `HealthCheckDefinition` (durations as Go strings).
    definition: Value,
}

fn agent_service(view: &ConsulView, found: &Found) -> AgentService {
    let endpoint = &found.endpoint;
    AgentService {
        id: service_id(endpoint).to_owned(),
        service: found.key.service.to_string(),
        tags: tags(endpoint),
        meta: meta(endpoint),
        port: super::shape::consul_port(endpoint),
        address: endpoint.addresses.first().map(|a| a.ip.to_string()).unwrap_or_default(),
        weights: Weights {
            passing: u32::from(endpoint.weight),
            warning: endpoint
                .labels
                .get(WARNING_WEIGHT_LABEL)
                .and_then(|w| w.parse().ok())
                .unwrap_or(1),
        },
        enable_tag_override: false,
        content_hash: format!("{:016x}", endpoint.fingerprint()),
        datacenter: view.datacenter.clone(),
    }
}

/// A duration as Go writes one (`time.Duration.String` parses back from it).
fn go_duration(duration: Duration) -> String {
    format!("{}ms", duration.as_millis())
}

fn agent_checks(view: &ConsulView, key: &ServiceKey, endpoint: &Endpoint) -> Vec<AgentCheck> {
    let id = service_id(endpoint);
    let status = check_status(endpoint.serving);
    let ids = check_ids(endpoint);
    let mut checks: Vec<AgentCheck> = endpoint
        .checks
        .iter()
        .enumerate()
        .map(|(n, check)| {
            let (kind, definition) = match &check.kind {
                CheckKind::Ttl { ttl } => ("ttl", json!({ "TTL": go_duration(*ttl) })),
                CheckKind::Http { .. } => ("http", json!({ "HTTP": check.target() })),
                CheckKind::Tcp { authority } => ("tcp", json!({ "TCP": authority })),
                CheckKind::Grpc { authority, service } if service.is_empty() => ("grpc", json!({ "GRPC": authority })),
                CheckKind::Grpc { authority, service } => ("grpc", json!({ "GRPC": format!("{authority}/{service}") })),
            };
            let mut definition = definition;
            if kind != "ttl" {
                definition["Interval"] = json!(go_duration(check.interval));
                definition["Timeout"] = json!(go_duration(check.timeout));
            }
            AgentCheck {
                node: view.node.clone(),
                check_id: ids[n].clone(),
                name: check_label(endpoint, n, "name")
                    .map_or_else(|| format!("Service '{}' check", key.service), str::to_owned),
                status: status.as_str(),
                notes: check_label(endpoint, n, "notes").unwrap_or_default().to_owned(),
                output: endpoint.observation.reason.to_string(),
                service_id: id.to_owned(),
                service_name: key.service.to_string(),
                service_tags: tags(endpoint),
                kind,
                definition,
            }
        })
        .collect();
    if in_maintenance(endpoint.serving) {
        checks.push(AgentCheck {
            node: view.node.clone(),
            check_id: maintenance_check_id(id),
            name: MAINTENANCE_NAME.to_owned(),
            status: CheckStatus::Critical.as_str(),
            notes: endpoint.observation.reason.to_string(),
            output: String::new(),
            service_id: id.to_owned(),
            service_name: key.service.to_string(),
            service_tags: tags(endpoint),
            kind: "maintenance",
            definition: json!({}),
        });
    }
    checks
}

/// Every endpoint of the request's namespace the caller may read.
fn readable(app: &ConsulApp, view: &ConsulView, caller: &ConsulCaller, query: Option<&str>) -> Vec<Found> {
    let (place, _) = agent_lookup::placement(view, &query_pairs(query));
    let Some(namespace) = agent_lookup::namespace_of(&place) else {
        return Vec::new();
    };
    app.gate.read(|registry| {
        registry
            .services(&namespace)
            .into_iter()
            .filter(|snapshot| caller.may(snapshot.key(), Verb::Read))
            .flat_map(|snapshot| {
                snapshot
                    .iter()
                    .map(|endpoint| Found {
                        key: snapshot.key().clone(),
                        endpoint: Arc::clone(endpoint),
                    })
                    .collect::<Vec<_>>()
            })
            .collect()
    })
}

/// `GET /v1/agent/services`: service ID → `AgentService`.
pub(super) async fn services(
    State(app): State<Arc<ConsulApp>>,
    caller: ConsulCaller,
    Extension(view): Extension<Arc<ConsulView>>,
    RawQuery(query): RawQuery,
) -> Json<BTreeMap<String, AgentService>> {
    let found = readable(&app, &view, &caller, query.as_deref());
    Json(
        found
            .iter()
            .map(|found| (service_id(&found.endpoint).to_owned(), agent_service(&view, found)))
            .collect(),
    )
}

/// `GET /v1/agent/service/<id>`.
pub(super) async fn service(
    State(app): State<Arc<ConsulApp>>,
    caller: ConsulCaller,
    Extension(view): Extension<Arc<ConsulView>>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Json<AgentService>, ConsulError> {
    let (place, _) = agent_lookup::placement(&view, &query_pairs(query.as_deref()));
    let unknown = || ConsulError::not_found(format!("unknown service ID: {id}"));
    // Looked for only among the services the caller may read: Consul hides what a token
    // may not read behind the same 404 (ACL filtering).
    let readable = |key: &ServiceKey| caller.may(key, Verb::Read);
    let found = app
        .gate
        .read(|registry| agent_lookup::service(registry, &place, &id, readable, readable))
        .map_err(|_| unknown())?;
    Ok(Json(agent_service(&view, &found)))
}

/// `GET /v1/agent/checks`: check ID → `AgentCheck`.
pub(super) async fn checks(
    State(app): State<Arc<ConsulApp>>,
    caller: ConsulCaller,
    Extension(view): Extension<Arc<ConsulView>>,
    RawQuery(query): RawQuery,
) -> Json<BTreeMap<String, AgentCheck>> {
    let found = readable(&app, &view, &caller, query.as_deref());
    Json(
        found
            .iter()
            .flat_map(|found| agent_checks(&view, &found.key, &found.endpoint))
            .map(|check| (check.check_id.clone(), check))
            .collect(),
    )
}

/// `GET /v1/agent/self`: what Consul clients read of it. Every top-level value is an object
/// (Go decodes `map[string]map[string]interface{}`); `Config.Datacenter` and
/// `Config.NodeName` are strings (Prometheus `consul_sd`, `api.Agent.NodeName`),
/// `Member.Addr` the node's address. With authentication on it needs a token (Consul asks
/// `agent:read`; any token here): without one, `403 Permission denied`.
pub(super) async fn agent_self(
    State(app): State<Arc<ConsulApp>>,
    Extension(view): Extension<Arc<ConsulView>>,
    caller: ConsulCaller,
) -> Result<Json<Value>, ConsulError> {
    if app.gate.auth.enabled && caller.caller().is_nobody() {
        return Err(ConsulError::permission_denied());
    }
    // The node's UUID as catalog and health answers name it (`ConsulView::node_id`).
    let uuid = view.node_id.clone();
    Ok(Json(json!({
        "Config": {
            "Datacenter": view.datacenter,
            "PrimaryDatacenter": view.datacenter,
            "NodeName": view.node,
            "NodeID": uuid,
            "Server": true,
            "Version": CONSUL_VERSION,
            "Revision": concat!("muster-", env!("CARGO_PKG_VERSION")),
        },
        "DebugConfig": {},
        "Coord": {"Vec": [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], "Error": 1.5, "Adjustment": 0.0, "Height": 1.0e-5},
        "Member": {
            "Name": view.node,
            "Addr": view.node_address.to_string(),
            // Serf's LAN port, what a Consul agent reports here; nothing dials it.
            "Port": 8301,
            "Tags": {"dc": view.datacenter, "role": "consul", "id": uuid, "build": CONSUL_VERSION, "vsn": "2"},
            "Status": 1,
            "ProtocolMin": 1, "ProtocolMax": 5, "ProtocolCur": 2,
            "DelegateMin": 2, "DelegateMax": 5, "DelegateCur": 4,
        },
        "Meta": {},
        "Stats": {},
    })))
}
