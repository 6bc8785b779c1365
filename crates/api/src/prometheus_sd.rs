//! `GET /v1/prometheus/sd`: Prometheus's HTTP service discovery (`http_sd_configs`, SPEC E1)
//! over the registry: the JSON list of target groups Prometheus expects, in full every time.
//!
//! ```text
//!  ?tenant=&namespace=&service=&port=&state=
//!     ─▶ every service the caller may read (SPEC S3), in key order, filtered by the params
//!     ─▶ each endpoint in a matching state, by instance ─▶ one group per (endpoint, port):
//!        {"targets": ["<first address>:<port>"], "labels": {"__meta_muster_…": …}}
//! ```
//!
//! # Choices
//! - `state` (default `ready`): the states to list, comma-separated (`ready,degraded`), or
//!   `any` for every state. Prometheus should scrape what takes traffic; a draining or failing
//!   endpoint is still visible with `state=any` and its `__meta_muster_state`.
//! - `port` (default: every port): only the named port; an endpoint without it is left out.
//!   One group per port, so `__meta_muster_port` tells a relabel rule which one it is.
//! - The target's host is the endpoint's first address (the registry keeps addresses in the
//!   order registered, the preferred one first); IPv6 in brackets.
//! - The order is stable: services by tenant, namespace and name, endpoints by instance,
//!   ports as registered. Prometheus needs no order, but a stable one makes the list diffable.
//! - Labels: `__meta_muster_{tenant,namespace,service,port,state,instance,incarnation,region,
//!   zone}` (region and zone empty when unknown) and `__meta_muster_label_<key>` for each
//!   endpoint label, the key made a Prometheus label name (`[a-zA-Z_][a-zA-Z0-9_]*`: any other
//!   character becomes `_`); when two keys map to one name, the first in key order wins.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use muster_auth::Verb;
use muster_core::{Endpoint, Label, ServiceKey, ServiceSnapshot, ServingState};
use serde::{Deserialize, Serialize};

use crate::Native;
use muster_gate::Caller;
use muster_http::error::ApiError;
use muster_http::extract::QueryParams;

/// The route.
pub const PATH: &str = "/v1/prometheus/sd";

/// The query of `GET /v1/prometheus/sd`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct SdQuery {
    /// Only this tenant's services (default: every tenant the caller may read).
    #[serde(default)]
    tenant: Option<String>,
    /// Only services in a namespace of this name.
    #[serde(default)]
    namespace: Option<String>,
    /// Only services of this name.
    #[serde(default)]
    service: Option<String>,
    /// Only this named port (default: a target per port).
    #[serde(default)]
    port: Option<String>,
    /// States to list, comma-separated, or `any` (default `ready`).
    #[serde(default)]
    state: Option<String>,
}

/// One target group, as Prometheus's `http_sd` reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct TargetGroup {
    /// `host:port`, one per group here.
    targets: Vec<String>,
    /// `__meta_muster_*` labels, for relabelling.
    labels: BTreeMap<String, String>,
}

/// Which states a query lists.
#[derive(Debug, Clone, PartialEq, Eq)]
enum States {
    Any,
    Only(Vec<ServingState>),
}

