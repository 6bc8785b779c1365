//! `muster_client::tower::Balance` over a hyper client (SPEC C4, C5, C7, H6), against a real
//! registry and real HTTP backends: requests spread, a backend answering 5xx is ejected by
//! the balancer itself and comes back when its ejection ends, a draining endpoint gets
//! nothing, and `poll_ready` without an endpoint is a typed error rather than `Pending`.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::Empty;
use hyper::body::Bytes;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use muster_client::tower::{Balance, NewSetAuthority};
use muster_client::{Client, EjectionConfig, Fraction, Member, Resolver, ResolverConfig, ServingState};
use tower::{Service, ServiceBuilder, ServiceExt};

use crate::inproc::{Backend, Registry, STEP, key, until, until_endpoints};

type Http = HttpClient<HttpConnector, Empty<Bytes>>;

/// What the next call is refused with: `poll_ready` reports ready (an error there would close
/// a tower `Buffer` for good), and the call carries the refusal.
async fn refusal(balance: &mut Balance<NewSetAuthority<Http>>) -> &'static str {
    let ready = tokio::time::timeout(STEP, balance.ready())
        .await
        .expect("not pending forever")
        .expect("ready: the refusal comes with the call");
    let request = hyper::Request::get("/").body(Empty::new()).unwrap();
    let error = ready.call(request).await.expect_err("refused");
    error.code()
}

fn http() -> Http {
    HttpClient::builder(TokioExecutor::new()).build_http()
}

/// Three failures in a row eject for `ejection_ms`; half of the endpoints may be out.
fn ejection(ejection_ms: u64) -> EjectionConfig {
    EjectionConfig {
        consecutive_failures: 3,
        base_ejection_ms: ejection_ms,
        max_ejection_ms: ejection_ms,
        max_ejected: Fraction::percent(50),
    }
}

/// One GET through the balancer: the status, bounded.
async fn get(balance: &mut Balance<NewSetAuthority<Http>>) -> u16 {
    let request = hyper::Request::get("/").body(Empty::new()).unwrap();
    let call = async { balance.ready().await?.call(request).await };
    let response = tokio::time::timeout(STEP, call)
        .await
        .expect("an answer in time")
        .unwrap();
    response.status().as_u16()
}

/// Two backends registered as `service` web-a and web-b, and a resolver holding both.
async fn two_backends(registry: &Registry, service: &str) -> (Backend, Backend, Resolver) {
    let (a, b) = (Backend::start().await, Backend::start().await);
    registry.register(service, "web-a", a.port()).await;
    registry.register(service, "web-b", b.port()).await;
    let resolver = registry.resolver(service).await;
    until_endpoints(&resolver, 2).await;
    (a, b, resolver)
}

fn endpoint(resolver: &Resolver, instance: &str) -> Arc<Member> {
    let view = resolver.view();
    let set = view.active().unwrap();
    Arc::clone(set.iter().find(|e| e.instance.as_str() == instance).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_spread_over_both_backends() {
    let registry = Registry::start().await;
    let (a, b, resolver) = two_backends(&registry, "web").await;
    let mut balance = Balance::builder(resolver).port("http").shared(http()).unwrap();
    for _ in 0..40 {
        assert_eq!(get(&mut balance).await, 200);
    }
    assert_eq!(a.requests() + b.requests(), 40);
    // Least-request over idle backends picks at random: both get some (1 in 2^39 to fail).
    assert!(
        a.requests() > 0 && b.requests() > 0,
        "{} / {}",
        a.requests(),
        b.requests()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_answering_5xx_is_ejected_and_gets_no_more_requests() {
    let registry = Registry::start().await;
    let (a, b, resolver) = two_backends(&registry, "web").await;
    b.answer(500);
    // Longer than the test: the ejection cannot end while it runs.
    let mut balance = Balance::builder(resolver.clone())
        .ejection(ejection(600_000))
        .shared(http())
        .unwrap();
    let mut calls = 0;
    while b.requests() < 3 {
        get(&mut balance).await;
        calls += 1;
        assert!(calls < 1_000, "web-b was never picked three times");
    }
    assert!(
        balance.is_ejected(&endpoint(&resolver, "web-b")),
        "three 5xx in a row eject"
    );
    let (before_a, before_b) = (a.requests(), b.requests());
    for _ in 0..30 {
        assert_eq!(get(&mut balance).await, 200, "only web-a answers now");
    }
    assert_eq!(b.requests(), before_b, "an ejected backend gets no requests");
    assert_eq!(a.requests(), before_a + 30);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ejected_backend_gets_requests_again_when_its_ejection_ends() {
    let registry = Registry::start().await;
    let (_a, b, resolver) = two_backends(&registry, "web").await;
    b.answer(503);
    let mut balance = Balance::builder(resolver.clone())
        .ejection(ejection(300))
        .shared(http())
        .unwrap();
    while b.requests() < 3 {
        get(&mut balance).await;
    }
    b.answer(200);
    let web_b = endpoint(&resolver, "web-b");
    until("the ejection ends", || !balance.is_ejected(&web_b)).await;
    let mut calls = 0;
    while b.requests() == 3 {
        get(&mut balance).await;
        calls += 1;
        assert!(calls < 1_000, "web-b never came back");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_endpoint_gets_no_requests_through_the_layer() {
    let registry = Registry::start().await;
    let (a, b, resolver) = two_backends(&registry, "web").await;
    registry.drain("web", "web-b").await;
    until("the view carries the drain", || {
        endpoint(&resolver, "web-b").serving == ServingState::Draining
    })
    .await;
    let layer = Balance::builder(resolver).port("http").into_layer().unwrap();
    let mut balance = ServiceBuilder::new().layer(layer).service(http());
    for _ in 0..20 {
        assert_eq!(get(&mut balance).await, 200);
    }
    assert_eq!((a.requests(), b.requests()), (20, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_eligible_endpoint_is_a_typed_refusal_not_pending() {
    // Its only endpoint drains: a usable view with nothing to pick.
    let registry = Registry::start().await;
    let backend = Backend::start().await;
    registry.register("web", "web-a", backend.port()).await;
    registry.drain("web", "web-a").await;
    let resolver = registry.resolver("web").await;
    until("the view carries the drain", || {
        endpoint(&resolver, "web-a").serving == ServingState::Draining
    })
    .await;
    let mut balance = Balance::builder(resolver).shared(http()).unwrap();
    assert_eq!(refusal(&mut balance).await, "no_endpoint");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_view_at_all_is_unavailable_after_the_first_view_timeout() {
    // A port nobody listens on: the resolver never gets a view.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let client = Client::new(&format!("http://127.0.0.1:{port}")).unwrap();
    let resolver = Resolver::start(client, key("web"), ResolverConfig::default());
    let mut balance = Balance::builder(resolver)
        .first_view_timeout(Duration::from_millis(200))
        .shared(http())
        .unwrap();
    assert_eq!(refusal(&mut balance).await, "unavailable");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_without_the_named_port_is_a_typed_error() {
    let registry = Registry::start().await;
    let backend = Backend::start().await;
    registry.register("web", "web-a", backend.port()).await;
    let resolver = registry.resolver("web").await;
    until_endpoints(&resolver, 1).await;
    let mut balance = Balance::builder(resolver).port("grpc").shared(http()).unwrap();
    assert_eq!(refusal(&mut balance).await, "no_port");
}
