//! Services of 1,000, 5,000 and 20,000 endpoints over real sockets (SPEC D2): over UDP, by
//! default, TC set with the same first records every time, so resolvers retry over TCP
//! (RFC 2181 section 9); with `large_rrsets = "rotate"` a rotating window with TC clear; over
//! TCP as much as fits 64 KiB, for A and for SRV with the targets' addresses in the
//! additional section.
//!
//! The zone is built once for the whole binary straight from snapshots (no registry, no
//! HTTP) and folded in before any listener serves it, so no query waits on the build.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use hickory_proto::op::Message;
use hickory_proto::rr::{RData, RecordType};
use hickory_resolver::TokioResolver;
use hickory_resolver::config::NameServerConfig;
use muster_core::Revision;
use muster_dns::{DnsListener, LargeRrsets, LiveZone};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

use crate::fixture::{key, snapshot};
use crate::support::{query, zone_with};
use crate::zone::{assert_additionals_are_the_targets, many};

/// The sizes asked for: each is service `big<n>` in namespace `prod`.
const SIZES: [usize; 3] = [1_000, 5_000, 20_000];

fn shared_zone(large_rrsets: LargeRrsets) -> Arc<LiveZone> {
    static TRUNCATE: OnceLock<Arc<LiveZone>> = OnceLock::new();
    static ROTATE: OnceLock<Arc<LiveZone>> = OnceLock::new();
    let once = match large_rrsets {
        LargeRrsets::Truncate => &TRUNCATE,
        LargeRrsets::Rotate => &ROTATE,
    };
    Arc::clone(once.get_or_init(|| {
        let live = Arc::new(LiveZone::new(zone_with(large_rrsets)));
        for (n, size) in SIZES.into_iter().enumerate() {
            let service = key("default", "prod", &format!("big{size}"));
            live.stage(
                &service,
                Some(snapshot(&service, n as u64 + 1, many(size))),
                Revision(3),
            );
        }
        live.read(|zone| assert!(zone.name_count() > 26_000));
        live
    }))
}

async fn serve(large_rrsets: LargeRrsets) -> DnsListener {
    let live = shared_zone(large_rrsets);
    DnsListener::bind("127.0.0.1:0".parse().unwrap(), live).await.unwrap()
}

/// A resolver asking only `server` over one transport, caching nothing.
fn resolver(server: SocketAddr, tcp: bool, edns: bool) -> TokioResolver {
    let name_server = if tcp {
        NameServerConfig::tcp(server.ip())
    } else {
        NameServerConfig::udp(server.ip())
    };
    crate::resolver::resolver_over(server, name_server, edns)
}

/// One query over UDP: the reply's size and the reply.
async fn ask_udp(server: SocketAddr, packet: &[u8]) -> (usize, Message) {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    socket.send_to(packet, server).await.unwrap();
    let mut buffer = vec![0; 65_535];
    let len = socket.recv(&mut buffer).await.unwrap();
    (len, Message::from_vec(&buffer[..len]).unwrap())
}

