//! Reads (SPEC W2, W5), the change log (W3) and export/import (determinism).

use std::sync::Arc;

use muster_core::{NamespaceKey, ServiceKey};
use muster_registry::{ReadError, Registry, RegistryConfig, RegistryState, Scope};

use crate::support::*;

#[test]
fn empty_is_an_answer_and_unknown_is_not() {
    let mut registry = registry();
    assert!(registry.snapshot(&key("api")).is_none(), "never registered: unknown");
    ok(&mut registry, register("api", "api-0", 1, "10.0.0.1"));
    let removed = ok(&mut registry, deregister("api", "api-0", 1));
    let empty = current(&registry, "api");
    assert!(empty.is_empty());
    assert_eq!(
        empty.revision(),
        removed.revision,
        "an empty set still has its revision"
    );
    assert_eq!(empty.digest(), muster_core::Digest::EMPTY);
}

#[test]
fn a_snapshot_is_shared_not_copied() {
    let mut registry = registry();
    ok(&mut registry, register("api", "api-0", 1, "10.0.0.1"));
    let first = current(&registry, "api");
    assert!(Arc::ptr_eq(&first, &current(&registry, "api")));
    ok(&mut registry, register("api", "api-1", 1, "10.0.0.2"));
    assert_eq!(first.len(), 1, "a handed-out snapshot never changes under its holder");
    assert_eq!(current(&registry, "api").len(), 2);
}

#[test]
fn pages_hold_one_revision_while_writes_continue() {
    let mut registry = registry();
    for i in 0..25 {
        ok(
            &mut registry,
            register("api", &format!("api-{i:02}"), 1, &format!("10.0.0.{}", i + 1)),
        );
    }
    let first = registry.page(&key("api"), None, None, 10).unwrap().unwrap();
    assert_eq!((first.endpoints.len(), first.total), (10, 25));
    // Writes between pages: one endpoint of the first page goes, a new one arrives.
    ok(&mut registry, deregister("api", "api-03", 1));
    ok(&mut registry, register("api", "api-99", 1, "10.0.1.1"));
    let mut seen: Vec<String> = first.endpoints.iter().map(|e| e.instance.to_string()).collect();
    let mut next = first.next.clone();
    while let Some(after) = next {
        let page = registry
            .page(&key("api"), Some(first.at), Some(&after), 10)
            .unwrap()
            .unwrap();
        assert_eq!((page.at, page.digest), (first.at, first.digest));
        seen.extend(page.endpoints.iter().map(|e| e.instance.to_string()));
        next = page.next;
    }
    let expected: Vec<String> = (0..25).map(|i| format!("api-{i:02}")).collect();
    assert_eq!(seen, expected, "every page comes from the first page's revision");
}

#[test]
fn past_revisions_are_readable_within_history() {
    let mut registry = Registry::new(RegistryConfig {
        history_revisions: 4,
        ..RegistryConfig::default()
    });
    ok(&mut registry, register("web", "web-0", 1, "10.0.1.1")); // 1
    ok(&mut registry, register("api", "api-0", 1, "10.0.0.1")); // 2
    ok(&mut registry, register("api", "api-1", 1, "10.0.0.2")); // 3
    ok(&mut registry, deregister("api", "api-0", 1)); // 4
    let at_3 = registry.snapshot_at(&key("api"), rev(3)).unwrap().unwrap();
    assert_eq!(
        members(&at_3).iter().map(|m| m.0.as_str()).collect::<Vec<_>>(),
        ["api-0", "api-1"]
    );
    assert_eq!(at_3.revision(), rev(3));
    let at_2 = registry.snapshot_at(&key("api"), rev(2)).unwrap().unwrap();
    assert_eq!(at_2.len(), 1);
    assert_eq!(
        at_2.digest(),
        muster_core::ServiceSnapshot::from_endpoints(key("api"), rev(2), at_2.iter().cloned()).digest()
    );
    assert!(
        registry.snapshot_at(&key("api"), rev(1)).unwrap().is_none(),
        "api did not exist at 1"
    );
    assert_eq!(registry.snapshot_at(&key("web"), rev(3)).unwrap().unwrap().len(), 1);
    assert_eq!(
        registry.snapshot_at(&key("api"), rev(5)).unwrap_err(),
        ReadError::FutureRevision {
            requested: rev(5),
            current: rev(4)
        }
    );
    for _ in 0..3 {
        ok(&mut registry, register("web", "web-0", 1, "10.0.1.2"));
        ok(&mut registry, register("web", "web-0", 1, "10.0.1.1"));
    }
    assert!(matches!(
        registry.snapshot_at(&key("api"), rev(3)),
        Err(ReadError::Compacted { .. })
    ));
}

