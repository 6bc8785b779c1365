//! Drain without errors (SPEC D3, L6; `reference/control-plane-state.txt` "Drain before
//! removal"): a draining endpoint gets no new work at once, its work in flight finishes.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use muster_client::{Protocol, ServingState};
use muster_proxy::config::ListenerProtocol;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{
    Backend, Load, Registry, get, http_client, proxy, proxy_with, three_backends, until, until_eligible,
};

/// Waits until the proxy's view has `instance` draining.
async fn until_draining(proxy: &muster_proxy::RunningProxy, instance: &str) {
    let target = Arc::clone(&proxy.targets()[0]);
    until(&format!("the proxy sees {instance} draining"), || {
        target.resolver().view().active().is_some_and(|set| {
            set.iter()
                .any(|e| e.instance.as_str() == instance && e.serving == ServingState::Draining)
        })
    })
    .await;
}

/// A registry with one backend, `slow`, a proxy in front, and a request of `ms` milliseconds
/// through it that has reached the backend.
async fn slow_request_in_flight(
    ms: u64,
) -> (
    Registry,
    Backend,
    muster_proxy::RunningProxy,
    tokio::task::JoinHandle<Result<(u16, String), String>>,
) {
    let registry = Registry::start().await;
    let slow = Backend::http("slow").await;
    registry.register("slow", slow.addr, Protocol::Http).await;
    let proxy = proxy(&registry, ListenerProtocol::Http).await;
    until_eligible(&proxy, 1).await;
    let addr = proxy.listeners()[0];
    let in_flight = tokio::spawn(async move { get(&http_client(false), addr, &format!("/slow?ms={ms}")).await });
    until("the slow request reached the backend", || slow.count() == 1).await;
    (registry, slow, proxy, in_flight)
}

#[tokio::test]
async fn a_slow_request_in_flight_on_a_draining_endpoint_completes_and_it_gets_nothing_new() {
    let (registry, slow, proxy, in_flight) = slow_request_in_flight(1_500).await;
    let addr = proxy.listeners()[0];
    let other = Backend::http("other").await;
    registry.register("other", other.addr, Protocol::Http).await;
    registry.drain("slow").await;
    until_draining(&proxy, "slow").await;
    // The order the name claims: the proxy saw the drain while the slow request was still in
    // flight to it (1.5 s of headroom against one watch update).
    let target = Arc::clone(&proxy.targets()[0]);
    assert!(
        target
            .in_flight()
            .iter()
            .any(|((instance, _), n)| instance.as_str() == "slow" && *n > 0),
        "the drain was seen while the slow request was in flight"
    );
    let client = http_client(false);
    for _ in 0..30 {
        let (status, body) = get(&client, addr, "/").await.expect("answered");
        assert_eq!((status, body.as_str()), (200, "other"));
    }
    let (status, body) = in_flight.await.unwrap().expect("the slow request completes");
    assert_eq!((status, body.as_str()), (200, "slow"));
    assert_eq!(slow.count(), 1, "the draining endpoint got no new request");
}

#[tokio::test]
async fn draining_one_of_three_under_load_fails_no_request() {
    let registry = Registry::start().await;
    let mut backends = three_backends(&registry).await;
    let proxy = proxy(&registry, ListenerProtocol::Http).await;
    until_eligible(&proxy, 3).await;
    // A bounded load loop: 8 callers x 150 requests, each a short request.
    let load = Load::start(proxy.listeners()[0], 8, 150);
    let done = Arc::clone(&load.done);
    until("a third of the load ran", || done.load(Ordering::Relaxed) >= 400).await;
    registry.drain("a").await;
    until_draining(&proxy, "a").await;
    let target = Arc::clone(&proxy.targets()[0]);
    until("requests in flight to a finished", || {
        target.in_flight().keys().all(|(instance, _)| instance.as_str() != "a")
    })
    .await;
    let a_after_drain = backends[0].count();
    // The drained backend now stops for good, as a deploy would stop it.
    backends[0].kill();
    assert_eq!(load.failures().await, 0, "no request failed");
    assert_eq!(
        backends[0].count(),
        a_after_drain,
        "a got nothing once the drain was seen"
    );
    assert!(backends[1].count() > 0 && backends[2].count() > 0);
}

#[tokio::test]
async fn stopping_the_proxy_lets_a_request_in_flight_finish() {
    let (_registry, _slow, proxy, in_flight) = slow_request_in_flight(800).await;
    let addr = proxy.listeners()[0];
    proxy.shutdown().await;
    let (status, body) = in_flight.await.unwrap().expect("the request in flight completes");
    assert_eq!((status, body.as_str()), (200, "slow"));
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "a stopped proxy accepts nothing"
    );
}

#[tokio::test]
async fn a_tcp_stream_to_a_draining_endpoint_runs_until_the_grace_then_is_cut() {
    let registry = Registry::start().await;
    let echo = Backend::echo("echo").await;
    registry.register("echo", echo.addr, Protocol::Tcp).await;
    let proxy = proxy_with(&registry, ListenerProtocol::Tcp, |mut config| {
        config.drain_grace = Duration::from_millis(700);
        config
    })
    .await;
    until_eligible(&proxy, 1).await;
    let mut stream = TcpStream::connect(proxy.listeners()[0]).await.unwrap();
    let mut greeting = [0u8; 5];
    stream.read_exact(&mut greeting).await.unwrap();
    registry.drain("echo").await;
    until_draining(&proxy, "echo").await;
    // Still flowing inside the grace. Proved by order: the drain was seen (the grace runs),
    // the echo comes back, and only then is the stream cut. This one step must land inside
    // the 700 ms grace, the proxy's own timer; nothing here measures it.
    stream.write_all(b"ping").await.unwrap();
    let mut pong = [0u8; 4];
    stream.read_exact(&mut pong).await.unwrap();
    assert_eq!(&pong, b"ping");
    // Then cut: the read ends (bounded by the test's step, not timed).
    let mut rest = Vec::new();
    let read = tokio::time::timeout(crate::support::STEP, stream.read_to_end(&mut rest)).await;
    assert!(read.is_ok(), "the stream was cut after the grace");
}

#[tokio::test]
async fn a_tcp_stream_carries_a_megabyte_both_ways_and_a_half_close_reaches_the_far_end() {
    // SPEC D3: the TCP pipe reads in chunks and holds no buffer between them; bulk bytes
    // arrive whole and in order, and the client's end of writing ends the endpoint's.
    let registry = Registry::start().await;
    let echo = Backend::echo("echo").await;
    registry.register("echo", echo.addr, Protocol::Tcp).await;
    let proxy = proxy_with(&registry, ListenerProtocol::Tcp, |config| config).await;
    until_eligible(&proxy, 1).await;
    let stream = TcpStream::connect(proxy.listeners()[0]).await.unwrap();
    let (mut read, mut write) = stream.into_split();
    let sent: Vec<u8> = (0..1_048_576u32).map(|i| (i % 251) as u8).collect();
    let sending = sent.clone();
    let writer = tokio::spawn(async move {
        write.write_all(&sending).await.unwrap();
        write.shutdown().await.unwrap();
    });
    let mut received = Vec::new();
    tokio::time::timeout(crate::support::STEP * 4, read.read_to_end(&mut received))
        .await
        .expect("the echo ends after the client's half-close")
        .unwrap();
    writer.await.unwrap();
    assert_eq!(&received[..5], b"echo\n");
    assert!(received[5..] == sent[..], "{} bytes came back", received.len() - 5);
}
