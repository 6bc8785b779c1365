//! The replies of the catalog and health routes, field for field as the Go `api` package
//! (`github.com/hashicorp/consul/api`: `catalog.go`, `health.go`, `agent.go`) decodes them:
//! PascalCase names with Go's initialisms (`ID`, `CheckID`, `ServiceID`), integers as JSON
//! integers, lists and maps never `null`, `Node.TaggedAddresses` a map of strings,
//! `Service.TaggedAddresses` a map of `{Address, Port}`.
//!
//! One [`Instance`] is drawn from an endpoint (its labels read back by `agent_map`'s
//! convention) and rendered as a health entry ([`ServiceEntry`]), a catalog entry
//! ([`CatalogService`]) or its checks ([`HealthCheck`]). Fields Muster has no value for carry
//! Consul's empty ones (`Kind` absent, `EnableTagOverride` false, `ExposedPort` 0);
//! `Namespace` and `Partition` are left out, as Consul's community edition leaves them.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use muster_core::{CheckKind, Endpoint, ServiceKey};
use serde::Serialize;

use super::ConsulView;
use super::agent_map;
use super::status::{self, CheckStatus};
use crate::view::NETWORK_SEGMENT;

/// `api.Node`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct Node {
    #[serde(rename = "ID")]
    pub(crate) id: String,
    pub(crate) node: String,
    pub(crate) address: String,
    pub(crate) datacenter: String,
    pub(crate) tagged_addresses: BTreeMap<String, String>,
    pub(crate) meta: BTreeMap<String, String>,
    pub(crate) create_index: u64,
    pub(crate) modify_index: u64,
}

/// `api.ServiceAddress`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct ServiceAddress {
    pub(crate) address: String,
    pub(crate) port: u16,
}

/// `api.AgentWeights` / `api.Weights`.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct Weights {
    pub(crate) passing: u32,
    pub(crate) warning: u32,
}

/// `api.AgentService`, the `Service` of a health entry.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct Service {
    #[serde(rename = "ID")]
    pub(crate) id: String,
    pub(crate) service: String,
    pub(crate) tags: Vec<String>,
    pub(crate) meta: BTreeMap<String, String>,
    pub(crate) port: u16,
    pub(crate) address: String,
    pub(crate) tagged_addresses: BTreeMap<String, ServiceAddress>,
    pub(crate) weights: Weights,
    pub(crate) enable_tag_override: bool,
    pub(crate) datacenter: String,
    pub(crate) create_index: u64,
    pub(crate) modify_index: u64,
}

/// `api.HealthCheckDefinition`: what a check probes, durations as Go writes them (`10s`).
/// A duration a check does not have is `0s`, never empty: Go's `ReadableDuration` runs
/// `time.ParseDuration` on the text, and `""` fails the whole reply (Prometheus's consul_sd
/// then finds no targets at all).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct HealthCheckDefinition {
    #[serde(rename = "HTTP")]
    pub(crate) http: String,
    #[serde(rename = "TCP")]
    pub(crate) tcp: String,
    #[serde(rename = "GRPC")]
    pub(crate) grpc: String,
    pub(crate) interval: String,
    pub(crate) timeout: String,
    pub(crate) deregister_critical_service_after: String,
}

impl Default for HealthCheckDefinition {
    fn default() -> Self {
        let zero = || go_duration(Duration::ZERO);
        HealthCheckDefinition {
            http: String::new(),
            tcp: String::new(),
            grpc: String::new(),
            interval: zero(),
            timeout: zero(),
            deregister_critical_service_after: zero(),
        }
    }
}

/// `api.HealthCheck`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct HealthCheck {
    pub(crate) node: String,
    #[serde(rename = "CheckID")]
    pub(crate) check_id: String,
    pub(crate) name: String,
    pub(crate) status: CheckStatus,
    pub(crate) notes: String,
    pub(crate) output: String,
    #[serde(rename = "ServiceID")]
    pub(crate) service_id: String,
    pub(crate) service_name: String,
    pub(crate) service_tags: Vec<String>,
    #[serde(rename = "Type")]
    pub(crate) kind: &'static str,
    pub(crate) exposed_port: u16,
    pub(crate) definition: HealthCheckDefinition,
    pub(crate) create_index: u64,
    pub(crate) modify_index: u64,
}