#[test]
fn namespaces_list_their_services_and_nothing_else() {
    let mut registry = registry();
    ok(&mut registry, register("web", "web-0", 1, "10.0.1.1"));
    ok(&mut registry, register("api", "api-0", 1, "10.0.0.1"));
    let elsewhere = muster_registry::Register {
        target: muster_registry::Target {
            key: ServiceKey::new("acme", "staging", "db").unwrap(),
            instance: instance("db-0"),
            incarnation: muster_core::Incarnation(1),
        },
        spec: spec("10.0.2.1"),
        lease: muster_registry::LeaseSpec::None,
        expected_revision: None,
    };
    ok(&mut registry, elsewhere.into());
    let prod = NamespaceKey::new("acme", "prod").unwrap();
    let names: Vec<_> = registry
        .services(&prod)
        .iter()
        .map(|s| s.key().service.to_string())
        .collect();
    assert_eq!(names, ["api", "web"]);
    assert!(
        registry
            .services(&NamespaceKey::new("globex", "prod").unwrap())
            .is_empty()
    );
}

#[test]
fn namespace_changes_interleave_by_revision() {
    let mut registry = registry();
    ok(&mut registry, register("web", "web-0", 1, "10.0.1.1")); // 1
    ok(&mut registry, register("api", "api-0", 1, "10.0.0.1")); // 2
    ok(&mut registry, register("web", "web-1", 1, "10.0.1.2")); // 3
    ok(&mut registry, register("api", "api-1", 1, "10.0.0.2")); // 4
    let prod = Scope::Namespace(NamespaceKey::new("acme", "prod").unwrap());
    let updates = registry.changes_since(&prod, rev(1)).unwrap();
    let order: Vec<_> = updates
        .iter()
        .map(|u| (u.revision.0, u.key.service.to_string()))
        .collect();
    assert_eq!(order, [(2, "api".into()), (3, "web".into()), (4, "api".into())]);
    assert_eq!(updates[2].prev_revision, rev(2));
    let other = Scope::Namespace(NamespaceKey::new("acme", "staging").unwrap());
    assert!(registry.changes_since(&other, rev(0)).unwrap().is_empty());
    assert!(
        registry
            .changes_since(&Scope::Service(key("nothing")), rev(0))
            .unwrap()
            .is_empty()
    );
}

#[test]
fn export_then_import_is_byte_identical_and_behaves_the_same() {
    let mut registry = registry();
    let id = lease(&mut registry, 5_000);
    ok(&mut registry, register_leased("api", "api-0", 1, "10.0.0.1", id));
    ok(&mut registry, register("api", "api-1", 2, "10.0.0.2"));
    ok(&mut registry, deregister("api", "api-1", 2));
    ok(&mut registry, drain("api", "api-0", 1));
    let bytes = state_bytes(&registry);
    let state: RegistryState = serde_json::from_slice(&bytes).unwrap();
    let mut restored = Registry::import(RegistryConfig::default(), state).unwrap();
    assert_eq!(state_bytes(&restored), bytes);
    // Fencing, leases and history all survived: the same commands give the same answers.
    for command in [
        register("api", "api-1", 2, "10.0.0.2"),
        expire(&[id]),
        register("api", "api-1", 3, "10.0.0.3"),
    ] {
        assert_eq!(restored.apply(&command, &app()), registry.apply(&command, &app()));
    }
    assert_eq!(state_bytes(&restored), state_bytes(&registry));
    assert_eq!(
        restored.changes_since(&Scope::Service(key("api")), rev(0)).unwrap(),
        registry.changes_since(&Scope::Service(key("api")), rev(0)).unwrap()
    );
}

#[test]
fn import_refuses_a_tampered_state() {
    let mut registry = registry();
    ok(&mut registry, register("api", "api-0", 1, "10.0.0.1"));
    let text = String::from_utf8(state_bytes(&registry)).unwrap();
    let tampered = text.replacen("\"weight\":100", "\"weight\":7", 1);
    assert_ne!(tampered, text);
    let err = serde_json::from_str::<RegistryState>(&tampered).unwrap_err();
    assert!(err.to_string().contains("does not match its endpoints"), "{err}");
}
