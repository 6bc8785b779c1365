//! Hostile browsers and clients (SPEC S6, W4): what a web page, a slow or lying client, an
//! unauthenticated peer and a greedy watcher can no longer do. Every refusal has its code and
//! changes nothing.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use muster_testkit::fixed_tcp_port as free_port;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{STEP, TestServer, endpoint, instance_path, poll, slow_watch};

const SECRET: &str = "a-cluster-secret-of-some-length";

/// One request with exactly these headers (no defaults added): status and JSON body.
async fn raw(
    server: &TestServer,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (StatusCode, Value) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut request = Request::builder().method(method).uri(server.url(path));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(Full::new(Bytes::from(body.to_owned()))).unwrap();
    let response = tokio::time::timeout(STEP, client.request(request))
        .await
        .expect("a reply in time")
        .expect("a reply");
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

fn code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("<no code>")
}

fn registration() -> String {
    json!({"incarnation": 1, "endpoint": endpoint("10.0.0.1")}).to_string()
}

/// Writes `head` on a fresh connection to `addr` and reads whatever comes back within
/// [`STEP`]: the reply's text, or `None` if nothing came.
async fn exchange_raw(addr: std::net::SocketAddr, head: &str) -> Option<String> {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut reply = Vec::new();
    let mut buf = [0_u8; 4096];
    let read = tokio::time::timeout(STEP, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    reply.extend_from_slice(&buf[..n]);
                    if String::from_utf8_lossy(&reply).contains("\"message\"") {
                        break;
                    }
                }
            }
        }
    })
    .await;
    (read.is_ok() && !reply.is_empty()).then(|| String::from_utf8_lossy(&reply).into_owned())
}

#[tokio::test]
async fn a_body_sent_as_anything_but_json_is_refused_415_and_changes_nothing() {
    // Trace: a page POSTs a `text/plain` form (a "simple" request: no preflight) at the
    // registry on loopback; it used to be parsed as JSON and committed.
    let server = TestServer::start().await;
    let path = instance_path("api", "a-0");
    for content_type in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
        Some("application/json; charset=latin1"),
        None,
    ] {
        let headers: Vec<(&str, &str)> = content_type.iter().map(|t| ("content-type", *t)).collect();
        let (status, body) = raw(&server, Method::PUT, &path, &headers, &registration()).await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type"),
            "{content_type:?}: {body}"
        );
    }
    // A body on a route that takes none is refused the same way.
    let (status, body) = raw(
        &server,
        Method::GET,
        "/v1/status",
        &[("content-type", "text/plain")],
        "x",
    )
    .await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")
    );
    assert_eq!(server.revision().await, 0, "nothing was committed");
    let (status, body) = raw(
        &server,
        Method::PUT,
        &path,
        &[("content-type", "application/json; charset=utf-8")],
        &registration(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn a_browser_origin_not_in_allowed_origins_is_refused_403_and_changes_nothing() {
    // Trace: a page on another site calls the API through the operator's browser; the
    // browser names the page's origin. Same-origin is not trusted either: under DNS
    // rebinding the page's origin and the Host agree.
    let server = TestServer::start_with(|config| {
        config.allowed_origins = vec!["https://console.example:8443".into()];
    })
    .await;
    let json = ("content-type", "application/json");
    let path = instance_path("api", "a-0");
    for origin in ["https://evil.example", "null", "https://console.example"] {
        let (status, body) = raw(
            &server,
            Method::PUT,
            &path,
            &[json, ("origin", origin)],
            &registration(),
        )
        .await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::FORBIDDEN, "forbidden_origin"),
            "{origin}: {body}"
        );
        let (status, body) = raw(
            &server,
            Method::GET,
            "/v1/registry/acme/prod/api",
            &[("origin", origin)],
            "",
        )
        .await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::FORBIDDEN, "forbidden_origin"),
            "{origin}"
        );
    }
    assert_eq!(server.revision().await, 0, "nothing was committed");
    let allowed = ("origin", "https://Console.example:8443");
    let (status, body) = raw(&server, Method::PUT, &path, &[json, allowed], &registration()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn without_auth_a_host_that_is_not_loopback_is_refused_403_which_blocks_dns_rebinding() {
    // Trace: evil.example first resolves to the attacker, then (TTL 0) to 127.0.0.1; the
    // page's same-origin requests reach the registry with `Host: evil.example:PORT`.
    let server = TestServer::start().await;
    let port = server.addr().port();
    let rebound = format!("evil.example:{port}");
    let (status, body) = raw(&server, Method::GET, "/v1/status", &[("host", &rebound)], "").await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::FORBIDDEN, "forbidden_host"),
        "{body}"
    );
    let (status, body) = raw(
        &server,
        Method::PUT,
        &instance_path("api", "a-0"),
        &[("host", &rebound), ("content-type", "application/json")],
        &registration(),
    )
    .await;
    assert_eq!((status, code(&body)), (StatusCode::FORBIDDEN, "forbidden_host"));
    assert_eq!(server.revision().await, 0, "nothing was committed");
    for host in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        "localhost".to_owned(),
    ] {
        let (status, _) = raw(&server, Method::GET, "/v1/status", &[("host", &host)], "").await;
        assert_eq!(status, StatusCode::OK, "{host}");
    }
}

