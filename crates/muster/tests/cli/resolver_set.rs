//! The client library's resolver handles (SPEC C1, C2, C7, D4) against a real registry:
//! resolvers of several services sharing one namespace watch, each view following its own
//! service; clonable handles whose task stops with the last handle or an explicit stop; and
//! the views as a `Stream`.

use std::future::poll_fn;
use std::pin::Pin;
use std::sync::Arc;

use futures_core::Stream;
use muster_client::view::View;
use muster_client::{
    Client, Deregistration, Drain, Resolver, ResolverConfig, ResolverSet, ResolverSetConfig, StaleBudget, ViewChanges,
};
use muster_core::{Incarnation, InstanceId, ServiceKey, ServingState};

use crate::inproc::{Registry, STEP, until};

fn key(service: &str) -> ServiceKey {
    ServiceKey::new("acme", "prod", service).unwrap()
}

async fn register(client: &Client, service: &str, instance: &str, ip: &str) {
    crate::inproc::register(client, &key(service), instance, 1, ip).await;
}

/// The instances of the resolver's active set.
fn members(resolver: &Resolver) -> Vec<String> {
    resolver
        .view()
        .active()
        .map(|set| set.iter().map(|e| e.instance.to_string()).collect())
        .unwrap_or_default()
}

fn lenient() -> StaleBudget {
    StaleBudget {
        budget_ms: 60_000,
        ..StaleBudget::default()
    }
}

fn set(client: &Client) -> ResolverSet {
    ResolverSet::new(
        client.clone(),
        ResolverSetConfig {
            budget: lenient(),
            ..ResolverSetConfig::default()
        },
    )
}

/// Waits (bounded) until `views` says its resolver has stopped: its sender is gone.
async fn stopped(mut views: tokio::sync::watch::Receiver<Arc<View>>) {
    tokio::time::timeout(STEP, async { while views.changed().await.is_ok() {} })
        .await
        .expect("the resolver's task stops");
}

/// The next view of `changes` (bounded), or `None` once the stream has ended.
async fn next(changes: &mut ViewChanges) -> Option<Arc<View>> {
    tokio::time::timeout(STEP, poll_fn(|cx| Pin::new(&mut *changes).poll_next(cx)))
        .await
        .expect("a view arrives, or the stream ends")
}

/// Three services of one namespace resolved through one set hold one watch stream on the
/// server, not three; every view follows its own service through registrations, a
/// deregistration and a drain, and a service resolved later joins the same stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_services_share_one_namespace_watch_and_each_view_follows_its_own() {
    let registry = Registry::start().await;
    let client = registry.client();
    register(&client, "api", "api-0", "10.0.0.1").await;
    register(&client, "web", "web-0", "10.0.1.1").await;
    register(&client, "web", "web-1", "10.0.1.2").await;
    register(&client, "db", "db-0", "10.0.2.1").await;
    // Another namespace's service: its changes must not reach these views.
    crate::inproc::register(
        &client,
        &ServiceKey::new("acme", "dev", "api").unwrap(),
        "x-0",
        1,
        "10.9.0.1",
    )
    .await;

    let resolvers = set(&client);
    let api = resolvers.resolve(key("api"));
    let web = resolvers.resolve(key("web"));
    let db = resolvers.clone().resolve(key("db"));
    until("every view holds its service", || {
        members(&api) == ["api-0"] && members(&web) == ["web-0", "web-1"] && members(&db) == ["db-0"]
    })
    .await;
    until("one watch stream serves the three", || registry.watchers() == 1).await;
    let again = resolvers.resolve(key("api"));
    assert!(
        Arc::ptr_eq(&again.view(), &api.view()),
        "resolving a followed service returns the same resolver"
    );

    register(&client, "api", "api-1", "10.0.0.2").await;
    client
        .deregister(
            &key("web"),
            &InstanceId::new("web-0").unwrap(),
            Deregistration::new(Incarnation(1)),
        )
        .await
        .unwrap();
    let drained = client
        .drain(
            &key("db"),
            &InstanceId::new("db-0").unwrap(),
            Drain::new(Incarnation(1)).reason("deploy"),
        )
        .await
        .unwrap();
    until("every view follows its own changes", || {
        members(&api) == ["api-0", "api-1"]
            && members(&web) == ["web-1"]
            && db.view().active().is_some_and(|set| set.revision() >= drained.revision)
    })
    .await;
    let db_view = db.view();
    let db_0 = db_view
        .active()
        .unwrap()
        .get(&InstanceId::new("db-0").unwrap())
        .unwrap();
    assert_eq!(db_0.serving, ServingState::Draining);
    until("the namespace's progress reaches every view", || {
        [&api, &web, &db]
            .iter()
            .all(|resolver| resolver.status().received >= drained.revision)
    })
    .await;
    for resolver in [&api, &web, &db] {
        let status = resolver.status();
        assert!(!status.resnapshot_pending);
        assert_eq!(status.active, resolver.view().active().map(|set| set.revision()));
    }

    // A service resolved later, not registered yet: unknown, then followed on the same stream.
    let cache = resolvers.resolve(key("cache"));
    until("the late service is confirmed unknown", || {
        !cache.status().resnapshot_pending && cache.view().active().is_none()
    })
    .await;
    register(&client, "cache", "cache-0", "10.0.3.1").await;
    until("the late service's view follows it", || members(&cache) == ["cache-0"]).await;
    until("still one watch stream for four services", || registry.watchers() == 1).await;
    assert_eq!(members(&api), ["api-0", "api-1"], "the others' views are kept");

    let views = api.subscribe();
    drop((api, again, web, db, cache));
    stopped(views).await;
    until("the namespace watch ends with its last resolver", || {
        registry.watchers() == 0
    })
    .await;
}

