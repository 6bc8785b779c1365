//! Bad input (SPEC S5): every validation rule refuses with its stable code, names the field
//! and the limit, and leaves the state byte-for-byte as it was, revision included.

use std::collections::BTreeMap;

use muster_core::{AddressSpec, InstanceId, LeaseId, NamespaceKey, Revision, ServiceKey, ServingState};
use muster_registry::{Command, Drain, LeaseSpec, Register, Registry, RegistryConfig, SetServing};

use crate::support::*;

/// A registry with some state to leave untouched: a live endpoint at incarnation 5, a
/// removed one, and a lease.
fn populated(config: RegistryConfig) -> Registry {
    let mut registry = Registry::new(config);
    ok(&mut registry, register("api", "api-0", 5, "10.0.0.1"));
    ok(&mut registry, register("api", "gone", 2, "10.0.0.2"));
    ok(&mut registry, deregister("api", "gone", 2));
    lease(&mut registry, 5_000);
    registry
}

fn register_with(edit: impl FnOnce(&mut Register)) -> Command {
    let mut command = Register {
        target: target("api", "api-1", 1),
        spec: spec("10.0.0.9"),
        lease: LeaseSpec::None,
        expected_revision: None,
    };
    edit(&mut command);
    command.into()
}

fn labels(pairs: impl IntoIterator<Item = (String, String)>) -> BTreeMap<String, String> {
    pairs.into_iter().collect()
}

/// Applies `command` to a populated registry and checks the refusal.
fn assert_refused(config: RegistryConfig, command: Command, code: &str, message: &str) {
    let mut registry = populated(config);
    let before = state_bytes(&registry);
    let revision = registry.revision();
    let err = registry.apply(&command, &app()).expect_err(message);
    assert_eq!(err.code(), code, "{err}");
    assert!(
        err.to_string().contains(message),
        "message {:?} should contain {message:?}",
        err.to_string()
    );
    assert_eq!(registry.revision(), revision, "{code}: the revision must not move");
    assert_eq!(state_bytes(&registry), before, "{code}: the state must not change");
}

#[test]
fn invalid_names_are_refused() {
    let cases: Vec<(Command, &str)> = vec![
        (
            register_with(|r| r.spec.ports[0].name = "Http".into()),
            "ports[0].name: 'Http' may hold only a-z, 0-9 and '-'",
        ),
        (
            register_with(|r| r.spec.ports[0].name = "-http".into()),
            "ports[0].name: '-http' must not start or end with '-'",
        ),
        (
            register_with(|r| r.spec.ports[0].name = "x".repeat(16)),
            "ports[0].name: must be 1 to 15 characters, got 16",
        ),
        (
            register_with(|r| r.spec.ports.push(r.spec.ports[0].clone())),
            "ports[1].name: 'http' is used twice",
        ),
        (
            register_with(|r| r.spec.locality.region = Some("EU West".into())),
            "locality.region:",
        ),
        (
            register_with(|r| r.spec.locality.zone = Some(String::new())),
            "locality.zone: must be 1 to 63 characters, got 0",
        ),
        (
            register_with(|r| r.spec.locality.sub_zone = Some("rack_7".into())),
            "locality.sub_zone:",
        ),
        (
            register_with(|r| r.spec.addresses[0].scope = Some("v".repeat(64))),
            "addresses[0].scope: must be 1 to 63",
        ),
    ];
    for (command, message) in cases {
        assert_refused(RegistryConfig::default(), command, "invalid_name", message);
    }
}

#[test]
fn invalid_keys_never_become_commands() {
    // Keys and instance ids are typed: a bad one is refused where it is parsed, with the
    // same code, before any command exists.
    for (result, field) in [
        (ServiceKey::new("Acme", "prod", "api").err(), "tenant: "),
        (ServiceKey::new("acme", "prod_1", "api").err(), "namespace: "),
        (
            ServiceKey::new("acme", "prod", &"s".repeat(64)).err(),
            "service: must be 1 to 63 characters, got 64",
        ),
        (NamespaceKey::new("acme", "").err(), "namespace: must be 1 to 63"),
        (InstanceId::new("pod/7").err(), "instance: "),
    ] {
        let err = result.expect("must be refused");
        assert_eq!(err.code(), "invalid_name");
        assert!(err.to_string().starts_with(field), "{err}");
    }
}

