//! The policy is replicated state (SPEC L2): a committed `SetPolicy` judges the commands after
//! it and never the ones before, travels in the exported state, and outranks the policy a
//! replica is created or restored with.

use muster_core::{NetworkPolicy, Revision};
use muster_registry::{Command, Registry, RegistryConfig, SetPolicy, Unchanged};

use crate::support::*;

fn only_ten_slash_eight() -> RegistryConfig {
    RegistryConfig {
        network: NetworkPolicy {
            permitted: vec!["10.0.0.0/8".parse().unwrap()],
            revision: Revision(2),
        },
        ..RegistryConfig::default()
    }
}

fn set_policy(policy: RegistryConfig) -> Command {
    SetPolicy { policy, initial: false }.into()
}

/// A registry whose first policy (everything permitted) is committed, holding two endpoints
/// outside 10/8 and one inside.
fn committed_wide() -> Registry {
    let mut registry = registry();
    ok(&mut registry, set_policy(RegistryConfig::default()));
    ok(&mut registry, register("api", "api-0", 1, "192.168.0.1"));
    ok(&mut registry, register("api", "api-1", 1, "10.0.0.1"));
    ok(&mut registry, register("web", "web-0", 1, "172.16.0.1"));
    registry
}

/// The trace: the operator narrows the network policy. Endpoints committed before stay;
/// new ones outside it are refused; the policy says when it was set.
#[test]
fn a_narrower_policy_keeps_what_was_committed_before_it_and_refuses_new_growth() {
    let mut registry = committed_wide();
    let applied = ok(&mut registry, set_policy(only_ten_slash_eight()));
    assert_eq!((applied.revision, applied.updates.len()), (rev(4), 0));
    assert_eq!(registry.revision(), rev(4));
    assert_eq!(registry.policy_revision(), rev(4));
    assert_eq!(registry.policy(), &only_ten_slash_eight());
    assert_eq!(members(&current(&registry, "api")).len(), 2, "nothing is judged again");
    assert_eq!(members(&current(&registry, "web")).len(), 1);
    let err = registry
        .apply(&register("api", "api-2", 1, "192.168.0.2"), &app())
        .unwrap_err();
    assert_eq!(err.code(), "address_out_of_scope");
    let inside = ok(&mut registry, register("api", "api-2", 1, "10.0.0.2"));
    assert_eq!(
        current(&registry, "api")
            .get(&instance("api-2"))
            .unwrap()
            .provenance
            .policy_revision,
        Revision(2),
        "a record names the network policy that admitted it"
    );
    assert_eq!(inside.revision, rev(5));
}

/// Narrower record limits likewise leave existing records alone.
#[test]
fn narrower_limits_refuse_new_records_only() {
    let mut registry = committed_wide();
    let mut tight = RegistryConfig::default();
    tight.limits.max_record_bytes = 16;
    ok(&mut registry, set_policy(tight));
    assert_eq!(members(&current(&registry, "api")).len(), 2);
    let err = registry
        .apply(&register("db", "db-0", 1, "10.0.0.9"), &app())
        .unwrap_err();
    assert_eq!(err.code(), "record_too_large");
}

/// Restored from a snapshot, a replica keeps judging by the replicated policy, not the one
/// it is restored with (its own config file's).
#[test]
fn the_exported_policy_outranks_the_importers_config() {
    let mut registry = committed_wide();
    ok(&mut registry, set_policy(only_ten_slash_eight()));
    let mut restored = Registry::import(RegistryConfig::default(), registry.export()).unwrap();
    assert_eq!(restored.policy(), &only_ten_slash_eight());
    assert_eq!(restored.policy_revision(), rev(4));
    assert_eq!(state_bytes(&restored), state_bytes(&registry));
    let err = restored
        .apply(&register("api", "api-2", 1, "192.168.0.2"), &app())
        .unwrap_err();
    assert_eq!(err.code(), "address_out_of_scope");
}

