//! What every reply must be, whatever the packet: shared by the corpus replay (a test) and
//! the fuzz target (`fuzz/fuzz_targets/answer.rs` includes this file and `fixture.rs`).

use hickory_proto::op::{Message, MessageType};
use muster_core::{Protocol, Revision, ServingState};
use muster_dns::{Outcome, Transport, Zone, ZoneConfig};

use crate::fixture::{endpoint, key, labels, port, snapshot};

/// The zone the corpus is written against: `prod/api` (a dual-stack endpoint with labels, a
/// UDP port, a draining one) and `prod/big` (40 endpoints, for truncation).
pub(crate) fn sample_zone() -> Zone {
    let mut zone = Zone::new(ZoneConfig::default()).expect("the default config is valid");
    let api = key("default", "prod", "api");
    let mut a = endpoint("api-0", &["10.0.0.1", "2001:db8::1"]);
    a.labels = labels(&[("team", "core"), ("version", "v2")]);
    a.ports = vec![port("http", 8080, Protocol::Http), port("dns", 5353, Protocol::Udp)].into();
    let mut drained = endpoint("api-1", &["10.0.0.2"]);
    drained.serving = ServingState::Draining;
    zone.update(&api, Some(&snapshot(&api, 1, vec![a, drained])));
    let big = key("default", "prod", "big");
    let many = (0..40)
        .map(|i| endpoint(&format!("big-{i}"), &[&format!("10.1.0.{i}")]))
        .collect();
    zone.update(&big, Some(&snapshot(&big, 2, many)));
    zone.set_revision(Revision(2));
    zone
}

/// Answers `packet` over both transports and checks the reply: absent (dropped), or a
/// response hickory can decode, with the query's ID, within the transport's size, its TC
/// bit and rcode as reported, TC only on an empty answer; over UDP at two rotations.
pub(crate) fn check(zone: &Zone, packet: &[u8]) {
    let mut out = Vec::new();
    for (transport, limit, rotation) in [
        (Transport::Udp, usize::from(zone.config().max_udp_payload), 0),
        (Transport::Udp, usize::from(zone.config().max_udp_payload), 0x9e37),
        (Transport::Tcp, 65_535, 1),
    ] {
        match zone.answer(packet, transport, rotation, &mut out) {
            Outcome::Dropped(_) => assert!(out.is_empty(), "a dropped packet leaves no reply"),
            Outcome::Answered { rcode, truncated } => {
                assert!(out.len() <= limit, "{transport:?} reply of {} bytes", out.len());
                let message = Message::from_vec(&out)
                    .unwrap_or_else(|err| panic!("undecodable reply {out:?} to {packet:?}: {err}"));
                assert_eq!(message.metadata.message_type, MessageType::Response);
                assert_eq!(out[..2], packet[..2], "the ID is echoed");
                assert_eq!(message.metadata.truncation, truncated);
                assert_eq!(u16::from(message.metadata.response_code) & 0x0f, rcode.value() & 0x0f);
                if transport == Transport::Tcp {
                    assert!(!truncated, "TCP answers are never truncated");
                }
                if truncated && zone.config().large_rrsets == muster_dns::LargeRrsets::Rotate {
                    assert!(message.answers.is_empty(), "rotating: TC only when not one record fits");
                }
            }
        }
    }
}
