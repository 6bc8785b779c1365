use muster_core::api::Frame;
use muster_core::{Actor, Incarnation, InstanceId, Principal, ServiceSnapshot};
use muster_registry::{CommandMeta, LeaseSpec, Register, RegistryConfig, Target};

use futures_util::StreamExt;

use super::*;

fn key(service: &str) -> ServiceKey {
    ServiceKey::new("acme", "prod", service).unwrap()
}

fn register(registry: &mut Registry, service: &str, instance: &str) -> Applied {
    let command = Register {
        target: Target {
            key: key(service),
            instance: InstanceId::new(instance).unwrap(),
            incarnation: Incarnation(1),
        },
        spec: serde_json::from_str(r#"{"addresses":[{"ip":"10.0.0.1"}]}"#).unwrap(),
        lease: LeaseSpec::None,
        expected_revision: None,
    };
    let meta = CommandMeta {
        at_ms: 0,
        principal: Principal::new("test").unwrap(),
        actor: Actor::App,
    };
    registry.apply(&command.into(), &meta).unwrap()
}

fn pop_frame(watcher: &mut Subscription) -> Option<Frame> {
    match watcher.try_next() {
        Next::Frame(bytes) => Some(serde_json::from_slice(&bytes).unwrap()),
        Next::Empty | Next::Done => None,
    }
}

fn apply(hub: &WatchHub, registry: &mut Registry, service: &str, instance: &str) -> Applied {
    let applied = register(registry, service, instance);
    hub.applied(registry, &applied);
    applied
}

#[test]
fn one_encoding_reaches_service_and_namespace_watchers_only() {
    let hub = WatchHub::new(8);
    let mut registry = Registry::new(RegistryConfig::default());
    let mut api = hub.subscribe(Scope::Service(key("api"))).unwrap();
    let mut namespace = hub.subscribe(Scope::Namespace(key("api").namespace_key())).unwrap();
    let mut web = hub.subscribe(Scope::Service(key("web"))).unwrap();
    apply(&hub, &mut registry, "api", "a");

    let (Next::Frame(one), Next::Frame(two)) = (api.try_next(), namespace.try_next()) else {
        panic!("both watchers get the update");
    };
    assert_eq!(one.as_ptr(), two.as_ptr(), "encoded once, shared");
    assert_eq!(web.try_next(), Next::Empty);
    assert_eq!(hub.revision(), Revision(1));
}

#[test]
fn a_full_queue_gets_resync_and_leaves_the_hub() {
    let hub = WatchHub::new(2);
    let mut registry = Registry::new(RegistryConfig::default());
    let mut slow = hub.subscribe(Scope::Service(key("api"))).unwrap();
    for instance in ["a", "b"] {
        apply(&hub, &mut registry, "api", instance);
    }
    assert_eq!(hub.stats().max_queued_frames, 2);
    apply(&hub, &mut registry, "api", "c");
    assert_eq!(
        hub.stats(),
        WatchStats {
            resyncs: 1,
            slow_consumers: 1,
            ..WatchStats::default()
        },
        "a slow consumer, cut off: its frames are released"
    );
    assert_eq!(pop_frame(&mut slow), Some(Frame::Resync { revision: Revision(3) }));
    assert_eq!(slow.try_next(), Next::Done);
    apply(&hub, &mut registry, "api", "d");
    assert_eq!(slow.try_next(), Next::Done, "nothing after the resync");
}

#[test]
fn reset_resyncs_every_watcher() {
    let hub = WatchHub::new(8);
    let mut registry = Registry::new(RegistryConfig::default());
    apply(&hub, &mut registry, "api", "a");
    let mut watcher = hub.subscribe(Scope::Service(key("web"))).unwrap();
    hub.reset(&registry);
    assert_eq!(pop_frame(&mut watcher), Some(Frame::Resync { revision: Revision(1) }));
    assert_eq!(hub.stats().watchers, 0);
}

#[test]
fn close_sends_closing_after_queued_frames_and_refuses_new_watchers() {
    let hub = WatchHub::new(8);
    let mut registry = Registry::new(RegistryConfig::default());
    let mut watcher = hub.subscribe(Scope::Service(key("api"))).unwrap();
    apply(&hub, &mut registry, "api", "a");
    hub.close();
    assert!(matches!(pop_frame(&mut watcher), Some(Frame::Update(_))));
    assert_eq!(pop_frame(&mut watcher), Some(Frame::Closing { revision: Revision(1) }));
    assert_eq!(watcher.try_next(), Next::Done);
    assert!(hub.subscribe(Scope::Service(key("api"))).is_none());
}

#[test]
fn dropping_a_subscription_unsubscribes() {
    let hub = WatchHub::new(8);
    let first = hub.subscribe(Scope::Service(key("api"))).unwrap();
    let second = hub.subscribe(Scope::Service(key("api"))).unwrap();
    assert_eq!(hub.stats().watchers, 2);
    drop(first);
    assert_eq!(hub.stats().watchers, 1);
    drop(second);
    assert_eq!(hub.stats().watchers, 0);
    assert!(hub.lock().services.is_empty(), "the topic goes with its last watcher");
}

#[test]
fn a_watcher_subscribed_after_an_apply_starts_after_it() {
    // Trace: the initial read saw revision 1; the live part must not repeat it.
    let hub = WatchHub::new(8);
    let mut registry = Registry::new(RegistryConfig::default());
    let mut early = hub.subscribe(Scope::Service(key("api"))).unwrap();
    apply(&hub, &mut registry, "api", "a");
    let mut late = hub.subscribe(Scope::Service(key("api"))).unwrap();
    apply(&hub, &mut registry, "api", "b");
    let revisions = |watcher: &mut Subscription| {
        std::iter::from_fn(|| pop_frame(watcher))
            .map(|frame| match frame {
                Frame::Update(update) => update.revision,
                other => panic!("unexpected {other:?}"),
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(revisions(&mut early), vec![Revision(1), Revision(2)]);
    assert_eq!(revisions(&mut late), vec![Revision(2)]);
}

#[test]
fn a_read_frame_is_freed_once_every_watcher_has_it() {
    let hub = WatchHub::new(8);
    let mut registry = Registry::new(RegistryConfig::default());
    let mut one = hub.subscribe(Scope::Service(key("api"))).unwrap();
    let mut two = hub.subscribe(Scope::Service(key("api"))).unwrap();
    apply(&hub, &mut registry, "api", "a");
    assert_eq!(hub.stats().queued_frames, 2);
    assert!(pop_frame(&mut one).is_some());
    assert_eq!(hub.stats().queued_frames, 1);
    drop(two);
    assert_eq!(hub.stats().queued_frames, 0);
    assert_eq!(one.try_next(), Next::Empty);
    two = hub.subscribe(Scope::Service(key("api"))).unwrap();
    assert_eq!(two.try_next(), Next::Empty, "a new watcher starts at the head");
}

#[tokio::test]
async fn an_idle_watcher_answers_a_tick_with_progress_at_the_published_revision() {
    let hub = WatchHub::new(8);
    let mut registry = Registry::new(RegistryConfig::default());
    let mut watcher = hub.subscribe(Scope::Service(key("api"))).unwrap();
    apply(&hub, &mut registry, "api", "a");
    apply(&hub, &mut registry, "web", "b");
    assert!(matches!(
        watcher.next().await.map(|f| serde_json::from_slice(&f).unwrap()),
        Some(Frame::Update(_))
    ));
    assert!(hub.progress_tick());
    let progress: Frame = serde_json::from_slice(&watcher.next().await.unwrap()).unwrap();
    assert_eq!(progress, Frame::Progress { revision: Revision(2) });
    hub.close();
    assert!(!hub.progress_tick(), "a closed hub stops ticking");
    let closing: Frame = serde_json::from_slice(&watcher.next().await.unwrap()).unwrap();
    assert_eq!(closing, Frame::Closing { revision: Revision(2) });
    assert_eq!(watcher.next().await, None);
}

fn deregister(hub: &WatchHub, registry: &mut Registry, service: &str, instance: &str) {
    let command = muster_registry::Deregister {
        target: Target {
            key: key(service),
            instance: InstanceId::new(instance).unwrap(),
            incarnation: Incarnation(1),
        },
        expected_revision: None,
    };
    let meta = CommandMeta {
        at_ms: 0,
        principal: Principal::new("test").unwrap(),
        actor: Actor::App,
    };
    let applied = registry.apply(&command.into(), &meta).unwrap();
    hub.applied(registry, &applied);
}

#[test]
fn a_lagging_watchers_coalesced_updates_bring_its_view_exactly_to_the_registrys() {
    // Trace (reference/control-plane-state.txt, "Capacity Planning"): coalescing superseded
    // endpoint updates must preserve ordered deletion. A watcher that fell behind a burst
    // of puts and deletes of one service (and of another in its namespace) gets one update
    // per service; applied to the view it had, with the contiguity and digest checks a
    // client makes, it must reach exactly the registry's set: no lost delete, no gap.
    let hub = WatchHub::new(64);
    let mut registry = Registry::new(RegistryConfig::default());
    apply(&hub, &mut registry, "api", "a");
    apply(&hub, &mut registry, "api", "b");
    let mut view = ServiceSnapshot::clone(&registry.snapshot(&key("api")).unwrap());
    let mut watcher = hub.subscribe(Scope::Service(key("api"))).unwrap();
    let mut namespace = hub.subscribe(Scope::Namespace(key("api").namespace_key())).unwrap();
    let mut namespace_views = std::collections::HashMap::new();
    namespace_views.insert(key("api"), view.clone());
    let mut changes = 0;
    for round in 0..4 {
        for instance in ["c", "d", "e"] {
            apply(&hub, &mut registry, "api", &format!("{instance}{round}"));
            apply(&hub, &mut registry, "web", &format!("{instance}{round}"));
            changes += 1;
        }
        deregister(&hub, &mut registry, "api", &format!("c{round}"));
        changes += 1;
    }
    deregister(&hub, &mut registry, "api", "a");
    changes += 1;

    let mut updates = 0;
    while let Some(frame) = pop_frame(&mut watcher) {
        let Frame::Update(update) = frame else {
            panic!("only updates: {frame:?}")
        };
        assert!(view.apply(&update).unwrap(), "contiguous and its digest checks");
        updates += 1;
    }
    assert_eq!(view, *registry.snapshot(&key("api")).unwrap());
    assert!(view.get(&InstanceId::new("a").unwrap()).is_none(), "the delete arrived");
    assert_eq!(updates, 1, "{changes} changes behind, coalesced into one update");

    while let Some(frame) = pop_frame(&mut namespace) {
        let Frame::Update(update) = frame else {
            panic!("only updates: {frame:?}")
        };
        let view = namespace_views
            .entry(update.key.clone())
            .or_insert_with(|| ServiceSnapshot::empty(update.key.clone()));
        assert!(view.apply(&update).unwrap());
    }
    for service in ["api", "web"] {
        assert_eq!(
            namespace_views[&key(service)],
            *registry.snapshot(&key(service)).unwrap(),
            "{service}"
        );
    }
    assert_eq!(hub.stats().resyncs, 0);
}
