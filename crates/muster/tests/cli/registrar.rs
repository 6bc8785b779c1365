//! The client library's registrar (SPEC C6) against a real registry started in-process:
//! renewals keep an endpoint past its TTL, shutdown drains before it deletes, a lost lease
//! is reported and recovered, an unreachable registry is reported as a failing renewal.

use std::time::Duration;

use muster_client::Client;
use muster_client::{LeaseLossPolicy, Registrar, RegistrarStatus, Registration, incarnation_from_counter};
use muster_core::api::Frame;
use muster_core::{
    AddressSpec, DeleteReason, Endpoint, EndpointSpec, Event, Incarnation, InstanceId, PortSpec, Protocol, ServiceKey,
    ServingState,
};
use tokio::sync::watch;

use crate::inproc::{POLL, Registry, STEP, TTL};

fn key() -> ServiceKey {
    ServiceKey::new("acme", "prod", "api").unwrap()
}

fn instance() -> InstanceId {
    InstanceId::new("api-1").unwrap()
}

fn spec() -> EndpointSpec {
    EndpointSpec {
        addresses: vec![AddressSpec {
            ip: "10.0.0.1".into(),
            scope: None,
        }],
        ports: vec![PortSpec {
            name: "http".into(),
            port: 8080,
            protocol: Protocol::Http,
        }],
        ..EndpointSpec::default()
    }
}

fn registrar(registry: &Registry) -> muster_client::RegistrarBuilder {
    Registrar::builder(
        registry.client(),
        key(),
        instance(),
        Registration::new(incarnation_from_counter(1)).endpoint(spec()),
    )
    .ttl(TTL)
    .drain_grace(Duration::from_millis(500))
}

/// The registry's record of the instance, if any.
async fn record(client: &Client) -> Option<Endpoint> {
    let reply = client.snapshot_all(&key(), None).await.unwrap();
    reply.endpoints.into_iter().find(|e| e.instance == instance())
}

/// Polls the registry until `check` holds for the instance's record (bounded by [`STEP`]).
async fn wait_record(client: &Client, what: &str, check: impl Fn(Option<&Endpoint>) -> bool) -> Option<Endpoint> {
    let polls = STEP.as_millis() / POLL.as_millis();
    for _ in 0..polls {
        let found = record(client).await;
        if check(found.as_ref()) {
            return found;
        }
        tokio::time::sleep(POLL).await;
    }
    panic!("{what}: still {:?}", record(client).await);
}