/// The first committed policy is adopted without a revision, so a log that starts with it
/// replays to the same state whatever policy the replaying registry was created with.
#[test]
fn a_log_that_starts_with_its_policy_replays_alike_under_any_config() {
    let log = [
        set_policy(RegistryConfig::default()),
        register("api", "api-0", 1, "192.168.0.1"),
        register("api", "api-1", 1, "10.0.0.1"),
    ];
    let mut original = registry();
    let mut narrow_file = Registry::new(only_ten_slash_eight());
    for command in &log {
        let a = original.apply(command, &app()).unwrap();
        let b = narrow_file.apply(command, &app()).unwrap();
        assert_eq!(a, b);
    }
    assert_eq!(
        original.revision(),
        rev(2),
        "adopting the first policy spends no revision"
    );
    assert_eq!(state_bytes(&narrow_file), state_bytes(&original));
    assert_eq!(members(&current(&narrow_file, "api")).len(), 2);
}

#[test]
fn the_same_policy_again_changes_nothing() {
    let mut registry = committed_wide();
    let again = ok(&mut registry, set_policy(RegistryConfig::default()));
    assert_eq!(
        (again.revision, again.unchanged),
        (rev(0), Some(Unchanged::AlreadyCommitted))
    );
    assert_eq!(registry.revision(), rev(3));
}

#[test]
fn an_unusable_policy_is_refused_and_changes_nothing() {
    let mut registry = committed_wide();
    let before = state_bytes(&registry);
    let upside_down = RegistryConfig {
        min_lease_ttl_ms: 10_000,
        max_lease_ttl_ms: 1_000,
        ..RegistryConfig::default()
    };
    let err = registry.apply(&set_policy(upside_down), &app()).unwrap_err();
    assert_eq!(err.code(), "invalid_field");
    assert!(err.to_string().starts_with("min_lease_ttl_ms:"), "{err}");
    assert_eq!(state_bytes(&registry), before);
}

/// A snapshot from before the policy was replicated (no `policy`, no `fences`, tombstones per
/// service) still loads: the importer's policy stands in, the tombstones become fences.
#[test]
fn an_older_snapshot_without_policy_or_fences_still_loads() {
    let mut registry = registry();
    ok(&mut registry, register("api", "api-0", 1, "10.0.0.1"));
    ok(&mut registry, register("api", "api-1", 4, "10.0.0.2"));
    ok(&mut registry, deregister("api", "api-1", 4));
    let mut state = serde_json::to_value(registry.export()).unwrap();
    let object = state.as_object_mut().unwrap();
    object.remove("policy");
    object.remove("fences");
    object["services"][0]["tombstones"] = serde_json::json!([{"instance": "api-1", "incarnation": 4, "revision": 3}]);
    let old: muster_registry::RegistryState = serde_json::from_value(state).unwrap();
    let mut restored = Registry::import(only_ten_slash_eight(), old).unwrap();
    assert_eq!(restored.policy(), &only_ten_slash_eight());
    assert!(!restored.policy_committed());
    let err = restored
        .apply(&register("api", "api-1", 4, "10.0.0.2"), &app())
        .unwrap_err();
    assert_eq!(err.code(), "stale_incarnation");
}

/// The trace: an operator sets a narrower policy; later a node whose config file still has
/// the old one (a joiner still catching up, so its own view shows no policy) proposes its
/// file's policy as the bootstrap policy. The operator's policy stands.
#[test]
fn a_bootstrap_policy_proposed_after_one_was_committed_changes_nothing() {
    let mut registry = committed_wide();
    ok(&mut registry, set_policy(only_ten_slash_eight()));
    let bootstrap = SetPolicy {
        policy: RegistryConfig::default(),
        initial: true,
    };
    let applied = ok(&mut registry, bootstrap.into());
    assert_eq!(applied.unchanged, Some(Unchanged::AlreadyCommitted));
    assert_eq!(registry.policy(), &only_ten_slash_eight());
}
