//! The answer builder in-process: every name form and every response code.

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::{RData, RecordType};
use muster_core::{Address, Label, Locality, Protocol, Revision, ServingState};
use muster_dns::{Outcome, Rcode, Transport, Zone, ZoneConfig};

use crate::fixture::{endpoint, key, labels, port, snapshot};
use crate::support::{ID, answers, ask, assert_negative, query, rcode, reply, zone};

/// `prod/api` with two ready endpoints (one dual-stack, in failover tier 1 with weight 30
/// and labels) and one draining endpoint.
fn api_zone() -> Zone {
    let mut zone = zone();
    let mut a = endpoint("api-0", &["10.0.0.1"]);
    a.weight = 70;
    let mut b = endpoint("api-1", &["10.0.0.2", "2001:db8::2"]);
    b.weight = 30;
    b.locality = Locality {
        priority: 1,
        ..Locality::default()
    };
    b.labels = labels(&[("team", "core"), ("version", "v2")]);
    b.ports = vec![port("http", 8080, Protocol::Http), port("dns", 5353, Protocol::Udp)].into();
    let mut drained = endpoint("api-2", &["10.0.0.3"]);
    drained.serving = ServingState::Draining;
    let api = key("default", "prod", "api");
    zone.update(&api, Some(&snapshot(&api, 3, vec![a, b, drained])));
    zone.set_revision(Revision(3));
    zone
}

#[test]
fn a_and_aaaa_at_the_service_name_hold_only_eligible_endpoints() {
    let zone = api_zone();
    let a = ask(&zone, "api.prod.muster.", RecordType::A);
    assert_eq!(rcode(&a), ResponseCode::NoError);
    assert!(a.metadata.authoritative);
    assert_eq!(
        answers(&a),
        ["10.0.0.1", "10.0.0.2"],
        "the draining 10.0.0.3 is left out"
    );
    assert!(a.answers.iter().all(|r| r.ttl == 5));
    let aaaa = ask(&zone, "api.prod.muster.", RecordType::AAAA);
    assert_eq!(answers(&aaaa), ["2001:db8::2"]);
}

#[test]
fn an_instance_name_answers_that_endpoints_addresses() {
    let zone = api_zone();
    assert_eq!(
        answers(&ask(&zone, "api-1.api.prod.muster.", RecordType::A)),
        ["10.0.0.2"]
    );
    assert_eq!(
        answers(&ask(&zone, "api-1.api.prod.muster.", RecordType::AAAA)),
        ["2001:db8::2"]
    );
    // A draining instance keeps its name but has nothing to hand out.
    assert_negative(
        &ask(&zone, "api-2.api.prod.muster.", RecordType::A),
        ResponseCode::NoError,
    );
}

#[test]
fn srv_carries_tier_weight_port_and_target_with_addresses_in_additional() {
    let zone = api_zone();
    let srv = ask(&zone, "_http._tcp.api.prod.muster.", RecordType::SRV);
    assert_eq!(
        answers(&srv),
        ["0 70 8080 api-0.api.prod.muster.", "1 30 8080 api-1.api.prod.muster."]
    );
    let additional: Vec<(String, String)> = srv
        .additionals
        .iter()
        .map(|r| (r.name.to_ascii(), crate::support::render(&r.data)))
        .collect();
    assert_eq!(
        additional,
        [
            ("api-0.api.prod.muster.".to_owned(), "10.0.0.1".to_owned()),
            ("api-1.api.prod.muster.".to_owned(), "10.0.0.2".to_owned()),
            ("api-1.api.prod.muster.".to_owned(), "2001:db8::2".to_owned()),
        ]
    );
    let udp = ask(&zone, "_dns._udp.api.prod.muster.", RecordType::SRV);
    assert_eq!(answers(&udp), ["1 30 5353 api-1.api.prod.muster."]);
    // The port exists, but not over that transport.
    assert_negative(
        &ask(&zone, "_dns._tcp.api.prod.muster.", RecordType::SRV),
        ResponseCode::NXDomain,
    );
}

