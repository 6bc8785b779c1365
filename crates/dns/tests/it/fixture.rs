//! Endpoint records and snapshots for the DNS tests, built directly (no registry).

use std::collections::BTreeMap;
use std::sync::Arc;

use muster_core::{
    Actor, Address, Endpoint, Incarnation, InstanceId, Label, Labels, Limits, Locality, NamedPort, Observation,
    Principal, Protocol, Provenance, Revision, ServiceKey, ServiceSnapshot, ServingState,
};

/// A ready endpoint listening on `ips` with port `http` 8080 (HTTP, so `_tcp`), weight 100,
/// failover tier 0, no labels.
pub(crate) fn endpoint(instance: &str, ips: &[&str]) -> Endpoint {
    Endpoint {
        instance: InstanceId::new(instance).unwrap(),
        incarnation: Incarnation(1),
        addresses: ips
            .iter()
            .map(|ip| Address {
                ip: ip.parse().unwrap(),
                scope: None,
            })
            .collect(),
        ports: vec![port("http", 8080, Protocol::Http)].into(),
        locality: Locality::default(),
        serving: ServingState::Ready,
        weight: 100,
        capacity: None,
        labels: Labels::default(),
        lease: None,
        revision: Revision(1),
        provenance: Provenance {
            registrar: Principal::new("test").unwrap(),
            source_revision: None,
            policy_revision: Revision(0),
        },
        observation: Observation {
            actor: Actor::App,
            principal: Principal::new("test").unwrap(),
            at_ms: 0,
            reason: "test".into(),
        },
        checks: Box::default(),
    }
}

pub(crate) fn port(name: &str, number: u16, protocol: Protocol) -> NamedPort {
    NamedPort {
        name: Label::new("port", name).unwrap(),
        port: number,
        protocol,
    }
}

pub(crate) fn labels(pairs: &[(&str, &str)]) -> Labels {
    let map: BTreeMap<String, String> = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    Labels::new(&map, &Limits::default()).unwrap()
}

pub(crate) fn key(tenant: &str, namespace: &str, service: &str) -> ServiceKey {
    ServiceKey::new(tenant, namespace, service).unwrap()
}

/// `tenant/namespace/service` holding `endpoints`, at `revision`.
pub(crate) fn snapshot(key: &ServiceKey, revision: u64, endpoints: Vec<Endpoint>) -> Arc<ServiceSnapshot> {
    Arc::new(ServiceSnapshot::from_endpoints(
        key.clone(),
        Revision(revision),
        endpoints.into_iter().map(Arc::new),
    ))
}
