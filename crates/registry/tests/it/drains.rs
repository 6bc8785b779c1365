//! Drain deadlines are committed state (SPEC L6): a drain with a grace records when it
//! ends, every lift of the drain clears it, and snapshots carry it.

use muster_core::{Actor, Incarnation, Revision, ServingState};
use muster_registry::{Command, Drain, DrainDeadline, Registry, RegistryConfig, RegistryState};

use crate::support::{
    deregister, instance, key, meta, ok, owner, register, registry, set_serving, state_bytes, target,
};

fn drain_with_grace(name: &str, incarnation: u64, grace_ms: u64) -> Command {
    Drain {
        target: target("api", name, incarnation),
        reason: "shutdown".into(),
        grace_ms: Some(grace_ms),
        expected_revision: None,
    }
    .into()
}

fn deadline_of(registry: &Registry, name: &str) -> Option<u64> {
    registry
        .drain_deadline(&key("api"), &instance(name))
        .map(|drain| drain.deadline_ms)
}

#[test]
fn a_drain_with_a_grace_records_its_deadline_from_the_commands_time() {
    let mut registry = registry();
    ok(&mut registry, register("api", "a", 1, "10.0.0.1"));
    ok(&mut registry, register("api", "b", 1, "10.0.0.2"));
    // support::ok() proposes at 1,000 ms.
    ok(&mut registry, drain_with_grace("a", 1, 300));
    assert_eq!(
        registry.drain_deadline(&key("api"), &instance("a")),
        Some(&DrainDeadline {
            key: key("api"),
            instance: instance("a"),
            incarnation: Incarnation(1),
            deadline_ms: 1_300,
        })
    );
    let due = |registry: &Registry, now| {
        registry
            .drains_due(now)
            .map(|d| d.instance.to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(due(&registry, 1_299), Vec::<String>::new());
    assert_eq!(due(&registry, 1_300), ["a"]);
    // A retried drain changes nothing, its deadline included.
    let retried = ok(&mut registry, drain_with_grace("a", 1, 9_000));
    assert!(retried.unchanged.is_some());
    assert_eq!(deadline_of(&registry, "a"), Some(1_300));
}

#[test]
fn lifting_a_drain_clears_its_deadline_in_the_same_revision() {
    let mut registry = registry();
    for name in ["ready", "reregistered", "deregistered", "app-ready"] {
        ok(&mut registry, register("api", name, 1, "10.0.0.1"));
        ok(&mut registry, drain_with_grace(name, 1, 300));
    }
    assert_eq!(registry.drain_count(), 4);
    // The owner sets ready: lifted.
    let owner_ready = registry
        .apply(&set_serving("api", "ready", 1, ServingState::Ready), &owner())
        .unwrap();
    assert!(owner_ready.unchanged.is_none());
    // A higher incarnation replaces the drained record: lifted.
    ok(&mut registry, register("api", "reregistered", 2, "10.0.0.1"));
    ok(&mut registry, deregister("api", "deregistered", 1));
    // The app's ready is held by the drain (L5): the deadline stays.
    let held = registry
        .apply(
            &set_serving("api", "app-ready", 1, ServingState::Ready),
            &meta(Actor::App),
        )
        .unwrap();
    assert!(held.unchanged.is_some());
    let left: Vec<String> = registry.drains().map(|d| d.instance.to_string()).collect();
    assert_eq!(left, ["app-ready"]);
}

#[test]
fn a_grace_longer_than_an_hour_is_refused_and_changes_nothing() {
    let mut registry = registry();
    ok(&mut registry, register("api", "a", 1, "10.0.0.1"));
    let before = state_bytes(&registry);
    let refused = registry
        .apply(&drain_with_grace("a", 1, 3_600_001), &owner())
        .unwrap_err();
    assert_eq!(refused.code(), "invalid_field");
    assert!(refused.to_string().contains("grace_ms"), "{refused}");
    assert_eq!(state_bytes(&registry), before);
}

#[test]
fn drain_deadlines_survive_export_and_import_and_old_snapshots_load() {
    let mut registry = registry();
    ok(&mut registry, register("api", "a", 1, "10.0.0.1"));
    ok(&mut registry, drain_with_grace("a", 1, 300));
    let bytes = state_bytes(&registry);
    let state: RegistryState = serde_json::from_slice(&bytes).unwrap();
    let restored = Registry::import(RegistryConfig::default(), state).unwrap();
    assert_eq!(deadline_of(&restored, "a"), Some(1_300));
    assert_eq!(state_bytes(&restored), bytes);

    // A snapshot written before drains were committed state has no `drains` field.
    let mut old: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert!(old.as_object_mut().unwrap().remove("drains").is_some());
    let state: RegistryState = serde_json::from_value(old).unwrap();
    let restored = Registry::import(RegistryConfig::default(), state).unwrap();
    assert_eq!(restored.drain_count(), 0);
    assert_eq!(restored.revision(), Revision(2));
}

#[test]
fn import_refuses_a_deadline_for_an_instance_that_is_not_draining() {
    let mut registry = registry();
    ok(&mut registry, register("api", "a", 1, "10.0.0.1"));
    ok(&mut registry, drain_with_grace("a", 1, 300));
    let mut state: serde_json::Value = serde_json::from_slice(&state_bytes(&registry)).unwrap();
    state["drains"][0]["incarnation"] = 7.into();
    let state: RegistryState = serde_json::from_value(state).unwrap();
    let refused = Registry::import(RegistryConfig::default(), state).unwrap_err();
    assert!(refused.to_string().contains("not draining"), "{refused}");
}

#[test]
fn a_drain_with_a_grace_of_an_instance_already_draining_without_one_records_its_deadline() {
    // Trace: the owner sets `draining` by set-serving (or drains without a grace), then
    // drains with a grace. The second used to answer `already_committed` and record
    // nothing: the caller was told yes and the instance was never deregistered.
    let mut registry = registry();
    ok(&mut registry, register("api", "a", 1, "10.0.0.1"));
    ok(&mut registry, set_serving("api", "a", 1, ServingState::Draining));
    let before = registry.revision();
    let drained = ok(&mut registry, drain_with_grace("a", 1, 300));
    assert_eq!(drained.unchanged, None);
    assert_eq!(drained.revision, before.next());
    assert_eq!(deadline_of(&registry, "a"), Some(1_300));
}
