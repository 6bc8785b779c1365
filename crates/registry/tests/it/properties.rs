//! Property tests over random command sequences (SPEC M, L, W, (a)–(e)).

use std::collections::BTreeSet;
use std::sync::Arc;

use muster_core::{
    AddressSpec, Event, Incarnation, LeaseId, NamespaceKey, PortSpec, Principal, Protocol, Revision, ServiceSnapshot,
    ServingState,
};
use muster_registry::{
    Applied, Command, CommandMeta, Deregister, Drain, Evict, ExpireLeases, GrantLease, LeaseSpec, Register, Registry,
    RegistryConfig, RegistryState, RevokeLease, Scope, SetServing, Target,
};
use proptest::prelude::*;

use crate::model::{INSTANCES, IPS, LeaseChoice, Model, Op, SERVICES, Verdict};
use crate::support::{key, state_bytes};

// ---- generation ------------------------------------------------------------------------

fn serving_state() -> impl Strategy<Value = ServingState> {
    prop_oneof![
        Just(ServingState::Starting),
        Just(ServingState::Ready),
        Just(ServingState::Degraded),
        Just(ServingState::Draining),
        Just(ServingState::NotServing),
        Just(ServingState::Unknown),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let service = 0..SERVICES.len() as u8;
    let instance = 0..INSTANCES.len() as u8;
    let incarnation = 1..=4u64;
    let expected = prop::option::weighted(0.15, 0..12u64);
    let lease = prop_oneof![
        3 => Just(LeaseChoice::None),
        3 => (1..=5u64).prop_map(LeaseChoice::Attach),
        2 => prop_oneof![Just(5_000u64), Just(9_000), Just(500)].prop_map(LeaseChoice::Grant),
    ];
    prop_oneof![
        6 => (service.clone(), instance.clone(), incarnation.clone(), 0..IPS.len() as u8, prop_oneof![Just(1u32), Just(2), Just(0)], lease, expected.clone())
            .prop_map(|(service, instance, incarnation, ip, weight, lease, expected)| Op::Register { service, instance, incarnation, ip, weight, lease, expected }),
        3 => (service.clone(), instance.clone(), incarnation.clone(), serving_state(), any::<bool>(), expected.clone())
            .prop_map(|(service, instance, incarnation, state, owner, expected)| Op::Serving { service, instance, incarnation, state, owner, expected }),
        1 => (service.clone(), instance.clone(), incarnation.clone(), any::<bool>())
            .prop_map(|(service, instance, incarnation, owner)| Op::Drain { service, instance, incarnation, owner }),
        2 => (service.clone(), instance.clone(), incarnation, expected)
            .prop_map(|(service, instance, incarnation, expected)| Op::Deregister { service, instance, incarnation, expected }),
        1 => (service, instance).prop_map(|(service, instance)| Op::Evict { service, instance }),
        2 => prop_oneof![Just(5_000u64), Just(9_000), Just(10)].prop_map(|ttl_ms| Op::Grant { ttl_ms }),
        1 => (1..=6u64).prop_map(|lease| Op::Revoke { lease }),
        2 => prop::collection::vec(1..=6u64, 0..3).prop_map(|leases| Op::Expire { leases }),
    ]
}

/// An operation and, most of the time, a live endpoint to point it at (see [`Op::retarget`]).
type Step = (Op, Option<(prop::sample::Index, i8)>);

fn ops(max: usize) -> impl Strategy<Value = Vec<Step>> {
    let pick = prop::option::weighted(
        0.6,
        (
            any::<prop::sample::Index>(),
            prop_oneof![Just(-1i8), Just(0), Just(0), Just(0), Just(1)],
        ),
    );
    prop::collection::vec((op(), pick), 1..max)
}

/// Resolves a step against the model's current state.
fn resolve(step: &Step, model: &Model) -> Op {
    let (mut op, pick) = step.clone();
    if let Some((index, delta)) = pick {
        op.retarget(model, index.index(usize::MAX), delta);
    }
    op
}

/// Runs steps, keeping a model alongside to resolve them; yields each resolved op.
fn replay(steps: &[Step], model: &mut Model) -> Vec<Op> {
    steps
        .iter()
        .map(|step| {
            let op = resolve(step, model);
            model.apply(&op);
            op
        })
        .collect()
}

// ---- translation to registry commands ---------------------------------------------------

fn target(service: u8, instance: u8, incarnation: u64) -> Target {
    Target {
        key: key(SERVICES[service as usize]),
        instance: muster_core::InstanceId::new(INSTANCES[instance as usize]).unwrap(),
        incarnation: Incarnation(incarnation),
    }
}

fn acme() -> muster_core::Label {
    muster_core::Label::new("tenant", "acme").unwrap()
}

fn to_command(op: &Op) -> (Command, CommandMeta) {
    let meta = |owner| CommandMeta {
        at_ms: 7,
        principal: Principal::new("prop").unwrap(),
        actor: Model::actor(owner),
    };
    let command: Command = match op.clone() {
        Op::Register {
            service,
            instance,
            incarnation,
            ip,
            weight,
            lease,
            expected,
        } => Register {
            target: target(service, instance, incarnation),
            spec: muster_core::EndpointSpec {
                addresses: vec![AddressSpec {
                    ip: IPS[ip as usize].into(),
                    scope: None,
                }],
                ports: vec![PortSpec {
                    name: "http".into(),
                    port: 80,
                    protocol: Protocol::Http,
                }],
                weight: Some(weight),
                ..Default::default()
            },
            lease: match lease {
                LeaseChoice::None => LeaseSpec::None,
                LeaseChoice::Attach(id) => LeaseSpec::Attach(LeaseId(id)),
                LeaseChoice::Grant(ttl_ms) => LeaseSpec::Grant { ttl_ms },
            },
            expected_revision: expected.map(Revision),
        }
        .into(),
        Op::Serving {
            service,
            instance,
            incarnation,
            state,
            owner,
            expected,
        } => {
            let command = SetServing {
                target: target(service, instance, incarnation),
                state,
                reason: "prop".into(),
                expected_revision: expected.map(Revision),
            };
            return (command.into(), meta(owner));
        }
        Op::Drain {
            service,
            instance,
            incarnation,
            owner,
        } => {
            let command = Drain {
                target: target(service, instance, incarnation),
                reason: "prop".into(),
                // A grace, so the drain-deadline table is in every exported state.
                grace_ms: Some(1_000),
                expected_revision: None,
            };
            return (command.into(), meta(owner));
        }
        Op::Deregister {
            service,
            instance,
            incarnation,
            expected,
        } => Deregister {
            target: target(service, instance, incarnation),
            expected_revision: expected.map(Revision),
        }
        .into(),
        Op::Evict { service, instance } => {
            let t = target(service, instance, 0);
            Evict {
                key: t.key,
                instance: t.instance,
                expected_revision: None,
            }
            .into()
        }
        Op::Grant { ttl_ms } => GrantLease {
            tenant: acme(),
            ttl_ms,
            service: None,
        }
        .into(),
        Op::Revoke { lease } => RevokeLease {
            tenant: acme(),
            lease: LeaseId(lease),
            expected_revision: None,
        }
        .into(),
        Op::Expire { leases } => ExpireLeases {
            leases: leases.into_iter().map(LeaseId).collect(),
        }
        .into(),
    };
    (command, meta(false))
}

/// History long enough that nothing is compacted within a generated sequence, so fencing
/// by tombstone holds for the whole run (tombstones live as long as history).
fn config() -> RegistryConfig {
    RegistryConfig {
        history_revisions: 10_000,
        ..RegistryConfig::default()
    }
}

fn verdict(result: &Result<Applied, muster_core::Rejection>) -> Verdict {
    match result {
        Ok(applied) if applied.unchanged.is_some() => Verdict::Unchanged(applied.revision.0),
        Ok(applied) => Verdict::Committed(applied.revision.0),
        Err(rejection) => Verdict::Refused(rejection.code()),
    }
}

/// Every read of the registry agrees with the model.
fn assert_agrees(registry: &Registry, model: &Model) -> Result<(), TestCaseError> {
    prop_assert_eq!(registry.revision().0, model.revision);
    for (index, name) in SERVICES.iter().enumerate() {
        let snapshot = registry.snapshot(&key(name));
        let Some(expected_revision) = model.service_revision.get(&(index as u8)) else {
            prop_assert!(snapshot.is_none(), "{} must be unknown", name);
            continue;
        };
        let snapshot = snapshot.expect("a service with history is known");
        prop_assert_eq!(snapshot.revision().0, *expected_revision);
        let actual: Vec<_> = snapshot
            .iter()
            .map(|e| {
                (
                    e.instance.to_string(),
                    e.incarnation.0,
                    e.addresses[0].ip.to_string(),
                    u32::from(e.weight),
                    e.serving,
                    e.lease.map(|l| l.0),
                    e.revision.0,
                )
            })
            .collect();
        let expected: Vec<_> = model
            .endpoints
            .iter()
            .filter(|((s, _), _)| *s as usize == index)
            .map(|((_, i), e)| {
                (
                    INSTANCES[*i as usize].to_string(),
                    e.incarnation,
                    e.ip.clone(),
                    e.weight,
                    e.serving,
                    e.lease,
                    e.revision,
                )
            })
            .collect();
        prop_assert_eq!(actual, expected);
        let recomputed = ServiceSnapshot::from_endpoints(key(name), snapshot.revision(), snapshot.iter().cloned());
        prop_assert_eq!(recomputed.digest(), snapshot.digest(), "the incremental digest drifted");
    }
    let leases: Vec<u64> = registry.leases().map(|l| l.id.0).collect();
    prop_assert_eq!(leases, model.leases.keys().copied().collect::<Vec<_>>());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// (e) A simple reference model agrees with the registry on every verdict and every read
    /// after every command; (b) every refused command, older incarnations included, leaves
    /// the state byte-for-byte unchanged.
    #[test]
    fn the_registry_agrees_with_a_reference_model(ops in ops(80)) {
        let mut registry = Registry::new(config());
        let mut model = Model::new();
        for step in &ops {
            let op = &resolve(step, &model);
            let before = state_bytes(&registry);
            let (command, meta) = to_command(op);
            let result = registry.apply(&command, &meta);
            prop_assert_eq!(verdict(&result), model.apply(op), "{:?}", op);
            if !matches!(verdict(&result), Verdict::Committed(_)) {
                prop_assert_eq!(state_bytes(&registry), before, "{:?} changed state without committing", op);
            }
            assert_agrees(&registry, &model)?;
        }
    }

    /// (b) Whatever the state, every kind of mutation from an older incarnation than the
    /// registry knows for that instance is refused and changes nothing.
    #[test]
    fn an_older_incarnation_never_changes_the_state(ops in ops(60)) {
        let mut registry = Registry::new(config());
        let mut model = Model::new();
        for step in &ops {
            let op = &resolve(step, &model);
            let (command, meta) = to_command(op);
            let _ = registry.apply(&command, &meta);
            model.apply(op);
            for (&(service, instance), &highest) in model.endpoints.iter().map(|(at, e)| (at, &e.incarnation))
                .chain(model.removed.iter().map(|(at, (incarnation, _))| (at, incarnation)))
            {
                let older = highest - 1;
                let before = state_bytes(&registry);
                for stale in [
                    Op::Register { service, instance, incarnation: older, ip: 0, weight: 1, lease: LeaseChoice::None, expected: None },
                    Op::Serving { service, instance, incarnation: older, state: ServingState::Ready, owner: true, expected: None },
                    Op::Drain { service, instance, incarnation: older, owner: true },
                    Op::Deregister { service, instance, incarnation: older, expected: None },
                ] {
                    let (command, meta) = to_command(&stale);
                    let mut probe = registry.clone();
                    let result = probe.apply(&command, &meta);
                    prop_assert_eq!(result.map_err(|e| e.code()).err(), Some("stale_incarnation"), "{:?}", stale);
                    prop_assert_eq!(state_bytes(&probe), before.clone());
                }
            }
        }
    }

    /// (c) Expiry removes exactly the endpoints attached to the expired leases, all in one
    /// revision with reason `lease_expired`, and touches nothing else.
    #[test]
    fn expiry_removes_exactly_the_expired_leases_endpoints(steps in ops(60), expired in prop::collection::btree_set(1..=6u64, 1..4)) {
        let ops = replay(&steps, &mut Model::new());
        let mut registry = Registry::new(config());
        for op in &ops {
            let (command, meta) = to_command(op);
            let _ = registry.apply(&command, &meta);
        }
        let all = |registry: &Registry| -> Vec<Arc<muster_core::Endpoint>> {
            SERVICES.iter().filter_map(|s| registry.snapshot(&key(s))).flat_map(|s| s.iter().cloned().collect::<Vec<_>>()).collect()
        };
        let before = all(&registry);
        let leases: BTreeSet<LeaseId> = expired.iter().copied().map(LeaseId).collect();
        let applied = registry
            .apply(&ExpireLeases { leases: leases.iter().copied().collect() }.into(), &to_command(&Op::Evict { service: 0, instance: 0 }).1)
            .unwrap();
        let (doomed, kept): (Vec<_>, Vec<_>) = before.into_iter().partition(|e| e.lease.is_some_and(|l| leases.contains(&l)));
        prop_assert_eq!(all(&registry), kept, "everything else is untouched");
        let deleted: Vec<String> = applied.updates.iter().flat_map(|u| &u.events).map(|e| match e {
            Event::Delete { instance, reason: muster_core::DeleteReason::LeaseExpired, .. } => Ok(instance.to_string()),
            other => Err(format!("unexpected event {other:?}")),
        }).collect::<Result<_, _>>().map_err(TestCaseError::fail)?;
        let mut expected: Vec<String> = doomed.iter().map(|e| e.instance.to_string()).collect();
        let mut deleted_sorted = deleted.clone();
        expected.sort();
        deleted_sorted.sort();
        prop_assert_eq!(deleted_sorted, expected);
        prop_assert!(applied.updates.iter().all(|u| u.revision == applied.revision));
        prop_assert!(leases.iter().all(|id| registry.lease(*id).is_none()));
    }

    /// (d) Restoring from an exported snapshot, then replaying the rest, gives the same
    /// replies, the same events and the same bytes as never having stopped.
    #[test]
    fn restore_then_replay_gives_the_same_state_and_events(steps in ops(80), split in any::<prop::sample::Index>()) {
        let ops = replay(&steps, &mut Model::new());
        let at = split.index(ops.len());
        let mut original = Registry::new(config());
        for op in &ops[..at] {
            let (command, meta) = to_command(op);
            let _ = original.apply(&command, &meta);
        }
        let bytes = serde_json::to_vec(&original.export()).unwrap();
        let state: RegistryState = serde_json::from_slice(&bytes).unwrap();
        let mut restored = Registry::import(config(), state).unwrap();
        prop_assert_eq!(state_bytes(&restored), bytes, "re-serialisation is byte-identical");
        for op in &ops[at..] {
            let (command, meta) = to_command(op);
            prop_assert_eq!(restored.apply(&command, &meta), original.apply(&command, &meta), "{:?}", op);
        }
        prop_assert_eq!(state_bytes(&restored), state_bytes(&original));
    }

    /// (a) The snapshot at any revision R plus every update after R equals the snapshot at
    /// the end, digests included; past reads give back exactly what was current at R; and
    /// when R has been compacted the answer is `Compacted`, never a partial list.
    #[test]
    fn snapshot_plus_updates_equals_the_later_snapshot(steps in ops(80), history in 2..40u64) {
        let ops = replay(&steps, &mut Model::new());
        let mut registry = Registry::new(RegistryConfig { history_revisions: history, ..RegistryConfig::default() });
        let mut seen: Vec<(Revision, usize, Arc<ServiceSnapshot>)> = Vec::new();
        for op in &ops {
            let (command, meta) = to_command(op);
            let _ = registry.apply(&command, &meta);
            for (index, name) in SERVICES.iter().enumerate() {
                match registry.snapshot(&key(name)) {
                    Some(snapshot) => seen.push((registry.revision(), index, snapshot)),
                    // Released (empty for the whole history window): if it comes back it is
                    // a new lineage, which the old views cannot follow.
                    None => seen.retain(|(_, seen_index, _)| *seen_index != index),
                }
            }
        }
        let namespace = Scope::Namespace(NamespaceKey::new("acme", "prod").unwrap());
        for (at, index, then) in seen {
            let service = key(SERVICES[index]);
            let now = registry.snapshot(&service).unwrap();
            match registry.changes_since(&Scope::Service(service.clone()), at) {
                Err(_) => {
                    prop_assert!(at < registry.compacted());
                    prop_assert!(registry.changes_since(&namespace, at).is_err());
                    prop_assert!(registry.snapshot_at(&service, at).is_err());
                }
                Ok(updates) => {
                    prop_assert!(at >= registry.compacted());
                    let mut replayed = ServiceSnapshot::clone(&then);
                    for update in &updates {
                        prop_assert!(replayed.apply(update).is_ok(), "contiguous and digest-verified");
                    }
                    prop_assert_eq!(&replayed, &*now);
                    let from_namespace: Vec<_> = registry
                        .changes_since(&namespace, at)
                        .unwrap()
                        .into_iter()
                        .filter(|u| u.key == service)
                        .collect();
                    prop_assert_eq!(from_namespace, updates);
                    let past = registry.snapshot_at(&service, at).unwrap();
                    prop_assert_eq!(past.as_deref(), Some(&*then));
                }
            }
        }
    }
}
