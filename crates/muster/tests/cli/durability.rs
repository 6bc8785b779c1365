//! Crash durability and lease restarts, against the real binary: what was acknowledged
//! survives SIGKILL, what was refused never appears, and a restart never mass-expires leases.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use muster_core::api::{Frame, RegisterRequest, SnapshotReply, WriteReply};
use muster_core::{AddressSpec, EndpointSpec, Incarnation, Revision};

use crate::support::{Server, read_lines};

/// One HTTP/1.1 request on its own connection; `None` if the server could not be reached or
/// the connection broke (a crash mid-request: unknown outcome, neither acked nor refused).
fn http(addr: &str, method: &str, path: &str, body: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).ok()?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply).ok()?;
    let status = reply.get(9..12)?.parse().ok()?;
    let (_, body) = reply.split_once("\r\n\r\n")?;
    Some((status, body.to_owned()))
}

fn register_body(ip: &str, incarnation: u64, ttl_ms: Option<u64>) -> String {
    let request = RegisterRequest {
        incarnation: Incarnation(incarnation),
        endpoint: EndpointSpec {
            addresses: vec![AddressSpec {
                ip: ip.into(),
                scope: None,
            }],
            ..EndpointSpec::default()
        },
        lease: ttl_ms.map(|ttl_ms| muster_core::api::LeaseRequest::Grant { ttl_ms }),
        expected_revision: None,
    };
    serde_json::to_string(&request).unwrap()
}

fn members(addr: &str, service: &str) -> BTreeMap<String, Revision> {
    let (status, body) = http(
        addr,
        "GET",
        &format!("/v1/registry/default/burst/{service}?limit=10000"),
        "",
    )
    .expect("reachable");
    if status == 404 {
        return BTreeMap::new();
    }
    let reply: SnapshotReply = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    reply
        .endpoints
        .into_iter()
        .map(|e| (e.instance.to_string(), e.revision))
        .collect()
}

#[derive(Default)]
struct Outcomes {
    acknowledged: Vec<(String, String, Revision)>,
    refused: Vec<(String, String)>,
}

