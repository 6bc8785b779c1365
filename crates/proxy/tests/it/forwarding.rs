//! Requests and connections reach the service's endpoints through every listener protocol.

use std::collections::BTreeSet;

use muster_client::Protocol;
use muster_proxy::config::{BalancerKind, ListenerProtocol};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{Backend, Registry, get, http_client, proxy, proxy_with, until_eligible};

#[tokio::test]
async fn http1_and_h2c_requests_are_balanced_over_the_endpoints() {
    let registry = Registry::start().await;
    let a = Backend::http("a").await;
    let b = Backend::http("b").await;
    registry.register("a", a.addr, Protocol::Http).await;
    // `b` registered as HTTP/2: an HTTP/1.1 caller is sent to it over h2c.
    registry.register("b", b.addr, Protocol::Http2).await;
    let proxy = proxy(&registry, ListenerProtocol::Auto).await;
    until_eligible(&proxy, 2).await;
    let addr = proxy.listeners()[0];
    for h2 in [false, true] {
        let client = http_client(h2);
        let mut seen = BTreeSet::new();
        for _ in 0..40 {
            let (status, body) = get(&client, addr, "/").await.expect("answered");
            assert_eq!(status, 200, "h2={h2}");
            seen.insert(body);
        }
        assert_eq!(seen, BTreeSet::from(["a".to_owned(), "b".to_owned()]), "h2={h2}");
    }
    assert!(a.count() > 0 && b.count() > 0);
}

#[tokio::test]
async fn tcp_connections_reach_an_endpoint_and_auto_falls_back_to_tcp() {
    let registry = Registry::start().await;
    let echo = Backend::echo("echo").await;
    registry.register("echo", echo.addr, Protocol::Tcp).await;
    for protocol in [ListenerProtocol::Tcp, ListenerProtocol::Auto] {
        let proxy = proxy(&registry, protocol).await;
        until_eligible(&proxy, 1).await;
        let mut stream = TcpStream::connect(proxy.listeners()[0]).await.unwrap();
        // Not HTTP: `auto` must hand these bytes over untouched.
        stream.write_all(b"\x00\x01hello").await.unwrap();
        let mut got = vec![0u8; b"echo\n\x00\x01hello".len()];
        stream.read_exact(&mut got).await.unwrap();
        assert_eq!(got, b"echo\n\x00\x01hello", "{protocol:?}");
        proxy.shutdown().await;
    }
}

#[tokio::test]
async fn the_hash_balancer_keeps_a_header_value_on_one_endpoint() {
    let registry = Registry::start().await;
    let a = Backend::http("a").await;
    let b = Backend::http("b").await;
    registry.register("a", a.addr, Protocol::Http).await;
    registry.register("b", b.addr, Protocol::Http).await;
    let proxy = proxy_with(&registry, ListenerProtocol::Http, |mut config| {
        config.listeners[0].balancer = BalancerKind::Hash;
        config.listeners[0].hash_header = Some(hyper::header::HeaderName::from_static("x-user"));
        config
    })
    .await;
    until_eligible(&proxy, 2).await;
    let client = http_client(false);
    let mut owners = BTreeSet::new();
    for user in 0..20 {
        let mut seen = BTreeSet::new();
        for _ in 0..5 {
            let request = hyper::Request::get(format!("http://{}/", proxy.listeners()[0]))
                .header("x-user", format!("user-{user}"))
                .body(http_body_util::Full::new(bytes::Bytes::new()))
                .unwrap();
            let response = client.request(request).await.unwrap();
            let body = http_body_util::BodyExt::collect(response.into_body())
                .await
                .unwrap()
                .to_bytes();
            seen.insert(body);
        }
        assert_eq!(seen.len(), 1, "user-{user} went to {seen:?}");
        owners.extend(seen);
    }
    assert_eq!(owners.len(), 2, "20 users spread over both endpoints");
}

#[tokio::test]
async fn the_admin_listener_shows_the_view_and_the_counters() {
    let registry = Registry::start().await;
    let a = Backend::http("a").await;
    registry.register("a", a.addr, Protocol::Http).await;
    // Two listeners: every metric family is written once, with a row per listener.
    let proxy = proxy_with(&registry, ListenerProtocol::Http, |mut config| {
        let mut second = config.listeners[0].clone();
        second.protocol = ListenerProtocol::Tcp;
        config.listeners.push(second);
        config
    })
    .await;
    until_eligible(&proxy, 1).await;
    let client = http_client(false);
    for _ in 0..3 {
        assert_eq!(get(&client, proxy.listeners()[0], "/").await.unwrap().0, 200);
    }
    let admin = proxy.admin_addr().unwrap();
    let (status, debug) = get(&client, admin, "/debug/endpoints").await.unwrap();
    assert_eq!(status, 200);
    let debug: serde_json::Value = serde_json::from_str(&debug).unwrap();
    let listener = &debug["listeners"][0];
    assert_eq!(listener["service"], "default/prod/api");
    assert_eq!(listener["eligible"], 1);
    assert!(listener["revision"].as_u64().unwrap() >= 1);
    assert_eq!(listener["endpoints"][0]["instance"], "a");
    assert_eq!(listener["endpoints"][0]["standing"], "eligible");
    assert_eq!(listener["endpoints"][0]["address"], a.addr.to_string());
    let (_, metrics) = get(&client, admin, "/metrics").await.unwrap();
    let listen = proxy.listeners()[0];
    assert!(
        metrics.contains(&format!("muster_proxy_requests_ok_total{{listener=\"{listen}\"}} 3")),
        "{metrics}"
    );
    assert_eq!(
        metrics.matches("# TYPE muster_proxy_requests_ok counter").count(),
        1,
        "{metrics}"
    );
    let second = proxy.listeners()[1];
    assert!(
        metrics.contains(&format!("muster_proxy_requests_ok_total{{listener=\"{second}\"}} 0")),
        "{metrics}"
    );
    for name in [
        "muster_proxy_retries_total",
        "muster_proxy_retry_budget_exhausted_total",
        "muster_proxy_ejections_total",
        "muster_proxy_view_revision",
        "muster_proxy_view_age_seconds",
    ] {
        assert!(metrics.contains(name), "{name} missing from {metrics}");
    }
}
