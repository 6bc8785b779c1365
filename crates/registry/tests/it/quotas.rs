//! Quotas that release (SPEC S5): a service counts while it holds endpoints, a service left
//! empty for the whole history window is released (its fences stay), and the number of
//! tenants holding anything is bounded.

use muster_core::{Label, ServiceKey};
use muster_registry::{Command, GrantLease, LeaseSpec, Quotas, Register, Registry, RegistryConfig};

use crate::support::*;

fn with_quotas(quotas: Quotas, history_revisions: u64) -> Registry {
    Registry::new(RegistryConfig {
        quotas,
        history_revisions,
        ..RegistryConfig::default()
    })
}

/// A registration in another tenant.
fn register_in(tenant: &str, service: &str, name: &str) -> Command {
    Register {
        target: muster_registry::Target {
            key: ServiceKey::new(tenant, "prod", service).unwrap(),
            instance: instance(name),
            incarnation: muster_core::Incarnation(1),
        },
        spec: spec("10.0.0.1"),
        lease: LeaseSpec::None,
        expected_revision: None,
    }
    .into()
}

fn deregister_in(tenant: &str, service: &str, name: &str) -> Command {
    muster_registry::Deregister {
        target: muster_registry::Target {
            key: ServiceKey::new(tenant, "prod", service).unwrap(),
            instance: instance(name),
            incarnation: muster_core::Incarnation(1),
        },
        expected_revision: None,
    }
    .into()
}

fn quota_of(registry: &mut Registry, command: Command) -> String {
    let err = registry.apply(&command, &app()).unwrap_err();
    assert_eq!(err.code(), "quota_exceeded", "{err}");
    err.to_string()
}

/// The trace: a tenant at its service quota empties one service; a new service is accepted
/// at once (it used to stay refused forever).
#[test]
fn an_emptied_service_stops_counting_against_services_per_tenant() {
    let quotas = Quotas {
        services_per_tenant: 2,
        ..Quotas::default()
    };
    let mut registry = with_quotas(quotas, 100_000);
    ok(&mut registry, register("api", "api-0", 1, "10.0.0.1"));
    ok(&mut registry, register("web", "web-0", 1, "10.0.0.2"));
    assert_eq!(
        quota_of(&mut registry, register("db", "db-0", 1, "10.0.0.3")),
        "services_per_tenant: tenant 'acme' is at its limit of 2"
    );
    ok(&mut registry, deregister("web", "web-0", 1));
    assert!(
        current(&registry, "web").is_empty(),
        "still known, empty, within the history window"
    );
    ok(&mut registry, register("db", "db-0", 1, "10.0.0.3"));
    assert_eq!(
        quota_of(&mut registry, register("web", "web-1", 1, "10.0.0.4")),
        "services_per_tenant: tenant 'acme' is at its limit of 2",
        "refilling the emptied service is growth again"
    );
}

/// A service left empty is released once its last change leaves the history window: it
/// becomes unknown and the commit says so, but its fences stay.
#[test]
fn a_service_left_empty_is_released_after_the_history_window_and_keeps_its_fences() {
    let mut registry = with_quotas(Quotas::default(), 3);
    ok(&mut registry, register("old", "old-0", 2, "10.0.0.1"));
    ok(&mut registry, deregister("old", "old-0", 2));
    let mut released = Vec::new();
    for n in 0..3 {
        let applied = ok(&mut registry, register("web", &format!("web-{n}"), 1, "10.0.0.2"));
        released.extend(applied.released);
    }
    assert_eq!(released, vec![key("old")]);
    assert!(registry.snapshot(&key("old")).is_none(), "released: unknown now");
    let err = registry
        .apply(&register("old", "old-0", 1, "10.0.0.1"), &app())
        .unwrap_err();
    assert_eq!(
        err.code(),
        "stale_incarnation",
        "the fence outlives the released service"
    );
    let again = ok(&mut registry, register("old", "old-0", 3, "10.0.0.1"));
    assert_eq!(again.updates[0].prev_revision, rev(0), "a new lineage");
}

/// A service that still holds endpoints is never released, however old its last change.
#[test]
fn a_live_service_is_never_released() {
    let mut registry = with_quotas(Quotas::default(), 1);
    ok(&mut registry, register("api", "api-0", 1, "10.0.0.1"));
    for n in 0..5 {
        ok(&mut registry, register("web", &format!("web-{n}"), 1, "10.0.0.2"));
    }
    assert_eq!(current(&registry, "api").len(), 1);
}

#[test]
fn tenants_beyond_max_tenants_are_refused_until_one_holds_nothing() {
    let quotas = Quotas {
        max_tenants: 2,
        ..Quotas::default()
    };
    let mut registry = with_quotas(quotas, 100_000);
    ok(&mut registry, register_in("alpha", "api", "api-0"));
    ok(&mut registry, register_in("beta", "api", "api-0"));
    assert_eq!(
        quota_of(&mut registry, register_in("gamma", "api", "api-0")),
        "max_tenants: the registry is at its limit of 2"
    );
    let grant = GrantLease {
        tenant: Label::new("tenant", "gamma").unwrap(),
        ttl_ms: 5_000,
        service: None,
    };
    assert_eq!(
        quota_of(&mut registry, grant.into()),
        "max_tenants: the registry is at its limit of 2",
        "a lease makes a tenant hold something too"
    );
    ok(&mut registry, register_in("alpha", "web", "web-0")); // a known tenant grows freely
    assert_eq!(registry.tenant_count(), 2);
    ok(&mut registry, deregister_in("beta", "api", "api-0"));
    assert_eq!(registry.tenant_count(), 1, "beta holds nothing now");
    ok(&mut registry, register_in("gamma", "api", "api-0"));
}

