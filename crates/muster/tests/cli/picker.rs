//! The client library's `Picker` against a real registry: picks cycle over the eligible
//! endpoints, local failures eject (for this client only), a drain removes at once, and an
//! empty set is "no endpoint", never an older set.

use std::collections::BTreeSet;

use muster_client::{
    Deregistration, Drain, EligibilityConfig, OutlierDetector, PickError, Picker, Resolver, ResolverConfig, Risk,
    Strategy,
};
use muster_core::{Incarnation, InstanceId, ServiceKey};

use crate::inproc::{Registry, until};

fn key() -> ServiceKey {
    ServiceKey::new("acme", "prod", "pay").unwrap()
}

fn id(name: &str) -> InstanceId {
    InstanceId::new(name).unwrap()
}

/// Registers pay-0, pay-1 and pay-2, ready.
async fn register_three(client: &muster_client::Client) {
    for (n, ip) in ["10.0.0.1", "10.0.0.2", "10.0.0.3"].into_iter().enumerate() {
        crate::inproc::register(client, &key(), &format!("pay-{n}"), 1, ip).await;
    }
}

/// The instances picked by `times` picks at `now_ms`.
fn picked(picker: &Picker, times: usize, now_ms: u64) -> BTreeSet<String> {
    (0..times)
        .map(|_| {
            picker
                .pick(Risk::ReadOnly, now_ms)
                .unwrap()
                .endpoint
                .instance
                .to_string()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn picks_follow_eligibility_ejection_and_drain() {
    let registry = Registry::start().await;
    let client = registry.client();
    register_three(&client).await;
    let resolver = Resolver::start(client.clone(), key(), ResolverConfig::default());
    let picker = Picker::new(
        resolver.clone(),
        EligibilityConfig::default(),
        Strategy::RoundRobin,
        OutlierDetector::default(),
    )
    .unwrap();
    until("the view holds all three", || {
        resolver.view().active().is_some_and(|set| set.len() == 3)
    })
    .await;
    assert_eq!(
        picked(&picker, 6, 0),
        BTreeSet::from(["pay-0".into(), "pay-1".into(), "pay-2".into()])
    );

    // Five failures in a row eject pay-0 for this client.
    let pay0 = resolver.view().active().unwrap().get(&id("pay-0")).unwrap().clone();
    for _ in 0..5 {
        picker.report_failure(&pay0, 1_000);
    }
    let after_ejection = picked(&picker, 6, 1_000);
    assert_eq!(after_ejection, BTreeSet::from(["pay-1".into(), "pay-2".into()]));

    let drain = Drain::new(Incarnation(1)).reason("deploy");
    let drained = client.drain(&key(), &id("pay-1"), drain).await.unwrap();
    until("the drain arrives", || {
        resolver.view().active().unwrap().revision() >= drained.revision
    })
    .await;
    let after_drain = picked(&picker, 4, 1_000);
    assert_eq!(after_drain, BTreeSet::from(["pay-2".into()]));

    for name in ["pay-0", "pay-1", "pay-2"] {
        client
            .deregister(&key(), &id(name), Deregistration::new(Incarnation(1)))
            .await
            .unwrap();
    }
    until("the set is empty", || {
        resolver.view().active().is_some_and(|set| set.is_empty())
    })
    .await;
    assert_eq!(picker.pick(Risk::ReadOnly, 1_000).unwrap_err(), PickError::NoEndpoint);
}

/// With `LeastRequest`, picks prefer the endpoint with fewer calls in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_request_picks_prefer_the_idle_endpoint() {
    let registry = Registry::start().await;
    let client = registry.client();
    register_three(&client).await;
    let resolver = Resolver::start(client.clone(), key(), ResolverConfig::default());
    let picker = Picker::new(
        resolver.clone(),
        EligibilityConfig::default(),
        Strategy::LeastRequest,
        OutlierDetector::default(),
    )
    .unwrap();
    until("the view holds all three", || {
        resolver.view().active().is_some_and(|set| set.len() == 3)
    })
    .await;
    picker.pick(Risk::ReadOnly, 0).unwrap();
    let set = resolver.view().active().unwrap().clone();
    for busy in ["pay-0", "pay-1"] {
        for _ in 0..10 {
            picker.call_started(set.get(&id(busy)).unwrap());
        }
    }
    let mut counts = std::collections::BTreeMap::new();
    for _ in 0..60 {
        *counts
            .entry(picker.pick(Risk::ReadOnly, 0).unwrap().endpoint.instance.to_string())
            .or_insert(0) += 1;
    }
    let idle = counts.get("pay-2").copied().unwrap_or(0);
    assert!(
        counts.iter().all(|(name, n)| name == "pay-2" || *n < idle),
        "{counts:?}"
    );
}

/// With `Hash`, a key keeps its endpoint; a hash ring without points is refused up front.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hash_picks_keep_a_key_on_its_endpoint() {
    let registry = Registry::start().await;
    let client = registry.client();
    register_three(&client).await;
    let resolver = Resolver::start(client.clone(), key(), ResolverConfig::default());
    let zero = muster_client::HashRingConfig { vnodes_per_endpoint: 0 };
    let refused = Picker::new(
        resolver.clone(),
        EligibilityConfig::default(),
        Strategy::Hash(zero),
        OutlierDetector::default(),
    );
    assert_eq!(refused.unwrap_err().code(), "zero_not_allowed");
    let hash = Strategy::Hash(muster_client::HashRingConfig::default());
    let picker = Picker::new(
        resolver.clone(),
        EligibilityConfig::default(),
        hash,
        OutlierDetector::default(),
    )
    .unwrap();
    until("the view holds all three", || {
        resolver.view().active().is_some_and(|set| set.len() == 3)
    })
    .await;
    for key in [7_u64, 42, 1_000_003] {
        let first = picker
            .pick_keyed(Risk::ReadOnly, key, 0)
            .unwrap()
            .endpoint
            .instance
            .clone();
        for _ in 0..5 {
            assert_eq!(
                picker.pick_keyed(Risk::ReadOnly, key, 0).unwrap().endpoint.instance,
                first
            );
        }
    }
}
