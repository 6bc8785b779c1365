//! The listener over real sockets, asked by a real resolver (hickory-resolver, with 0x20
//! case randomisation on, so it checks the question echo too).

use std::sync::Arc;

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::{RData, RecordType};
use hickory_resolver::net::{DnsError, NetError};
use muster_core::{Protocol, Revision, ServingState};
use muster_dns::{DnsListener, LiveZone};
use tokio::net::UdpSocket;

use crate::fixture::{endpoint, key, labels, port, snapshot};
use crate::resolver::resolver;
use crate::support::{query, zone};

/// A listener on a free loopback port over a live zone holding `prod/api` (two endpoints),
/// `prod/big` (40) and `meta/wide` (one endpoint whose TXT record is over 512 bytes).
async fn serve() -> (Arc<LiveZone>, DnsListener) {
    let live = Arc::new(LiveZone::new(zone()));
    let api = key("default", "prod", "api");
    let mut a = endpoint("api-0", &["10.0.0.1", "2001:db8::1"]);
    a.labels = labels(&[("team", "core")]);
    let mut b = endpoint("api-1", &["10.0.0.2"]);
    b.weight = 30;
    b.ports = vec![port("http", 8081, Protocol::Http)].into();
    live.stage(&api, Some(snapshot(&api, 1, vec![a, b])), Revision(1));
    let big = key("default", "prod", "big");
    let many = (0..40)
        .map(|i| endpoint(&format!("big-{i}"), &[&format!("10.1.0.{i}")]))
        .collect();
    live.stage(&big, Some(snapshot(&big, 2, many)), Revision(2));
    let wide = key("default", "meta", "wide");
    let mut w = endpoint("wide-0", &["10.2.0.1"]);
    w.labels = crate::zone::wide_labels();
    live.stage(&wide, Some(snapshot(&wide, 2, vec![w])), Revision(2));
    let listener = DnsListener::bind("127.0.0.1:0".parse().unwrap(), Arc::clone(&live))
        .await
        .unwrap();
    (live, listener)
}

/// The answers as lower-case text. Names in the data compress against the question, which
/// is echoed in the resolver's randomised case, so they come back in that case.
fn texts(lookup: &hickory_resolver::lookup::Lookup) -> Vec<String> {
    let mut texts: Vec<String> = lookup
        .answers()
        .iter()
        .map(|r| crate::support::render(&r.data).to_ascii_lowercase())
        .collect();
    texts.sort();
    texts
}

fn no_records(err: NetError) -> hickory_resolver::net::NoRecords {
    match err {
        NetError::Dns(DnsError::NoRecordsFound(no_records)) => no_records,
        other => panic!("expected a negative answer, got {other}"),
    }
}

#[tokio::test]
async fn a_resolver_gets_a_aaaa_srv_ptr_and_txt_over_udp() {
    let (_live, listener) = serve().await;
    let dns = resolver(listener.local_addr(), true);
    let a = dns.lookup("api.prod.muster.", RecordType::A).await.unwrap();
    assert_eq!(texts(&a), ["10.0.0.1", "10.0.0.2"]);
    let aaaa = dns.lookup("api.prod.muster.", RecordType::AAAA).await.unwrap();
    assert_eq!(texts(&aaaa), ["2001:db8::1"]);
    let srv = dns
        .lookup("_http._tcp.api.prod.muster.", RecordType::SRV)
        .await
        .unwrap();
    assert_eq!(
        texts(&srv),
        ["0 100 8080 api-0.api.prod.muster.", "0 30 8081 api-1.api.prod.muster."]
    );
    let browse = dns
        .lookup("_services._dns-sd._udp.prod.muster.", RecordType::PTR)
        .await
        .unwrap();
    assert_eq!(texts(&browse), ["_api._tcp.prod.muster.", "_big._tcp.prod.muster."]);
    let instances = dns.lookup("_api._tcp.prod.muster.", RecordType::PTR).await.unwrap();
    assert_eq!(
        texts(&instances),
        ["api-0._api._tcp.prod.muster.", "api-1._api._tcp.prod.muster."]
    );
    let txt = dns
        .lookup("api-0._api._tcp.prod.muster.", RecordType::TXT)
        .await
        .unwrap();
    assert_eq!(texts(&txt), ["team=core"]);
    listener.stop().await;
}

