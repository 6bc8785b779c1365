//! Registration, fencing, precedence, leases, compare-and-swap and quotas (SPEC L1–L7).

use muster_core::{DeleteReason, Event, Incarnation, Revision, ServingState};
use muster_registry::{
    Command, Deregister, Evict, LeaseSpec, Quotas, Register, Registry, RegistryConfig, RevokeLease, SetServing,
    Unchanged,
};

use crate::support::*;

#[test]
fn a_retried_registration_returns_the_committed_result() {
    let mut registry = registry();
    let first = ok(&mut registry, register("api", "api-0", 1, "10.0.0.1"));
    ok(&mut registry, register("api", "api-1", 1, "10.0.0.2"));
    let retry = ok(&mut registry, register("api", "api-0", 1, "10.0.0.1"));
    assert_eq!(retry.revision, first.revision, "the reply names the original commit");
    assert_eq!(retry.unchanged, Some(Unchanged::AlreadyCommitted));
    assert!(retry.updates.is_empty());
    assert_eq!(registry.revision(), rev(2), "no new revision");
    assert_eq!(current(&registry, "api").len(), 2, "never a second endpoint");
}

#[test]
fn a_retried_register_with_grant_returns_the_same_lease() {
    let mut registry = registry();
    let command: Command = Register {
        target: target("api", "api-0", 1),
        spec: spec("10.0.0.1"),
        lease: LeaseSpec::Grant { ttl_ms: 10_000 },
        expected_revision: None,
    }
    .into();
    let first = ok(&mut registry, command.clone());
    let lease = first.lease.unwrap();
    assert_eq!(lease.ttl_ms, 10_000);
    assert_eq!(first.revision, rev(1), "record and lease commit in one revision");
    assert_eq!(registry.lease(lease.id).unwrap().revision, rev(1));
    let retry = ok(&mut registry, command);
    assert_eq!((retry.revision, retry.lease), (first.revision, Some(lease)));
    assert_eq!(registry.leases().count(), 1, "no second lease");
}

#[test]
fn same_incarnation_updates_attributes_and_keeps_serving_state() {
    let mut registry = registry();
    ok(&mut registry, register("api", "api-0", 1, "10.0.0.1"));
    ok(&mut registry, set_serving("api", "api-0", 1, ServingState::Degraded));
    let applied = ok(&mut registry, register("api", "api-0", 1, "10.0.0.9"));
    let endpoint = current(&registry, "api").get(&instance("api-0")).unwrap().clone();
    assert_eq!(endpoint.addresses[0].ip.to_string(), "10.0.0.9");
    assert_eq!(
        endpoint.serving,
        ServingState::Degraded,
        "readiness is set-serving's, not register's"
    );
    assert_eq!(endpoint.revision, applied.revision);
}

#[test]
fn a_higher_incarnation_replaces_the_record_atomically() {
    let mut registry = registry();
    ok(&mut registry, register("api", "api-0", 7, "10.0.0.7"));
    ok(&mut registry, drain("api", "api-0", 7));
    let applied = ok(&mut registry, register("api", "api-0", 8, "10.0.0.8"));
    let update = &applied.updates[0];
    assert_eq!(update.prev_revision, rev(2));
    let [Event::Put { endpoint }] = &update.events[..] else {
        panic!("one put, got {:?}", update.events)
    };
    assert_eq!(
        (endpoint.incarnation, endpoint.serving),
        (Incarnation(8), ServingState::Ready)
    );
    assert_eq!(current(&registry, "api").len(), 1);
}

#[test]
fn serving_changes_record_who_when_and_why() {
    let mut registry = registry();
    ok(&mut registry, register("api", "api-0", 1, "10.0.0.1"));
    let mut meta = owner();
    meta.at_ms = 42_000;
    let command: Command = SetServing {
        target: target("api", "api-0", 1),
        state: ServingState::NotServing,
        reason: "maintenance window".into(),
        expected_revision: None,
    }
    .into();
    registry.apply(&command, &meta).unwrap();
    let endpoint = current(&registry, "api").get(&instance("api-0")).unwrap().clone();
    assert_eq!(endpoint.serving, ServingState::NotServing);
    assert_eq!(endpoint.observation.at_ms, 42_000);
    assert_eq!(endpoint.observation.reason.as_str(), "maintenance window");
    assert_eq!(endpoint.observation.actor, muster_core::Actor::Owner);
    let again = registry.apply(&command, &meta).unwrap();
    assert_eq!(again.unchanged, Some(Unchanged::AlreadyCommitted));
}