#[test]
fn dns_sd_browses_service_types_then_instances_then_srv_and_txt() {
    let zone = api_zone();
    let types = ask(&zone, "_services._dns-sd._udp.prod.muster.", RecordType::PTR);
    assert_eq!(answers(&types), ["_api._tcp.prod.muster.", "_api._udp.prod.muster."]);
    let instances = ask(&zone, "_api._tcp.prod.muster.", RecordType::PTR);
    assert_eq!(
        answers(&instances),
        ["api-0._api._tcp.prod.muster.", "api-1._api._tcp.prod.muster."],
        "only eligible instances are listed"
    );
    assert!(
        instances.additionals.iter().any(|r| matches!(&r.data, RData::SRV(_))),
        "RFC 6763 12.1: the instances' SRV travel with the PTR"
    );
    let srv = ask(&zone, "api-1._api._tcp.prod.muster.", RecordType::SRV);
    assert_eq!(answers(&srv), ["1 30 8080 api-1.api.prod.muster."]);
    let txt = ask(&zone, "api-1._api._tcp.prod.muster.", RecordType::TXT);
    assert_eq!(answers(&txt), ["team=core|version=v2"]);
    let empty = ask(&zone, "api-0._api._tcp.prod.muster.", RecordType::TXT);
    assert_eq!(answers(&empty), [""], "RFC 6763 6.1: no labels is one empty string");
    let udp = ask(&zone, "_api._udp.prod.muster.", RecordType::PTR);
    assert_eq!(answers(&udp), ["api-1._api._udp.prod.muster."]);
}

#[test]
fn unknown_names_are_nxdomain_and_known_names_without_the_type_are_nodata_both_with_the_soa() {
    let zone = api_zone();
    assert_negative(&ask(&zone, "nope.prod.muster.", RecordType::A), ResponseCode::NXDomain);
    assert_negative(
        &ask(&zone, "api.staging.muster.", RecordType::A),
        ResponseCode::NXDomain,
    );
    assert_negative(&ask(&zone, "api.prod.muster.", RecordType::TXT), ResponseCode::NoError);
    // Empty non-terminals exist (RFC 8020): NODATA, not NXDOMAIN.
    for ent in ["prod.muster.", "_tcp.api.prod.muster.", "_dns-sd._udp.prod.muster."] {
        assert_negative(&ask(&zone, ent, RecordType::A), ResponseCode::NoError);
    }
    let soa = ask(&zone, "muster.", RecordType::SOA);
    assert_eq!(rcode(&soa), ResponseCode::NoError);
    let RData::SOA(record) = &soa.answers[0].data else {
        panic!("{soa:?}")
    };
    assert_eq!(record.serial, 3, "the serial is the registry revision");
    assert_negative(&ask(&zone, "muster.", RecordType::NS), ResponseCode::NoError);
}

#[test]
fn a_service_with_no_eligible_endpoint_answers_nodata_not_its_old_addresses() {
    let mut zone = api_zone();
    let api = key("default", "prod", "api");
    let mut gone = endpoint("api-0", &["10.0.0.1"]);
    gone.serving = ServingState::Draining;
    let mut unknown = endpoint("api-1", &["10.0.0.2"]);
    unknown.serving = ServingState::Unknown;
    zone.update(&api, Some(&snapshot(&api, 4, vec![gone, unknown])));
    assert_negative(&ask(&zone, "api.prod.muster.", RecordType::A), ResponseCode::NoError);
    assert_negative(
        &ask(&zone, "_http._tcp.api.prod.muster.", RecordType::SRV),
        ResponseCode::NoError,
    );
    assert_negative(
        &ask(&zone, "_api._tcp.prod.muster.", RecordType::PTR),
        ResponseCode::NoError,
    );
    // And once the registry forgets the service, its names and empty parents go too.
    zone.update(&api, None);
    assert_negative(&ask(&zone, "api.prod.muster.", RecordType::A), ResponseCode::NXDomain);
    assert_negative(&ask(&zone, "prod.muster.", RecordType::A), ResponseCode::NXDomain);
    assert_eq!(zone.name_count(), 0);
}

