//! The health checker against real targets on loopback (SPEC H1–H5, L6): an HTTP server that
//! turns 503, a TCP port that closes, a `tonic-health` gRPC server that flips to NOT_SERVING,
//! a wedged server, TTL checks, self-preservation and drains with a grace.
//!
//! Checks here probe every 200 ms with a 100 ms timeout and rise = fall = 2, so each
//! transition takes a fraction of a second; every wait is bounded by [`STEP`]. Detection
//! latency against its bound is measured by `muster bench --workloads checks`, not asserted.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

use hyper::{Method, StatusCode};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::support::{STEP, TestServer, endpoint, instance_path, poll};

/// An HTTP health endpoint whose answer the test controls.
pub(crate) struct HttpTarget {
    addr: SocketAddr,
    mode: Arc<AtomicU8>,
    requests: Arc<AtomicU64>,
}

pub(crate) const OK: u8 = 0;
pub(crate) const UNAVAILABLE: u8 = 1;
/// Accepts and reads the request, never answers.
const WEDGED: u8 = 2;
/// Answers `500 Internal Server Error`.
const BROKEN: u8 = 3;

impl HttpTarget {
    pub(crate) async fn start() -> HttpTarget {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mode = Arc::new(AtomicU8::new(OK));
        let requests = Arc::new(AtomicU64::new(0));
        let (m, r) = (Arc::clone(&mode), Arc::clone(&requests));
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let (mode, requests) = (Arc::clone(&m), Arc::clone(&r));
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buf = [0_u8; 1024];
                    while !request.ends_with(b"\r\n\r\n") && request.len() < 8192 {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                    }
                    requests.fetch_add(1, Ordering::Relaxed);
                    let reply: &[u8] = match mode.load(Ordering::Relaxed) {
                        OK => b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                        UNAVAILABLE => {
                            b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 4\r\nconnection: close\r\n\r\ndown"
                        }
                        BROKEN => {
                            b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 6\r\nconnection: close\r\n\r\nbroken"
                        }
                        _ => {
                            tokio::time::sleep(STEP).await;
                            return;
                        }
                    };
                    let _ = stream.write_all(reply).await;
                });
            }
        });
        HttpTarget { addr, mode, requests }
    }

    pub(crate) fn set(&self, mode: u8) {
        self.mode.store(mode, Ordering::Relaxed);
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}/healthz", self.addr)
    }

    fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }
}

/// A fast check on `url`: 200 ms interval, 100 ms timeout, rise = fall = 2.
pub(crate) fn fast_check(url: &str) -> Value {
    json!({"url": url, "interval_ms": 200, "timeout_ms": 100, "rise": 2, "fall": 2})
}

/// An endpoint on loopback without named ports, so its checks may probe any port of
/// 127.0.0.1 (SPEC S6: a check probes its own endpoint; loopback is allowed without auth).
pub(crate) fn loopback_endpoint() -> Value {
    json!({"addresses": [{"ip": "127.0.0.1"}]})
}

async fn register_checked(server: &TestServer, service: &str, instance: &str, checks: Value) {
    let mut spec = loopback_endpoint();
    spec["checks"] = checks;
    server
        .call(
            Method::PUT,
            &instance_path(service, instance),
            Some(json!({"incarnation": 1, "endpoint": spec})),
        )
        .await
        .expect(StatusCode::OK);
}

/// The service's endpoints by instance, and whether protection is active.
async fn read(server: &TestServer, service: &str) -> (Vec<Value>, bool) {
    let reply = server.get(&format!("/v1/registry/acme/prod/{service}")).await;
    if reply.status == StatusCode::NOT_FOUND {
        return (Vec::new(), false);
    }
    let reply = reply.expect(StatusCode::OK);
    let endpoints = reply.body["endpoints"].as_array().cloned().unwrap_or_default();
    (endpoints, reply.body["protection_active"].as_bool().unwrap())
}

/// Polls until `done` holds for the service's endpoints (bounded by [`STEP`]).
async fn until(server: &TestServer, service: &str, what: &str, done: impl Fn(&[Value], bool) -> bool) -> Vec<Value> {
    let done = &done;
    match poll(Duration::from_millis(25), || async move {
        let (endpoints, protected) = read(server, service).await;
        done(&endpoints, protected).then_some(endpoints)
    })
    .await
    {
        Some(endpoints) => endpoints,
        None => panic!("{what}: still {:?}", read(server, service).await.0),
    }
}

