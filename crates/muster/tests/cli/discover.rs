//! The client library's `tower::discover::Discover` source (SPEC C7) against a real
//! registry: eligible endpoints are inserted, a drain removes at once, a restart with a new
//! incarnation replaces the key.

use std::collections::BTreeSet;
use std::time::Duration;

use muster_client::discover::{EndpointDiscover, EndpointKey};
use muster_client::{Drain, EligibilityConfig, Resolver, ResolverConfig};
use muster_core::{Incarnation, InstanceId, ServiceKey};
use tower::discover::Change;

use crate::inproc::{Registry, STEP};

fn key() -> ServiceKey {
    ServiceKey::new("acme", "prod", "web").unwrap()
}

async fn register(client: &muster_client::Client, instance: &str, incarnation: u64) {
    crate::inproc::register(client, &key(), instance, incarnation, "10.0.0.1").await;
}

/// The next change, bounded.
async fn next(discover: &mut EndpointDiscover<String>) -> Change<EndpointKey, String> {
    let change = tokio::time::timeout(
        STEP,
        std::future::poll_fn(|cx| futures_core::Stream::poll_next(std::pin::Pin::new(&mut *discover), cx)),
    )
    .await
    .expect("a change in time")
    .expect("the stream is open");
    change.unwrap()
}

fn describe(change: &Change<EndpointKey, String>) -> String {
    match change {
        Change::Insert((instance, incarnation), service) => format!("+{instance}#{incarnation}={service}"),
        Change::Remove((instance, incarnation)) => format!("-{instance}#{incarnation}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_follows_eligibility_and_incarnations() {
    let registry = Registry::start().await;
    let client = registry.client();
    register(&client, "web-0", 1).await;
    register(&client, "web-1", 1).await;
    let resolver = Resolver::start(client.clone(), key(), ResolverConfig::default());
    let mut discover = EndpointDiscover::new(resolver.clone(), EligibilityConfig::default(), |e| {
        e.addresses[0].ip.to_string()
    });

    let first: BTreeSet<String> = [next(&mut discover).await, next(&mut discover).await]
        .iter()
        .map(describe)
        .collect();
    assert_eq!(
        first,
        BTreeSet::from(["+web-0#1=10.0.0.1".to_owned(), "+web-1#1=10.0.0.1".to_owned()])
    );

    let drain = Drain::new(Incarnation(1)).reason("deploy");
    client
        .drain(&key(), &InstanceId::new("web-1").unwrap(), drain)
        .await
        .unwrap();
    assert_eq!(
        describe(&next(&mut discover).await),
        "-web-1#1",
        "a drain removes the endpoint at once"
    );

    register(&client, "web-0", 2).await;
    let restart: BTreeSet<String> = [next(&mut discover).await, next(&mut discover).await]
        .iter()
        .map(describe)
        .collect();
    assert_eq!(
        restart,
        BTreeSet::from(["-web-0#1".to_owned(), "+web-0#2=10.0.0.1".to_owned()])
    );

    tokio::time::sleep(Duration::from_millis(100)).await;
    resolver.stop().await;
}