/// `api.ServiceEntry`: `/v1/health/service/<name>`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct ServiceEntry {
    pub(crate) node: Node,
    pub(crate) service: Service,
    pub(crate) checks: Vec<HealthCheck>,
}

/// `api.CatalogService`: `/v1/catalog/service/<name>`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct CatalogService {
    #[serde(rename = "ID")]
    pub(crate) id: String,
    pub(crate) node: String,
    pub(crate) address: String,
    pub(crate) datacenter: String,
    pub(crate) tagged_addresses: BTreeMap<String, String>,
    pub(crate) node_meta: BTreeMap<String, String>,
    #[serde(rename = "ServiceID")]
    pub(crate) service_id: String,
    pub(crate) service_name: String,
    pub(crate) service_address: String,
    pub(crate) service_tagged_addresses: BTreeMap<String, ServiceAddress>,
    pub(crate) service_tags: Vec<String>,
    pub(crate) service_meta: BTreeMap<String, String>,
    pub(crate) service_port: u16,
    pub(crate) service_weights: Weights,
    pub(crate) service_enable_tag_override: bool,
    pub(crate) create_index: u64,
    pub(crate) modify_index: u64,
}

/// The node every service is on: this listener's node.
pub(crate) fn node(view: &ConsulView) -> Node {
    let address = view.node_address.to_string();
    Node {
        id: view.node_id.clone(),
        node: view.node.clone(),
        address: address.clone(),
        datacenter: view.datacenter.clone(),
        tagged_addresses: node_tagged_addresses(view.node_address),
        meta: BTreeMap::from([(NETWORK_SEGMENT.to_owned(), String::new())]),
        // The node has been there since the registry began.
        create_index: 1,
        modify_index: 1,
    }
}

/// `lan`, `wan` and their `_ipv4` (or `_ipv6`) forms, as an agent tags its address.
fn node_tagged_addresses(ip: IpAddr) -> BTreeMap<String, String> {
    let family = if ip.is_ipv4() { "ipv4" } else { "ipv6" };
    ["lan", "wan"]
        .into_iter()
        .flat_map(|scope| [scope.to_owned(), format!("{scope}_{family}")])
        .map(|name| (name, ip.to_string()))
        .collect()
}

/// The node check every node answers with.
pub(crate) fn serf_health(view: &ConsulView) -> HealthCheck {
    HealthCheck {
        node: view.node.clone(),
        check_id: status::SERF_HEALTH_ID.to_owned(),
        name: status::SERF_HEALTH_NAME.to_owned(),
        status: CheckStatus::Passing,
        notes: String::new(),
        output: status::SERF_HEALTH_OUTPUT.to_owned(),
        service_id: String::new(),
        service_name: String::new(),
        service_tags: Vec::new(),
        kind: "",
        exposed_port: 0,
        definition: HealthCheckDefinition::default(),
        create_index: 1,
        modify_index: 1,
    }
}

/// One endpoint in Consul's terms, drawn once and rendered as each route needs it.
pub(crate) struct Instance<'a> {
    view: &'a ConsulView,
    endpoint: &'a Endpoint,
    service: &'a str,
    /// The Consul service ID.
    pub(crate) id: String,
    /// Its tags, in order.
    pub(crate) tags: Vec<String>,
}

impl<'a> Instance<'a> {
    /// `endpoint` of `key`'s service.
    pub(crate) fn new(view: &'a ConsulView, key: &'a ServiceKey, endpoint: &'a Endpoint) -> Instance<'a> {
        Instance {
            view,
            endpoint,
            service: key.service.as_str(),
            id: agent_map::service_id(endpoint).to_owned(),
            tags: agent_map::tags(endpoint),
        }
    }

    /// Whether it carries every tag of `wanted` (Consul's `tag` filters are all required).
    pub(crate) fn has_tags<'t>(&self, mut wanted: impl Iterator<Item = &'t str>) -> bool {
        wanted.all(|tag| self.tags.iter().any(|own| own == tag))
    }

    fn revision(&self) -> u64 {
        self.endpoint.revision.0
    }

    fn address(&self) -> String {
        self.endpoint
            .addresses
            .first()
            .map(|address| address.ip.to_string())
            .unwrap_or_default()
    }

