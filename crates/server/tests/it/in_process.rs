//! The in-process front doors (`RunningServer::connect`, `RunningServer::answer_dns`) the
//! instruction-count gate drives (SPEC K2): the same router, guards and zone as the
//! listeners, and nothing left running once the server stops.

use hyper::Method;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{STEP, TestServer, endpoint};

/// Writes `request` into a new in-process connection and reads until `until` shows up.
async fn exchange(server: &TestServer, request: &str, until: &str) -> String {
    let mut io = server.running().connect();
    io.write_all(request.as_bytes()).await.expect("written");
    let mut seen = Vec::new();
    tokio::time::timeout(STEP, async {
        while !String::from_utf8_lossy(&seen).contains(until) {
            let mut chunk = [0u8; 4096];
            let read = io.read(&mut chunk).await.expect("readable");
            assert!(read > 0, "closed before {until:?}: {}", String::from_utf8_lossy(&seen));
            seen.extend_from_slice(&chunk[..read]);
        }
    })
    .await
    .expect("an answer in time");
    String::from_utf8_lossy(&seen).into_owned()
}

#[tokio::test]
async fn an_in_process_connection_is_served_like_a_loopback_one_with_its_guards() {
    let server = TestServer::start().await;
    server
        .register("api", "i-1", "10.9.0.1")
        .await
        .expect(hyper::StatusCode::OK);
    let reply = exchange(
        &server,
        "GET /v1/registry/acme/prod/api HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n",
        "10.9.0.1",
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    // DNS rebinding: a name that is not loopback is refused here as on the listener.
    let refused = exchange(
        &server,
        "GET /v1/registry/acme/prod/api HTTP/1.1\r\nhost: evil.example\r\n\r\n",
        "\r\n\r\n",
    )
    .await;
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
}

#[tokio::test]
async fn an_open_in_process_watch_ends_when_the_server_stops() {
    let mut server = TestServer::start().await;
    server
        .register("api", "i-1", "10.9.0.2")
        .await
        .expect(hyper::StatusCode::OK);
    let mut io = server.running().connect();
    io.write_all(b"GET /v1/watch/acme/prod/api HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        .await
        .expect("written");
    let mut chunk = vec![0u8; 64 * 1024];
    let read = io.read(&mut chunk).await.expect("the snapshot");
    assert!(String::from_utf8_lossy(&chunk[..read]).starts_with("HTTP/1.1 200"));
    server.stop().await;
    // Every byte left, then the end: the stream does not outlive the server.
    tokio::time::timeout(STEP, async {
        while io.read(&mut chunk).await.expect("readable") > 0 {}
    })
    .await
    .expect("the stream ends with the server");
}

/// An A query for `name`.
fn a_query(name: &str) -> Vec<u8> {
    let mut query = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in name.split('.') {
        query.push(u8::try_from(label.len()).expect("a short label"));
        query.extend_from_slice(label.as_bytes());
    }
    query.extend_from_slice(&[0, 0, 1, 0, 1]);
    query
}

#[tokio::test]
async fn answer_dns_answers_as_the_udp_listener_and_nothing_when_dns_is_off() {
    let server = TestServer::start().await;
    server
        .call(
            Method::PUT,
            "/v1/registry/default/prod/api/i-1",
            Some(json!({"incarnation": 1, "endpoint": endpoint("10.9.0.3")})),
        )
        .await
        .expect(hyper::StatusCode::OK);
    let answer = server
        .running()
        .answer_dns(&a_query("api.prod.muster"))
        .expect("an answer");
    assert_eq!(answer[..2], [0x12, 0x34], "the query's id");
    assert_eq!(answer[3] & 0x0f, 0, "NOERROR");
    assert_eq!(u16::from_be_bytes([answer[6], answer[7]]), 1, "one address");
    assert!(answer.ends_with(&[10, 9, 0, 3]), "{answer:?}");
    assert_eq!(server.running().answer_dns(&[0u8; 3]), None, "too short to be a query");

    let off = TestServer::start_with(|config| config.dns_enabled = false).await;
    assert_eq!(off.running().answer_dns(&a_query("api.prod.muster")), None);
}
