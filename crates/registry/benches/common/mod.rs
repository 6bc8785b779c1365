//! The endpoint every benchmark registers: one IPv4 address, ports `http` and `grpc`, four
//! labels (`team`, `version`, `zone` and the instance-specific `pod`), as issue 2 states the
//! memory budget's record.

use std::collections::BTreeMap;

use muster_core::{
    Actor, AddressSpec, EndpointSpec, Incarnation, InstanceId, PortSpec, Principal, Protocol, ServiceKey,
};
use muster_registry::{Command, CommandMeta, LeaseSpec, Register, Target};

pub(crate) fn meta() -> CommandMeta {
    CommandMeta {
        at_ms: 0,
        principal: Principal::new("bench").expect("a valid principal"),
        actor: Actor::App,
    }
}

/// Registration `n` of instance `pod` into `key`, with this weight and lease.
pub(crate) fn register(key: &ServiceKey, pod: &str, n: u32, weight: u32, lease: LeaseSpec) -> Command {
    let zones = ["eu-west-1a", "eu-west-1b", "eu-west-1c"];
    let labels = BTreeMap::from([
        ("team".to_owned(), "core".to_owned()),
        ("version".to_owned(), "v1.2.3".to_owned()),
        ("zone".to_owned(), zones[n as usize % zones.len()].to_owned()),
        ("pod".to_owned(), pod.to_owned()),
    ]);
    let spec = EndpointSpec {
        addresses: vec![AddressSpec {
            ip: format!("10.{}.{}.{}", (n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff),
            scope: None,
        }],
        ports: vec![
            PortSpec {
                name: "http".into(),
                port: 8080,
                protocol: Protocol::Http,
            },
            PortSpec {
                name: "grpc".into(),
                port: 9090,
                protocol: Protocol::Grpc,
            },
        ],
        weight: Some(weight),
        labels,
        ..EndpointSpec::default()
    };
    Command::Register(Register {
        target: Target {
            key: key.clone(),
            instance: InstanceId::new(pod).expect("a valid instance id"),
            incarnation: Incarnation(1),
        },
        spec,
        lease,
        expected_revision: None,
    })
}
