//! `muster_client::tower::Balance` under a generated tonic client (SPEC C5, C7): one lazily
//! connecting `Channel` per endpoint, tonic-health servers as backends, and an endpoint that
//! refuses connections ejected by the balancer after its first failure.

use muster_client::tower::{Balance, BalanceError, Target};
use muster_client::{EjectionConfig, Fraction};
use tokio::net::TcpListener;
use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

use crate::inproc::{Registry, STEP, until_endpoints};

/// A grpc.health.v1 server on a free loopback port; its port.
async fn health_server() -> u16 {
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter
        .set_service_status("pay.v1.Pay", tonic_health::ServingStatus::Serving)
        .await;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        // Keeps the status alive as long as the server runs.
        let _reporter = reporter;
        tonic::transport::Server::builder()
            .add_service(health)
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
            .await
    });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tonic_client_is_balanced_and_a_refusing_endpoint_is_ejected() {
    let registry = Registry::start().await;
    registry.register("pay", "pay-0", health_server().await).await;
    registry.register("pay", "pay-1", health_server().await).await;
    // Registered, but nobody listens there.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    registry.register("pay", "pay-dead", dead).await;
    let resolver = registry.resolver("pay").await;
    until_endpoints(&resolver, 3).await;

    let balance = Balance::builder(resolver.clone())
        .port("http")
        .ejection(EjectionConfig {
            consecutive_failures: 1,
            base_ejection_ms: 600_000,
            max_ejection_ms: 600_000,
            max_ejected: Fraction::percent(50),
        })
        .per_endpoint(|target: &Target| Channel::builder(target.uri().clone()).connect_lazy())
        .unwrap();
    let mut health = HealthClient::new(balance.clone());
    let mut failures = 0;
    for _ in 0..30 {
        let request = HealthCheckRequest {
            service: "pay.v1.Pay".into(),
        };
        match tokio::time::timeout(STEP, health.check(request))
            .await
            .expect("an answer in time")
        {
            Ok(reply) => assert_eq!(reply.into_inner().status, 1, "SERVING"),
            Err(status) => {
                failures += 1;
                let source = std::error::Error::source(&status).and_then(|e| e.downcast_ref::<BalanceError>());
                assert_eq!(source.map(BalanceError::code), Some("endpoint_failed"), "{status:?}");
            }
        }
    }
    assert!(
        failures <= 1,
        "the refusing endpoint fails once, then is ejected: {failures}"
    );
    let view = resolver.view();
    let pay_dead = view
        .active()
        .unwrap()
        .iter()
        .find(|e| e.instance.as_str() == "pay-dead")
        .unwrap();
    // Picked at least once in 30 calls over three endpoints (1 in 10^5 to fail otherwise).
    assert!(balance.is_ejected(pay_dead));
}
