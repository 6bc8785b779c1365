use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use muster_core::{
    Actor, Address, Incarnation, InstanceId, Labels, Locality, NamedPort, Observation, Principal, Protocol, Provenance,
    Revision, ServiceKey,
};

use super::*;

fn label(text: &str) -> Label {
    Label::new("test", text).unwrap()
}

/// `n` at 10.0.0.n, ports `http` 8080 and `grpc` 9090, in `zone` of region `r1`.
pub(crate) fn endpoint(n: u8, zone: &str, serving: ServingState) -> Endpoint {
    let principal = Principal::new("test").unwrap();
    Endpoint {
        instance: InstanceId::new(&format!("ep-{n}")).unwrap(),
        incarnation: Incarnation(1),
        addresses: vec![Address {
            ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, n)),
            scope: None,
        }]
        .into(),
        ports: vec![
            NamedPort {
                name: label("http"),
                port: 8080,
                protocol: Protocol::Http,
            },
            NamedPort {
                name: label("grpc"),
                port: 9090,
                protocol: Protocol::Grpc,
            },
        ]
        .into(),
        locality: Locality {
            region: Some(label("r1")),
            zone: Some(label(zone)),
            sub_zone: None,
            priority: 0,
        },
        serving,
        weight: 10 + u16::from(n),
        capacity: None,
        labels: Labels::default(),
        lease: None,
        revision: Revision(7),
        provenance: Provenance {
            registrar: principal.clone(),
            source_revision: None,
            policy_revision: Revision::ZERO,
        },
        observation: Observation {
            actor: Actor::App,
            principal,
            at_ms: 0,
            reason: "test".into(),
        },
        checks: Box::default(),
    }
}

pub(crate) fn snapshot(endpoints: Vec<Endpoint>) -> ServiceSnapshot {
    ServiceSnapshot::from_endpoints(
        ServiceKey::new("default", "prod", "api").unwrap(),
        Revision(7),
        endpoints.into_iter().map(Arc::new),
    )
}

fn zone_a() -> Cohort {
    Cohort {
        region: Some("r1".into()),
        zone: Some("a".into()),
    }
}

/// (ip:port, health, weight).
type Seen = (String, HealthStatus, u32);

/// (priority, zone, endpoints) per locality.
fn shape(assignment: &ClusterLoadAssignment) -> Vec<(u32, String, Vec<Seen>)> {
    assignment
        .endpoints
        .iter()
        .map(|locality| {
            let endpoints = locality
                .lb_endpoints
                .iter()
                .map(|lb| {
                    let Some(lb_endpoint::HostIdentifier::Endpoint(endpoint)) = &lb.host_identifier else {
                        panic!("no endpoint");
                    };
                    let Some(address::Address::SocketAddress(socket)) = &endpoint.address.as_ref().unwrap().address
                    else {
                        panic!("no socket address");
                    };
                    let Some(socket_address::PortSpecifier::PortValue(port)) = socket.port_specifier else {
                        panic!("no port");
                    };
                    (
                        format!("{}:{port}", socket.address),
                        HealthStatus::try_from(lb.health_status).unwrap(),
                        lb.load_balancing_weight.unwrap().value,
                    )
                })
                .collect();
            (
                locality.priority,
                locality.locality.as_ref().unwrap().zone.clone(),
                endpoints,
            )
        })
        .collect()
}

#[test]
fn serving_states_map_to_health_and_never_to_unknown() {
    let states = [
        (ServingState::Ready, HealthStatus::Healthy),
        (ServingState::Degraded, HealthStatus::Degraded),
        (ServingState::Draining, HealthStatus::Draining),
        (ServingState::Starting, HealthStatus::Unhealthy),
        (ServingState::NotServing, HealthStatus::Unhealthy),
        (ServingState::Unknown, HealthStatus::Unhealthy),
    ];
    let endpoints = states
        .iter()
        .zip(1..)
        .map(|((state, _), n)| endpoint(n, "a", *state))
        .collect();
    let built = assignment("api.prod", &snapshot(endpoints), &zone_a());
    assert_eq!(built.cluster_name, "api.prod");
    let seen: Vec<HealthStatus> = shape(&built)
        .into_iter()
        .flat_map(|(_, _, e)| e)
        .map(|(_, h, _)| h)
        .collect();
    assert_eq!(seen, states.map(|(_, health)| health));
}

