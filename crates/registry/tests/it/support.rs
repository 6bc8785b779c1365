//! Builders shared by the tests: a registry, commands, metas, and a state fingerprint.

use std::sync::Arc;

use muster_core::{
    Actor, AddressSpec, EndpointSpec, Incarnation, InstanceId, Label, LeaseId, PortSpec, Principal, Protocol, Revision,
    ServiceKey, ServiceSnapshot, ServingState,
};
use muster_registry::{
    Applied, Command, CommandMeta, Deregister, Drain, ExpireLeases, GrantLease, LeaseSpec, Register, Registry,
    RegistryConfig, SetServing, Target,
};

pub(crate) fn key(service: &str) -> ServiceKey {
    ServiceKey::new("acme", "prod", service).unwrap()
}

pub(crate) fn instance(name: &str) -> InstanceId {
    InstanceId::new(name).unwrap()
}

pub(crate) fn target(service: &str, name: &str, incarnation: u64) -> Target {
    Target {
        key: key(service),
        instance: instance(name),
        incarnation: Incarnation(incarnation),
    }
}

pub(crate) fn meta(actor: Actor) -> CommandMeta {
    CommandMeta {
        at_ms: 1_000,
        principal: Principal::new("tester").unwrap(),
        actor,
    }
}

pub(crate) fn app() -> CommandMeta {
    meta(Actor::App)
}

pub(crate) fn owner() -> CommandMeta {
    meta(Actor::Owner)
}

pub(crate) fn spec(ip: &str) -> EndpointSpec {
    EndpointSpec {
        addresses: vec![AddressSpec {
            ip: ip.into(),
            scope: None,
        }],
        ports: vec![PortSpec {
            name: "http".into(),
            port: 8080,
            protocol: Protocol::Http,
        }],
        ..EndpointSpec::default()
    }
}

pub(crate) fn register(service: &str, name: &str, incarnation: u64, ip: &str) -> Command {
    Register {
        target: target(service, name, incarnation),
        spec: spec(ip),
        lease: LeaseSpec::None,
        expected_revision: None,
    }
    .into()
}

pub(crate) fn register_leased(service: &str, name: &str, incarnation: u64, ip: &str, lease: LeaseId) -> Command {
    Register {
        target: target(service, name, incarnation),
        spec: spec(ip),
        lease: LeaseSpec::Attach(lease),
        expected_revision: None,
    }
    .into()
}

pub(crate) fn set_serving(service: &str, name: &str, incarnation: u64, state: ServingState) -> Command {
    SetServing {
        target: target(service, name, incarnation),
        state,
        reason: "test".into(),
        expected_revision: None,
    }
    .into()
}

pub(crate) fn drain(service: &str, name: &str, incarnation: u64) -> Command {
    Drain {
        target: target(service, name, incarnation),
        reason: "shutdown".into(),
        grace_ms: None,
        expected_revision: None,
    }
    .into()
}

pub(crate) fn deregister(service: &str, name: &str, incarnation: u64) -> Command {
    Deregister {
        target: target(service, name, incarnation),
        expected_revision: None,
    }
    .into()
}

pub(crate) fn grant(ttl_ms: u64) -> Command {
    GrantLease {
        tenant: Label::new("tenant", "acme").unwrap(),
        ttl_ms,
        service: None,
    }
    .into()
}

pub(crate) fn expire(leases: &[LeaseId]) -> Command {
    ExpireLeases {
        leases: leases.to_vec(),
    }
    .into()
}

pub(crate) fn registry() -> Registry {
    Registry::new(RegistryConfig::default())
}

/// Applies a command that must be accepted.
pub(crate) fn ok(registry: &mut Registry, command: Command) -> Applied {
    registry
        .apply(&command, &app())
        .unwrap_or_else(|e| panic!("{command:?} was refused: {e}"))
}

/// Grants a lease and returns its id.
pub(crate) fn lease(registry: &mut Registry, ttl_ms: u64) -> LeaseId {
    ok(registry, grant(ttl_ms)).lease.expect("a grant returns its lease").id
}

/// The whole state as bytes: equal bytes, equal state.
pub(crate) fn state_bytes(registry: &Registry) -> Vec<u8> {
    serde_json::to_vec(&registry.export()).unwrap()
}

/// Sorted (instance, incarnation, serving) of a snapshot, for compact assertions.
pub(crate) fn members(snapshot: &ServiceSnapshot) -> Vec<(String, u64, ServingState)> {
    snapshot
        .iter()
        .map(|e| (e.instance.to_string(), e.incarnation.0, e.serving))
        .collect()
}

pub(crate) fn current(registry: &Registry, service: &str) -> Arc<ServiceSnapshot> {
    registry.snapshot(&key(service)).expect("service is known")
}

pub(crate) fn rev(n: u64) -> Revision {
    Revision(n)
}