    /// [`consul_port`].
    fn port(&self) -> u16 {
        consul_port(self.endpoint)
    }

    fn weights(&self) -> Weights {
        Weights {
            passing: u32::from(self.endpoint.weight),
            warning: self
                .endpoint
                .labels
                .get(agent_map::WARNING_WEIGHT_LABEL)
                .and_then(|warning| warning.parse().ok())
                .unwrap_or(1),
        }
    }

    fn tagged_addresses(&self) -> BTreeMap<String, ServiceAddress> {
        let Some(ip) = self.endpoint.addresses.first().map(|address| address.ip) else {
            return BTreeMap::new();
        };
        let family = if ip.is_ipv4() { "ipv4" } else { "ipv6" };
        ["lan", "wan"]
            .into_iter()
            .map(|scope| {
                let address = ServiceAddress {
                    address: ip.to_string(),
                    port: self.port(),
                };
                (format!("{scope}_{family}"), address)
            })
            .collect()
    }

    /// `api.AgentService`.
    pub(crate) fn service(&self) -> Service {
        Service {
            id: self.id.clone(),
            service: self.service.to_owned(),
            tags: self.tags.clone(),
            meta: agent_map::meta(self.endpoint),
            port: self.port(),
            address: self.address(),
            tagged_addresses: self.tagged_addresses(),
            weights: self.weights(),
            enable_tag_override: false,
            datacenter: self.view.datacenter.clone(),
            create_index: self.revision(),
            modify_index: self.revision(),
        }
    }

    /// `api.CatalogService`.
    pub(crate) fn catalog(&self) -> CatalogService {
        let node = node(self.view);
        CatalogService {
            id: node.id,
            node: node.node,
            address: node.address,
            datacenter: node.datacenter,
            tagged_addresses: node.tagged_addresses,
            node_meta: node.meta,
            service_id: self.id.clone(),
            service_name: self.service.to_owned(),
            service_address: self.address(),
            service_tagged_addresses: self.tagged_addresses(),
            service_tags: self.tags.clone(),
            service_meta: agent_map::meta(self.endpoint),
            service_port: self.port(),
            service_weights: self.weights(),
            service_enable_tag_override: false,
            create_index: self.revision(),
            modify_index: self.revision(),
        }
    }

    /// The service's checks: one per Muster check (or a `service:<id>` check standing for
    /// its state when it has none), then the maintenance check while it drains.
    pub(crate) fn checks(&self) -> Vec<HealthCheck> {
        let state = self.endpoint.serving;
        let own = status::check_status(state);
        let check = |check_id: String, name: String, kind: &'static str, definition, notes: String| HealthCheck {
            node: self.view.node.clone(),
            check_id,
            name,
            status: own,
            notes,
            output: self.endpoint.observation.reason.to_string(),
            service_id: self.id.clone(),
            service_name: self.service.to_owned(),
            service_tags: self.tags.clone(),
            kind,
            exposed_port: 0,
            definition,
            create_index: self.revision(),
            modify_index: self.revision(),
        };
        let default_name = format!("Service '{}' check", self.service);
        let mut checks: Vec<HealthCheck> = if self.endpoint.checks.is_empty() {
            vec![check(
                status::check_id(&self.id, 0, 1),
                default_name,
                "",
                HealthCheckDefinition::default(),
                String::new(),
            )]
        } else {
            let ids = agent_map::check_ids(self.endpoint);
            let deregister_after =
                agent_map::deregister_after(self.endpoint).map_or_else(|| go_duration(Duration::ZERO), go_duration);
            self.endpoint
                .checks
                .iter()
                .zip(ids)
                .enumerate()
                .map(|(n, (muster_check, check_id))| {
                    let label = |field| agent_map::check_label(self.endpoint, n, field).map(str::to_owned);
                    let (kind, mut definition) = definition(&muster_check.kind);
                    if kind != "ttl" {
                        definition.interval = go_duration(muster_check.interval);
                        definition.timeout = go_duration(muster_check.timeout);
                    }
                    definition
                        .deregister_critical_service_after
                        .clone_from(&deregister_after);
                    check(
                        check_id,
                        label("name").unwrap_or_else(|| default_name.clone()),
                        kind,
                        definition,
                        label("notes").unwrap_or_default(),
                    )
                })
                .collect()
        };
        if status::in_maintenance(state) {
            let reason = &self.endpoint.observation.reason;
            checks.push(HealthCheck {
                check_id: status::maintenance_check_id(&self.id),
                name: status::MAINTENANCE_NAME.to_owned(),
                status: CheckStatus::Critical,
                notes: if reason.is_empty() {
                    status::DEFAULT_MAINTENANCE_NOTES.to_owned()
                } else {
                    reason.to_string()
                },
                output: String::new(),
                kind: "",
                definition: HealthCheckDefinition::default(),
                ..check(
                    String::new(),
                    String::new(),
                    "",
                    HealthCheckDefinition::default(),
                    String::new(),
                )
            });
        }
        checks
    }

    /// A health entry: the node, the service, the node's and the service's checks.
    pub(crate) fn entry(&self) -> ServiceEntry {
        let mut checks = vec![serf_health(self.view)];
        checks.extend(self.checks());
        ServiceEntry {
            node: node(self.view),
            service: self.service(),
            checks,
        }
    }
}

