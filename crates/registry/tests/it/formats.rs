//! The registry format (architecture.md "Formats and versions"): a log and a snapshot written by the
//! second wave (`tests/golden/`, made by that build) still apply and load alike, nothing
//! this build writes at format 1 differs from what the second wave wrote, and what format
//! 2 adds (a token's role, a lease's service, the `metrics` verb, an app lifting its own
//! drain) waits for a committed `RaiseFormat`.

use muster_auth::{Accessor, Effect, Rule, Secret, TokenSpec};
use muster_core::{Actor, ErrorCode, FORMAT, Label, Rejection, ServiceKey, ServingState};
use muster_registry::{
    Command, CommandMeta, CreateToken, GrantLease, LeaseSpec, RaiseFormat, Register, Registry, RegistryConfig,
    RegistryState, Unchanged,
};
use serde_json::Value;

use crate::support::{app, current, drain, key, ok, owner, registry, set_serving, spec, target};

const WAVE2_LOG: &str = include_str!("../golden/wave2-log.json");
const WAVE2_STATE: &str = include_str!("../golden/wave2-state.json");

fn wave2_log() -> Vec<(Value, Command, CommandMeta)> {
    let entries: Vec<Value> = serde_json::from_str(WAVE2_LOG).unwrap();
    entries
        .into_iter()
        .map(|entry| {
            let command = serde_json::from_value(entry["command"].clone()).unwrap();
            let meta = serde_json::from_value(entry["meta"].clone()).unwrap();
            (entry["command"].clone(), command, meta)
        })
        .collect()
}

fn raise(registry: &mut Registry, format: u32) -> Result<muster_registry::Applied, Rejection> {
    registry.apply(&RaiseFormat { format }.into(), &owner())
}

#[test]
fn a_second_wave_log_replays_to_the_second_waves_state_and_reads_back_unchanged() {
    let mut registry = Registry::new(RegistryConfig::default());
    for (written, command, meta) in wave2_log() {
        // What this build writes of it is what the second wave wrote: such a node can read it.
        assert_eq!(serde_json::to_value(&command).unwrap(), written);
        registry.apply(&command, &meta).unwrap();
    }
    assert_eq!(registry.format(), 1);
    let state: Value = serde_json::to_value(registry.export()).unwrap();
    let golden: Value = serde_json::from_str(WAVE2_STATE).unwrap();
    assert_eq!(state, golden, "format 1 applies as the second wave did");
    // Its last command, the app lifting its own drain, was held then and is held at format 1.
    assert_eq!(
        current(&registry, "web").iter().next().unwrap().serving,
        ServingState::Draining
    );
}

#[test]
fn a_second_wave_snapshot_loads_at_format_1_and_exports_the_same() {
    let state: RegistryState = serde_json::from_str(WAVE2_STATE).unwrap();
    let registry = Registry::import(RegistryConfig::default(), state).unwrap();
    assert_eq!(registry.format(), 1);
    let again: Value = serde_json::to_value(registry.export()).unwrap();
    assert_eq!(again, serde_json::from_str::<Value>(WAVE2_STATE).unwrap());
    assert!(
        registry.leases().all(|lease| lease.service.is_none()),
        "old leases are the tenant's"
    );
}

#[test]
fn raising_the_format_spends_no_revision_and_stops_at_this_builds() {
    let mut registry = registry();
    let revision = registry.revision();
    let raised = raise(&mut registry, FORMAT).unwrap();
    assert_eq!(raised.unchanged, Some(Unchanged::FormatRaised));
    assert_eq!(registry.revision(), revision);
    assert_eq!(registry.format(), FORMAT);
    assert_eq!(
        raise(&mut registry, FORMAT).unwrap().unchanged,
        Some(Unchanged::AlreadyCommitted)
    );
    let beyond = raise(&mut registry, FORMAT + 1).unwrap_err();
    assert_eq!(beyond.error_code(), ErrorCode::InvalidField);
    // The format travels with a snapshot, and a snapshot from a newer build is refused.
    let exported = serde_json::to_value(registry.export()).unwrap();
    assert_eq!(exported["format"], FORMAT);
    let state: RegistryState = serde_json::from_value(exported.clone()).unwrap();
    assert_eq!(
        Registry::import(RegistryConfig::default(), state).unwrap().format(),
        FORMAT
    );
    let mut newer = exported;
    newer["format"] = (FORMAT + 1).into();
    let state: RegistryState = serde_json::from_value(newer).unwrap();
    let refused = Registry::import(RegistryConfig::default(), state).unwrap_err();
    assert!(refused.to_string().contains("upgrade"), "{refused}");
}

fn token(role: Actor, rule: &str) -> Command {
    let secret = Secret::from_random([9; 32]);
    CreateToken {
        token: TokenSpec {
            accessor: Accessor::from_random([9; 16]),
            secret_hash: secret.hash(),
            tenant: Some(Label::new("tenant", "acme").unwrap()),
            rules: vec![Rule::parse(rule, Effect::Allow).unwrap()],
            san: None,
            description: String::new(),
            role,
        },
    }
    .into()
}

