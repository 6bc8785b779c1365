//! A service's snapshot as a `ClusterLoadAssignment` (SPEC D5, C3, C4, G1).
//!
//! - Each endpoint is its first address and the port named `grpc`, else its first port; an
//!   endpoint with neither is left out (there is nothing to connect to). Two records on one
//!   address and port (an instance back under a new id while its old record drains) are
//!   sent once, in the better state: gRPC refuses an assignment that repeats an address.
//! - Health: `ready` → HEALTHY, `degraded` → DEGRADED, `draining` → DRAINING, everything else
//!   → UNHEALTHY. Never UNKNOWN: gRPC and Envoy send traffic to UNKNOWN endpoints.
//! - Endpoint weight = the record's weight. Localities are (region, zone, sub-zone); a
//!   locality's weight is the sum of its eligible (HEALTHY or DEGRADED) endpoints' weights, at
//!   least 1 (a locality of weight 0 is dropped by gRPC, which can leave a priority empty).
//! - Priority: every endpoint's tier is (its failover tier `locality.priority`, its proximity
//!   to the caller: same zone, same region, other region) — the client library's order
//!   (`muster_client::balance::LocalityAware`); the tiers present are ranked densely from 0, since
//!   xDS priorities must be contiguous. Tiers count every endpoint, ready or not, so an
//!   endpoint's priority does not move when health changes: a priority whose endpoints are
//!   all unusable is what makes gRPC fail over to the next one. A failover tier's endpoints
//!   (labelled `muster/spilled-from`, SPEC G1) share the local set's best tier, as their own
//!   region's locality, so they take the share their weights give them.
//!
//! The caller's position is its [`Cohort`] (its node's region and zone): streams of one cohort
//! share one encoded assignment per service revision.
//!
//! A known service with nothing eligible gets an assignment with no usable endpoints — safe
//! emptiness (SPEC C3): the client stops sending instead of keeping the old set.

use std::collections::BTreeMap;

use envoy_types::pb::envoy::config::core::v3::{
    Address, HealthStatus, Locality as XdsLocality, SocketAddress, address, socket_address,
};
use envoy_types::pb::envoy::config::endpoint::v3::{
    ClusterLoadAssignment, Endpoint as XdsEndpoint, LbEndpoint, LocalityLbEndpoints, lb_endpoint,
};
use envoy_types::pb::google::protobuf::UInt32Value;
use muster_core::federation::SPILLED_FROM;
use muster_core::{Endpoint, Label, ServiceSnapshot, ServingState};

/// Where a caller runs, as far as tiers care: its node's region and zone.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cohort {
    /// The node's region (`None` when it names none).
    pub region: Option<String>,
    /// The node's zone.
    pub zone: Option<String>,
}

impl Cohort {
    /// The cohort of a node's locality; empty strings say nothing.
    pub fn of(locality: Option<&XdsLocality>) -> Cohort {
        let known = |text: &str| (!text.is_empty()).then(|| text.to_owned());
        locality.map_or_else(Cohort::default, |locality| Cohort {
            region: known(&locality.region),
            zone: known(&locality.zone),
        })
    }

    /// 0 same zone, 1 same region, 2 other region. Unknown values compare as values, so a
    /// caller and endpoints that say nothing share one tier, as in the client library.
    fn proximity(&self, endpoint: &Endpoint) -> u8 {
        let region = endpoint.locality.region.as_ref().map(Label::as_str);
        let zone = endpoint.locality.zone.as_ref().map(Label::as_str);
        if region != self.region.as_deref() {
            2
        } else if zone != self.zone.as_deref() {
            1
        } else {
            0
        }
    }
}

/// The xDS health of a serving state.
pub fn health(serving: ServingState) -> HealthStatus {
    match serving {
        ServingState::Ready => HealthStatus::Healthy,
        ServingState::Degraded => HealthStatus::Degraded,
        ServingState::Draining => HealthStatus::Draining,
        ServingState::Starting | ServingState::NotServing | ServingState::Unknown => HealthStatus::Unhealthy,
    }
}

/// Which of two records on one address to keep: lower is better.
fn rank(serving: ServingState) -> u8 {
    match serving {
        ServingState::Ready => 0,
        ServingState::Degraded => 1,
        ServingState::Draining => 2,
        ServingState::Starting | ServingState::NotServing | ServingState::Unknown => 3,
    }
}

/// The port a gRPC caller uses: the one named `grpc`, else the first.
pub fn port(endpoint: &Endpoint) -> Option<u16> {
    endpoint
        .ports
        .iter()
        .find(|port| port.name.as_str() == "grpc")
        .or_else(|| endpoint.ports.first())
        .map(|port| port.port)
}

/// A locality at one priority: (priority, region, zone, sub-zone).
type Group = (u32, String, String, String);

fn label(value: Option<&Label>) -> String {
    value.map(|label| label.as_str().to_owned()).unwrap_or_default()
}