#[test]
fn the_grpc_port_is_used_else_the_first_and_weights_carry_over() {
    let mut plain = endpoint(2, "a", ServingState::Ready);
    plain.ports = plain.ports[..1].into();
    let mut portless = endpoint(3, "a", ServingState::Ready);
    portless.ports = Box::default();
    let built = assignment(
        "api.prod",
        &snapshot(vec![endpoint(1, "a", ServingState::Ready), plain, portless]),
        &zone_a(),
    );
    assert_eq!(
        shape(&built),
        [(
            0,
            "a".to_owned(),
            vec![
                ("10.0.0.1:9090".to_owned(), HealthStatus::Healthy, 11),
                ("10.0.0.2:8080".to_owned(), HealthStatus::Healthy, 12)
            ]
        )]
    );
    assert_eq!(built.endpoints[0].load_balancing_weight.unwrap().value, 23);
}

#[test]
fn another_zone_is_a_lower_priority_whatever_its_health() {
    let built = assignment(
        "api.prod",
        &snapshot(vec![
            endpoint(1, "a", ServingState::Draining),
            endpoint(2, "b", ServingState::Ready),
        ]),
        &zone_a(),
    );
    let priorities: Vec<(u32, String)> = shape(&built).into_iter().map(|(p, zone, _)| (p, zone)).collect();
    assert_eq!(priorities, [(0, "a".to_owned()), (1, "b".to_owned())]);
    // The draining locality keeps a positive weight: gRPC drops weight-0 localities.
    assert_eq!(built.endpoints[0].load_balancing_weight.unwrap().value, 1);
    // A caller in zone b sees the mirror image; one that names no place sees one tier.
    let from_b = Cohort {
        region: Some("r1".into()),
        zone: Some("b".into()),
    };
    let built = assignment(
        "api.prod",
        &snapshot(vec![
            endpoint(1, "a", ServingState::Ready),
            endpoint(2, "b", ServingState::Ready),
        ]),
        &from_b,
    );
    let priorities: Vec<(u32, String)> = shape(&built).into_iter().map(|(p, zone, _)| (p, zone)).collect();
    assert_eq!(priorities, [(0, "b".to_owned()), (1, "a".to_owned())]);
}

#[test]
fn the_failover_tier_outranks_nearness_and_priorities_stay_contiguous() {
    let mut backup = endpoint(1, "a", ServingState::Ready);
    backup.locality.priority = 5;
    let mut far = endpoint(2, "x", ServingState::Ready);
    far.locality.region = Some(label("r2"));
    let built = assignment("api.prod", &snapshot(vec![backup, far]), &zone_a());
    let priorities: Vec<(u32, String)> = shape(&built).into_iter().map(|(p, zone, _)| (p, zone)).collect();
    // (0, other region) before (5, same zone), ranked 0 and 1.
    assert_eq!(priorities, [(0, "x".to_owned()), (1, "a".to_owned())]);
}

#[test]
fn a_known_service_with_nothing_eligible_is_an_assignment_without_healthy_endpoints() {
    let built = assignment("api.prod", &snapshot(vec![]), &zone_a());
    assert_eq!(built.cluster_name, "api.prod");
    assert!(built.endpoints.is_empty());
    let built = assignment(
        "api.prod",
        &snapshot(vec![endpoint(1, "a", ServingState::NotServing)]),
        &zone_a(),
    );
    assert!(
        shape(&built)
            .iter()
            .flat_map(|(_, _, e)| e)
            .all(|(_, health, _)| *health == HealthStatus::Unhealthy)
    );
}

