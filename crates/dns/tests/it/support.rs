//! Asking a zone questions in-process, and reading its answers with hickory's decoder (an
//! independent parser: a reply it cannot read is a failed test).

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use muster_dns::{Outcome, Transport, Zone, ZoneConfig};

/// The ID every test query carries; replies must echo it.
pub(crate) const ID: u16 = 0x4d53;

/// A zone for tenant `default` under `muster.` with TTL 5 and negative TTL 7 (so the two are
/// told apart).
pub(crate) fn zone() -> Zone {
    zone_with(muster_dns::LargeRrsets::default())
}

/// [`zone`], answering RRsets too large for a UDP answer as `large_rrsets` says.
pub(crate) fn zone_with(large_rrsets: muster_dns::LargeRrsets) -> Zone {
    Zone::new(ZoneConfig {
        negative_ttl_s: 7,
        large_rrsets,
        ..ZoneConfig::default()
    })
    .unwrap()
}

/// A query for `name` (spelled as given) and `rtype`, with EDNS advertising `edns` bytes.
pub(crate) fn query(name: &str, rtype: RecordType, edns: Option<u16>) -> Vec<u8> {
    let mut message = Message::new(ID, MessageType::Query, OpCode::Query);
    message.metadata.recursion_desired = true;
    message.add_query(Query::query(Name::from_ascii(name).unwrap(), rtype));
    if let Some(size) = edns {
        let mut opt = Edns::new();
        opt.set_max_payload(size);
        message.set_edns(opt);
    }
    message.to_vec().unwrap()
}

/// Answers `packet`, requiring a reply, and decodes it.
pub(crate) fn reply(zone: &Zone, packet: &[u8], transport: Transport) -> (Outcome, Message, Vec<u8>) {
    let mut out = Vec::new();
    let outcome = zone.answer(packet, transport, 0, &mut out);
    assert!(matches!(outcome, Outcome::Answered { .. }), "{outcome:?}");
    let message = Message::from_vec(&out).unwrap_or_else(|err| panic!("undecodable reply {out:?}: {err}"));
    assert_eq!(message.metadata.id, u16::from_be_bytes([packet[0], packet[1]]));
    assert_eq!(message.metadata.message_type, MessageType::Response);
    (outcome, message, out)
}

/// Asks `name`/`rtype` over UDP without EDNS.
pub(crate) fn ask(zone: &Zone, name: &str, rtype: RecordType) -> Message {
    reply(zone, &query(name, rtype, None), Transport::Udp).1
}

pub(crate) fn rcode(message: &Message) -> ResponseCode {
    message.metadata.response_code
}

/// The answers' data, as text (`10.0.0.1`, `0 100 8080 api-0.api.prod.muster.`, ...).
pub(crate) fn answers(message: &Message) -> Vec<String> {
    message.answers.iter().map(|r| render(&r.data)).collect()
}

pub(crate) fn render(data: &RData) -> String {
    match data {
        RData::A(a) => a.0.to_string(),
        RData::AAAA(aaaa) => aaaa.0.to_string(),
        RData::SRV(srv) => format!("{} {} {} {}", srv.priority, srv.weight, srv.port, srv.target),
        RData::PTR(ptr) => ptr.0.to_string(),
        RData::TXT(txt) => txt
            .txt_data
            .iter()
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect::<Vec<_>>()
            .join("|"),
        other => format!("{other:?}"),
    }
}

/// Asserts a negative answer: no answers, the zone's SOA alone in authority with the
/// negative TTL as both its TTL and its minimum.
pub(crate) fn assert_negative(message: &Message, expected: ResponseCode) {
    assert_eq!(rcode(message), expected);
    assert!(message.metadata.authoritative);
    assert!(message.answers.is_empty(), "{:?}", message.answers);
    assert_eq!(message.authorities.len(), 1, "{:?}", message.authorities);
    let soa = &message.authorities[0];
    assert_eq!(soa.name.to_ascii(), "muster.");
    assert_eq!(soa.ttl, 7);
    let RData::SOA(soa) = &soa.data else {
        panic!("not an SOA: {soa:?}")
    };
    assert_eq!(soa.minimum, 7);
}