#[tokio::test]
async fn an_answer_over_the_udp_buffer_sets_tc_and_the_resolver_gets_it_whole_over_tcp() {
    let (_live, listener) = serve().await;
    // Over plain UDP, without EDNS, 40 addresses do not fit 512 bytes: the first 29, TC set.
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    socket
        .send_to(&query("big.prod.muster.", RecordType::A, None), listener.local_addr())
        .await
        .unwrap();
    let mut buffer = vec![0; 2048];
    let len = socket.recv(&mut buffer).await.unwrap();
    let cut = Message::from_vec(&buffer[..len]).unwrap();
    assert!(cut.metadata.truncation);
    assert_eq!(cut.answers.len(), 29);
    assert!(len <= 512);
    // A resolver without EDNS meets the same TC and asks again over TCP.
    let dns = resolver(listener.local_addr(), false);
    assert_eq!(
        dns.lookup("big.prod.muster.", RecordType::A)
            .await
            .unwrap()
            .answers()
            .len(),
        40
    );
    listener.stop().await;
}

#[tokio::test]
async fn a_record_too_large_for_udp_is_truncated_and_the_resolver_gets_it_over_tcp() {
    let (_live, listener) = serve().await;
    let name = "wide-0._wide._tcp.meta.muster.";
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    socket
        .send_to(&query(name, RecordType::TXT, None), listener.local_addr())
        .await
        .unwrap();
    let mut buffer = vec![0; 2048];
    let len = socket.recv(&mut buffer).await.unwrap();
    let truncated = Message::from_vec(&buffer[..len]).unwrap();
    assert!(truncated.metadata.truncation);
    assert!(truncated.answers.is_empty());
    // The resolver sees the TC bit and asks again over TCP.
    let dns = resolver(listener.local_addr(), false);
    let txt = dns.lookup(name, RecordType::TXT).await.unwrap();
    assert_eq!(txt.answers().len(), 1);
    listener.stop().await;
}

#[tokio::test]
async fn nxdomain_and_nodata_come_with_the_soa_for_negative_caching() {
    let (_live, listener) = serve().await;
    let dns = resolver(listener.local_addr(), true);
    let missing = no_records(dns.lookup("nope.prod.muster.", RecordType::A).await.unwrap_err());
    assert_eq!(missing.response_code, ResponseCode::NXDomain);
    let soa = missing.soa.expect("an SOA in authority");
    assert_eq!(soa.name.to_ascii(), "muster.");
    assert_eq!(soa.data.minimum, 7);
    assert_eq!(soa.data.serial, 2, "the serial is the revision the zone reflects");
    let nodata = no_records(dns.lookup("api.prod.muster.", RecordType::TXT).await.unwrap_err());
    assert_eq!(nodata.response_code, ResponseCode::NoError);
    assert!(nodata.soa.is_some());
    assert_eq!(nodata.negative_ttl, Some(7));
    listener.stop().await;
}

#[tokio::test]
async fn a_drained_endpoint_disappears_at_the_next_query() {
    let (live, listener) = serve().await;
    let dns = resolver(listener.local_addr(), true);
    let before = dns.lookup("api.prod.muster.", RecordType::A).await.unwrap();
    assert_eq!(texts(&before), ["10.0.0.1", "10.0.0.2"]);
    let api = key("default", "prod", "api");
    let a = endpoint("api-0", &["10.0.0.1"]);
    let mut drained = endpoint("api-1", &["10.0.0.2"]);
    drained.serving = ServingState::Draining;
    live.stage(&api, Some(snapshot(&api, 3, vec![a, drained])), Revision(3));
    let after = dns.lookup("api.prod.muster.", RecordType::A).await.unwrap();
    assert_eq!(texts(&after), ["10.0.0.1"]);
    let srv = dns
        .lookup("_http._tcp.api.prod.muster.", RecordType::SRV)
        .await
        .unwrap();
    assert!(
        srv.answers()
            .iter()
            .all(|r| !matches!(&r.data, RData::SRV(s) if s.port == 8081))
    );
    listener.stop().await;
}

#[tokio::test]
async fn garbage_does_not_stop_the_listener_and_stop_closes_it() {
    let (_live, listener) = serve().await;
    let addr = listener.local_addr();
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    for garbage in [&b""[..], b"\x00", &[0xff; 12], &[0xc0; 600]] {
        socket.send_to(garbage, addr).await.unwrap();
    }
    // Over TCP: a frame announcing more than it sends, then a close.
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut stream, &[0x10, 0x00, 1, 2, 3])
        .await
        .unwrap();
    drop(stream);
    let dns = resolver(addr, true);
    let a = dns.lookup("api.prod.muster.", RecordType::A).await.unwrap();
    assert_eq!(a.answers().len(), 2);
    listener.stop().await;
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "the TCP listener is closed after stop"
    );
}