#[test]
fn a_node_locality_becomes_its_cohort() {
    let locality = XdsLocality {
        region: "r1".into(),
        zone: String::new(),
        sub_zone: "rack".into(),
    };
    assert_eq!(
        Cohort::of(Some(&locality)),
        Cohort {
            region: Some("r1".into()),
            zone: None
        }
    );
    assert_eq!(Cohort::of(None), Cohort::default());
}

#[test]
fn two_records_on_one_address_are_sent_once_in_the_better_state() {
    let old = endpoint(1, "a", ServingState::Draining);
    let mut back = endpoint(2, "a", ServingState::Ready);
    back.addresses = old.addresses.clone();
    let built = assignment(
        "api.prod",
        &snapshot(vec![old, back, endpoint(3, "a", ServingState::Ready)]),
        &zone_a(),
    );
    let seen: Vec<(String, HealthStatus, u32)> = shape(&built).into_iter().flat_map(|(_, _, e)| e).collect();
    assert_eq!(
        seen,
        [
            ("10.0.0.1:9090".to_owned(), HealthStatus::Healthy, 12),
            ("10.0.0.3:9090".to_owned(), HealthStatus::Healthy, 13)
        ]
    );
}

#[test]
fn a_spilled_endpoint_shares_the_local_sets_best_tier_in_its_own_locality() {
    let local = endpoint(1, "a", ServingState::Ready);
    let mut spilled = endpoint(2, "x", ServingState::Ready);
    spilled.locality.region = Some(label("r2"));
    spilled.labels = spilled.labels.with(SPILLED_FROM, "r2");
    let mut far = endpoint(3, "y", ServingState::Ready);
    far.locality.region = Some(label("r2"));
    let built = assignment("api.prod", &snapshot(vec![local, spilled, far]), &zone_a());
    let priorities: Vec<(u32, String)> = shape(&built).into_iter().map(|(p, zone, _)| (p, zone)).collect();
    // The spilled one beside zone a (priority 0, a locality of its own); the other region's
    // unspilled one stays the lower tier it always was.
    assert_eq!(
        priorities,
        [(0, "a".to_owned()), (0, "x".to_owned()), (1, "y".to_owned())]
    );
}

#[test]
fn the_spill_joins_the_best_tier_with_an_eligible_local_endpoint_at_that_tiers_share() {
    let down = endpoint(1, "a", ServingState::NotServing);
    let up = endpoint(2, "b", ServingState::Ready);
    let mut spilled = endpoint(3, "x", ServingState::Ready);
    spilled.locality.region = Some(label("r2"));
    spilled.labels = spilled.labels.with(SPILLED_FROM, "r2");
    let built = assignment("api.prod", &snapshot(vec![down, up, spilled.clone()]), &zone_a());
    let priorities: Vec<(u32, String)> = shape(&built).into_iter().map(|(p, zone, _)| (p, zone)).collect();
    // Zone a has nothing eligible: the spill stands beside zone b, not beside the unusable.
    assert_eq!(
        priorities,
        [(0, "a".to_owned()), (1, "b".to_owned()), (1, "x".to_owned())]
    );
    // Two eligible local endpoints, in zones a (weight 14) and b (12): the spill (weight 13,
    // scaled against all 26) weighs the home tier's fraction of it in zone a's priority.
    let near = endpoint(4, "a", ServingState::Ready);
    let up = endpoint(2, "b", ServingState::Ready);
    let built = assignment("api.prod", &snapshot(vec![near, up, spilled]), &zone_a());
    let weights: Vec<(u32, String, u32)> = built
        .endpoints
        .iter()
        .map(|l| {
            let zone = l.locality.as_ref().unwrap().zone.clone();
            (l.priority, zone, l.load_balancing_weight.unwrap().value)
        })
        .collect();
    // 13 × 14 / 26 = 7.
    assert_eq!(
        weights,
        [(0, "a".to_owned(), 14), (0, "x".to_owned(), 7), (1, "b".to_owned(), 12)]
    );
}