#[test]
fn deregistration_is_fenced_visible_and_idempotent() {
    let mut registry = registry();
    ok(&mut registry, register("api", "api-0", 3, "10.0.0.1"));
    let removed = ok(&mut registry, deregister("api", "api-0", 3));
    assert!(matches!(
        &removed.updates[0].events[..],
        [Event::Delete {
            incarnation: Incarnation(3),
            reason: DeleteReason::Deregistered,
            ..
        }]
    ));
    let retry = ok(&mut registry, deregister("api", "api-0", 3));
    assert_eq!(
        (retry.revision, retry.unchanged),
        (removed.revision, Some(Unchanged::AlreadyCommitted))
    );
    assert_eq!(
        registry
            .apply(&deregister("api", "api-0", 2), &app())
            .unwrap_err()
            .code(),
        "stale_incarnation"
    );
    assert_eq!(
        registry
            .apply(&deregister("api", "nobody", 1), &app())
            .unwrap_err()
            .code(),
        "not_found"
    );
}

#[test]
fn a_newer_incarnation_may_remove_and_fence_an_older_record() {
    let mut registry = registry();
    ok(&mut registry, register("api", "api-0", 3, "10.0.0.1"));
    ok(&mut registry, deregister("api", "api-0", 5));
    assert!(current(&registry, "api").is_empty());
    for incarnation in [3, 4, 5] {
        let err = registry
            .apply(&register("api", "api-0", incarnation, "10.0.0.1"), &app())
            .unwrap_err();
        assert_eq!(err.code(), "stale_incarnation");
    }
    ok(&mut registry, register("api", "api-0", 6, "10.0.0.1"));
}

#[test]
fn serving_commands_for_an_unregistered_incarnation_are_not_found() {
    let mut registry = registry();
    ok(&mut registry, register("api", "api-0", 3, "10.0.0.1"));
    let err = registry
        .apply(&set_serving("api", "api-0", 4, ServingState::Ready), &app())
        .unwrap_err();
    assert_eq!(err.code(), "not_found");
    assert_eq!(
        err.to_string(),
        "instance 'api-0' incarnation 4 of acme/prod/api is not registered"
    );
}

#[test]
fn eviction_needs_no_incarnation_and_says_so() {
    let mut registry = registry();
    ok(&mut registry, register("api", "api-0", 3, "10.0.0.1"));
    let evict: Command = Evict {
        key: key("api"),
        instance: instance("api-0"),
        expected_revision: None,
    }
    .into();
    let applied = registry.apply(&evict, &owner()).unwrap();
    assert!(matches!(
        &applied.updates[0].events[..],
        [Event::Delete {
            reason: DeleteReason::Evicted,
            ..
        }]
    ));
    assert_eq!(registry.apply(&evict, &owner()).unwrap_err().code(), "not_found");
    assert_eq!(
        registry
            .apply(&register("api", "api-0", 3, "10.0.0.1"), &app())
            .unwrap_err()
            .code(),
        "stale_incarnation"
    );
}

#[test]
fn lease_expiry_removes_every_attached_endpoint_in_one_revision() {
    let mut registry = registry();
    let doomed = lease(&mut registry, 5_000);
    let kept = lease(&mut registry, 5_000);
    ok(&mut registry, register_leased("web", "web-0", 1, "10.0.1.1", doomed));
    ok(&mut registry, register_leased("api", "api-0", 1, "10.0.0.1", doomed));
    ok(&mut registry, register_leased("api", "api-1", 1, "10.0.0.2", doomed));
    ok(&mut registry, register_leased("api", "api-2", 1, "10.0.0.3", kept));
    ok(&mut registry, register("api", "api-3", 1, "10.0.0.4"));
    let applied = ok(&mut registry, expire(&[doomed, doomed]));
    assert_eq!(applied.revision, registry.revision());
    let services: Vec<_> = applied.updates.iter().map(|u| u.key.service.to_string()).collect();
    assert_eq!(services, ["api", "web"], "one update per service, sorted");
    assert!(applied.updates.iter().all(|u| u.revision == applied.revision));
    let removed: Vec<_> = applied
        .updates
        .iter()
        .flat_map(|u| u.events.iter().map(|e| e.instance().to_string()))
        .collect();
    assert_eq!(removed, ["api-0", "api-1", "web-0"]);
    assert!(applied.updates.iter().flat_map(|u| &u.events).all(|e| matches!(
        e,
        Event::Delete {
            reason: DeleteReason::LeaseExpired,
            ..
        }
    )));
    assert_eq!(
        members(&current(&registry, "api"))
            .iter()
            .map(|m| m.0.clone())
            .collect::<Vec<_>>(),
        ["api-2", "api-3"]
    );
    assert!(registry.lease(doomed).is_none() && registry.lease(kept).is_some());
    let again = ok(&mut registry, expire(&[doomed]));
    assert_eq!(
        (again.unchanged, again.revision),
        (Some(Unchanged::NothingToExpire), applied.revision)
    );
}