#[test]
fn degraded_endpoints_and_scoped_addresses_follow_the_view_settings() {
    let api = key("default", "prod", "api");
    let mut degraded = endpoint("api-0", &["10.0.0.1"]);
    degraded.serving = ServingState::Degraded;
    let mut scoped = endpoint("api-1", &["10.0.0.2"]);
    scoped.addresses = vec![
        Address {
            ip: "192.168.0.2".parse().unwrap(),
            scope: Some(Label::new("scope", "lan").unwrap()),
        },
        Address {
            ip: "10.0.0.2".parse().unwrap(),
            scope: None,
        },
    ]
    .into();
    let services = snapshot(&api, 1, vec![degraded, scoped]);
    let mut strict = zone();
    strict.update(&api, Some(&services));
    assert_eq!(answers(&ask(&strict, "api.prod.muster.", RecordType::A)), ["10.0.0.2"]);
    let mut lenient = Zone::new(ZoneConfig {
        accept_degraded: true,
        reachable_scopes: vec![Label::new("scope", "lan").unwrap()],
        ..ZoneConfig::default()
    })
    .unwrap();
    lenient.update(&api, Some(&services));
    assert_eq!(
        answers(&ask(&lenient, "api.prod.muster.", RecordType::A)),
        ["10.0.0.1", "192.168.0.2", "10.0.0.2"]
    );
}

#[test]
fn another_tenants_services_are_not_in_the_view() {
    let mut zone = zone();
    let theirs = key("acme", "prod", "api");
    zone.update(
        &theirs,
        Some(&snapshot(&theirs, 1, vec![endpoint("api-0", &["10.0.0.1"])])),
    );
    assert_negative(&ask(&zone, "api.prod.muster.", RecordType::A), ResponseCode::NXDomain);
    let acme = Zone::new(ZoneConfig {
        tenant: Label::new("tenant", "acme").unwrap(),
        ..ZoneConfig::default()
    });
    let mut acme = acme.unwrap();
    acme.update(
        &theirs,
        Some(&snapshot(&theirs, 1, vec![endpoint("api-0", &["10.0.0.1"])])),
    );
    assert_eq!(answers(&ask(&acme, "api.prod.muster.", RecordType::A)), ["10.0.0.1"]);
}

#[test]
fn the_question_is_echoed_in_the_case_it_was_asked() {
    let zone = api_zone();
    let asked = "_HtTp._TcP.aPi.PrOd.MuStEr.";
    let (_, message, bytes) = reply(&zone, &query(asked, RecordType::SRV, None), Transport::Udp);
    assert_eq!(message.queries[0].name().to_ascii(), asked);
    assert_eq!(answers(&message).len(), 2);
    let wire = query(asked, RecordType::SRV, None);
    assert_eq!(bytes[12..wire.len()], wire[12..], "the question section, byte for byte");
    let (_, negative, _) = reply(&zone, &query("NoPe.PrOd.MuStEr.", RecordType::A, None), Transport::Udp);
    assert_eq!(negative.queries[0].name().to_ascii(), "NoPe.PrOd.MuStEr.");
}

#[test]
fn names_outside_the_domain_other_classes_and_transfers_are_refused() {
    let zone = api_zone();
    assert_eq!(rcode(&ask(&zone, "example.com.", RecordType::A)), ResponseCode::Refused);
    assert_eq!(
        rcode(&ask(&zone, "api.prod.notmuster.", RecordType::A)),
        ResponseCode::Refused
    );
    assert_eq!(rcode(&ask(&zone, "muster.", RecordType::AXFR)), ResponseCode::Refused);
    let mut chaos = query("api.prod.muster.", RecordType::A, None);
    let class_at = chaos.len() - 2;
    chaos[class_at..].copy_from_slice(&3u16.to_be_bytes());
    let (outcome, message, _) = reply(&zone, &chaos, Transport::Udp);
    assert_eq!(
        outcome,
        Outcome::Answered {
            rcode: Rcode::Refused,
            truncated: false
        }
    );
    assert!(message.answers.is_empty());
}

