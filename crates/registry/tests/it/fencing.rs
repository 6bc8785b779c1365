//! Fencing by time (SPEC L7): a removed instance's older incarnations stay refused for
//! `fence_retention_ms`, however many unrelated writes come after, and no longer.

use muster_core::{Actor, Principal};
use muster_registry::{CommandMeta, Registry, RegistryConfig, Unchanged};

use crate::support::*;

/// Small history, so unrelated writes push the removal out of it quickly.
const HISTORY: u64 = 10;
/// The default retention, 24 h.
const DAY_MS: u64 = 86_400_000;
/// When the instance is removed.
const REMOVED_AT: u64 = 1_000_000;

fn at(at_ms: u64) -> CommandMeta {
    CommandMeta {
        at_ms,
        principal: Principal::new("tester").unwrap(),
        actor: Actor::App,
    }
}

fn registry_with_small_history() -> Registry {
    Registry::new(RegistryConfig {
        history_revisions: HISTORY,
        ..RegistryConfig::default()
    })
}

/// Registers api-0 at incarnation 2, deregisters it at `REMOVED_AT`, then makes far more
/// than `HISTORY` unrelated writes, an hour later.
fn deregistered_then_buried(registry: &mut Registry) {
    registry
        .apply(&register("api", "api-0", 2, "10.0.0.1"), &at(REMOVED_AT))
        .unwrap();
    registry.apply(&deregister("api", "api-0", 2), &at(REMOVED_AT)).unwrap();
    for n in 0..(3 * HISTORY) {
        let ip = format!("10.0.1.{n}");
        registry
            .apply(
                &register("web", &format!("web-{n}"), 1, &ip),
                &at(REMOVED_AT + 3_600_000),
            )
            .unwrap();
    }
    assert!(registry.compacted().0 > 2, "the removal has left the change history");
}

/// The delayed-registration trace: an older process's register arrives after the history
/// that removed its successor is gone. It must not revive the instance.
#[test]
fn a_delayed_older_incarnation_stays_fenced_after_the_history_window() {
    let mut registry = registry_with_small_history();
    deregistered_then_buried(&mut registry);
    let err = registry
        .apply(&register("api", "api-0", 1, "10.0.0.1"), &at(REMOVED_AT + 7_200_000))
        .unwrap_err();
    assert_eq!(err.code(), "stale_incarnation");
    let err = registry
        .apply(&register("api", "api-0", 2, "10.0.0.1"), &at(REMOVED_AT + 7_200_000))
        .unwrap_err();
    assert_eq!(
        err.code(),
        "stale_incarnation",
        "the removed incarnation itself is fenced too"
    );
    assert!(registry.snapshot(&key("api")).is_none_or(|s| s.is_empty()));
}

/// Boundary: the last millisecond of the retention still fences; at `removed + retention`
/// the fence has expired and the old incarnation may register.
#[test]
fn the_fence_holds_until_exactly_the_retention_has_passed() {
    let mut registry = registry_with_small_history();
    deregistered_then_buried(&mut registry);
    let last_fenced = at(REMOVED_AT + DAY_MS - 1);
    let err = registry
        .apply(&register("api", "api-0", 1, "10.0.0.1"), &last_fenced)
        .unwrap_err();
    assert_eq!(err.code(), "stale_incarnation");
    let applied = registry
        .apply(&register("api", "api-0", 1, "10.0.0.1"), &at(REMOVED_AT + DAY_MS))
        .unwrap();
    assert_eq!(applied.unchanged, None);
    assert_eq!(members(&current(&registry, "api")).len(), 1);
}