#[tokio::test]
async fn a_body_that_does_not_arrive_within_body_read_timeout_ms_is_refused_408() {
    // Trace: a client announces 100 bytes, sends one and stops; the handler used to wait
    // for the rest for as long as the connection lived.
    let server = TestServer::start_with(|config| config.body_read_timeout_ms = 300).await;
    let head = format!(
        "PUT {} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{{",
        instance_path("api", "a-0")
    );
    let reply = exchange_raw(server.addr(), &head)
        .await
        .expect("the server answers a body that never arrives");
    assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
    assert!(reply.contains("\"request_timeout\""), "{reply}");
    assert_eq!(server.revision().await, 0);
}

/// A one-member cluster (it elects itself), so the cluster listener runs.
async fn cluster_of_one() -> TestServer {
    let port = free_port();
    TestServer::start_with(move |config| {
        config.node_id = 1;
        config.cluster_addr = Some(format!("127.0.0.1:{port}").parse().unwrap());
        config.peers = BTreeMap::from([(1, format!("127.0.0.1:{port}"))]);
        config.cluster_secret = Some(SECRET.into());
    })
    .await
}

#[tokio::test]
async fn the_cluster_listener_refuses_a_wrong_secret_before_reading_the_announced_body() {
    // Trace: an unauthenticated peer announces a 32 MiB append and trickles it; the listener
    // used to buffer all of it (up to 64 MiB) before looking at the secret.
    let server = cluster_of_one().await;
    let addr: std::net::SocketAddr = server.cluster_url().trim_start_matches("http://").parse().unwrap();
    let head = "POST /raft/append HTTP/1.1\r\nhost: 127.0.0.1\r\nx-muster-cluster-secret: not-the-secret\r\n\
                content-type: application/json\r\ncontent-length: 33554432\r\n\r\n{";
    let reply = exchange_raw(addr, head)
        .await
        .expect("refused at once, without waiting for the body");
    assert!(reply.starts_with("HTTP/1.1 401"), "{reply}");
    assert!(reply.contains("\"unauthenticated\""), "{reply}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_to_node_message_newer_than_this_build_reads_is_refused_naming_both_versions() {
    // SPEC R7: during an upgrade a newer member may speak an encoding this build cannot read;
    // it is refused by name, before anything is decoded, and every reply names this build's.
    let server = cluster_of_one().await;
    let addr: std::net::SocketAddr = server.cluster_url().trim_start_matches("http://").parse().unwrap();
    let vote = r#"{"vote":{"leader_id":{"term":0,"node_id":9},"committed":false},"last_log_id":null}"#;
    let head = |wire: &str| {
        format!(
            "POST /raft/vote HTTP/1.1\r\nhost: 127.0.0.1\r\nx-muster-cluster-secret: {SECRET}\r\n{wire}\
             content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{vote}",
            vote.len()
        )
    };
    let newer = muster_consensus::WIRE_VERSION + 1;
    let reply = exchange_raw(addr, &head(&format!("x-muster-wire: {newer}\r\n")))
        .await
        .expect("a reply");
    assert!(reply.starts_with("HTTP/1.1 400"), "{reply}");
    assert!(
        reply.contains(&format!("version {newer}")) && reply.contains("upgrade this node"),
        "{reply}"
    );
    assert!(
        reply.contains(&format!("x-muster-wire: {}", muster_consensus::WIRE_VERSION)),
        "{reply}"
    );
    // A message without the header is what every older build sends: read as version 1.
    let reply = exchange_raw(addr, &head("")).await.expect("a reply");
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(
        reply.contains(&format!("x-muster-wire: {}", muster_consensus::WIRE_VERSION)),
        "{reply}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adding_a_member_that_cannot_prove_the_secret_sends_it_nothing_and_changes_nothing() {
    // Trace: anyone who can reach the API asks the leader to add "node 2" at their own
    // address; the leader used to replicate the log to it, the cluster secret in every
    // request's headers.
    let server = cluster_of_one().await;
    let leads = poll(std::time::Duration::from_millis(20), || async {
        (server.get("/v1/status").await.body["leader"] == 1).then_some(())
    })
    .await;
    assert!(leads.is_some(), "the cluster of one elects itself");
    let impostor = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let impostor_addr = impostor.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::<u8>::new()));
    let heard = Arc::clone(&seen);
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = impostor.accept().await else {
                return;
            };
            let heard = Arc::clone(&heard);
            tokio::spawn(async move {
                let mut buf = [0_u8; 4096];
                let Ok(n) = stream.read(&mut buf).await else { return };
                heard.lock().unwrap().extend_from_slice(&buf[..n]);
                // A made-up proof, as an impostor without the secret can only give.
                let body = json!({"node_id": 2, "addr": "x", "proof": "00".repeat(32)}).to_string();
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(reply.as_bytes()).await;
            });
        }
    });
    let add = {
        let url = server.url("/v1/cluster/members");
        tokio::spawn(async move {
            let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
            let body = json!({"id": 2, "addr": impostor_addr.to_string()}).to_string();
            let request = Request::builder()
                .method(Method::POST)
                .uri(url)
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(body)))
                .unwrap();
            let response = client.request(request).await.unwrap();
            let status = response.status();
            let bytes = response.into_body().collect().await.unwrap().to_bytes();
            (status, serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null))
        })
    };
    let leaked = || String::from_utf8_lossy(&seen.lock().unwrap()).contains(SECRET);
    let outcome = poll(std::time::Duration::from_millis(20), || async {
        if leaked() {
            return Some(None);
        }
        add.is_finished().then_some(Some(()))
    })
    .await;
    assert!(
        !leaked(),
        "the leader sent the cluster secret to the impostor: {}",
        String::from_utf8_lossy(&seen.lock().unwrap())
    );
    assert_eq!(outcome, Some(Some(())), "the add is answered");
    let (status, body) = add.await.unwrap();
    assert_eq!(
        (status, code(&body)),
        (StatusCode::CONFLICT, "membership_refused"),
        "{body}"
    );
    let members = server.get("/v1/cluster").await.expect(StatusCode::OK);
    assert_eq!(members.body["members"].as_array().unwrap().len(), 1, "{}", members.body);
}