/// Waits until `instance` is in `state`; returns its record.
pub(crate) async fn until_state(server: &TestServer, service: &str, instance: &str, state: &str) -> Value {
    let endpoints = until(server, service, &format!("{instance} {state}"), |endpoints, _| {
        endpoints
            .iter()
            .any(|e| e["instance"] == instance && e["serving"] == state)
    })
    .await;
    endpoints.into_iter().find(|e| e["instance"] == instance).unwrap()
}

fn count(endpoints: &[Value], state: &str) -> usize {
    endpoints.iter().filter(|e| e["serving"] == state).count()
}

#[tokio::test]
async fn an_http_check_follows_a_server_that_turns_503_and_back() {
    let server = TestServer::start().await;
    let target = HttpTarget::start().await;
    register_checked(&server, "web", "web-0", json!([fast_check(&target.url())])).await;
    let (endpoints, _) = read(&server, "web").await;
    assert_eq!(
        endpoints[0]["serving"], "starting",
        "a checked endpoint waits for its first pass"
    );
    until_state(&server, "web", "web-0", "ready").await;

    target.set(UNAVAILABLE);
    let down = until_state(&server, "web", "web-0", "not_serving").await;
    let observation = &down["observation"];
    assert_eq!(observation["actor"], "checker");
    assert_eq!(observation["principal"], "muster-checker");
    assert_eq!(
        observation["reason"],
        format!("{}: 2 consecutive failures", target.url()),
        "observer, time and reason (H4)"
    );
    assert!(observation["at_ms"].as_u64().unwrap() > 0);

    target.set(OK);
    let up = until_state(&server, "web", "web-0", "ready").await;
    assert_eq!(
        up["observation"]["reason"],
        format!("{}: 2 consecutive passes", target.url())
    );
}

/// Trace: registered with a check against a backend answering 500, refusing, or never
/// answering from its first probe, an endpoint stayed `starting` until its lease ran out.
/// Each reaches `not_serving` at its `fall`-th failure (fall × interval plus at most one
/// interval for the first probe's phase; the poll is bounded, the time not asserted), with
/// the checker as observer and the reason (H2, H4).
#[tokio::test]
async fn a_check_failing_from_its_first_probe_makes_the_endpoint_not_serving_with_its_reason() {
    let server = TestServer::start().await;
    let broken = HttpTarget::start().await;
    broken.set(BROKEN);
    let wedged = HttpTarget::start().await;
    wedged.set(WEDGED);
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let refused = format!("http://{}/healthz", closed.local_addr().unwrap());
    drop(closed);
    let cases = [
        ("b-500", broken.url(), ""),
        ("b-refused", refused, ", the connection refused each time"),
        ("b-timeout", wedged.url(), ""),
    ];
    for (instance, url, _) in &cases {
        register_checked(&server, "boot", instance, json!([fast_check(url)])).await;
    }
    for (instance, url, cause) in &cases {
        let down = until_state(&server, "boot", instance, "not_serving").await;
        let observation = &down["observation"];
        assert_eq!(
            (&observation["actor"], &observation["principal"]),
            (&json!("checker"), &json!("muster-checker")),
            "{instance}"
        );
        assert_eq!(
            observation["reason"],
            format!("{url}: 2 consecutive failures{cause}"),
            "{instance}"
        );
        assert!(observation["at_ms"].as_u64().unwrap() > 0, "{instance}");
    }
    assert!(broken.requests() >= 2, "the 500 was probed and answered");
}

#[tokio::test]
async fn a_wedged_instance_that_accepts_but_never_answers_fails_by_timeout() {
    let server = TestServer::start().await;
    let target = HttpTarget::start().await;
    register_checked(&server, "wedge", "w-0", json!([fast_check(&target.url())])).await;
    until_state(&server, "wedge", "w-0", "ready").await;
    target.set(WEDGED);
    let down = until_state(&server, "wedge", "w-0", "not_serving").await;
    assert!(
        down["observation"]["reason"]
            .as_str()
            .unwrap()
            .ends_with("2 consecutive failures")
    );
}