/// Boundary: a newer incarnation than the fence is never held back.
#[test]
fn a_newer_incarnation_registers_at_once_and_lifts_the_fence() {
    let mut registry = registry_with_small_history();
    deregistered_then_buried(&mut registry);
    registry
        .apply(&register("api", "api-0", 3, "10.0.0.1"), &at(REMOVED_AT + 1))
        .unwrap();
    registry
        .apply(&deregister("api", "api-0", 3), &at(REMOVED_AT + 2))
        .unwrap();
    let err = registry
        .apply(&register("api", "api-0", 3, "10.0.0.1"), &at(REMOVED_AT + 3))
        .unwrap_err();
    assert_eq!(
        err.code(),
        "stale_incarnation",
        "the new removal fences again, from its own time"
    );
}

/// A retried deregistration long after the history window still answers with the revision
/// that removed the instance.
#[test]
fn a_retried_deregistration_returns_the_committed_revision_after_the_history_window() {
    let mut registry = registry_with_small_history();
    deregistered_then_buried(&mut registry);
    let retry = registry
        .apply(&deregister("api", "api-0", 2), &at(REMOVED_AT + 7_200_000))
        .unwrap();
    assert_eq!(
        (retry.revision, retry.unchanged),
        (rev(2), Some(Unchanged::AlreadyCommitted))
    );
    let err = registry
        .apply(&deregister("api", "api-0", 1), &at(REMOVED_AT + 7_200_000))
        .unwrap_err();
    assert_eq!(err.code(), "stale_incarnation");
}

/// A snapshot carries the fences: a replica restored from it refuses what the original
/// refuses, and exports the same bytes.
#[test]
fn fences_survive_export_and_import() {
    let mut registry = registry_with_small_history();
    deregistered_then_buried(&mut registry);
    let restored = Registry::import(RegistryConfig::default(), registry.export()).unwrap();
    assert_eq!(state_bytes(&restored), state_bytes(&registry));
    let mut restored = restored;
    let err = restored
        .apply(&register("api", "api-0", 1, "10.0.0.1"), &at(REMOVED_AT + 7_200_000))
        .unwrap_err();
    assert_eq!(err.code(), "stale_incarnation");
}

/// Memory stays bounded: fences older than the retention are pruned by the next commit, so
/// the exported state no longer holds them.
#[test]
fn expired_fences_are_pruned_on_commit() {
    let mut registry = registry_with_small_history();
    for n in 0..5 {
        let name = format!("api-{n}");
        registry
            .apply(&register("api", &name, 1, "10.0.0.1"), &at(REMOVED_AT))
            .unwrap();
        registry.apply(&deregister("api", &name, 1), &at(REMOVED_AT)).unwrap();
    }
    let fences = |registry: &Registry| serde_json::to_value(registry.export()).unwrap()["fences"].clone();
    assert_eq!(fences(&registry).as_array().unwrap().len(), 5);
    registry
        .apply(&register("web", "web-0", 1, "10.0.1.1"), &at(REMOVED_AT + DAY_MS - 1))
        .unwrap();
    assert_eq!(
        fences(&registry).as_array().unwrap().len(),
        5,
        "still within the retention"
    );
    registry
        .apply(&register("web", "web-1", 1, "10.0.1.2"), &at(REMOVED_AT + DAY_MS))
        .unwrap();
    assert_eq!(fences(&registry), serde_json::json!([]));
}

/// A shorter retention is honoured too: the fence length is policy, not a constant.
#[test]
fn the_retention_is_the_policys() {
    let mut registry = Registry::new(RegistryConfig {
        fence_retention_ms: 60_000,
        ..RegistryConfig::default()
    });
    registry
        .apply(&register("api", "api-0", 2, "10.0.0.1"), &at(0))
        .unwrap();
    registry.apply(&deregister("api", "api-0", 2), &at(0)).unwrap();
    let err = registry
        .apply(&register("api", "api-0", 1, "10.0.0.1"), &at(59_999))
        .unwrap_err();
    assert_eq!(err.code(), "stale_incarnation");
    registry
        .apply(&register("api", "api-0", 1, "10.0.0.1"), &at(60_000))
        .unwrap();
}