/// Waits (bounded) for a status matching `check`.
async fn wait_status(
    status: &mut watch::Receiver<RegistrarStatus>,
    what: &str,
    check: impl FnMut(&RegistrarStatus) -> bool,
) -> RegistrarStatus {
    let found = match tokio::time::timeout(STEP, status.wait_for(check)).await {
        Ok(Ok(found)) => Some(found.clone()),
        _ => None,
    };
    found.unwrap_or_else(|| panic!("{what}: the status is still {:?}", status.borrow()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_keep_a_ready_endpoint_registered_past_several_ttls() {
    let registry = Registry::start().await;
    let client = registry.client();
    let registrar = registrar(&registry).start();
    let registration = registrar.registered().await.expect("registered");
    assert_eq!(registration.incarnation, incarnation_from_counter(1));
    let starting = record(&client).await.expect("registered");
    assert_eq!(
        starting.serving,
        ServingState::Starting,
        "no traffic before the app is ready"
    );

    registrar.set_ready();
    wait_record(&client, "ready", |e| {
        e.is_some_and(|e| e.serving == ServingState::Ready)
    })
    .await;
    tokio::time::sleep(TTL * 3).await;
    let kept = record(&client).await.expect("still registered after three TTLs");
    assert_eq!(
        (kept.incarnation, kept.lease),
        (registration.incarnation, Some(registration.lease))
    );
    assert!(
        matches!(registrar.status(), RegistrarStatus::Healthy(_)),
        "{:?}",
        registrar.status()
    );

    let last = tokio::time::timeout(STEP, registrar.shutdown()).await.unwrap();
    assert!(
        matches!(last, RegistrarStatus::Stopped { deregistered: true, .. }),
        "{last:?}"
    );
    assert!(record(&client).await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_publishes_draining_before_the_fenced_delete() {
    let registry = Registry::start().await;
    let client = registry.client();
    let registrar = registrar(&registry).start();
    let registration = registrar.registered().await.expect("registered");
    registrar.set_ready();
    wait_record(&client, "ready", |e| {
        e.is_some_and(|e| e.serving == ServingState::Ready)
    })
    .await;

    let mut watch = client.watch_service(&key(), None, STEP).await.unwrap();
    let shutdown = tokio::spawn(registrar.shutdown());
    let mut seen = Vec::new();
    while !seen.iter().any(|event| matches!(event, Event::Delete { .. })) {
        let frame = tokio::time::timeout(STEP, watch.next_frame()).await.unwrap().unwrap();
        if let Some((_, Frame::Update(update))) = frame {
            seen.extend(update.events.iter().cloned());
        }
    }
    let draining = seen
        .iter()
        .position(|e| matches!(e, Event::Put { endpoint } if endpoint.serving == ServingState::Draining));
    let deleted = seen.iter().position(|e| {
        matches!(e, Event::Delete { incarnation, reason: DeleteReason::Deregistered, .. }
            if *incarnation == registration.incarnation)
    });
    assert!(
        matches!((draining, deleted), (Some(d), Some(x)) if d < x),
        "draining must come before the delete: {seen:?}"
    );
    let last = tokio::time::timeout(STEP, shutdown).await.unwrap().unwrap();
    assert_eq!(
        last,
        RegistrarStatus::Stopped {
            deregistered: true,
            error: None
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_is_reregistered_with_the_next_incarnation_in_the_asked_state() {
    let registry = Registry::start().await;
    let client = registry.client();
    let registrar = registrar(&registry).start();
    let first = registrar.registered().await.expect("registered");
    registrar.set_ready();
    wait_record(&client, "ready", |e| {
        e.is_some_and(|e| e.serving == ServingState::Ready)
    })
    .await;

    // Someone revokes the lease (as expiry would after a partition): the endpoint goes, and
    // the tombstone refuses this incarnation from now on.
    client.revoke_lease(&key().tenant, first.lease).await.unwrap();
    let mut status = registrar.subscribe();
    let again = wait_status(&mut status, "re-registered", |s| {
        s.registration().is_some_and(|r| r.lease_losses == 1)
    })
    .await;
    let again = again.registration().unwrap().clone();
    assert_eq!(again.incarnation, Incarnation(first.incarnation.0 + 1));
    assert_ne!(again.lease, first.lease);
    let back = wait_record(&client, "back", |e| {
        e.is_some_and(|e| e.incarnation == again.incarnation)
    })
    .await;
    assert_eq!(
        back.unwrap().serving,
        ServingState::Ready,
        "the app's readiness carried over"
    );

    let last = tokio::time::timeout(STEP, registrar.shutdown()).await.unwrap();
    assert!(
        matches!(last, RegistrarStatus::Stopped { deregistered: true, .. }),
        "{last:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_stop_policy_a_lost_lease_is_reported_and_final() {
    let registry = Registry::start().await;
    let client = registry.client();
    let registrar = registrar(&registry).lease_loss(LeaseLossPolicy::Stop).start();
    let first = registrar.registered().await.expect("registered");
    client.revoke_lease(&key().tenant, first.lease).await.unwrap();
    let mut status = registrar.subscribe();
    let lost = wait_status(&mut status, "lease lost", RegistrarStatus::is_finished).await;
    let RegistrarStatus::LeaseLost {
        lost,
        reregistering_as: None,
        last_error: Some(error),
        ..
    } = lost
    else {
        panic!("{lost:?}");
    };
    assert_eq!((lost.lease, error.code().as_str()), (first.lease, "lease_not_found"));
    assert!(record(&client).await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_registry_is_reported_as_failing_renewals_and_recovers_on_its_return() {
    let mut registry = Registry::start().await;
    let registrar = registrar(&registry).ttl(Duration::from_secs(3)).start();
    let first = registrar.registered().await.expect("registered");
    let mut status = registrar.subscribe();

    registry.stop().await;
    let failing = wait_status(&mut status, "renewal failing", |s| {
        matches!(s, RegistrarStatus::RenewalFailing { .. })
    })
    .await;
    let RegistrarStatus::RenewalFailing { error, .. } = &failing else {
        unreachable!()
    };
    assert!(error.is_transient(), "{error:?}");

    // The restarted registry still holds the lease (and gives it a fresh deadline).
    registry.restart().await;
    let healthy = wait_status(&mut status, "healthy again", |s| {
        matches!(s, RegistrarStatus::Healthy(_))
    })
    .await;
    let healthy = healthy.registration().unwrap();
    assert_eq!((healthy.lease, healthy.lease_losses), (first.lease, 0));
    let last = tokio::time::timeout(STEP, registrar.shutdown()).await.unwrap();
    assert!(
        matches!(last, RegistrarStatus::Stopped { deregistered: true, .. }),
        "{last:?}"
    );
}