#[tokio::test]
async fn a_tcp_check_fails_when_the_port_closes_and_recovers_when_it_opens() {
    let server = TestServer::start().await;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accept = tokio::spawn(async move { while listener.accept().await.is_ok() {} });
    register_checked(&server, "db", "db-0", json!([fast_check(&format!("tcp://{addr}"))])).await;
    until_state(&server, "db", "db-0", "ready").await;

    accept.abort();
    let _ = accept.await;
    until_state(&server, "db", "db-0", "not_serving").await;

    let listener = TcpListener::bind(addr).await.unwrap();
    tokio::spawn(async move { while listener.accept().await.is_ok() {} });
    until_state(&server, "db", "db-0", "ready").await;
}

/// The newcomer's trace (SPEC H5): 4 checked backends, one broken, then a second killed;
/// the killed one stayed `ready` (and in DNS) for more than 20 s under the brake. A service
/// that small has no brake (`brake_min_endpoints`): both leave, nothing is protected.
#[tokio::test]
async fn in_a_small_service_a_second_killed_backend_leaves_routing() {
    let server = TestServer::start().await;
    let mut accepts = Vec::new();
    for n in 0..4 {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        accepts.push(tokio::spawn(async move { while listener.accept().await.is_ok() {} }));
        let instance = format!("s-{n}");
        register_checked(
            &server,
            "small",
            &instance,
            json!([fast_check(&format!("tcp://{addr}"))]),
        )
        .await;
        until_state(&server, "small", &instance, "ready").await;
    }
    for (n, accept) in accepts.iter().enumerate().take(2) {
        accept.abort();
        until_state(&server, "small", &format!("s-{n}"), "not_serving").await;
    }
    let (_, protected) = read(&server, "small").await;
    assert!(!protected, "nothing is held");
}

#[tokio::test]
async fn a_grpc_check_follows_a_tonic_health_server_flipping_to_not_serving() {
    let server = TestServer::start().await;
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter
        .set_service_status("pay.v1.Pay", tonic_health::ServingStatus::Serving)
        .await;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(health)
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    let url = format!("grpc://{addr}/pay.v1.Pay");
    register_checked(&server, "pay", "pay-0", json!([fast_check(&url)])).await;
    until_state(&server, "pay", "pay-0", "ready").await;

    reporter
        .set_service_status("pay.v1.Pay", tonic_health::ServingStatus::NotServing)
        .await;
    let down = until_state(&server, "pay", "pay-0", "not_serving").await;
    assert_eq!(down["observation"]["reason"], format!("{url}: 2 consecutive failures"));

    reporter
        .set_service_status("pay.v1.Pay", tonic_health::ServingStatus::Serving)
        .await;
    until_state(&server, "pay", "pay-0", "ready").await;
}

#[tokio::test]
async fn ttl_checks_follow_reports_and_fail_without_one() {
    let server = TestServer::start().await;
    register_checked(&server, "batch", "b-0", json!([{"ttl_ms": 1000}])).await;
    let check = format!("{}/check", instance_path("batch", "b-0"));
    let passed = server
        .call(Method::PUT, &check, Some(json!({"incarnation": 1, "status": "pass"})))
        .await
        .expect(StatusCode::OK);
    assert_eq!(passed.body["serving"], "ready", "answered after the change committed");
    assert!(passed.body["revision"].as_u64().is_some());
    let warned = server
        .call(Method::PUT, &check, Some(json!({"incarnation": 1, "status": "warn"})))
        .await
        .expect(StatusCode::OK);
    assert_eq!(warned.body["serving"], "degraded");

    // Silence: a TTL later the check fails.
    let down = until_state(&server, "batch", "b-0", "not_serving").await;
    assert_eq!(
        down["observation"]["reason"],
        "ttl 1000ms: no report within 1000 ms (1 consecutive failures)"
    );
}

