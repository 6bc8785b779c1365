//! Retries only what is safe, within the budget (SPEC D3), and local ejection of a crashed
//! endpoint (SPEC C5, H6; `reference/registry-walkthrough.txt`, a client-side view routing
//! around a dead instance before the registry knows).

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use muster_client::Protocol;
use muster_proxy::config::ListenerProtocol;

use crate::support::{Backend, Load, Registry, get, http_client, proxy, proxy_with, three_backends, until_eligible};

fn dead_addr() -> std::net::SocketAddr {
    // A port bound and released: nothing listens there now.
    let socket = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    socket.local_addr().unwrap()
}

async fn send(
    client: &hyper_util::client::legacy::Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
    method: hyper::Method,
    uri: String,
    body: &'static [u8],
) -> (u16, String) {
    let request = hyper::Request::builder()
        .method(method)
        .uri(uri)
        .body(Full::new(Bytes::from_static(body)))
        .unwrap();
    let response = client.request(request).await.unwrap();
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

fn metric(proxy: &muster_proxy::RunningProxy, read: impl Fn(&muster_proxy::target::Stats) -> &AtomicU64) -> u64 {
    read(&proxy.targets()[0].stats).load(Ordering::Relaxed)
}

#[tokio::test]
async fn a_connect_failure_is_retried_even_for_a_post_with_a_body() {
    let registry = Registry::start().await;
    let live = Backend::http("live").await;
    registry.register("dead", dead_addr(), Protocol::Http).await;
    registry.register("live", live.addr, Protocol::Http).await;
    let proxy = proxy(&registry, ListenerProtocol::Http).await;
    until_eligible(&proxy, 2).await;
    let client = http_client(false);
    for _ in 0..20 {
        let (status, body) = send(
            &client,
            hyper::Method::POST,
            format!("http://{}/", proxy.listeners()[0]),
            b"hello",
        )
        .await;
        assert_eq!((status, body.as_str()), (200, "live:5"));
    }
    assert!(
        metric(&proxy, |s| &s.retries) > 0,
        "the dead endpoint was tried and the request retried"
    );
}

#[tokio::test]
async fn a_gateway_error_is_retried_for_get_and_never_for_post() {
    let registry = Registry::start().await;
    let a = Backend::http("a").await;
    let b = Backend::http("b").await;
    registry.register("a", a.addr, Protocol::Http).await;
    registry.register("b", b.addr, Protocol::Http).await;
    let proxy = proxy(&registry, ListenerProtocol::Http).await;
    until_eligible(&proxy, 2).await;
    let client = http_client(false);
    let uri = format!("http://{}/fail", proxy.listeners()[0]);
    let (status, _) = send(&client, hyper::Method::POST, uri.clone(), b"x").await;
    assert_eq!(status, 503);
    assert_eq!(a.count() + b.count(), 1, "a POST is sent once");
    let (status, _) = send(&client, hyper::Method::GET, uri, b"").await;
    assert_eq!(status, 503, "every attempt failed: the last answer is passed on");
    assert_eq!(a.count() + b.count(), 1 + 3, "a GET is tried three times");
    assert_eq!(metric(&proxy, |s| &s.retries), 2);
}

#[tokio::test]
async fn a_spent_budget_refuses_retries_and_says_so() {
    let registry = Registry::start().await;
    registry.register("dead", dead_addr(), Protocol::Http).await;
    let proxy = proxy_with(&registry, ListenerProtocol::Http, |mut config| {
        config.listeners[0].budget.ratio = 0.0;
        config.listeners[0].budget.min_per_second = 0;
        config
    })
    .await;
    until_eligible(&proxy, 1).await;
    let (status, body) = get(&http_client(false), proxy.listeners()[0], "/").await.unwrap();
    assert_eq!(status, 502);
    assert!(body.contains("upstream_failed"), "{body}");
    assert_eq!(metric(&proxy, |s| &s.retries), 0);
    assert_eq!(metric(&proxy, |s| &s.budget_exhausted), 1);
}

/// SIGKILL of one of three backends under load: only requests in flight at the kill can
/// fail, and only once the budget is spent, so failures are bounded by the callers' count
/// (8); once the proxy has ejected the dead endpoint, nothing fails.
#[tokio::test]
async fn a_crashed_backend_costs_at_most_the_requests_in_flight_then_nothing() {
    let registry = Registry::start().await;
    let mut backends = three_backends(&registry).await;
    let proxy = proxy(&registry, ListenerProtocol::Http).await;
    until_eligible(&proxy, 3).await;
    let addr = proxy.listeners()[0];
    const CALLERS: u64 = 8;
    let load = Load::start(addr, CALLERS, 120);
    crate::support::until("the load is flowing", || backends[0].count() >= 20).await;
    backends[0].kill();
    let at_crash = load.failures().await;
    println!("failed requests across the crash: {at_crash} of {}", CALLERS * 120);
    assert!(at_crash <= CALLERS, "{at_crash} failures");
    assert_eq!(
        Load::start(addr, CALLERS, 60).failures().await,
        0,
        "nothing fails once the dead endpoint is ejected"
    );
    assert!(metric(&proxy, |s| &s.ejections) >= 1);
}