#[test]
fn any_gets_one_rrset_of_the_name() {
    let zone = api_zone();
    assert_eq!(
        answers(&ask(&zone, "api.prod.muster.", RecordType::ANY)),
        ["10.0.0.1", "10.0.0.2"]
    );
}

/// `prod/big` with `n` ready endpoints at 10.1.0.x.
fn big_zone(n: u8) -> Zone {
    let mut zone = zone();
    let big = key("default", "prod", "big");
    let endpoints = (0..n)
        .map(|i| endpoint(&format!("big-{i}"), &[&format!("10.1.0.{i}")]))
        .collect();
    zone.update(&big, Some(&snapshot(&big, 1, endpoints)));
    zone
}

#[test]
fn udp_answers_over_the_clients_size_set_tc_with_the_first_records_and_tcp_returns_everything() {
    let zone = big_zone(40);
    let plain = query("big.prod.muster.", RecordType::A, None);
    let (outcome, message, bytes) = reply(&zone, &plain, Transport::Udp);
    assert_eq!(
        outcome,
        Outcome::Answered {
            rcode: Rcode::NoError,
            truncated: true
        }
    );
    // 512 bytes: the header and question (33) and 29 addresses of 16 bytes, TC set (RFC
    // 2181 section 9), the first 29 in the stored order whatever the rotation.
    assert!(message.metadata.truncation);
    assert_eq!(message.answers.len(), 29);
    assert!(bytes.len() <= 512);
    let mut rotated = Vec::new();
    zone.answer(&plain, Transport::Udp, 0x9e37, &mut rotated);
    assert_eq!(rotated, bytes, "a truncated answer does not rotate");
    let first = answers(&message);
    let (outcome, message, _) = reply(&zone, &plain, Transport::Tcp);
    assert_eq!(
        outcome,
        Outcome::Answered {
            rcode: Rcode::NoError,
            truncated: false
        }
    );
    assert_eq!(message.answers.len(), 40);
    let whole = answers(&message);
    assert_eq!(first, whole[..29], "the truncated answer's records are the first ones");
    // With EDNS the client's buffer (up to our 1,232 bytes) is the limit: all 40, in order.
    let (_, message, bytes) = reply(
        &zone,
        &query("big.prod.muster.", RecordType::A, Some(4096)),
        Transport::Udp,
    );
    assert!(!message.metadata.truncation);
    assert_eq!(answers(&message), whole);
    assert!(bytes.len() > 512 && bytes.len() <= 1232);
    assert_eq!(message.edns.as_ref().map(|e| e.max_payload()), Some(1232));
}

#[test]
fn an_srv_answer_keeps_every_record_and_as_many_target_addresses_as_fit() {
    // 10 SRV records (their targets uncompressed, RFC 2782) take about 450 bytes: they fit
    // 512 with only a few of their 10 addresses (614 bytes in all).
    let zone = big_zone(10);
    let (outcome, message, bytes) = reply(
        &zone,
        &query("_http._tcp.big.prod.muster.", RecordType::SRV, None),
        Transport::Udp,
    );
    assert_eq!(
        outcome,
        Outcome::Answered {
            rcode: Rcode::NoError,
            truncated: false
        }
    );
    assert_eq!(message.answers.len(), 10);
    assert!(!message.additionals.is_empty() && message.additionals.len() < 10);
    assert_additionals_are_the_targets(&message);
    assert!(bytes.len() <= 512);
    let (_, full, _) = reply(
        &zone,
        &query("_http._tcp.big.prod.muster.", RecordType::SRV, None),
        Transport::Tcp,
    );
    assert_eq!(full.additionals.len(), 10);
    assert_additionals_are_the_targets(&full);
}