/// A registry restart under a shared namespace watch: every view keeps its set while the
/// registry is away and, once back, catches up with a change made after the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_namespace_watch_keeps_the_views_through_a_restart_and_recovers() {
    let mut registry = Registry::start().await;
    let client = registry.client();
    register(&client, "api", "api-0", "10.0.0.1").await;
    register(&client, "web", "web-0", "10.0.1.1").await;
    let resolvers = set(&client);
    let api = resolvers.resolve(key("api"));
    let web = resolvers.resolve(key("web"));
    until("both views hold their service", || {
        members(&api) == ["api-0"] && members(&web) == ["web-0"]
    })
    .await;
    let before = api.view().resume_from().unwrap();

    registry.stop().await;
    assert_eq!(members(&api), ["api-0"], "an outage keeps the last set");
    assert_eq!(members(&web), ["web-0"], "an outage keeps the last set");
    registry.restart().await;
    register(&registry.client(), "web", "web-1", "10.0.1.2").await;
    until("the views recover", || members(&web) == ["web-0", "web-1"]).await;
    assert_eq!(members(&api), ["api-0"]);
    assert!(
        api.view().resume_from().unwrap() > before,
        "progress confirms the unchanged service too"
    );
    api.stop().await;
    web.stop().await;
    until("the namespace watch ends", || registry.watchers() == 0).await;
}

/// Clones of a resolver share one view and one task: dropping one keeps it following;
/// dropping the last stops the task and closes its watch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resolvers_task_stops_when_its_last_handle_is_dropped() {
    let registry = Registry::start().await;
    let client = registry.client();
    register(&client, "api", "api-0", "10.0.0.1").await;
    let first = Resolver::start(client.clone(), key("api"), ResolverConfig::default());
    let second = first.clone();
    until("the view holds the service", || members(&second) == ["api-0"]).await;
    assert_eq!(registry.watchers(), 1, "clones share one watch");

    let views = second.subscribe();
    drop(first);
    register(&client, "api", "api-1", "10.0.0.2").await;
    until("the remaining handle still follows", || {
        members(&second) == ["api-0", "api-1"]
    })
    .await;

    drop(second);
    stopped(views).await;
    until("the watch is closed", || registry.watchers() == 0).await;
}

/// An explicit stop on one handle stops the task for every clone; the others keep the last
/// view readable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explicit_stop_on_one_handle_stops_every_clone() {
    let registry = Registry::start().await;
    let client = registry.client();
    register(&client, "api", "api-0", "10.0.0.1").await;
    let first = Resolver::start(client.clone(), key("api"), ResolverConfig::default());
    let second = first.clone();
    until("the view holds the service", || members(&second) == ["api-0"]).await;

    let views = second.subscribe();
    first.stop().await;
    stopped(views).await;
    until("the watch is closed", || registry.watchers() == 0).await;
    assert_eq!(members(&second), ["api-0"], "the last view stays readable");
}

/// `changes()` is a `Stream` of views: the current one at once, then the ones published
/// after a change, and it ends when the resolver stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_views_changes_arrive_as_a_stream_that_ends_with_the_resolver() {
    let registry = Registry::start().await;
    let client = registry.client();
    register(&client, "api", "api-0", "10.0.0.1").await;
    let resolver = set(&client).resolve(key("api"));
    let mut changes = resolver.changes();
    let names = |view: &View| -> Vec<String> {
        view.active()
            .map(|set| set.iter().map(|e| e.instance.to_string()).collect())
            .unwrap_or_default()
    };
    let mut view = next(&mut changes).await.expect("the current view at once");
    while names(&view) != ["api-0"] {
        view = next(&mut changes).await.expect("the resolver is running");
    }
    register(&client, "api", "api-1", "10.0.0.2").await;
    while names(&view) != ["api-0", "api-1"] {
        view = next(&mut changes).await.expect("the resolver is running");
    }
    resolver.stop().await;
    // What was published before the stop may still be read; then the stream ends.
    while next(&mut changes).await.is_some() {}
}