#[test]
fn invalid_addresses_are_refused() {
    let cases: Vec<(Command, &str)> = vec![
        (
            register_with(|r| r.spec.addresses.clear()),
            "addresses: at least one address is required",
        ),
        (
            register_with(|r| r.spec.addresses[0].ip = "10.0.0.256".into()),
            "addresses[0].ip: '10.0.0.256' is not an IPv4",
        ),
        (
            register_with(|r| r.spec.addresses[0].ip = "fe80::1%eth0".into()),
            "carries a zone id",
        ),
        (
            register_with(|r| r.spec.addresses[0].ip = "0.0.0.0".into()),
            "0.0.0.0 is the unspecified address",
        ),
        (
            register_with(|r| r.spec.addresses[0].ip = "239.1.1.1".into()),
            "239.1.1.1 is a multicast address",
        ),
        (
            register_with(|r| r.spec.addresses[0].ip = "255.255.255.255".into()),
            "is the broadcast address",
        ),
        (
            register_with(|r| {
                r.spec.addresses.push(AddressSpec {
                    ip: "::ffff:10.0.0.9".into(),
                    scope: None,
                })
            }),
            "addresses[1].ip: 10.0.0.9 is listed twice",
        ),
    ];
    for (command, message) in cases {
        assert_refused(RegistryConfig::default(), command, "invalid_address", message);
    }
}

#[test]
fn addresses_outside_the_permitted_networks_are_refused() {
    let mut config = RegistryConfig::default();
    config.network.permitted = vec!["10.0.0.0/8".parse().unwrap(), "fd00::/8".parse().unwrap()];
    assert_refused(
        config.clone(),
        register_with(|r| r.spec.addresses[0].ip = "192.168.1.10".into()),
        "address_out_of_scope",
        "addresses[0].ip: 192.168.1.10 is outside the permitted networks (10.0.0.0/8, fd00::/8)",
    );
    assert_refused(
        config,
        register_with(|r| {
            r.spec.addresses.push(AddressSpec {
                ip: "2001:db8::1".into(),
                scope: None,
            })
        }),
        "address_out_of_scope",
        "addresses[1].ip: 2001:db8::1 is outside",
    );
}

#[test]
fn label_limits_are_enforced() {
    let cases: Vec<(Command, &str)> = vec![
        (
            register_with(|r| r.spec.labels = labels((0..33).map(|i| (format!("k{i}"), "v".into())))),
            "labels: 33 labels exceed the limit of 32",
        ),
        (
            register_with(|r| r.spec.labels = labels([("k".repeat(64), "v".into())])),
            "key must be 1 to 63 bytes, got 64",
        ),
        (
            register_with(|r| r.spec.labels = labels([("team name".into(), "v".into())])),
            "labels.team name: key may hold only",
        ),
        (
            register_with(|r| r.spec.labels = labels([("team".into(), "v".repeat(192))])),
            "labels.team: value of 192 bytes exceeds the limit of 191",
        ),
        (
            register_with(|r| r.spec.labels = labels([("team".into(), "a\tb".into())])),
            "labels.team: value must not hold control",
        ),
        (
            register_with(|r| r.spec.labels = labels((0..12).map(|i| (format!("key{i:02}"), "v".repeat(180))))),
            "labels: 2220 bytes of keys and values exceed the limit of 2048",
        ),
    ];
    for (command, message) in cases {
        assert_refused(RegistryConfig::default(), command, "label_limit", message);
    }
}

#[test]
fn oversized_records_are_refused() {
    let mut small = RegistryConfig::default();
    small.limits.max_record_bytes = 200;
    let cases: Vec<(RegistryConfig, Command, &str)> = vec![
        (
            RegistryConfig::default(),
            register_with(|r| {
                r.spec.addresses = (1..=9)
                    .map(|i| AddressSpec {
                        ip: format!("10.0.1.{i}"),
                        scope: None,
                    })
                    .collect()
            }),
            "addresses: 9 exceeds the limit of 8",
        ),
        (
            RegistryConfig::default(),
            register_with(|r| {
                r.spec.ports = (0..17)
                    .map(|i| muster_core::PortSpec {
                        name: format!("p{i}"),
                        port: 1000 + i,
                        protocol: Default::default(),
                    })
                    .collect()
            }),
            "ports: 17 exceeds the limit of 16",
        ),
        (
            RegistryConfig::default(),
            register_with(|r| r.spec.source_revision = Some("r".repeat(257))),
            "source_revision: 257 exceeds the limit of 256",
        ),
        (
            small.clone(),
            register_with(|r| r.spec.labels = labels([("description".into(), "d".repeat(150))])),
            "record bytes: 277 exceeds the limit of 200",
        ),
        (
            RegistryConfig::default(),
            Drain {
                target: target("api", "api-0", 5),
                reason: "x".repeat(300),
                grace_ms: None,
                expected_revision: None,
            }
            .into(),
            "reason: 300 exceeds the limit of 256",
        ),
    ];
    for (config, command, message) in cases {
        assert_refused(config, command, "record_too_large", message);
    }
}

