use muster_core::api::Frame;
use muster_core::{Actor, Incarnation, InstanceId, Principal};
use muster_registry::{CommandMeta, LeaseSpec, Register, RegistryConfig, Target};

use super::*;
use crate::frame_queue::Popped;

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

fn pop_frame(queue: &FrameQueue) -> Option<Frame> {
    match queue.try_pop() {
        Popped::Frame(bytes) => Some(serde_json::from_slice(&bytes).unwrap()),
        Popped::Empty | Popped::Done => None,
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
    let api = hub.subscribe(Scope::Service(key("api"))).unwrap();
    let namespace = hub.subscribe(Scope::Namespace(key("api").namespace_key())).unwrap();
    let web = hub.subscribe(Scope::Service(key("web"))).unwrap();
    apply(&hub, &mut registry, "api", "a");

    let (Popped::Frame(one), Popped::Frame(two)) = (api.queue().try_pop(), namespace.queue().try_pop()) else {
        panic!("both watchers get the update");
    };
    assert_eq!(one.as_ptr(), two.as_ptr(), "encoded once, shared");
    assert_eq!(web.queue().try_pop(), Popped::Empty);
    assert_eq!(hub.revision(), Revision(1));
}

#[test]
fn a_full_queue_gets_resync_and_leaves_the_hub() {
    let hub = WatchHub::new(2);
    let mut registry = Registry::new(RegistryConfig::default());
    let slow = hub.subscribe(Scope::Service(key("api"))).unwrap();
    for instance in ["a", "b"] {
        apply(&hub, &mut registry, "api", instance);
    }
    assert_eq!(hub.stats().max_queued_frames, 2);
    apply(&hub, &mut registry, "api", "c");
    assert_eq!(
        hub.stats(),
        WatchStats {
            resyncs: 1,
            ..WatchStats::default()
        }
    );
    assert_eq!(pop_frame(slow.queue()), Some(Frame::Resync { revision: Revision(3) }));
    assert_eq!(slow.queue().try_pop(), Popped::Done);
    apply(&hub, &mut registry, "api", "d");
    assert_eq!(slow.queue().try_pop(), Popped::Done, "nothing after the resync");
}

#[test]
fn reset_resyncs_every_watcher() {
    let hub = WatchHub::new(8);
    let mut registry = Registry::new(RegistryConfig::default());
    apply(&hub, &mut registry, "api", "a");
    let watcher = hub.subscribe(Scope::Service(key("web"))).unwrap();
    hub.reset(&registry);
    assert_eq!(
        pop_frame(watcher.queue()),
        Some(Frame::Resync { revision: Revision(1) })
    );
    assert_eq!(hub.stats().watchers, 0);
}

#[test]
fn close_sends_closing_after_queued_frames_and_refuses_new_watchers() {
    let hub = WatchHub::new(8);
    let mut registry = Registry::new(RegistryConfig::default());
    let watcher = hub.subscribe(Scope::Service(key("api"))).unwrap();
    apply(&hub, &mut registry, "api", "a");
    hub.close();
    assert!(matches!(pop_frame(watcher.queue()), Some(Frame::Update(_))));
    assert_eq!(
        pop_frame(watcher.queue()),
        Some(Frame::Closing { revision: Revision(1) })
    );
    assert_eq!(watcher.queue().try_pop(), Popped::Done);
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
    assert!(hub.lock().services.is_empty());
}