/// Every additional record is the address of a target of an SRV in the answer: for
/// `big-<i>.big.prod.muster.`, 10.1.<i / 256>.<i % 256>.
pub(crate) fn assert_additionals_are_the_targets(message: &hickory_proto::op::Message) {
    let targets: Vec<String> = message
        .answers
        .iter()
        .map(|r| match &r.data {
            RData::SRV(srv) => srv.target.to_ascii().to_ascii_lowercase(),
            other => panic!("not an SRV: {other:?}"),
        })
        .collect();
    for record in &message.additionals {
        let owner = record.name.to_ascii().to_ascii_lowercase();
        assert!(targets.contains(&owner), "{owner} is no target of the answer");
        let index: usize = owner
            .strip_prefix("big-")
            .and_then(|rest| rest.split('.').next())
            .and_then(|i| i.parse().ok())
            .unwrap_or_else(|| panic!("{owner}"));
        assert_eq!(
            crate::support::render(&record.data),
            format!("10.1.{}.{}", index / 256, index % 256),
            "{owner}"
        );
    }
}

/// `prod/big` with `n` ready endpoints `big-<i>` at 10.1.<i / 256>.<i % 256>.
pub(crate) fn many(n: usize) -> Vec<muster_core::Endpoint> {
    (0..n)
        .map(|i| endpoint(&format!("big-{i}"), &[&format!("10.1.{}.{}", i / 256, i % 256)]))
        .collect()
}

#[test]
fn max_answers_bounds_udp_answers_and_leaves_room_for_the_targets_addresses() {
    let mut zone = Zone::new(ZoneConfig {
        max_answers: 8,
        ..ZoneConfig::default()
    })
    .unwrap();
    let big = key("default", "prod", "big");
    zone.update(&big, Some(&snapshot(&big, 1, many(5_000))));
    let (outcome, a, _) = reply(
        &zone,
        &query("big.prod.muster.", RecordType::A, Some(1232)),
        Transport::Udp,
    );
    assert_eq!(
        outcome,
        Outcome::Answered {
            rcode: Rcode::NoError,
            truncated: false
        }
    );
    assert_eq!(a.answers.len(), 8);
    let srv_query = query("_http._tcp.big.prod.muster.", RecordType::SRV, Some(1232));
    let (_, srv, _) = reply(&zone, &srv_query, Transport::Udp);
    assert_eq!((srv.answers.len(), srv.additionals.len()), (8, 8));
    assert_additionals_are_the_targets(&srv);
    // TCP is not bounded by it: as many as fit 64 KiB.
    let (_, tcp, bytes) = reply(&zone, &srv_query, Transport::Tcp);
    assert!(tcp.answers.len() > 1_000, "{}", tcp.answers.len());
    assert!(bytes.len() <= 65_535);
    assert_additionals_are_the_targets(&tcp);
}

#[test]
fn rotating_the_rotation_picks_the_window_and_the_same_rotation_the_same_bytes() {
    let mut zone = crate::support::zone_with(muster_dns::LargeRrsets::Rotate);
    let big = key("default", "prod", "big");
    zone.update(&big, Some(&snapshot(&big, 1, many(5_000))));
    let packet = query("big.prod.muster.", RecordType::A, Some(1232));
    let window = |rotation: u32| {
        let mut out = Vec::new();
        let outcome = zone.answer(&packet, Transport::Udp, rotation, &mut out);
        assert_eq!(
            outcome,
            Outcome::Answered {
                rcode: Rcode::NoError,
                truncated: false
            }
        );
        out
    };
    assert_eq!(window(7), window(7), "the rotation is the only input");
    let windows: Vec<Vec<String>> = (0..4)
        .map(|rotation| answers(&hickory_proto::op::Message::from_vec(&window(rotation)).unwrap()))
        .collect();
    for (n, addresses) in windows.iter().enumerate() {
        // (1,232 - 33 - 11) / 16 addresses, consecutive from the window's start.
        assert_eq!(addresses.len(), 74);
        for other in &windows[n + 1..] {
            assert!(addresses.iter().all(|a| !other.contains(a)), "windows overlap");
        }
    }
}

