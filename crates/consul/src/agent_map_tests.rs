use std::net::{IpAddr, Ipv4Addr};

use muster_core::{Actor, Incarnation, Principal};
use muster_registry::{Command, CommandMeta, LeaseSpec, Register, Registry, RegistryConfig, Target};

use super::*;
use crate::agent_body::registration;

fn place() -> Placement {
    Placement {
        tenant: "default".into(),
        namespace: "default".into(),
    }
}

const CALLER: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3));

fn mapped(body: &str) -> Mapped {
    map(
        &registration(body.as_bytes()).unwrap(),
        &place(),
        (false, false),
        CALLER,
    )
    .unwrap()
}

/// The record the registry keeps for a mapped registration.
fn committed(mapped: &Mapped) -> Endpoint {
    let mut registry = Registry::new(RegistryConfig::default());
    let meta = CommandMeta {
        at_ms: 1,
        principal: Principal::new("tester").unwrap(),
        actor: Actor::App,
    };
    let register = Register {
        target: Target {
            key: mapped.key.clone(),
            instance: mapped.instance.clone(),
            incarnation: Incarnation(1),
        },
        spec: mapped.spec.clone(),
        lease: LeaseSpec::None,
        expected_revision: None,
    };
    registry.apply(&Command::Register(register), &meta).unwrap();
    let snapshot = registry.snapshot(&mapped.key).unwrap();
    Endpoint::clone(snapshot.get(&mapped.instance).unwrap())
}

#[test]
fn a_full_registration_maps_to_key_record_labels_and_checks() {
    let mapped = mapped(
        r#"{"Name": "web", "ID": "web-1", "Address": "10.0.0.5", "Port": 8080,
            "Tags": ["v1", "primary"], "Meta": {"version": "1.2"}, "Weights": {"Passing": 5},
            "Checks": [{"CheckID": "web-ttl", "TTL": "15s", "DeregisterCriticalServiceAfter": "1m"},
                       {"HTTP": "http://10.0.0.5:8080/health", "Interval": "2s", "Timeout": "5s",
                        "DeregisterCriticalServiceAfter": "30s", "FailuresBeforeCritical": 3}]}"#,
    );
    assert_eq!(mapped.key.to_string(), "default/default/web");
    assert_eq!(mapped.instance.as_str(), "web-1");
    let spec = &mapped.spec;
    assert_eq!(spec.addresses[0].ip, "10.0.0.5");
    assert_eq!((spec.ports[0].name.as_str(), spec.ports[0].port), (PORT_NAME, 8080));
    assert_eq!(spec.weight, Some(5));
    assert_eq!(spec.checks[0].ttl_ms, Some(15_000));
    assert_eq!(spec.checks[1].url.as_deref(), Some("http://10.0.0.5:8080/health"));
    // The timeout is cut to the interval; Consul's 0 thresholds are Muster's 1.
    assert_eq!(
        (spec.checks[1].interval_ms, spec.checks[1].timeout_ms),
        (Some(2_000), Some(2_000))
    );
    assert_eq!((spec.checks[1].rise, spec.checks[1].fall), (Some(1), Some(3)));
    let endpoint = committed(&mapped);
    assert_eq!(tags(&endpoint), ["v1", "primary"]);
    assert_eq!(meta(&endpoint), BTreeMap::from([("version".into(), "1.2".into())]));
    assert_eq!(endpoint.labels.get("version"), Some("1.2"));
    assert_eq!(endpoint.labels.get("consul.tag.1"), Some("primary"));
    assert_eq!(check_ids(&endpoint), ["web-ttl", "service:web-1:2"]);
    assert_eq!(deregister_after(&endpoint), Some(Duration::from_secs(30)));
    // No check says it starts passing: the registry's `starting` until one passes.
    assert_eq!(endpoint.serving, ServingState::Starting);
}