impl States {
    fn parse(text: Option<&str>) -> Result<States, ApiError> {
        let Some(text) = text else {
            return Ok(States::Only(vec![ServingState::Ready]));
        };
        if text == "any" {
            return Ok(States::Any);
        }
        text.split(',')
            .map(|name| {
                ServingState::ALL
                    .into_iter()
                    .find(|state| state.as_str() == name)
                    .ok_or_else(|| {
                        ApiError::bad_request(format!(
                            "state: '{}' is not a serving state (starting, ready, degraded, draining, \
                             not_serving, unknown) or 'any'",
                            name.escape_debug()
                        ))
                    })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(States::Only)
    }

    fn admits(&self, state: ServingState) -> bool {
        match self {
            States::Any => true,
            States::Only(states) => states.contains(&state),
        }
    }
}

/// A query parameter that must be a DNS label: 400 with the name rule's code otherwise.
fn label(field: &str, value: Option<&String>) -> Result<Option<Label>, ApiError> {
    value
        .map(|value| Label::new(field, value).map_err(|rejection| ApiError::path(&rejection)))
        .transpose()
}

/// The parsed query.
struct Filter {
    tenant: Option<Label>,
    namespace: Option<Label>,
    service: Option<Label>,
    port: Option<Label>,
    states: States,
}

impl Filter {
    fn parse(query: &SdQuery) -> Result<Filter, ApiError> {
        Ok(Filter {
            tenant: label("tenant", query.tenant.as_ref())?,
            namespace: label("namespace", query.namespace.as_ref())?,
            service: label("service", query.service.as_ref())?,
            port: label("port", query.port.as_ref())?,
            states: States::parse(query.state.as_deref())?,
        })
    }

    fn matches(&self, key: &ServiceKey) -> bool {
        self.tenant.as_ref().is_none_or(|t| *t == key.tenant)
            && self.namespace.as_ref().is_none_or(|n| *n == key.namespace)
            && self.service.as_ref().is_none_or(|s| *s == key.service)
    }
}

/// `GET /v1/prometheus/sd`.
pub async fn targets(
    State(app): State<Arc<Native>>,
    caller: Caller,
    QueryParams(query): QueryParams<SdQuery>,
) -> Result<Json<Vec<TargetGroup>>, ApiError> {
    let filter = Filter::parse(&query)?;
    // Take the matching snapshots (shared) under the read lock; build the groups after it.
    let snapshots: Vec<Arc<ServiceSnapshot>> = app.gate.read(|registry| {
        registry
            .all_services()
            .filter(|snapshot| filter.matches(snapshot.key()) && caller.may(snapshot.key(), Verb::Read))
            .cloned()
            .collect()
    });
    let mut groups = Vec::new();
    for snapshot in &snapshots {
        let mut endpoints: Vec<&Arc<Endpoint>> = snapshot
            .iter()
            .filter(|endpoint| filter.states.admits(endpoint.serving))
            .collect();
        endpoints.sort_by(|a, b| a.instance.cmp(&b.instance));
        for endpoint in endpoints {
            groups.extend(endpoint_groups(snapshot.key(), endpoint, filter.port.as_ref()));
        }
    }
    Ok(Json(groups))
}

/// The groups of one endpoint: one per port (or the one named).
fn endpoint_groups<'a>(
    key: &'a ServiceKey,
    endpoint: &'a Endpoint,
    port: Option<&'a Label>,
) -> impl Iterator<Item = TargetGroup> + 'a {
    let address = endpoint.addresses.first().map(|address| address.ip);
    endpoint
        .ports
        .iter()
        .filter(move |named| port.is_none_or(|wanted| *wanted == named.name))
        .filter_map(move |named| {
            let ip = address?;
            let mut labels = BTreeMap::new();
            let mut meta = |name: &str, value: String| {
                labels.entry(format!("__meta_muster_{name}")).or_insert(value);
            };
            meta("tenant", key.tenant.to_string());
            meta("namespace", key.namespace.to_string());
            meta("service", key.service.to_string());
            meta("port", named.name.to_string());
            meta("state", endpoint.serving.as_str().to_owned());
            meta("instance", endpoint.instance.to_string());
            meta("incarnation", endpoint.incarnation.0.to_string());
            meta(
                "region",
                endpoint
                    .locality
                    .region
                    .as_ref()
                    .map(ToString::to_string)
                    .unwrap_or_default(),
            );
            meta(
                "zone",
                endpoint
                    .locality
                    .zone
                    .as_ref()
                    .map(ToString::to_string)
                    .unwrap_or_default(),
            );
            for (name, value) in endpoint.labels.iter() {
                meta(&format!("label_{}", sanitise(name)), value.to_owned());
            }
            Some(TargetGroup {
                targets: vec![SocketAddr::new(ip, named.port).to_string()],
                labels,
            })
        })
}

/// A label key as a Prometheus label name: `[a-zA-Z0-9_]` kept, anything else `_` (the name
/// already starts with `__meta_muster_label_`, so a leading digit is fine).
fn sanitise(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_keys_become_prometheus_label_names() {
        assert_eq!(sanitise("app.kubernetes.io/name"), "app_kubernetes_io_name");
        assert_eq!(sanitise("tier"), "tier");
        assert_eq!(sanitise("ünï-code"), "_n__code");
    }

    #[test]
    fn states_default_to_ready_and_bad_names_are_refused() {
        assert_eq!(States::parse(None).unwrap(), States::Only(vec![ServingState::Ready]));
        assert_eq!(States::parse(Some("any")).unwrap(), States::Any);
        assert_eq!(
            States::parse(Some("ready,draining")).unwrap(),
            States::Only(vec![ServingState::Ready, ServingState::Draining])
        );
        assert!(States::parse(Some("up")).is_err());
        assert!(States::parse(Some("")).is_err());
    }
}