#[tokio::test]
async fn watches_over_max_watches_per_principal_are_refused_429_and_the_slot_returns_when_a_stream_ends() {
    let server = TestServer::start_with(|config| config.max_watches_per_principal = 2).await;
    let path = "/v1/watch/acme/prod/api";
    let first = slow_watch(&server, path).await;
    let _second = slow_watch(&server, path).await;
    let refused = server.get(path).await;
    assert_eq!(
        (refused.status, refused.code()),
        (StatusCode::TOO_MANY_REQUESTS, "too_many_watches"),
        "{}",
        refused.body
    );
    // Another tenant's watches count against the same principal in that tenant only.
    let _other_tenant = slow_watch(&server, "/v1/watch/globex/prod/api").await;
    drop(first);
    // The server sees the stream end at its next write (a progress frame).
    let reopened = poll(std::time::Duration::from_millis(50), || async {
        let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
        let request = Request::builder()
            .uri(server.url(path))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let response = client.request(request).await.ok()?;
        (response.status() == StatusCode::OK).then_some(response)
    })
    .await;
    assert!(reopened.is_some(), "the slot came back when the first stream ended");
}

#[tokio::test]
async fn watches_over_max_watches_per_tenant_are_refused_429_before_the_stream_starts() {
    let server = TestServer::start_with(|config| {
        config.max_watches_per_principal = 100;
        config.max_watches_per_tenant = 1;
    })
    .await;
    let _held = slow_watch(&server, "/v1/watch/acme/prod").await;
    let refused = server.get("/v1/watch/acme/prod/api").await;
    assert_eq!(
        (refused.status, refused.code()),
        (StatusCode::TOO_MANY_REQUESTS, "too_many_watches")
    );
    assert!(
        refused.message().contains("max_watches_per_tenant"),
        "{}",
        refused.message()
    );
    let _other = slow_watch(&server, "/v1/watch/globex/prod").await;
}

