//! `EndpointDiscover` with local ejections (SPEC C5, C7) against a real registry: an
//! endpoint the shared detector ejects is removed, inserted again when its ejection ends, and
//! view changes keep diffing meanwhile.

use std::collections::BTreeMap;
use std::sync::Arc;

use muster_client::discover::{EndpointDiscover, EndpointKey};
use muster_client::tower::SharedEjections;
use muster_client::{EjectionConfig, EligibilityConfig, FailureOutcome, Fraction, Member, OutlierDetector};
use tower::discover::Change;
use tower::{Service, ServiceExt};

use crate::inproc::{Registry, STEP, until_endpoints};

type Discover = EndpointDiscover<Arc<Member>>;

/// Two failures in a row eject for `ejection_ms`; half of the endpoints may be out.
fn ejections(ejection_ms: u64) -> SharedEjections {
    SharedEjections::new(
        OutlierDetector::new(EjectionConfig {
            consecutive_failures: 2,
            base_ejection_ms: ejection_ms,
            max_ejection_ms: ejection_ms,
            max_ejected: Fraction::percent(50),
        })
        .unwrap(),
    )
}

/// The next change, bounded.
async fn next(discover: &mut Discover) -> Change<EndpointKey, Arc<Member>> {
    let change = tokio::time::timeout(
        STEP,
        std::future::poll_fn(|cx| futures_core::Stream::poll_next(std::pin::Pin::new(&mut *discover), cx)),
    )
    .await
    .expect("a change in time")
    .expect("the stream is open");
    change.unwrap()
}

fn describe(change: &Change<EndpointKey, Arc<Member>>) -> String {
    match change {
        Change::Insert((instance, incarnation), _) => format!("+{instance}#{incarnation}"),
        Change::Remove((instance, incarnation)) => format!("-{instance}#{incarnation}"),
    }
}

/// The first `count` changes, all inserts: the endpoints by instance.
async fn inserted(discover: &mut Discover, count: usize) -> BTreeMap<String, Arc<Member>> {
    let mut endpoints = BTreeMap::new();
    for _ in 0..count {
        match next(discover).await {
            Change::Insert((instance, _), endpoint) => endpoints.insert(instance.to_string(), endpoint),
            Change::Remove(key) => panic!("unexpected remove of {key:?}"),
        };
    }
    endpoints
}

fn eject(ejections: &SharedEjections, endpoint: &Member) {
    assert!(matches!(
        ejections.report_failure(endpoint),
        FailureOutcome::Counted { .. }
    ));
    assert!(matches!(ejections.report_failure(endpoint), FailureOutcome::Ejected(_)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ejected_endpoint_is_removed_and_inserted_again_when_its_ejection_ends() {
    let registry = Registry::start().await;
    registry.register("web", "web-0", 8080).await;
    registry.register("web", "web-1", 8081).await;
    let resolver = registry.resolver("web").await;
    until_endpoints(&resolver, 2).await;
    // Short enough to end within the test, long enough to see the removal first.
    let ejections = ejections(300);
    let mut discover = EndpointDiscover::with_ejections(
        resolver.clone(),
        EligibilityConfig::default(),
        ejections.clone(),
        Arc::clone,
    );
    let endpoints = inserted(&mut discover, 2).await;

    eject(&ejections, &endpoints["web-1"]);
    assert_eq!(
        describe(&next(&mut discover).await),
        "-web-1#1",
        "an ejection removes at once"
    );
    assert_eq!(
        describe(&next(&mut discover).await),
        "+web-1#1",
        "the end of the ejection inserts it again"
    );
    assert!(!ejections.is_ejected(&endpoints["web-1"]));

    // View changes still diff against what was sent.
    registry.drain("web", "web-0").await;
    assert_eq!(describe(&next(&mut discover).await), "-web-0#1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_view_change_during_an_ejection_keeps_the_ejected_endpoint_out() {
    let registry = Registry::start().await;
    registry.register("api", "api-0", 8080).await;
    registry.register("api", "api-1", 8081).await;
    let resolver = registry.resolver("api").await;
    until_endpoints(&resolver, 2).await;
    // Longer than the test: the ejection cannot end while it runs.
    let ejections = ejections(600_000);
    let mut discover = EndpointDiscover::with_ejections(
        resolver.clone(),
        EligibilityConfig::default(),
        ejections.clone(),
        Arc::clone,
    );
    let endpoints = inserted(&mut discover, 2).await;
    eject(&ejections, &endpoints["api-0"]);
    assert_eq!(describe(&next(&mut discover).await), "-api-0#1");

    registry.register("api", "api-2", 8082).await;
    assert_eq!(
        describe(&next(&mut discover).await),
        "+api-2#1",
        "the new endpoint is inserted and the ejected one stays out (SPEC C5: ejection survives refreshes)"
    );
    registry.drain("api", "api-1").await;
    assert_eq!(describe(&next(&mut discover).await), "-api-1#1");
    assert!(ejections.is_ejected(&endpoints["api-0"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcomes_reported_by_the_endpoint_services_eject_through_discovery() {
    let registry = Registry::start().await;
    registry.register("pay", "pay-0", 8080).await;
    registry.register("pay", "pay-1", 8081).await;
    let resolver = registry.resolver("pay").await;
    until_endpoints(&resolver, 2).await;
    let ejections = ejections(600_000);
    let reporter = ejections.clone();
    // Every endpoint answers 503: its wrapped service reports each answer as a failure.
    let mut discover = EndpointDiscover::with_ejections(
        resolver.clone(),
        EligibilityConfig::default(),
        ejections.clone(),
        move |endpoint: &Arc<Member>| {
            let unavailable = tower::service_fn(|_: hyper::Request<()>| async {
                Ok::<_, std::convert::Infallible>(hyper::Response::builder().status(503).body(()).unwrap())
            });
            (Arc::clone(endpoint), reporter.report(endpoint, unavailable))
        },
    );
    let mut services = BTreeMap::new();
    for _ in 0..2 {
        let change = tokio::time::timeout(
            STEP,
            std::future::poll_fn(|cx| futures_core::Stream::poll_next(std::pin::Pin::new(&mut discover), cx)),
        )
        .await
        .unwrap()
        .unwrap()
        .unwrap();
        let Change::Insert((instance, _), service) = change else {
            panic!("an insert first");
        };
        services.insert(instance.to_string(), service);
    }
    let (endpoint, service) = services.get_mut("pay-1").unwrap();
    for _ in 0..2 {
        let response = service
            .ready()
            .await
            .unwrap()
            .call(hyper::Request::new(()))
            .await
            .unwrap();
        assert_eq!(response.status(), 503);
    }
    assert!(ejections.is_ejected(endpoint), "two 503s in a row eject");
    let change = tokio::time::timeout(
        STEP,
        std::future::poll_fn(|cx| futures_core::Stream::poll_next(std::pin::Pin::new(&mut discover), cx)),
    )
    .await
    .unwrap()
    .unwrap()
    .unwrap();
    assert!(matches!(change, Change::Remove((instance, _)) if instance.as_str() == "pay-1"));
}