/// The assignment `name` of `snapshot`'s endpoints as `cohort` sees them.
pub fn assignment(name: &str, snapshot: &ServiceSnapshot, cohort: &Cohort) -> ClusterLoadAssignment {
    // One endpoint per address: gRPC refuses a whole assignment that names an address twice
    // ("duplicate endpoint address"), which happens when an instance comes back under a new
    // id on the old address while its old record still drains. The best state wins.
    let mut by_address: BTreeMap<(std::net::IpAddr, u16), (&Endpoint, u16)> = BTreeMap::new();
    for endpoint in snapshot.iter() {
        let (Some(port), Some(address)) = (port(endpoint), endpoint.addresses.first()) else {
            continue;
        };
        let slot = by_address
            .entry((address.ip, port))
            .or_insert((endpoint.as_ref(), port));
        if rank(endpoint.serving) < rank(slot.0.serving) {
            *slot = (endpoint.as_ref(), port);
        }
    }
    let mut usable: Vec<(&Endpoint, u16)> = by_address.into_values().collect();
    usable.sort_by(|a, b| a.0.instance.cmp(&b.0.instance));
    // A failover tier's endpoints (SPEC G1) stand beside the local set's best tier: the
    // policy already chose to send them their weighted share.
    // Its tier is the best one that has an eligible local endpoint (else the best local one):
    // the spill must not share a priority with only unusable endpoints while usable ones wait
    // a priority below.
    let spilled = |endpoint: &Endpoint| endpoint.labels.get(SPILLED_FROM).is_some();
    let eligible = |endpoint: &Endpoint| matches!(endpoint.serving, ServingState::Ready | ServingState::Degraded);
    let local_tier = |endpoint: &Endpoint| (endpoint.locality.priority, cohort.proximity(endpoint));
    let local = || usable.iter().map(|(e, _)| *e).filter(|e| !spilled(e));
    let home = local()
        .filter(|e| eligible(e))
        .map(local_tier)
        .min()
        .or_else(|| local().map(local_tier).min())
        .unwrap_or_default();
    // The tier's weights were scaled against every eligible local endpoint; in this priority
    // only the home tier's compete, so its localities weigh that fraction of it.
    // Ready only, as the tier's weights were scaled (`muster_client::failover::Tiers`).
    let weight_of = |members: &mut dyn Iterator<Item = &Endpoint>| -> u64 {
        members
            .filter(|e| e.serving == ServingState::Ready)
            .map(|e| u64::from(e.weight))
            .sum()
    };
    let local_weight = weight_of(&mut local());
    let home_weight = weight_of(&mut local().filter(|e| local_tier(e) == home));
    let tier = |endpoint: &Endpoint| if spilled(endpoint) { home } else { local_tier(endpoint) };
    let mut tiers: Vec<(u8, u8)> = usable.iter().map(|(endpoint, _)| tier(endpoint)).collect();
    tiers.sort_unstable();
    tiers.dedup();
    // (priority, region, zone, sub-zone) → endpoints: BTreeMap for a stable order.
    let mut groups: BTreeMap<Group, Vec<(&Endpoint, u16)>> = BTreeMap::new();
    for (endpoint, port) in usable {
        let rank = tiers.binary_search(&tier(endpoint)).unwrap_or_default();
        let locality = &endpoint.locality;
        let group = (
            u32::try_from(rank).unwrap_or(u32::MAX),
            label(locality.region.as_ref()),
            label(locality.zone.as_ref()),
            label(locality.sub_zone.as_ref()),
        );
        groups.entry(group).or_default().push((endpoint, port));
    }
    let endpoints = groups
        .into_iter()
        .map(|((priority, region, zone, sub_zone), members)| {
            let mut eligible_weight: u64 = members
                .iter()
                .filter(|(endpoint, _)| eligible(endpoint))
                .map(|(endpoint, _)| u64::from(endpoint.weight))
                .sum();
            if members.iter().any(|(endpoint, _)| spilled(endpoint)) && local_weight > 0 {
                eligible_weight = (eligible_weight * home_weight).div_ceil(local_weight);
            }
            let eligible_weight = u32::try_from(eligible_weight).unwrap_or(u32::MAX);
            LocalityLbEndpoints {
                locality: Some(XdsLocality { region, zone, sub_zone }),
                lb_endpoints: members
                    .into_iter()
                    .map(|(endpoint, port)| lb_endpoint(endpoint, port))
                    .collect(),
                load_balancing_weight: Some(UInt32Value {
                    value: eligible_weight.max(1),
                }),
                priority,
                ..LocalityLbEndpoints::default()
            }
        })
        .collect();
    ClusterLoadAssignment {
        cluster_name: name.to_owned(),
        endpoints,
        ..ClusterLoadAssignment::default()
    }
}

fn lb_endpoint(endpoint: &Endpoint, port: u16) -> LbEndpoint {
    let socket = SocketAddress {
        address: endpoint.addresses[0].ip.to_string(),
        port_specifier: Some(socket_address::PortSpecifier::PortValue(u32::from(port))),
        ..SocketAddress::default()
    };
    LbEndpoint {
        host_identifier: Some(lb_endpoint::HostIdentifier::Endpoint(XdsEndpoint {
            address: Some(Address {
                address: Some(address::Address::SocketAddress(socket)),
            }),
            hostname: endpoint.instance.as_str().to_owned(),
            ..XdsEndpoint::default()
        })),
        health_status: health(endpoint.serving) as i32,
        load_balancing_weight: Some(UInt32Value {
            value: u32::from(endpoint.weight),
        }),
        ..LbEndpoint::default()
    }
}

#[cfg(test)]
#[path = "assignment_tests.rs"]
mod tests;
