//! Say what is wrong, at once (SPEC C2, W5): a misspelt service fails `unknown_service`
//! naming the key without waiting for the first-view timeout; a server that cannot be
//! reached fails `unavailable` with the connection error, in the message and in
//! `ViewStatus`; the tower `Discover` path ends with that error instead of pending forever.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::Empty;
use hyper::body::Bytes;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use muster_client::discover::EndpointDiscover;
use muster_client::tower::{Balance, SharedEjections};
use muster_client::{Client, EligibilityConfig, Member, Resolver, ResolverConfig, StaleError};
use tower::{Service, ServiceExt};

use crate::inproc::{Registry, STEP, key, until};

type Http = HttpClient<HttpConnector, Empty<Bytes>>;

/// Far longer than any answer here may take: a test that waited for it has failed.
const LONG: Duration = Duration::from_secs(60);

/// The error of one call through a default balancer over `resolver`, and how long it took.
async fn refused(resolver: Resolver, first_view_timeout: Duration) -> (&'static str, String, Duration) {
    let http: Http = HttpClient::builder(TokioExecutor::new()).build_http();
    let mut balance = Balance::builder(resolver)
        .first_view_timeout(first_view_timeout)
        .shared(http)
        .unwrap();
    let started = tokio::time::Instant::now();
    let request = hyper::Request::get("/").body(Empty::new()).unwrap();
    let call = async { balance.ready().await?.call(request).await };
    let error = tokio::time::timeout(STEP, call)
        .await
        .expect("never pending forever")
        .expect_err("refused");
    (error.code(), error.to_string(), started.elapsed())
}

/// A loopback address nothing listens on.
async fn nobody() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}")
}

/// The trace: `web-typo` looked exactly like a dead server (`unavailable` after 5 s).
/// The server answers at once that it holds nothing of it: so does the balancer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misspelt_service_fails_unknown_service_at_once_naming_the_key() {
    let registry = Registry::start().await;
    let resolver = Resolver::start(registry.client(), key("web-typo"), ResolverConfig::default());
    let (code, message, took) = refused(resolver.clone(), LONG).await;
    assert_eq!(code, "unknown_service");
    assert!(message.contains("acme/prod/web-typo"), "{message}");
    assert_eq!(
        message.matches("unknown_service").count(),
        1,
        "the code once: {message}"
    );
    assert!(took < Duration::from_secs(10), "not the first-view timeout: {took:?}");
    let status = resolver.status();
    assert!(status.unknown && status.active.is_none());
    assert!(matches!(
        resolver.usable(muster_client::Risk::ReadOnly),
        Err(StaleError::UnknownService { .. })
    ));
}

/// No server at all: `unavailable` after the first-view timeout, naming the connection error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_server_fails_unavailable_with_the_connection_error() {
    let client = Client::new(&nobody().await).unwrap();
    let resolver = Resolver::start(client, key("web"), ResolverConfig::default());
    until("the view has a transport error", || {
        resolver.status().last_error.is_some()
    })
    .await;
    let (code, message, _) = refused(resolver.clone(), Duration::from_millis(300)).await;
    assert_eq!(code, "unavailable");
    assert!(message.contains("cannot connect"), "{message}");
    assert_eq!(message.matches("unavailable").count(), 1, "the code once: {message}");
    let last_error = resolver.status().last_error.unwrap();
    assert!(last_error.contains("cannot connect"), "{last_error}");
}

type Discover = EndpointDiscover<Arc<Member>>;

async fn next(
    discover: &mut Discover,
) -> Option<Result<tower::discover::Change<muster_client::discover::EndpointKey, Arc<Member>>, StaleError>> {
    tokio::time::timeout(
        STEP,
        std::future::poll_fn(|cx| futures_core::Stream::poll_next(std::pin::Pin::new(&mut *discover), cx)),
    )
    .await
    .expect("never pending forever")
}

fn discover(resolver: &Resolver, first_view_timeout: Duration) -> Discover {
    EndpointDiscover::with_first_view_timeout(
        resolver.clone(),
        EligibilityConfig::default(),
        SharedEjections::default(),
        first_view_timeout,
        Arc::clone,
    )
}

/// The tower `Discover` path hung forever on both (`timeout 20` exited 124): now it ends
/// with `unknown_service` at once, or `unavailable` after the first-view timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_ends_with_the_error_instead_of_pending_forever() {
    let registry = Registry::start().await;
    let typo = Resolver::start(registry.client(), key("web-typo"), ResolverConfig::default());
    let mut changes = discover(&typo, LONG);
    let error = next(&mut changes).await.expect("an error, not the end").unwrap_err();
    assert_eq!(error.code(), "unknown_service");
    assert!(next(&mut changes).await.is_none(), "then the stream ends");

    let down = Resolver::start(
        Client::new(&nobody().await).unwrap(),
        key("web"),
        ResolverConfig::default(),
    );
    let mut changes = discover(&down, Duration::from_millis(300));
    let error = next(&mut changes).await.expect("an error, not the end").unwrap_err();
    assert_eq!(error.code(), "unavailable");
    assert!(error.to_string().contains("cannot connect"), "{error}");
}