/// A SIGKILL in the middle of a burst of concurrent registrations: after the restart every
/// acknowledged registration is present at its revision, no refused one is, and revisions
/// keep increasing.
#[test]
fn sigkill_during_a_burst_loses_no_acknowledged_registration() {
    let server = Server::start();
    let addr = server.http_addr().to_owned();
    let outcomes = Arc::new(Mutex::new(Outcomes::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(AtomicUsize::new(0));
    let writers: Vec<_> = (0..8)
        .map(|writer| {
            let (addr, outcomes, stop, acked) = (
                addr.clone(),
                Arc::clone(&outcomes),
                Arc::clone(&stop),
                Arc::clone(&acked),
            );
            std::thread::spawn(move || {
                // Bounded: at most 2,000 attempts per writer, and it stops at the first
                // unreachable reply (the crash).
                for n in 0..2_000u32 {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let service = format!("svc-{}", n % 4);
                    let instance = format!("w{writer}-{n}");
                    // Every fifth request is invalid: its refusal must leave no trace.
                    let ip = if n % 5 == 4 {
                        "10.0.0.999".to_owned()
                    } else {
                        format!("10.{writer}.{}.{}", n / 250, n % 250 + 1)
                    };
                    let path = format!("/v1/registry/default/burst/{service}/{instance}");
                    match http(&addr, "PUT", &path, &register_body(&ip, 1, None)) {
                        Some((200, body)) => {
                            let reply: WriteReply = serde_json::from_str(&body).unwrap();
                            outcomes
                                .lock()
                                .unwrap()
                                .acknowledged
                                .push((service, instance, reply.revision));
                            acked.fetch_add(1, Ordering::Relaxed);
                        }
                        Some((status, body)) => {
                            assert!((400..500).contains(&status), "{status}: {body}");
                            outcomes.lock().unwrap().refused.push((service, instance));
                        }
                        None => break,
                    }
                }
            })
        })
        .collect();
    // Kill once a few hundred registrations are acknowledged and the burst is still running.
    for _ in 0..600 {
        if acked.load(Ordering::Relaxed) >= 300 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let dir = server.kill9();
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        writer.join().unwrap();
    }
    let outcomes = std::mem::take(&mut *outcomes.lock().unwrap());
    assert!(
        outcomes.acknowledged.len() >= 300,
        "the burst was running when the server died"
    );
    assert!(!outcomes.refused.is_empty());

    let server = Server::start_in(dir);
    let addr = server.http_addr().to_owned();
    let present: BTreeMap<String, BTreeMap<String, Revision>> = (0..4)
        .map(|s| format!("svc-{s}"))
        .map(|s| (s.clone(), members(&addr, &s)))
        .collect();
    for (service, instance, revision) in &outcomes.acknowledged {
        assert_eq!(
            present[service].get(instance),
            Some(revision),
            "acknowledged {service}/{instance} was lost"
        );
    }
    for (service, instance) in &outcomes.refused {
        assert!(
            !present[service].contains_key(instance),
            "refused {service}/{instance} appeared"
        );
    }
    let highest = outcomes.acknowledged.iter().map(|(_, _, r)| *r).max().unwrap();
    let (status, body) = http(
        &addr,
        "PUT",
        "/v1/registry/default/burst/svc-0/after",
        &register_body("10.9.9.9", 1, None),
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    let after: WriteReply = serde_json::from_str(&body).unwrap();
    assert!(
        after.revision > highest,
        "revision {} after restart, {} before",
        after.revision,
        highest
    );
}

/// A restart extends every lease to now + TTL instead of expiring them at boot, even after
/// the server was down longer than the TTL; a lease whose holder then stays silent expires,
/// and a watcher sees the delete with reason `lease_expired`.
#[test]
fn a_restart_does_not_mass_expire_leases_but_silence_does() {
    let server = Server::start();
    let addr = server.http_addr().to_owned();
    let mut leases = BTreeMap::new();
    for instance in ["talker", "silent"] {
        let path = format!("/v1/registry/default/burst/leased/{instance}");
        let (status, body) = http(&addr, "PUT", &path, &register_body("10.1.1.1", 1, Some(2_000))).unwrap();
        assert_eq!(status, 200, "{body}");
        let reply: WriteReply = serde_json::from_str(&body).unwrap();
        leases.insert(instance, reply.lease.expect("a granted lease").id);
    }
    let dir = server.kill9();
    // Down for longer than the 2 s TTL: a keeper that persisted deadlines would now expire both.
    std::thread::sleep(Duration::from_millis(3_000));
    let server = Server::start_in(dir);
    let addr = server.http_addr().to_owned();
    let after_boot = members(&addr, "leased");
    assert!(
        after_boot.contains_key("talker") && after_boot.contains_key("silent"),
        "{after_boot:?}"
    );

    let mut watch = server.spawn(&["watch", "burst/leased", "--json", "--from-revision", "0"]);
    let frames = read_lines(&mut watch);
    let renew = format!("/v1/leases/default/{}/renew", leases["talker"]);
    let mut expired = None;
    // Bounded: renew the talker every 400 ms for at most 12 s while waiting for the silent
    // one's delete.
    'wait: for _ in 0..30 {
        let (status, body) = http(&addr, "PUT", &renew, "").unwrap();
        assert_eq!(status, 200, "{body}");
        while let Ok(line) = frames.recv_timeout(Duration::from_millis(400)) {
            if let Ok(Frame::Update(update)) = serde_json::from_str::<Frame>(&line) {
                for event in &update.events {
                    if let muster_core::Event::Delete { instance, reason, .. } = event {
                        expired = Some((instance.to_string(), *reason));
                        break 'wait;
                    }
                }
            }
        }
    }
    let _ = watch.kill();
    let _ = watch.wait();
    assert_eq!(
        expired,
        Some(("silent".to_owned(), muster_core::DeleteReason::LeaseExpired))
    );
    let now = members(&addr, "leased");
    assert!(now.contains_key("talker") && !now.contains_key("silent"), "{now:?}");
}