#[test]
fn revoking_a_lease_deregisters_its_endpoints() {
    let mut registry = registry();
    let id = lease(&mut registry, 5_000);
    ok(&mut registry, register_leased("api", "api-0", 1, "10.0.0.1", id));
    let revoke = |lease| -> Command {
        RevokeLease {
            tenant: muster_core::Label::new("tenant", "acme").unwrap(),
            lease,
            expected_revision: None,
        }
        .into()
    };
    let applied = ok(&mut registry, revoke(id));
    assert!(matches!(
        &applied.updates[0].events[..],
        [Event::Delete {
            reason: DeleteReason::Deregistered,
            ..
        }]
    ));
    assert_eq!(
        registry.apply(&revoke(id), &app()).unwrap_err().code(),
        "lease_not_found"
    );
}

#[test]
fn a_lease_belongs_to_its_tenant() {
    let mut registry = registry();
    let acme_lease = lease(&mut registry, 5_000);
    let other: Command = Register {
        target: muster_registry::Target {
            key: muster_core::ServiceKey::new("globex", "prod", "api").unwrap(),
            instance: instance("api-0"),
            incarnation: Incarnation(1),
        },
        spec: spec("10.0.0.1"),
        lease: LeaseSpec::Attach(acme_lease),
        expected_revision: None,
    }
    .into();
    let err = registry.apply(&other, &app()).unwrap_err();
    assert_eq!(err.code(), "lease_not_found");
}

#[test]
fn compare_and_swap_guards_every_endpoint_command() {
    let mut registry = registry();
    let create = |expected| -> Command {
        Register {
            target: target("api", "api-0", 1),
            spec: spec("10.0.0.1"),
            lease: LeaseSpec::None,
            expected_revision: expected,
        }
        .into()
    };
    let created = ok(&mut registry, create(Some(Revision::ZERO)));
    let mut update = create(Some(Revision::ZERO));
    if let Command::Register(r) = &mut update {
        r.spec = spec("10.0.0.2");
    }
    let err = registry.apply(&update, &app()).unwrap_err();
    assert_eq!(err.code(), "revision_mismatch");
    assert_eq!(
        err.to_string(),
        "expected_revision: expected 0, but instance 'api-0' of acme/prod/api is at revision 1"
    );
    let stale_cas: Command = SetServing {
        target: target("api", "api-0", 1),
        state: ServingState::NotServing,
        reason: "x".into(),
        expected_revision: Some(rev(7)),
    }
    .into();
    assert_eq!(
        registry.apply(&stale_cas, &app()).unwrap_err().code(),
        "revision_mismatch"
    );
    let good_cas: Command = Deregister {
        target: target("api", "api-0", 1),
        expected_revision: Some(created.revision),
    }
    .into();
    ok(&mut registry, good_cas);
}

#[test]
fn quotas_refuse_growth_beyond_their_limit() {
    let quotas = Quotas {
        endpoints_per_service: 2,
        services_per_tenant: 2,
        leases_per_tenant: 1,
        ..Quotas::default()
    };
    let mut registry = Registry::new(RegistryConfig {
        quotas,
        ..RegistryConfig::default()
    });
    ok(&mut registry, register("api", "api-0", 1, "10.0.0.1"));
    ok(&mut registry, register("api", "api-1", 1, "10.0.0.2"));
    let err = registry
        .apply(&register("api", "api-2", 1, "10.0.0.3"), &app())
        .unwrap_err();
    assert_eq!(
        (err.code(), err.to_string().as_str()),
        (
            "quota_exceeded",
            "endpoints_per_service: service acme/prod/api is at its limit of 2"
        )
    );
    ok(&mut registry, register("api", "api-1", 1, "10.0.0.9")); // updating is not growth
    ok(&mut registry, register("web", "web-0", 1, "10.0.1.1"));
    assert_eq!(
        registry
            .apply(&register("db", "db-0", 1, "10.0.2.1"), &app())
            .unwrap_err()
            .code(),
        "quota_exceeded"
    );
    lease(&mut registry, 5_000);
    assert_eq!(
        registry.apply(&grant(5_000), &app()).unwrap_err().code(),
        "quota_exceeded"
    );
}
