//! Scenario tests: each defends against a failure trace of the reference chapters.

use muster_core::{DeleteReason, Event, GapError, ServiceSnapshot, ServingState};
use muster_registry::{ReadError, Registry, RegistryConfig, Scope, Unchanged};

use crate::support::*;

/// Pads the global revision up to `target` with writes to an unrelated service: revisions
/// advance for other keys too, so a service's revisions are not consecutive.
fn advance_to(registry: &mut Registry, target: u64) {
    let mut i = 0;
    while registry.revision().0 < target {
        ok(registry, register("other", &format!("pad-{i}"), 1, "10.9.0.1"));
        i += 1;
    }
}

/// Builds the snapshots-and-watch trace: {A, B} at revision 20, A deleted at 21, C added at 22.
fn revision_20_21_22(registry: &mut Registry) {
    advance_to(registry, 18);
    ok(registry, register("api", "a", 1, "10.0.0.1"));
    ok(registry, register("api", "b", 1, "10.0.0.2"));
    assert_eq!(registry.revision(), rev(20));
    ok(registry, deregister("api", "a", 1));
    ok(registry, register("api", "c", 1, "10.0.0.3"));
    assert_eq!(registry.revision(), rev(22));
}

/// reference/snapshots-and-watch.txt, "Snapshots and Watch: connecting via revision": a read
/// of {A,B} at 20, then A deleted at 21 and C added at 22 before the watch starts. Resuming
/// from 20 replays both; a watch started "from now" would keep A and miss C forever.
#[test]
fn revision_20_21_22_watch_resumes_from_the_snapshot_revision() {
    let mut registry = registry();
    advance_to(&mut registry, 18);
    ok(&mut registry, register("api", "a", 1, "10.0.0.1"));
    ok(&mut registry, register("api", "b", 1, "10.0.0.2"));
    let read_at = registry.revision();
    let mut cache = ServiceSnapshot::clone(&current(&registry, "api"));
    assert_eq!(read_at, rev(20));
    ok(&mut registry, deregister("api", "a", 1));
    ok(&mut registry, register("api", "c", 1, "10.0.0.3"));

    // Watching "from now" (22) gets nothing: the cache would keep A and never learn of C.
    assert!(
        registry
            .changes_since(&Scope::Service(key("api")), registry.revision())
            .unwrap()
            .is_empty()
    );

    // Resuming from the snapshot's revision replays 21 and 22 in order, contiguous.
    let updates = registry.changes_since(&Scope::Service(key("api")), read_at).unwrap();
    assert_eq!(
        updates.iter().map(|u| u.revision).collect::<Vec<_>>(),
        [rev(21), rev(22)]
    );
    assert!(matches!(
        &updates[0].events[..],
        [Event::Delete {
            reason: DeleteReason::Deregistered,
            ..
        }]
    ));
    for update in &updates {
        assert!(cache.apply(update).unwrap());
    }
    assert_eq!(members(&cache), members(&current(&registry, "api")));
    assert_eq!(cache.digest(), current(&registry, "api").digest());
    assert_eq!(
        members(&cache).iter().map(|m| m.0.as_str()).collect::<Vec<_>>(),
        ["b", "c"]
    );

    // Revision 23 changes another service: a valid gap for this one. Revision 24 removes
    // two endpoints of this service in one revision, delivered as one update.
    let shared = lease(&mut registry, 10_000);
    ok(&mut registry, register_leased("api", "d", 1, "10.0.0.4", shared));
    ok(&mut registry, register_leased("api", "e", 1, "10.0.0.5", shared));
    let before_expiry = registry.revision();
    let applied = ok(&mut registry, expire(&[shared]));
    assert_eq!(applied.updates.len(), 1);
    assert_eq!(applied.updates[0].events.len(), 2, "both deletes travel in one update");
    let updates = registry
        .changes_since(&Scope::Service(key("api")), before_expiry)
        .unwrap();
    assert_eq!(updates, applied.updates);
    // A replay of an update already applied is recognised and ignored.
    let all = registry.changes_since(&Scope::Service(key("api")), read_at).unwrap();
    for update in &all {
        cache.apply(update).unwrap();
    }
    assert!(!cache.apply(all.last().unwrap()).unwrap());
    assert_eq!(cache.digest(), current(&registry, "api").digest());
}

/// The compacted variant: if 21 has left the history, resuming from 20 is an explicit
/// `compacted` error carrying the current revision (never silence), and a fresh snapshot
/// at that revision holds the right set.
#[test]
fn revision_20_21_22_compacted_forces_a_resnapshot() {
    let config = RegistryConfig {
        history_revisions: 1,
        ..RegistryConfig::default()
    };
    let mut registry = Registry::new(config);
    revision_20_21_22(&mut registry);
    let err = registry
        .changes_since(&Scope::Service(key("api")), rev(20))
        .unwrap_err();
    assert_eq!(
        err,
        ReadError::Compacted {
            compacted: rev(21),
            current: rev(22)
        }
    );
    assert_eq!(err.code(), "compacted");
    assert!(matches!(
        registry.snapshot_at(&key("api"), rev(20)),
        Err(ReadError::Compacted { .. })
    ));
    let fresh = current(&registry, "api");
    assert_eq!(
        members(&fresh).iter().map(|m| m.0.as_str()).collect::<Vec<_>>(),
        ["b", "c"]
    );
    assert_eq!(
        registry.changes_since(&Scope::Service(key("api")), rev(22)).unwrap(),
        vec![],
        "from the fresh snapshot's revision the watch continues"
    );
}