fn service_lease(service: &str) -> Command {
    GrantLease {
        tenant: Label::new("tenant", "acme").unwrap(),
        ttl_ms: 10_000,
        service: Some(key(service)),
    }
    .into()
}

#[test]
fn what_format_2_adds_waits_for_the_raise() {
    let mut registry = registry();
    for command in [
        token(Actor::Owner, "prod/api=read"),
        token(Actor::App, "prod/api=metrics"),
        service_lease("api"),
    ] {
        let refused = registry.apply(&command, &owner()).unwrap_err();
        assert_eq!(refused.error_code(), ErrorCode::UpgradePending, "{command:?}");
    }
    assert_eq!(registry.revision().0, 0, "nothing was applied");
    raise(&mut registry, 2).unwrap();
    for command in [token(Actor::Owner, "prod/api=read"), service_lease("api")] {
        registry.apply(&command, &owner()).unwrap();
    }
}

/// Trace (who may do what): a token allowed `register` on `prod/api` attached `api-9` to
/// payments' lease. From format 2 on, a lease of a service holds only that service's
/// endpoints, and a lease granted with a registration is its service's.
#[test]
fn a_lease_of_a_service_holds_only_that_services_endpoints() {
    let mut registry = registry();
    raise(&mut registry, 2).unwrap();
    let payments = ok(&mut registry, service_lease("payments")).lease.unwrap().id;
    let attach = Register {
        target: target("api", "api-9", 1),
        spec: spec("10.0.0.9"),
        lease: LeaseSpec::Attach(payments),
        expected_revision: None,
    };
    let revision = registry.revision();
    let refused = registry.apply(&attach.clone().into(), &app()).unwrap_err();
    assert_eq!(refused.error_code(), ErrorCode::LeaseScopeMismatch);
    assert!(
        !refused.to_string().contains("payments"),
        "a lease's service is not told: {refused}"
    );
    assert_eq!(registry.revision(), revision);
    let granted = Register {
        lease: LeaseSpec::Grant { ttl_ms: 10_000 },
        ..attach
    };
    let lease = ok(&mut registry, granted.into()).lease.unwrap().id;
    assert_eq!(
        registry.lease(lease).unwrap().service,
        Some(ServiceKey::new("acme", "prod", "api").unwrap())
    );
    // A lease for another tenant's service is refused.
    let foreign = GrantLease {
        tenant: Label::new("tenant", "acme").unwrap(),
        ttl_ms: 10_000,
        service: Some(ServiceKey::new("globex", "prod", "api").unwrap()),
    };
    assert_eq!(
        registry.apply(&foreign.into(), &owner()).unwrap_err().error_code(),
        ErrorCode::InvalidField
    );
}

/// From format 2 on, an app may lift a drain it set itself; the owner's drain holds against
/// the app and its checker at every format (SPEC L5).
#[test]
fn an_app_lifts_its_own_drain_from_format_2_and_never_the_owners() {
    let mut registry = registry();
    raise(&mut registry, 2).unwrap();
    ok(&mut registry, crate::support::register("api", "api-0", 1, "10.0.0.1"));
    registry.apply(&drain("api", "api-0", 1), &app()).unwrap();
    ok(&mut registry, set_serving("api", "api-0", 1, ServingState::Ready));
    assert_eq!(
        current(&registry, "api").iter().next().unwrap().serving,
        ServingState::Ready
    );
    // The app drains, then the owner: the drain is now the owner's, and holds.
    registry.apply(&drain("api", "api-0", 1), &app()).unwrap();
    let taken = registry.apply(&drain("api", "api-0", 1), &owner()).unwrap();
    assert_eq!(taken.unchanged, None, "the owner takes the drain over");
    assert_eq!(
        current(&registry, "api").iter().next().unwrap().observation.actor,
        Actor::Owner
    );
    for actor in [Actor::App, Actor::Checker] {
        let held = registry
            .apply(
                &set_serving("api", "api-0", 1, ServingState::Ready),
                &crate::support::meta(actor),
            )
            .unwrap();
        assert_eq!(held.unchanged, Some(Unchanged::DrainHeld));
    }
    // A checker-role token's drain is not the health checker's to lift (it speaks as one).
    ok(&mut registry, crate::support::register("api", "api-1", 1, "10.0.0.2"));
    registry
        .apply(&drain("api", "api-1", 1), &crate::support::meta(Actor::Checker))
        .unwrap();
    let held = registry
        .apply(
            &set_serving("api", "api-1", 1, ServingState::Ready),
            &crate::support::meta(Actor::Checker),
        )
        .unwrap();
    assert_eq!(held.unchanged, Some(Unchanged::DrainHeld));
}