#[test]
fn a_bare_registration_takes_consul_s_defaults() {
    let mapped = mapped(r#"{"Name": "db"}"#);
    assert_eq!(mapped.instance.as_str(), "db", "ID defaults to the name");
    assert_eq!(
        mapped.spec.addresses[0].ip,
        CALLER.to_string(),
        "no Address: the caller's"
    );
    assert!(mapped.spec.ports.is_empty());
    assert_eq!(mapped.spec.weight, Some(1), "Consul's default weight");
    let endpoint = committed(&mapped);
    assert_eq!(endpoint.serving, ServingState::Ready);
    assert!(tags(&endpoint).is_empty() && meta(&endpoint).is_empty() && check_ids(&endpoint).is_empty());
    assert_eq!(deregister_after(&endpoint), None);
}

#[test]
fn one_check_gets_the_id_service_colon_id_and_passing_checks_start_ready() {
    let mapped = mapped(
        r#"{"name": "api", "id": "api-7", "address": "localhost",
        "check": {"ttl": "10s", "status": "passing"}}"#,
    );
    assert_eq!(mapped.spec.addresses[0].ip, "127.0.0.1");
    let endpoint = committed(&mapped);
    assert_eq!(check_ids(&endpoint), ["service:api-7"]);
    assert_eq!(endpoint.serving, ServingState::Ready);
    let warning = self::mapped(
        r#"{"Name": "api", "Checks": [{"TTL": "1s", "Status": "passing"},
        {"TTL": "1s", "Status": "warning"}]}"#,
    );
    assert_eq!(warning.spec.serving, Some(ServingState::Degraded));
}

#[test]
fn the_query_s_placement_wins_over_the_body_s() {
    let body = registration(br#"{"Name": "web", "Namespace": "team-a", "Partition": "acme"}"#).unwrap();
    let from_body = map(&body, &place(), (false, false), CALLER).unwrap();
    assert_eq!(from_body.key.to_string(), "acme/team-a/web");
    let queried = Placement {
        tenant: "globex".into(),
        namespace: "ops".into(),
    };
    let from_query = map(&body, &queried, (true, true), CALLER).unwrap();
    assert_eq!(from_query.key.to_string(), "globex/ops/web");
}

#[test]
fn service_names_that_are_not_dns_labels_are_refused_not_rewritten() {
    for (body, want) in [
        (r#"{"Name": "Web"}"#, "Invalid service name 'Web'"),
        (r#"{"Name": "my_service"}"#, "Invalid service name 'my_service'"),
        (r#"{"Name": "web", "Namespace": "Team"}"#, "Invalid namespace 'Team'"),
        (r#"{"Name": "web", "Meta": {"a.b": "c"}}"#, "Invalid meta key 'a.b'"),
    ] {
        let registration = registration(body.as_bytes()).unwrap();
        let error = map(&registration, &place(), (false, false), CALLER).unwrap_err().0;
        assert!(error.starts_with(want), "{body}: {error}");
    }
}

/// The registrator trace: IDs like `host:web:80` are common; each must land on an instance
/// of its own, found again from the same ID, and shown back verbatim.
#[test]
fn service_ids_that_are_not_labels_are_rewritten_reversibly() {
    let (plain, rewritten) = instance_of("web-1").unwrap();
    assert_eq!((plain.as_str(), rewritten), ("web-1", false));
    let (a, rewritten) = instance_of("host:web:80").unwrap();
    assert!(rewritten);
    assert!(a.as_str().starts_with("host-web-80-"), "{a}");
    assert_eq!(instance_of("host:web:80").unwrap().0, a, "a function of the ID");
    assert_ne!(instance_of("host_web_80").unwrap().0, a, "two IDs never meet");
    assert_ne!(instance_of("Host:Web:80").unwrap().0, a);
    let (long, _) = instance_of(&"X".repeat(200)).unwrap();
    assert!(long.as_str().len() <= 63);
    assert!(instance_of("__").unwrap().0.as_str().starts_with("id-"));
    assert!(instance_of("").is_err() && instance_of("a b").is_ok() && instance_of("a\nb").is_err());
    let mapped =
        mapped(r#"{"Name": "web", "ID": "Web.1", "Meta": {"k": "v"}, "Weights": {"Passing": 2, "Warning": 3}}"#);
    let endpoint = committed(&mapped);
    assert_eq!(service_id(&endpoint), "Web.1");
    assert_eq!(endpoint.labels.get(WARNING_WEIGHT_LABEL), Some("3"));
    assert_eq!(meta(&endpoint), BTreeMap::from([("k".into(), "v".into())]));
}

#[test]
fn tags_read_back_in_numeric_order() {
    let body = format!(
        r#"{{"Name": "web", "Tags": [{}]}}"#,
        (0..12).map(|i| format!("\"t{i}\"")).collect::<Vec<_>>().join(",")
    );
    let endpoint = committed(&mapped(&body));
    let want: Vec<String> = (0..12).map(|i| format!("t{i}")).collect();
    assert_eq!(tags(&endpoint), want);
}
