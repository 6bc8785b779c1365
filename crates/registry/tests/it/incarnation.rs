//! The incarnation bound: nothing above 2^53 − 1 is accepted, so no client can squat an
//! instance with `u64::MAX` (nothing could ever replace it) or present a number it cannot read
//! back exactly from JSON.

use muster_registry::MAX_INCARNATION;

use crate::support::*;

#[test]
fn the_largest_exact_json_integer_is_the_highest_incarnation() {
    assert_eq!(MAX_INCARNATION, 9_007_199_254_740_991);
    let mut registry = registry();
    ok(&mut registry, register("api", "api-0", MAX_INCARNATION, "10.0.0.1"));
    ok(&mut registry, deregister("api", "api-0", MAX_INCARNATION));
}

#[test]
fn an_incarnation_above_the_bound_is_refused_and_changes_nothing() {
    let mut registry = registry();
    ok(&mut registry, register("api", "api-0", 5, "10.0.0.1"));
    let before = state_bytes(&registry);
    for command in [
        register("api", "api-0", MAX_INCARNATION + 1, "10.0.0.1"),
        register("api", "api-1", u64::MAX, "10.0.0.1"),
        deregister("api", "api-0", u64::MAX),
        drain("api", "api-0", u64::MAX),
        set_serving("api", "api-0", MAX_INCARNATION + 1, muster_core::ServingState::Ready),
    ] {
        let err = registry.apply(&command, &app()).unwrap_err();
        assert_eq!(err.code(), "invalid_field", "{command:?}");
        assert!(
            err.to_string()
                .starts_with("incarnation: must be at most 9007199254740991"),
            "{err}"
        );
    }
    assert_eq!(state_bytes(&registry), before);
}

/// The registry's pick for a caller without incarnations (the Consul agent API).
fn register_next(service: &str, name: &str, ip: &str) -> muster_registry::Command {
    match register(service, name, 0, ip) {
        muster_registry::Command::Register(register) => muster_registry::Command::RegisterNext(register),
        other => unreachable!("{other:?}"),
    }
}

fn incarnation_of(registry: &muster_registry::Registry, name: &str) -> u64 {
    registry
        .snapshot(&key("api"))
        .unwrap()
        .get(&instance(name))
        .unwrap()
        .incarnation
        .0
}

/// The restart trace: a process re-registers through an API that carries no incarnation; the
/// registry must still give it one above every incarnation the instance had, live or removed,
/// so the leader's duties and native writes of the old one are fenced.
#[test]
fn a_registration_without_an_incarnation_gets_one_above_every_earlier_one() {
    let mut registry = registry();
    ok(&mut registry, register_next("api", "api-0", "10.0.0.1"));
    assert_eq!(incarnation_of(&registry, "api-0"), 1);
    // The same body again is a new incarnation (a restart cannot be told from a retry).
    ok(&mut registry, register_next("api", "api-0", "10.0.0.1"));
    assert_eq!(incarnation_of(&registry, "api-0"), 2);
    let err = registry.apply(
        &set_serving("api", "api-0", 1, muster_core::ServingState::Ready),
        &app(),
    );
    assert_eq!(err.unwrap_err().code(), "stale_incarnation");
    // A native registrar's incarnation is a floor too; a removal's fence is remembered.
    ok(&mut registry, register("api", "api-0", 40, "10.0.0.1"));
    ok(&mut registry, deregister("api", "api-0", 40));
    ok(&mut registry, register_next("api", "api-0", "10.0.0.1"));
    assert_eq!(incarnation_of(&registry, "api-0"), 41);
    // The incarnation the command named is ignored.
    ok(&mut registry, register_next("api", "api-1", "10.0.0.2"));
    assert_eq!(incarnation_of(&registry, "api-1"), 1);
}
