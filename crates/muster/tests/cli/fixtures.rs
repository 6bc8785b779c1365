//! Fixed records for the renderer tests.

use muster_core::{
    Actor, Address, Endpoint, Incarnation, InstanceId, Label, Labels, LeaseId, Locality, NamedPort, Observation,
    Principal, Protocol, Provenance, Revision, ServingState,
};

/// An endpoint of `prod/api` listening on `ip`:8080 (HTTP) in zone `a`, with lease 3.
pub(crate) fn endpoint(instance: &str, ip: &str, serving: ServingState, reason: &str) -> Endpoint {
    Endpoint {
        instance: InstanceId::new(instance).unwrap(),
        incarnation: Incarnation(1),
        addresses: vec![Address {
            ip: ip.parse().unwrap(),
            scope: None,
        }]
        .into(),
        ports: vec![NamedPort {
            name: Label::new("port", "http").unwrap(),
            port: 8080,
            protocol: Protocol::Http,
        }]
        .into(),
        locality: Locality {
            zone: Some(Label::new("zone", "a").unwrap()),
            ..Locality::default()
        },
        serving,
        weight: 100,
        capacity: None,
        labels: Labels::default(),
        lease: Some(LeaseId(3)),
        revision: Revision(5),
        provenance: Provenance {
            registrar: Principal::new("cli").unwrap(),
            source_revision: None,
            policy_revision: Revision(0),
        },
        observation: Observation {
            actor: Actor::Owner,
            principal: Principal::new("cli").unwrap(),
            at_ms: 0,
            reason: reason.into(),
        },
        checks: Box::default(),
    }
}