/// A check's Consul `Type` and what it probes.
fn definition(kind: &CheckKind) -> (&'static str, HealthCheckDefinition) {
    let mut definition = HealthCheckDefinition::default();
    let kind = match kind {
        CheckKind::Http { authority, path, .. } => {
            definition.http = format!("http://{authority}{path}");
            "http"
        }
        CheckKind::Tcp { authority } => {
            definition.tcp.clone_from(authority);
            "tcp"
        }
        CheckKind::Grpc { authority, service } => {
            definition.grpc = if service.is_empty() {
                authority.clone()
            } else {
                format!("{authority}/{service}")
            };
            "grpc"
        }
        CheckKind::Ttl { .. } => "ttl",
    };
    (kind, definition)
}

/// The `Port` Consul shows for an endpoint: the port named `default` (what a Consul
/// registration makes), else the first one, else 0; the same in every route.
pub(crate) fn consul_port(endpoint: &muster_core::Endpoint) -> u16 {
    let ports = &endpoint.ports;
    ports
        .iter()
        .find(|port| port.name.as_str() == agent_map::PORT_NAME)
        .or_else(|| ports.first())
        .map_or(0, |port| port.port)
}

/// A duration as Go's `time.Duration.String` writes it, to the millisecond: `0s`, `250ms`,
/// `10s`, `1.5s`, `2m0s`, `1h0m0s` (what `api.ReadableDuration` reads back).
pub(crate) fn go_duration(duration: Duration) -> String {
    let ms = duration.as_millis();
    if ms == 0 {
        return "0s".to_owned();
    }
    if ms < 1_000 {
        return format!("{ms}ms");
    }
    let (hours, minutes) = (ms / 3_600_000, ms / 60_000 % 60);
    let (seconds, fraction) = (ms / 1_000 % 60, ms % 1_000);
    let seconds = if fraction == 0 {
        format!("{seconds}s")
    } else {
        let fraction = format!("{fraction:03}");
        format!("{seconds}.{}s", fraction.trim_end_matches('0'))
    };
    match (hours, minutes) {
        (0, 0) => seconds,
        (0, minutes) => format!("{minutes}m{seconds}"),
        (hours, minutes) => format!("{hours}h{minutes}m{seconds}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_go_writes_them() {
        for (ms, text) in [
            (0, "0s"),
            (250, "250ms"),
            (10_000, "10s"),
            (1_500, "1.5s"),
            (1_250, "1.25s"),
            (120_000, "2m0s"),
            (90_000, "1m30s"),
            (3_600_000, "1h0m0s"),
            (3_723_004, "1h2m3.004s"),
        ] {
            assert_eq!(go_duration(Duration::from_millis(ms)), text, "{ms} ms");
        }
    }

    #[test]
    fn node_tagged_addresses_are_strings_per_family() {
        let v4 = node_tagged_addresses("10.0.0.1".parse().unwrap());
        assert_eq!(v4.keys().collect::<Vec<_>>(), ["lan", "lan_ipv4", "wan", "wan_ipv4"]);
        let v6 = node_tagged_addresses("::1".parse().unwrap());
        assert_eq!(v6["lan_ipv6"], "::1");
    }
}