/// reference/control-plane-state.txt, "Restart reuses an instance identity": incarnation 7
/// pauses, the scheduler starts incarnation 8, then 7's delayed messages arrive. None of
/// them may overwrite, revive or delete 8.
#[test]
fn restart_reuses_an_instance_identity() {
    let mut registry = registry();
    let lease_7 = lease(&mut registry, 5_000);
    ok(&mut registry, register_leased("api", "api-0", 7, "10.0.0.7", lease_7));
    let lease_8 = lease(&mut registry, 5_000);
    let replaced = ok(&mut registry, register_leased("api", "api-0", 8, "10.0.0.8", lease_8));
    assert_eq!(replaced.updates[0].events.len(), 1, "replacement is one atomic put");
    let state = state_bytes(&registry);

    for delayed in [
        register("api", "api-0", 7, "10.0.0.7"),
        register_leased("api", "api-0", 7, "10.0.0.7", lease_7),
        set_serving("api", "api-0", 7, ServingState::Ready),
        drain("api", "api-0", 7),
        deregister("api", "api-0", 7),
    ] {
        let err = registry.apply(&delayed, &app()).unwrap_err();
        assert_eq!(err.code(), "stale_incarnation", "{delayed:?}");
        assert!(
            err.to_string().contains("presented incarnation 7, but incarnation 8"),
            "{err}"
        );
        assert_eq!(state_bytes(&registry), state, "a fenced command changes nothing");
    }
    // 7's lease expiring does not take 8 with it: 8 moved to its own lease.
    let applied = ok(&mut registry, expire(&[lease_7]));
    assert!(applied.updates.is_empty());
    let api = current(&registry, "api");
    let only = api.get(&instance("api-0")).unwrap();
    assert_eq!(
        (only.incarnation.0, only.addresses[0].ip.to_string()),
        (8, "10.0.0.8".into())
    );

    // Once 8 is deregistered, 7 still cannot come back: the tombstone fences it.
    ok(&mut registry, deregister("api", "api-0", 8));
    let err = registry
        .apply(&register("api", "api-0", 7, "10.0.0.7"), &app())
        .unwrap_err();
    assert_eq!(err.code(), "stale_incarnation");
    let err = registry
        .apply(&register("api", "api-0", 8, "10.0.0.8"), &app())
        .unwrap_err();
    assert_eq!(err.code(), "stale_incarnation", "a removed incarnation stays removed");
    ok(&mut registry, register("api", "api-0", 9, "10.0.0.9"));
}

/// reference/control-plane-state.txt, "Watch gap silently loses a deletion": a client at
/// revision 40 disconnects, 41 removes an endpoint, the log compacts, the client resumes at
/// 42. The registry answers `compacted` for 40, and an update after 41 cannot be applied to a
/// revision-40 view: its prev_revision exposes the gap.
#[test]
fn watch_gap_cannot_silently_lose_a_deletion() {
    let config = RegistryConfig {
        history_revisions: 1,
        ..RegistryConfig::default()
    };
    let mut registry = Registry::new(config);
    advance_to(&mut registry, 38);
    ok(&mut registry, register("api", "a", 1, "10.0.0.1"));
    ok(&mut registry, register("api", "b", 1, "10.0.0.2"));
    let mut client = ServiceSnapshot::clone(&current(&registry, "api"));
    assert_eq!(client.revision(), rev(40));

    ok(&mut registry, deregister("api", "a", 1)); // 41: the deletion the client misses
    ok(&mut registry, set_serving("api", "b", 1, ServingState::Degraded)); // 42
    assert!(matches!(
        registry.changes_since(&Scope::Service(key("api")), rev(40)),
        Err(ReadError::Compacted { current, .. }) if current == rev(42)
    ));
    let after_41 = registry.changes_since(&Scope::Service(key("api")), rev(41)).unwrap();
    let err = client.apply(&after_41[0]).unwrap_err();
    assert_eq!(
        err,
        GapError::Gap {
            have: rev(40),
            revision: rev(42),
            prev: rev(41)
        }
    );
    assert_eq!(
        client.revision(),
        rev(40),
        "the old view is kept until a snapshot replaces it"
    );
    assert!(client.get(&instance("a")).is_some());
}

/// SPEC L5 / L6: the owner drains an endpoint; the application's readiness loop keeps
/// reporting `ready`. The drain must hold until the owner lifts it.
#[test]
fn a_drain_is_not_undone_by_the_applications_ready() {
    let mut registry = registry();
    ok(&mut registry, register("api", "api-0", 1, "10.0.0.1"));
    let drained = registry.apply(&drain("api", "api-0", 1), &owner()).unwrap();
    assert_eq!(
        current(&registry, "api").get(&instance("api-0")).unwrap().serving,
        ServingState::Draining
    );
    let state = state_bytes(&registry);

    for actor_meta in [app(), meta(muster_core::Actor::Checker)] {
        let applied = registry
            .apply(&set_serving("api", "api-0", 1, ServingState::Ready), &actor_meta)
            .unwrap();
        assert_eq!(applied.unchanged, Some(Unchanged::DrainHeld));
        assert_eq!(applied.revision, drained.revision);
        assert_eq!(state_bytes(&registry), state);
    }
    // The owner may lift its own drain.
    let lifted = registry
        .apply(&set_serving("api", "api-0", 1, ServingState::Ready), &owner())
        .unwrap();
    assert_eq!(lifted.unchanged, None);
    let endpoint = current(&registry, "api").get(&instance("api-0")).unwrap().clone();
    assert_eq!(endpoint.serving, ServingState::Ready);
    assert_eq!(endpoint.observation.actor, muster_core::Actor::Owner);
}