#[tokio::test]
async fn bad_ttl_reports_are_refused_with_codes_and_change_nothing() {
    let server = TestServer::start().await;
    register_checked(&server, "batch", "b-0", json!([{"ttl_ms": 60000}])).await;
    server.register("plain", "p-0", "10.0.0.2").await.expect(StatusCode::OK);
    let before = server.revision().await;
    let cases = [
        (
            "batch",
            "b-0",
            json!({"incarnation": 2, "status": "pass"}),
            StatusCode::CONFLICT,
            "stale_incarnation",
        ),
        (
            "plain",
            "p-0",
            json!({"incarnation": 1, "status": "pass"}),
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            "batch",
            "nobody",
            json!({"incarnation": 1, "status": "pass"}),
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            "batch",
            "b-0",
            json!({"incarnation": 1, "status": "great"}),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
    ];
    for (service, instance, body, status, code) in cases {
        let path = format!("{}/check", instance_path(service, instance));
        let reply = server.call(Method::PUT, &path, Some(body)).await;
        assert_eq!((reply.status, reply.code()), (status, code), "{}", reply.body);
    }
    assert_eq!(server.revision().await, before, "refused reports change nothing");
}

#[tokio::test]
async fn an_endpoint_whose_checks_are_all_probed_has_no_ttl_check_to_report_to() {
    let server = TestServer::start().await;
    let target = HttpTarget::start().await;
    register_checked(&server, "web", "web-0", json!([fast_check(&target.url())])).await;
    let reply = server
        .call(
            Method::PUT,
            &format!("{}/check", instance_path("web", "web-0")),
            Some(json!({"incarnation": 1, "status": "pass"})),
        )
        .await;
    assert_eq!(
        (reply.status, reply.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "no_ttl_check")
    );
}

#[tokio::test]
async fn bad_checks_are_refused_with_codes_naming_the_field_and_register_nothing() {
    let server = TestServer::start().await;
    let cases = [
        (
            json!({"url": "tcp://10.0.0.1:80", "interval_ms": 0}),
            "checks[0].interval_ms",
        ),
        (
            json!({"url": "tcp://10.0.0.1:80", "interval_ms": 1000, "timeout_ms": 5000}),
            "checks[0].timeout_ms",
        ),
        (json!({"url": "ftp://10.0.0.1:21"}), "checks[0].url"),
        (json!({"url": "https://10.0.0.1:443/"}), "checks[0].url"),
        (json!({"url": "10.0.0.1:80"}), "checks[0].url"),
        (json!({"url": "http://10.0.0.1:80/", "rise": 0}), "checks[0].rise"),
        (json!({"ttl_ms": 50}), "checks[0].ttl_ms"),
    ];
    for (check, field) in cases {
        let mut spec = endpoint("10.0.0.1");
        spec["checks"] = json!([check]);
        let reply = server
            .call(
                Method::PUT,
                &instance_path("api", "a"),
                Some(json!({"incarnation": 1, "endpoint": spec})),
            )
            .await;
        assert_eq!(
            (reply.status, reply.code()),
            (StatusCode::UNPROCESSABLE_ENTITY, "invalid_field"),
            "{check}"
        );
        assert!(
            reply.message().starts_with(field),
            "{} should name {field}",
            reply.message()
        );
    }
    let mut negative = endpoint("10.0.0.1");
    negative["checks"] = json!([{"url": "tcp://10.0.0.1:80", "interval_ms": -5}]);
    let reply = server
        .call(
            Method::PUT,
            &instance_path("api", "a"),
            Some(json!({"incarnation": 1, "endpoint": negative})),
        )
        .await;
    assert_eq!((reply.status, reply.code()), (StatusCode::BAD_REQUEST, "bad_request"));
    assert_eq!(server.revision().await, 0, "nothing was registered");
}

/// reference/control-plane-state.txt, "Health checks must not become the outage" (the
/// "Health checker causes fleet eviction" trace): every instance's deep check calls one
/// shared dependency, which starts failing. Only 30% of the fleet leaves; the rest keep
/// serving, and the service and the server say protection is active.
#[tokio::test]
async fn trace_health_checker_causes_fleet_eviction() {
    let server = TestServer::start().await;
    let dependency = HttpTarget::start().await;
    for n in 0..10 {
        register_checked(
            &server,
            "fleet",
            &format!("f-{n}"),
            json!([fast_check(&dependency.url())]),
        )
        .await;
    }
    until(&server, "fleet", "all ready", |e, _| count(e, "ready") == 10).await;

    dependency.set(UNAVAILABLE);
    until(&server, "fleet", "3 removed, protection on", |e, protected| {
        count(e, "not_serving") == 3 && protected
    })
    .await;
    // Let every endpoint be probed several more times: nothing else may leave.
    let seen = dependency.requests();
    let probed = &dependency;
    poll(Duration::from_millis(25), || async move {
        (probed.requests() >= seen + 60).then_some(())
    })
    .await
    .expect("the checker keeps probing");
    let (endpoints, protected) = read(&server, "fleet").await;
    assert_eq!((count(&endpoints, "ready"), count(&endpoints, "not_serving")), (7, 3));
    assert!(protected);
    let status = server.get("/v1/status").await.expect(StatusCode::OK);
    assert_eq!(status.body["protected_services"], json!(["acme/prod/fleet"]));
    let services = server.get("/v1/registry/acme/prod").await.expect(StatusCode::OK);
    assert_eq!(services.body["services"][0]["protection_active"], true);
    let (status, metrics) = server.get_text("/v1/metrics").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        metrics.contains("muster_protection_active{service=\"acme/prod/fleet\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("muster_checker_endpoints 10"), "{metrics}");
    assert!(!metrics.contains("muster_checker_held_total 0"), "{metrics}");

    dependency.set(OK);
    until(&server, "fleet", "all ready again", |e, _| count(e, "ready") == 10).await;
}

/// A mass silence (SPEC H5): ten instances stop renewing at once. Lease expiry takes only the
/// fraction the brake allows; the rest stay registered while protection is active.
#[tokio::test]
async fn self_preservation_holds_a_mass_lease_expiry() {
    let server = TestServer::start().await;
    for n in 0..10 {
        server
            .call(
                Method::PUT,
                &instance_path("quiet", &format!("q-{n}")),
                Some(json!({"incarnation": 1, "endpoint": endpoint("10.0.0.1"), "lease": {"ttl_ms": 1000}})),
            )
            .await
            .expect(StatusCode::OK);
    }
    let left = until(&server, "quiet", "3 expired, protection on", |e, protected| {
        e.len() == 7 && protected
    })
    .await;
    assert_eq!(left.len(), 7);
    // Proof by order, not by a wait: a canary lease of another service, granted now, expires
    // after every held lease's deadline. Once the keeper has expired it, the keeper has
    // looked at the held leases past their deadlines too, and they are still held.
    server
        .call(
            Method::PUT,
            &instance_path("canary", "c-0"),
            Some(json!({"incarnation": 1, "endpoint": endpoint("10.0.0.2"), "lease": {"ttl_ms": 1000}})),
        )
        .await
        .expect(StatusCode::OK);
    until(&server, "canary", "the canary's lease expired", |e, _| e.is_empty()).await;
    let (endpoints, protected) = read(&server, "quiet").await;
    assert_eq!(endpoints.len(), 7, "held while protection is active");
    assert!(protected);
}

#[tokio::test]
async fn a_drain_with_a_grace_deregisters_when_the_grace_ends() {
    let server = TestServer::start().await;
    server.register("api", "a", "10.0.0.1").await.expect(StatusCode::OK);
    let drain = format!("{}/drain", instance_path("api", "a"));
    let too_long = server
        .call(
            Method::POST,
            &drain,
            Some(json!({"incarnation": 1, "grace_ms": 3_600_001})),
        )
        .await;
    assert_eq!(
        (too_long.status, too_long.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_field")
    );
    assert_eq!(
        read(&server, "api").await.0[0]["serving"],
        "ready",
        "a refused drain changes nothing"
    );

    server
        .call(Method::POST, &drain, Some(json!({"incarnation": 1, "grace_ms": 300})))
        .await
        .expect(StatusCode::OK);
    assert_eq!(read(&server, "api").await.0[0]["serving"], "draining");
    until(&server, "api", "deregistered after the grace", |e, _| e.is_empty()).await;
}

#[tokio::test]
async fn zero_requests_in_flight_ends_a_drains_grace_at_once() {
    let server = TestServer::start().await;
    server.register("api", "a", "10.0.0.1").await.expect(StatusCode::OK);
    server
        .call(
            Method::POST,
            &format!("{}/drain", instance_path("api", "a")),
            Some(json!({"incarnation": 1, "grace_ms": 3_600_000})),
        )
        .await
        .expect(StatusCode::OK);
    let in_flight = format!("{}/in-flight", instance_path("api", "a"));
    let busy = server
        .call(Method::PUT, &in_flight, Some(json!({"incarnation": 1, "in_flight": 4})))
        .await
        .expect(StatusCode::OK);
    assert_eq!(busy.body["unchanged"], "no_drain_ended");
    let stale = server
        .call(Method::PUT, &in_flight, Some(json!({"incarnation": 2, "in_flight": 0})))
        .await
        .expect(StatusCode::OK);
    assert_eq!(
        stale.body["unchanged"], "no_drain_ended",
        "another incarnation's report ends nothing"
    );
    assert_eq!(read(&server, "api").await.0.len(), 1);
    let done = server
        .call(Method::PUT, &in_flight, Some(json!({"incarnation": 1, "in_flight": 0})))
        .await
        .expect(StatusCode::OK);
    assert!(done.body.get("unchanged").is_none(), "{}", done.body);
    assert!(read(&server, "api").await.0.is_empty(), "deregistered at once");
}

#[tokio::test]
async fn checks_resume_after_a_restart_and_stop_when_the_endpoint_leaves() {
    let mut server = TestServer::start().await;
    let target = HttpTarget::start().await;
    register_checked(&server, "web", "web-0", json!([fast_check(&target.url())])).await;
    server.register("web", "web-1", "10.0.0.2").await.expect(StatusCode::OK);
    until_state(&server, "web", "web-0", "ready").await;

    server.restart().await;
    target.set(UNAVAILABLE);
    until_state(&server, "web", "web-0", "not_serving").await;
    // A witness checked by the same checker at the same interval: its probes are the clock
    // the test reads, so what follows is a proof by order, not a wait.
    let witness = HttpTarget::start().await;
    register_checked(&server, "witness", "w-0", json!([fast_check(&witness.url())])).await;
    until_state(&server, "witness", "w-0", "ready").await;

    server
        .call(
            Method::DELETE,
            &format!("{}?incarnation=1", instance_path("web", "web-0")),
            None,
        )
        .await
        .expect(StatusCode::OK);
    // A probe already running may still land: it has, once the witness was probed twice
    // more (a probe's timeout is half an interval). None starts after it: five more witness
    // probes, five intervals in which web-0's check would have been due.
    let witness_probes = |more: u64| {
        let (witness, from) = (&witness, witness.requests());
        async move {
            let reached = poll(Duration::from_millis(25), || async move {
                (witness.requests() >= from + more).then_some(())
            })
            .await;
            assert!(reached.is_some(), "the checker stopped probing the witness");
        }
    };
    witness_probes(2).await;
    let after = target.requests();
    witness_probes(5).await;
    assert_eq!(
        target.requests(),
        after,
        "the checker stopped probing a deregistered endpoint"
    );
}

#[tokio::test]
async fn a_check_added_later_by_re_registering_the_same_incarnation_takes_effect() {
    let server = TestServer::start().await;
    let target = HttpTarget::start().await;
    target.set(UNAVAILABLE);
    server.register("web", "web-0", "10.0.0.1").await.expect(StatusCode::OK);
    register_checked(&server, "web", "web-0", json!([fast_check(&target.url())])).await;
    let (endpoints, _) = read(&server, "web").await;
    assert_eq!(
        endpoints[0]["checks"][0]["url"],
        target.url(),
        "the record holds the check"
    );
    let down = until_state(&server, "web", "web-0", "not_serving").await;
    assert_eq!(down["incarnation"], 1);
}

#[tokio::test]
async fn an_owner_who_lifts_a_drain_keeps_the_instance_past_the_grace() {
    let server = TestServer::start().await;
    server.register("api", "a", "10.0.0.1").await.expect(StatusCode::OK);
    server
        .call(
            Method::POST,
            &format!("{}/drain", instance_path("api", "a")),
            Some(json!({"incarnation": 1, "grace_ms": 300})),
        )
        .await
        .expect(StatusCode::OK);
    server
        .send(
            Method::PUT,
            &format!("{}/serving", instance_path("api", "a")),
            Some(serde_json::to_vec(&json!({"incarnation": 1, "state": "ready"})).unwrap()),
            &[("x-muster-actor", "owner")],
        )
        .await
        .expect(StatusCode::OK);
    // Proof by order, not by a wait: a drain with the same grace, taken after the lift, ends
    // after a's deadline would have. Once the keeper has ended it, it has passed a's.
    server.register("witness", "w", "10.0.0.2").await.expect(StatusCode::OK);
    server
        .call(
            Method::POST,
            &format!("{}/drain", instance_path("witness", "w")),
            Some(json!({"incarnation": 1, "grace_ms": 300})),
        )
        .await
        .expect(StatusCode::OK);
    until(&server, "witness", "the later drain ended", |e, _| e.is_empty()).await;
    let (endpoints, _) = read(&server, "api").await;
    assert_eq!(endpoints.len(), 1, "a lifted drain does not deregister");
    assert_eq!(endpoints[0]["serving"], "ready");
}

/// SPEC L6: the owner lifts a drain while the instance's last in-flight report is on its
/// way; the report used to deregister it anyway (no compare-and-swap, and the lifted drain's
/// grace was still pending in memory).
#[tokio::test]
async fn a_late_in_flight_report_after_the_owner_lifted_the_drain_keeps_the_instance() {
    let server = TestServer::start().await;
    server.register("api", "a", "10.0.0.1").await.expect(StatusCode::OK);
    server
        .call(
            Method::POST,
            &format!("{}/drain", instance_path("api", "a")),
            Some(json!({"incarnation": 1, "grace_ms": 3_600_000})),
        )
        .await
        .expect(StatusCode::OK);
    server
        .send(
            Method::PUT,
            &format!("{}/serving", instance_path("api", "a")),
            Some(serde_json::to_vec(&json!({"incarnation": 1, "state": "ready"})).unwrap()),
            &[("x-muster-actor", "owner")],
        )
        .await
        .expect(StatusCode::OK);
    let late = server
        .call(
            Method::PUT,
            &format!("{}/in-flight", instance_path("api", "a")),
            Some(json!({"incarnation": 1, "in_flight": 0})),
        )
        .await
        .expect(StatusCode::OK);
    assert_eq!(late.body["unchanged"], "no_drain_ended", "{}", late.body);
    let (endpoints, _) = read(&server, "api").await;
    assert_eq!(endpoints.len(), 1, "a lifted drain is not ended by a late report");
    assert_eq!(endpoints[0]["serving"], "ready");
}

/// An agent holds one lease for a whole service (and one endpoint of another) and goes
/// silent: the lease's endpoints leave together or not at all, so self-preservation holds the
/// lease and counts nothing for it — the other service's own expiries go on.
#[tokio::test]
async fn a_lease_shared_by_a_whole_service_is_held_as_one() {
    let server = TestServer::start().await;
    let grant = server
        .call(Method::POST, "/v1/leases/acme", Some(json!({"ttl_ms": 1000})))
        .await
        .expect(StatusCode::OK);
    let agent = json!({"id": grant.body["lease"]["id"].as_u64().unwrap()});
    let put = |service: &str, instance: &str, lease: Option<Value>| {
        let mut body = json!({"incarnation": 1, "endpoint": endpoint("10.0.0.1")});
        if let Some(lease) = lease {
            body["lease"] = lease;
        }
        let path = instance_path(service, instance);
        let server = &server;
        async move { server.call(Method::PUT, &path, Some(body)).await }
    };
    for n in 0..10 {
        put("zzz", &format!("z-{n}"), Some(agent.clone()))
            .await
            .expect(StatusCode::OK);
    }
    // "aaa" (4 endpoints: one removal per window): one on the agent's lease, one on its own.
    put("aaa", "x", Some(agent.clone())).await.expect(StatusCode::OK);
    put("aaa", "solo", Some(json!({"ttl_ms": 1000})))
        .await
        .expect(StatusCode::OK);
    put("aaa", "p-0", None).await.expect(StatusCode::OK);
    put("aaa", "p-1", None).await.expect(StatusCode::OK);

    until(&server, "zzz", "protection on", |_, protected| protected).await;
    until(&server, "aaa", "aaa's own lease expires", |e, _| {
        e.len() == 3 && e.iter().all(|e| e["instance"] != "solo")
    })
    .await;
    let (endpoints, protected) = read(&server, "zzz").await;
    assert_eq!(endpoints.len(), 10, "held as one");
    assert!(protected);
}