/// One query over TCP (RFC 7766 framing): the reply's size and the reply.
async fn ask_tcp(server: SocketAddr, packet: &[u8]) -> (usize, Message) {
    let mut stream = TcpStream::connect(server).await.unwrap();
    let mut framed = (packet.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(packet);
    stream.write_all(&framed).await.unwrap();
    let len = usize::from(stream.read_u16().await.unwrap());
    let mut buffer = vec![0; len];
    stream.read_exact(&mut buffer).await.unwrap();
    (len, Message::from_vec(&buffer).unwrap())
}

fn names(size: usize) -> (String, String) {
    (
        format!("big{size}.prod.muster."),
        format!("_http._tcp.big{size}.prod.muster."),
    )
}

#[tokio::test]
async fn rotating_resolvers_get_a_and_srv_of_large_services_over_udp_with_tc_clear_and_over_tcp() {
    let listener = serve(LargeRrsets::Rotate).await;
    let server = listener.local_addr();
    let (udp, udp_plain, tcp) = (
        resolver(server, false, true),
        resolver(server, false, false),
        resolver(server, true, true),
    );
    for size in SIZES {
        let (a, srv) = names(size);
        for (name, rtype) in [(&a, RecordType::A), (&srv, RecordType::SRV)] {
            let over_udp = udp.lookup(name.as_str(), rtype).await.unwrap();
            let plain = udp_plain.lookup(name.as_str(), rtype).await.unwrap();
            let over_tcp = tcp.lookup(name.as_str(), rtype).await.unwrap();
            for (how, lookup) in [("udp", &over_udp), ("udp without edns", &plain), ("tcp", &over_tcp)] {
                assert!(!lookup.answers().is_empty(), "{name} {rtype} over {how}");
                assert!(!lookup.message().metadata.truncation, "{name} {rtype} over {how}");
            }
            assert!(
                over_tcp.answers().len() > over_udp.answers().len() && over_udp.answers().len() > plain.answers().len(),
                "{name} {rtype}: tcp {}, udp {}, udp without edns {}",
                over_tcp.answers().len(),
                over_udp.answers().len(),
                plain.answers().len()
            );
            if rtype == RecordType::SRV {
                assert_additionals_are_the_targets(over_tcp.message());
                // Answers come first: only when every SRV fits is there room for addresses.
                if size == 1_000 {
                    assert_eq!(over_tcp.answers().len(), 1_000);
                    assert!(
                        over_tcp.additionals().len() > 100,
                        "{name}: few target addresses over tcp"
                    );
                }
                assert_additionals_are_the_targets(over_udp.message());
            }
        }
    }
    listener.stop().await;
}

#[tokio::test]
async fn rotating_tcp_answers_are_larger_than_udp_ones_and_within_64_kib() {
    let listener = serve(LargeRrsets::Rotate).await;
    let server = listener.local_addr();
    for size in SIZES {
        let (a, srv) = names(size);
        for (name, rtype) in [(&a, RecordType::A), (&srv, RecordType::SRV)] {
            let packet = query(name, rtype, Some(4096));
            let (udp_len, udp) = ask_udp(server, &packet).await;
            let (tcp_len, tcp) = ask_tcp(server, &packet).await;
            assert!(udp_len <= 1232, "{name} {rtype}: {udp_len} bytes over udp");
            assert!(!udp.metadata.truncation && !udp.answers.is_empty(), "{name} {rtype}");
            assert!(
                tcp_len <= 65_535 && tcp_len > udp_len,
                "{name} {rtype}: {tcp_len} vs {udp_len}"
            );
            assert!(!tcp.metadata.truncation && tcp.answers.len() > udp.answers.len());
            if rtype == RecordType::A && size == 1_000 {
                assert_eq!(tcp.answers.len(), 1_000, "1,000 addresses fit 64 KiB whole");
            }
            if rtype == RecordType::A && size > 5_000 {
                // (65,535 - the header, question and OPT) / 16 bytes per address.
                assert!(tcp.answers.len() > 4_000, "{}", tcp.answers.len());
            }
        }
    }
    listener.stop().await;
}

#[tokio::test]
async fn rotating_successive_udp_queries_get_different_windows() {
    let listener = serve(LargeRrsets::Rotate).await;
    let server = listener.local_addr();
    for size in SIZES {
        let (a, srv) = names(size);
        for (name, rtype) in [(&a, RecordType::A), (&srv, RecordType::SRV)] {
            let packet = query(name, rtype, Some(1232));
            let mut windows = Vec::new();
            for _ in 0..4 {
                let (_, reply) = ask_udp(server, &packet).await;
                let mut records: Vec<String> = reply.answers.iter().map(|r| crate::support::render(&r.data)).collect();
                records.sort();
                windows.push(records);
            }
            windows.dedup();
            assert!(windows.len() > 1, "{name} {rtype}: four queries, one window");
        }
    }
    // Through a resolver too (whatever socket each query lands on).
    let udp = resolver(server, false, true);
    let mut seen = Vec::new();
    for _ in 0..4 {
        let lookup = udp.lookup("big5000.prod.muster.", RecordType::A).await.unwrap();
        let first = lookup.answers().first().map(|r| match &r.data {
            RData::A(a) => a.0,
            other => panic!("{other:?}"),
        });
        seen.push(first);
    }
    seen.sort();
    seen.dedup();
    assert!(seen.len() > 1, "{seen:?}");
    listener.stop().await;
}

/// Trace (HAProxy 2.6 against a 30-instance service): every UDP answer carried a different
/// 28 of the 30 SRV records with TC clear, and HAProxy's `server-template` marked servers
/// DOWN and UP again 20 times in 10 s. By default a cut RRset now sets TC, carries the same
/// first records every time, and TCP has them all.
#[tokio::test]
async fn by_default_a_udp_answer_that_cuts_an_rrset_sets_tc_and_tcp_has_it_whole() {
    let listener = serve(LargeRrsets::Truncate).await;
    let server = listener.local_addr();
    for size in SIZES {
        let (a, srv) = names(size);
        for (name, rtype) in [(&a, RecordType::A), (&srv, RecordType::SRV)] {
            let packet = query(name, rtype, Some(1232));
            let mut sets = Vec::new();
            for _ in 0..4 {
                let (udp_len, udp) = ask_udp(server, &packet).await;
                assert!(udp_len <= 1232, "{name} {rtype}: {udp_len} bytes over udp");
                assert!(udp.metadata.truncation, "{name} {rtype}: an RRset cut without TC");
                assert!(
                    !udp.answers.is_empty(),
                    "{name} {rtype}: the records that fit travel too"
                );
                sets.push(
                    udp.answers
                        .iter()
                        .map(|r| crate::support::render(&r.data))
                        .collect::<Vec<_>>(),
                );
            }
            sets.dedup();
            assert_eq!(
                sets.len(),
                1,
                "{name} {rtype}: a truncated answer changed between queries"
            );
            let (_, tcp) = ask_tcp(server, &packet).await;
            assert!(!tcp.metadata.truncation && tcp.answers.len() > sets[0].len());
            if size == 1_000 {
                assert_eq!(tcp.answers.len(), 1_000, "{name} {rtype}: the whole RRset over tcp");
            }
        }
    }
    listener.stop().await;
}