/// Usage is rebuilt from the snapshot: a restored replica refuses and accepts exactly what
/// the original does.
#[test]
fn usage_survives_export_and_import() {
    let quotas = Quotas {
        services_per_tenant: 2,
        max_tenants: 2,
        ..Quotas::default()
    };
    let mut original = with_quotas(quotas, 100_000);
    ok(&mut original, register("api", "api-0", 1, "10.0.0.1"));
    ok(&mut original, register("db", "db-0", 1, "10.0.0.3"));
    ok(&mut original, deregister("db", "db-0", 1)); // empty: does not count
    ok(&mut original, register("web", "web-0", 1, "10.0.0.2"));
    ok(&mut original, register_in("beta", "api", "api-0"));
    let mut restored = Registry::import(RegistryConfig::default(), original.export()).unwrap();
    assert_eq!(state_bytes(&restored), state_bytes(&original));
    for registry in [&mut original, &mut restored] {
        assert_eq!(registry.live_services(&Label::new("tenant", "acme").unwrap()), 2);
        assert_eq!(registry.tenant_count(), 2);
        quota_of(registry, register("cache", "cache-0", 1, "10.0.0.4"));
        quota_of(registry, register_in("gamma", "api", "api-0"));
        ok(registry, deregister("web", "web-0", 1));
        ok(registry, register("cache", "cache-0", 1, "10.0.0.4"));
    }
    assert_eq!(state_bytes(&restored), state_bytes(&original));
}

/// The newcomer's trace (SPEC W5): a service emptied and idle leaves the listings after
/// `EMPTY_LISTED_MS` from its last removal, while a live one stays however old its last
/// change; the emptied one is still known (an empty set) and its fences still hold.
#[test]
fn a_service_emptied_and_idle_leaves_the_listing_but_stays_known_and_fenced() {
    use muster_registry::EMPTY_LISTED_MS;

    let mut registry = registry();
    ok(&mut registry, register("api", "api-0", 1, "10.0.0.1"));
    ok(&mut registry, register("old", "old-0", 2, "10.0.0.2"));
    ok(&mut registry, deregister("old", "old-0", 2));
    let namespace = key("api").namespace_key();
    let listed = |registry: &Registry, now_ms: u64| -> Vec<String> {
        registry
            .listed_services(&namespace, now_ms)
            .iter()
            .map(|set| set.key().service.to_string())
            .collect()
    };
    // Removed at the command's time, 1,000 ms.
    assert_eq!(listed(&registry, 1_000 + EMPTY_LISTED_MS - 1), ["api", "old"]);
    assert_eq!(listed(&registry, 1_000 + EMPTY_LISTED_MS), ["api"]);
    assert_eq!(listed(&registry, u64::MAX), ["api"], "a live service never leaves");
    assert!(current(&registry, "old").is_empty(), "still known, and empty");
    let err = registry
        .apply(&register("old", "old-0", 1, "10.0.0.2"), &app())
        .unwrap_err();
    assert_eq!(err.code(), "stale_incarnation", "its fence holds");
}

/// A service released with its removals still fenced is known (an empty set, at service
/// revision 0 as a re-registration starts it), one never held is unknown.
#[test]
fn a_released_service_with_fences_is_known_and_empty_and_one_never_held_is_unknown() {
    let mut registry = with_quotas(Quotas::default(), 1);
    ok(&mut registry, register("old", "old-0", 1, "10.0.0.1"));
    ok(&mut registry, deregister("old", "old-0", 1));
    ok(&mut registry, register("web", "web-0", 1, "10.0.0.2"));
    assert!(registry.snapshot(&key("old")).is_none(), "released");
    let known = registry.known_snapshot(&key("old")).expect("known by its fences");
    assert!(known.is_empty());
    assert_eq!(known.revision(), rev(0));
    assert!(registry.known_snapshot(&key("never")).is_none());
    assert_eq!(registry.fenced_only().collect::<Vec<_>>(), [&key("old")]);
    // Its last fence expires (a commit past the retention prunes it): unknown now, and the
    // commit says so, so derived views (DNS) drop it.
    let later = muster_registry::CommandMeta {
        at_ms: 1_000 + RegistryConfig::default().fence_retention_ms,
        ..app()
    };
    let applied = registry
        .apply(&register("web", "web-1", 1, "10.0.0.3"), &later)
        .unwrap();
    assert_eq!(applied.released, [key("old")]);
    assert!(registry.known_snapshot(&key("old")).is_none());
    assert_eq!(registry.fenced_only().count(), 0);
}