#[tokio::test]
async fn a_check_aimed_beyond_its_own_endpoint_is_refused_422_and_registers_nothing() {
    // Trace: an endpoint at 10.0.0.1 registers an HTTP check on the cloud metadata service;
    // the leader probed it and its health told the registrar what the service answered.
    let server = TestServer::start().await;
    for url in [
        "http://169.254.169.254:80/latest/meta-data/",
        "tcp://10.0.0.2:8080",
        "tcp://db.internal:8080",
    ] {
        let mut spec = endpoint("10.0.0.1");
        spec["checks"] = json!([{"url": url}]);
        let reply = server
            .call(
                Method::PUT,
                &instance_path("api", "a-0"),
                Some(json!({"incarnation": 1, "endpoint": spec})),
            )
            .await;
        assert_eq!(
            (reply.status, reply.code()),
            (StatusCode::UNPROCESSABLE_ENTITY, "check_target_refused"),
            "{url}: {}",
            reply.body
        );
    }
    assert_eq!(server.revision().await, 0);
}

#[tokio::test]
async fn a_check_aimed_at_the_servers_own_listener_is_never_probed_and_fails() {
    // Trace: a loopback endpoint's check on the registry's own API port: the checker (on
    // the leader) would drive requests at the API from inside, and report it healthy.
    use crate::health::{fast_check, loopback_endpoint, until_state};
    let server = TestServer::start().await;
    let own = format!("http://{}/v1/status", server.addr());
    // Registered ready, so failing checks take it out (from `starting` they only hold it).
    let mut spec = loopback_endpoint();
    spec["serving"] = json!("ready");
    spec["checks"] = json!([fast_check(&own)]);
    server
        .call(
            Method::PUT,
            &instance_path("api", "a-0"),
            Some(json!({"incarnation": 1, "endpoint": spec})),
        )
        .await
        .expect(StatusCode::OK);
    let down = until_state(&server, "api", "a-0", "not_serving").await;
    let reason = down["observation"]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("check_target_refused"), "{reason}");
}

#[tokio::test]
async fn with_auth_on_any_host_passes_the_guard_and_meets_authentication() {
    // With authentication a page has no token, so the Host rule (which would refuse every
    // real deployment name) is off; the Origin rule still holds.
    let server = TestServer::start_with(|config| config.auth.enabled = true).await;
    let named = ("host", "registry.example:7070");
    let (status, body) = raw(&server, Method::GET, "/v1/status", &[named], "").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = raw(&server, Method::GET, "/v1/registry/acme/prod/api", &[named], "").await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::UNAUTHORIZED, "unauthenticated"),
        "{body}"
    );
    let (status, body) = raw(
        &server,
        Method::GET,
        "/v1/status",
        &[named, ("origin", "https://evil.example")],
        "",
    )
    .await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::FORBIDDEN, "forbidden_origin"),
        "{body}"
    );
}
