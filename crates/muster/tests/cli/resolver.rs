//! The client library's resolver (SPEC C1, C2, C3) against a real registry: a restart keeps
//! the view and recovers it, compaction while disconnected forces a resnapshot that loses no
//! delete, a drain leaves the eligible set at once, and a last-known-good set serves at start
//! while the registry is down.

use muster_client::Client;
use muster_client::balance::EligibleSet;
use muster_client::{Deregistration, Drain, EligibilityConfig, OutlierDetector};
use muster_client::{Resolver, ResolverConfig, Risk, StaleBudget};
use muster_core::{Incarnation, InstanceId, ServiceKey, ServingState};

use crate::inproc::{Registry, until};

fn key() -> ServiceKey {
    ServiceKey::new("acme", "prod", "api").unwrap()
}

async fn register(client: &Client, instance: &str, ip: &str) {
    crate::inproc::register(client, &key(), instance, 1, ip).await;
}

fn once() -> Deregistration {
    Deregistration::new(Incarnation(1))
}

/// The instances of the resolver's active set.
fn members(resolver: &Resolver) -> Vec<String> {
    resolver
        .view()
        .active()
        .map(|set| set.iter().map(|e| e.instance.to_string()).collect())
        .unwrap_or_default()
}

fn lenient() -> ResolverConfig {
    ResolverConfig {
        budget: StaleBudget {
            budget_ms: 60_000,
            ..StaleBudget::default()
        },
        ..ResolverConfig::default()
    }
}

/// The registry restarts while a client follows it: the view is kept (never emptied) and
/// its age grows while the registry is away; once it is back, the view catches up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_restart_keeps_the_view_and_it_recovers() {
    let mut registry = Registry::start().await;
    let client = registry.client();
    register(&client, "api-0", "10.0.0.1").await;
    register(&client, "api-1", "10.0.0.2").await;
    let resolver = Resolver::start(client.clone(), key(), lenient());
    until("the view holds both", || members(&resolver) == ["api-0", "api-1"]).await;

    registry.stop().await;
    let age_then = resolver.status().age_ms.unwrap();
    // The stale age grows while away: waited for as an event (it passes 500 ms over its
    // value at the stop, more than two progress intervals without a confirmation), never
    // timed. Until then, and after it, the last set is kept.
    until("the stale age grows while away", || {
        resolver.status().age_ms.unwrap() >= age_then + 500
    })
    .await;
    let away_age = resolver.status().age_ms.unwrap();
    assert_eq!(members(&resolver), ["api-0", "api-1"], "an outage keeps the last set");
    assert!(
        resolver.usable(Risk::ReadOnly).is_ok(),
        "within the budget the set is still usable"
    );

    registry.restart().await;
    register(&registry.client(), "api-2", "10.0.0.3").await;
    until("the view recovers", || {
        members(&resolver) == ["api-0", "api-1", "api-2"]
    })
    .await;
    // By order, not by a bound: an age below the one read while away means the server
    // confirmed the set after that read, that is, after the restart.
    let age_now = resolver.status().age_ms.unwrap();
    assert!(
        age_now < away_age,
        "the age restarts from the recovered confirmation: {age_now} ms, {away_age} ms while away"
    );
    resolver.stop().await;
}

/// reference/control-plane-state.txt, "Watch gap silently loses a deletion", over the wire:
/// while the client is disconnected an endpoint is deleted and the history compacted; the
/// resume gets `compacted`, the resolver resnapshots, and the deleted endpoint is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_while_disconnected_forces_a_resnapshot_that_keeps_the_delete() {
    let mut registry = Registry::start_with(|mut config| {
        config.registry.history_revisions = 2;
        config
    })
    .await;
    let client = registry.client();
    register(&client, "api-0", "10.0.0.1").await;
    register(&client, "api-1", "10.0.0.2").await;
    let resolver = Resolver::start(client.clone(), key(), lenient());
    until("the view holds both", || members(&resolver) == ["api-0", "api-1"]).await;
    let resume_from = resolver.view().resume_from().unwrap();

    registry
        .away(|elsewhere| async move {
            let id = InstanceId::new("api-0").unwrap();
            elsewhere.deregister(&key(), &id, once()).await.unwrap();
            for n in 0..5 {
                register(&elsewhere, &format!("pad-{n}"), "10.0.1.1").await;
                let pad = InstanceId::new(&format!("pad-{n}")).unwrap();
                elsewhere.deregister(&key(), &pad, once()).await.unwrap();
            }
        })
        .await;
    until("the resolver resnapshots", || members(&resolver) == ["api-1"]).await;
    assert!(resolver.view().resume_from().unwrap() > resume_from);
    resolver.stop().await;
}

/// SPEC L6 / C3: a drain reaches the view, and the endpoint leaves the eligible set at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_leaves_the_eligible_set_as_soon_as_the_update_arrives() {
    let registry = Registry::start().await;
    let client = registry.client();
    register(&client, "api-0", "10.0.0.1").await;
    register(&client, "api-1", "10.0.0.2").await;
    let resolver = Resolver::start(client.clone(), key(), lenient());
    until("the view holds both", || members(&resolver).len() == 2).await;
    let drained = client
        .drain(
            &key(),
            &InstanceId::new("api-1").unwrap(),
            Drain::new(Incarnation(1)).reason("deploy"),
        )
        .await
        .unwrap();
    until("the drain arrives", || {
        resolver.view().active().unwrap().revision() >= drained.revision
    })
    .await;
    let view = resolver.view();
    let set = view.active().unwrap();
    assert_eq!(
        set.get(&InstanceId::new("api-1").unwrap()).unwrap().serving,
        ServingState::Draining
    );
    let eligible = EligibleSet::build(
        set.revision(),
        set.iter(),
        &EligibilityConfig::default(),
        &OutlierDetector::default(),
        0,
    );
    let names: Vec<String> = eligible.eligible().iter().map(|e| e.instance.to_string()).collect();
    assert_eq!(names, ["api-0"]);
    resolver.stop().await;
}

/// SPEC C1 step 1 / C2: with the registry down at start, a saved last-known-good set serves
/// within the stale budget; beyond it, mutations fail closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_last_known_good_set_serves_at_start_while_the_registry_is_down() {
    let mut registry = Registry::start().await;
    let client = registry.client();
    register(&client, "api-0", "10.0.0.1").await;
    let scratch = tempfile::tempdir().unwrap();
    let path = scratch.path().join("api.lkg");
    let saving = Resolver::start(
        client.clone(),
        key(),
        ResolverConfig {
            last_known_good: Some(path.clone()),
            ..lenient()
        },
    );
    until("the set is saved", || path.exists()).await;
    saving.stop().await;
    registry.stop().await;

    let config = ResolverConfig {
        last_known_good: Some(path),
        budget: StaleBudget {
            budget_ms: 60_000,
            privileged_budget_ms: 0,
            stale_reads_allowed: false,
        },
    };
    let resolver = Resolver::start(client.clone(), key(), config);
    let usable = resolver
        .usable(Risk::ReadOnly)
        .expect("the saved set is usable at once");
    assert_eq!(usable.snapshot.len(), 1);
    assert!(resolver.status().resnapshot_pending, "it still wants a fresh snapshot");
    assert!(
        resolver.usable(Risk::Privileged).is_err(),
        "a zero privileged budget fails closed"
    );
    resolver.stop().await;
}