#[test]
fn tc_is_set_only_when_not_even_one_record_fits() {
    let mut zone = zone();
    let wide = key("default", "meta", "wide");
    let mut endpoint = endpoint("wide-0", &["10.2.0.1"]);
    endpoint.labels = wide_labels();
    zone.update(&wide, Some(&snapshot(&wide, 1, vec![endpoint])));
    let txt = query("wide-0._wide._tcp.meta.muster.", RecordType::TXT, None);
    let (outcome, message, bytes) = reply(&zone, &txt, Transport::Udp);
    assert_eq!(
        outcome,
        Outcome::Answered {
            rcode: Rcode::NoError,
            truncated: true
        }
    );
    assert!(message.metadata.truncation && message.answers.is_empty());
    assert!(bytes.len() <= 512);
    let (_, message, _) = reply(&zone, &txt, Transport::Tcp);
    assert_eq!(message.answers.len(), 1);
    assert!(!message.metadata.truncation);
}

/// Four labels of 150-byte values: one TXT record of about 620 bytes, over 512.
pub(crate) fn wide_labels() -> muster_core::Labels {
    let value = "v".repeat(150);
    labels(&[("a", &value), ("b", &value), ("c", &value), ("d", &value)])
}

#[test]
fn edns_is_answered_with_an_opt_record_and_unknown_versions_get_badvers() {
    let zone = api_zone();
    let (_, message, _) = reply(
        &zone,
        &query("api.prod.muster.", RecordType::A, Some(1232)),
        Transport::Udp,
    );
    assert!(message.edns.is_some());
    let (_, negative, _) = reply(
        &zone,
        &query("nope.prod.muster.", RecordType::A, Some(1232)),
        Transport::Udp,
    );
    assert!(negative.edns.is_some());
    assert_eq!(rcode(&negative), ResponseCode::NXDomain);
    let mut v1 = query("api.prod.muster.", RecordType::A, Some(1232));
    // The OPT record is last; its TTL's second byte is the version.
    let version_at = v1.len() - 11 + 6;
    v1[version_at] = 1;
    let (outcome, message, _) = reply(&zone, &v1, Transport::Udp);
    assert_eq!(
        outcome,
        Outcome::Answered {
            rcode: Rcode::BadVers,
            truncated: false
        }
    );
    // 16 on the wire (hickory names it BADSIG, which shares the number).
    assert_eq!(u16::from(message.metadata.response_code), 16);
    assert!(message.answers.is_empty());
}

#[test]
fn malformed_packets_get_formerr_or_are_dropped_and_the_flags_are_echoed() {
    let zone = api_zone();
    let good = query("api.prod.muster.", RecordType::A, None);
    let mut out = Vec::new();
    for dropped in [
        &good[..5],
        &{
            let mut response = good.clone();
            response[2] |= 0x80;
            response
        }[..],
    ] {
        assert!(matches!(
            zone.answer(dropped, Transport::Udp, 0, &mut out),
            Outcome::Dropped(_)
        ));
    }
    let (outcome, message, _) = reply(&zone, &good[..good.len() - 3], Transport::Udp);
    assert_eq!(
        outcome,
        Outcome::Answered {
            rcode: Rcode::FormErr,
            truncated: false
        }
    );
    assert_eq!(message.metadata.id, ID);
    let mut notify = good.clone();
    notify[2] = 0x20; // opcode 4, NOTIFY
    let (outcome, _, _) = reply(&zone, &notify, Transport::Udp);
    assert_eq!(
        outcome,
        Outcome::Answered {
            rcode: Rcode::NotImp,
            truncated: false
        }
    );
    let (_, message, _) = reply(&zone, &good, Transport::Udp);
    assert!(message.metadata.recursion_desired && !message.metadata.recursion_available);
}

#[test]
fn a_bad_configuration_is_refused_with_a_code() {
    let err = Zone::new(ZoneConfig {
        domain: "not a domain".into(),
        ..ZoneConfig::default()
    })
    .err()
    .unwrap();
    assert_eq!(err.code(), "invalid_dns_domain");
}
