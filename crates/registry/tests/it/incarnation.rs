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
