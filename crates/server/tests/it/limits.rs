//! Each listener's configured limits (SPEC S6): a connection over `max_connections` is
//! answered `503 too_many_connections`, and a client that trickles its request head is cut
//! off after `header_read_timeout_ms` instead of holding its connection.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{STEP, TestServer};

const REQUEST: &[u8] = b"GET /v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";

/// Reads what comes back on `tcp` (one read), within `STEP`.
async fn read_some(tcp: &mut TcpStream) -> String {
    let mut reply = vec![0; 8192];
    let read = tokio::time::timeout(STEP, tcp.read(&mut reply))
        .await
        .expect("an answer (or the close) in time")
        .unwrap();
    String::from_utf8_lossy(&reply[..read]).into_owned()
}

#[tokio::test]
async fn a_connection_over_the_configured_maximum_is_answered_too_many_connections() {
    let mut server = TestServer::start_with(|config| config.limits.http.max_connections = Some(1)).await;
    let addr = server.url("").trim_start_matches("http://").to_owned();
    let mut held = TcpStream::connect(&addr).await.unwrap();
    held.write_all(REQUEST).await.unwrap();
    assert!(read_some(&mut held).await.starts_with("HTTP/1.1 200"));

    let mut refused = TcpStream::connect(&addr).await.unwrap();
    refused.write_all(REQUEST).await.unwrap();
    let reply = read_some(&mut refused).await;
    assert!(reply.starts_with("HTTP/1.1 503"), "{reply}");
    assert!(reply.contains("\"code\":\"too_many_connections\""), "{reply}");
    drop(held);
    server.stop().await;
}

#[tokio::test]
async fn a_client_that_trickles_its_request_head_is_cut_off_after_the_header_read_timeout() {
    let mut server = TestServer::start_with(|config| config.limits.http.header_read_timeout_ms = 200).await;
    let addr = server.url("").trim_start_matches("http://").to_owned();
    let mut slow = TcpStream::connect(&addr).await.unwrap();
    slow.write_all(b"GET /v1/status HTTP/1.1\r\nHost: 127.0").await.unwrap();
    // The default (30 s) would keep it open past STEP; the configured 200 ms closes it.
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(STEP, slow.read_to_end(&mut rest)).await;
    assert!(closed.is_ok(), "the connection was still open after {STEP:?}");
    assert!(!String::from_utf8_lossy(&rest).contains("200 OK"), "{rest:?}");
    server.stop().await;
}

/// SPEC S6 (the hostile-client matrix's slow heads): with the budget taken by connections
/// that have sent no request, a new caller is served — the oldest silent connection makes
/// room — where it used to be answered `503 too_many_connections` until the slow heads
/// timed out. A connection that has sent a request keeps its place.
#[tokio::test]
async fn silent_connections_make_room_for_a_caller_when_the_budget_is_full() {
    let mut server = TestServer::start_with(|config| config.limits.http.max_connections = Some(3)).await;
    let addr = server.url("").trim_start_matches("http://").to_owned();
    let mut caller = TcpStream::connect(&addr).await.unwrap();
    caller.write_all(REQUEST).await.unwrap();
    assert!(read_some(&mut caller).await.starts_with("HTTP/1.1 200"));
    let mut slow = Vec::new();
    for _ in 0..2 {
        let mut tcp = TcpStream::connect(&addr).await.unwrap();
        tcp.write_all(b"GET /v1/status HTTP/1.1\r\nHo").await.unwrap();
        slow.push(tcp);
    }
    let mut newcomers = Vec::new();
    for _ in 0..2 {
        let mut newcomer = TcpStream::connect(&addr).await.unwrap();
        newcomer.write_all(REQUEST).await.unwrap();
        let reply = read_some(&mut newcomer).await;
        assert!(reply.starts_with("HTTP/1.1 200"), "the newcomer is served: {reply}");
        newcomers.push(newcomer);
    }
    // Both slow heads were closed to make room; the caller that spoke still is served.
    for tcp in &mut slow {
        let mut rest = Vec::new();
        let closed = tokio::time::timeout(STEP, tcp.read_to_end(&mut rest)).await;
        assert!(closed.is_ok(), "an evicted slow head is closed");
    }
    caller.write_all(REQUEST).await.unwrap();
    assert!(read_some(&mut caller).await.starts_with("HTTP/1.1 200"));
    server.stop().await;
}