#[test]
fn out_of_range_fields_are_refused() {
    let cases: Vec<(Command, &str)> = vec![
        (
            register_with(|r| r.spec.weight = Some(0)),
            "weight: must be 1 to 65535, got 0",
        ),
        (
            register_with(|r| r.spec.weight = Some(65_536)),
            "weight: must be 1 to 65535, got 65536",
        ),
        (
            register_with(|r| r.spec.ports[0].port = 0),
            "ports[0].port: must be 1 to 65535, got 0",
        ),
        (
            register_with(|r| r.lease = LeaseSpec::Grant { ttl_ms: 999 }),
            "ttl_ms: must be 1000 to 3600000 ms, got 999",
        ),
        (grant(3_600_001), "ttl_ms: must be 1000 to 3600000 ms, got 3600001"),
        (
            SetServing {
                target: target("api", "api-0", 5),
                state: ServingState::Ready,
                reason: "a\nb".into(),
                expected_revision: None,
            }
            .into(),
            "reason: must not hold control characters",
        ),
    ];
    for (command, message) in cases {
        assert_refused(RegistryConfig::default(), command, "invalid_field", message);
    }
}

#[test]
fn fencing_cas_and_missing_targets_are_refused() {
    let cases: Vec<(Command, &str, &str)> = vec![
        (
            register("api", "api-0", 4, "10.0.0.1"),
            "stale_incarnation",
            "presented incarnation 4, but incarnation 5",
        ),
        (
            register("api", "gone", 2, "10.0.0.2"),
            "stale_incarnation",
            "presented incarnation 2, but incarnation 2",
        ),
        (
            set_serving("api", "api-0", 1, ServingState::Ready),
            "stale_incarnation",
            "presented incarnation 1",
        ),
        (
            deregister("api", "api-0", 4),
            "stale_incarnation",
            "presented incarnation 4",
        ),
        (
            register_with(|r| r.expected_revision = Some(Revision(1))),
            "revision_mismatch",
            "expected_revision: expected 1, but instance 'api-1' of acme/prod/api is at revision 0",
        ),
        (
            SetServing {
                target: target("api", "api-0", 5),
                state: ServingState::NotServing,
                reason: "r".into(),
                expected_revision: Some(Revision(2)),
            }
            .into(),
            "revision_mismatch",
            "expected 2, but instance 'api-0' of acme/prod/api is at revision 1",
        ),
        (
            set_serving("api", "api-9", 1, ServingState::Ready),
            "not_found",
            "instance 'api-9' incarnation 1 of acme/prod/api",
        ),
        (
            drain("db", "db-0", 1),
            "not_found",
            "instance 'db-0' incarnation 1 of acme/prod/db is not registered",
        ),
        (deregister("api", "api-9", 1), "not_found", "is not registered"),
        (
            register_with(|r| r.lease = LeaseSpec::Attach(LeaseId(99))),
            "lease_not_found",
            "lease: lease 99 does not exist",
        ),
        (
            register_leased("api", "api-1", 1, "10.0.0.9", LeaseId(99)),
            "lease_not_found",
            "lease 99",
        ),
    ];
    for (command, code, message) in cases {
        assert_refused(RegistryConfig::default(), command, code, message);
    }
}

#[test]
fn quota_refusals_change_nothing() {
    let mut config = RegistryConfig::default();
    config.quotas.endpoints_per_service = 2;
    let mut registry = populated(config);
    ok(&mut registry, register("api", "api-1", 1, "10.0.0.9"));
    let before = state_bytes(&registry);
    let err = registry
        .apply(&register("api", "api-2", 1, "10.0.0.8"), &app())
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "endpoints_per_service: service acme/prod/api is at its limit of 2"
    );
    assert_eq!(state_bytes(&registry), before);

    let mut config = RegistryConfig::default();
    config.quotas.leases_per_tenant = 1;
    assert_refused(
        config,
        register_with(|r| r.lease = LeaseSpec::Grant { ttl_ms: 5_000 }),
        "quota_exceeded",
        "leases_per_tenant: tenant 'acme' is at its limit of 1",
    );
}
