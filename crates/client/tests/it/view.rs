//! The view state machine against a real registry's updates, delivered through a faulty
//! channel: drops, duplicates, reorders, disconnects (the SPEC C property test).

use std::collections::BTreeMap;
use std::sync::Arc;

use muster_client::view::{Next, View};
use muster_client::{MemberSet, Risk, StaleBudget, StaleError};
use muster_core::{
    Actor, AddressSpec, EndpointSpec, Incarnation, InstanceId, Principal, Revision, ServiceKey, ServiceSnapshot,
    ServiceUpdate, ServingState,
};
use muster_registry::{
    Command, CommandMeta, Deregister, LeaseSpec, Register, Registry, RegistryConfig, Scope, SetServing, Target,
};
use proptest::prelude::*;

fn key(service: &str) -> ServiceKey {
    ServiceKey::new("acme", "prod", service).unwrap()
}

fn target(service: &str, instance: u8, incarnation: u64) -> Target {
    Target {
        key: key(service),
        instance: InstanceId::new(&format!("i{instance}")).unwrap(),
        incarnation: Incarnation(incarnation),
    }
}

#[derive(Debug, Clone)]
enum Op {
    Register {
        other: bool,
        instance: u8,
        incarnation: u64,
        ip: u8,
    },
    Serving {
        instance: u8,
        incarnation: u64,
        state: ServingState,
    },
    Deregister {
        instance: u8,
        incarnation: u64,
    },
}

fn command(op: &Op) -> Command {
    match op {
        Op::Register {
            other,
            instance,
            incarnation,
            ip,
        } => Register {
            target: target(if *other { "other" } else { "api" }, *instance, *incarnation),
            spec: EndpointSpec {
                addresses: vec![AddressSpec {
                    ip: format!("10.0.0.{}", ip + 1),
                    scope: None,
                }],
                ..EndpointSpec::default()
            },
            lease: LeaseSpec::None,
            expected_revision: None,
        }
        .into(),
        Op::Serving {
            instance,
            incarnation,
            state,
        } => SetServing {
            target: target("api", *instance, *incarnation),
            state: *state,
            reason: "prop".into(),
            expected_revision: None,
        }
        .into(),
        Op::Deregister { instance, incarnation } => Deregister {
            target: target("api", *instance, *incarnation),
            expected_revision: None,
        }
        .into(),
    }
}

fn op() -> impl Strategy<Value = Op> {
    let state = prop_oneof![
        Just(ServingState::Ready),
        Just(ServingState::Draining),
        Just(ServingState::Degraded)
    ];
    prop_oneof![
        4 => (any::<bool>(), 0..5u8, 1..3u64, 0..3u8).prop_map(|(other, instance, incarnation, ip)| Op::Register { other, instance, incarnation, ip }),
        2 => (0..5u8, 1..3u64, state).prop_map(|(instance, incarnation, state)| Op::Serving { instance, incarnation, state }),
        1 => (0..5u8, 1..3u64).prop_map(|(instance, incarnation)| Op::Deregister { instance, incarnation }),
    ]
}

/// What the faulty channel does at one step.
#[derive(Debug, Clone, Copy)]
enum Fault {
    Deliver,
    Drop,
    Duplicate,
    Reorder,
    Disconnect,
    /// The server's clock moves: more history becomes sendable.
    Advance,
}

fn fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        6 => Just(Fault::Deliver),
        1 => Just(Fault::Drop),
        1 => Just(Fault::Duplicate),
        1 => Just(Fault::Reorder),
        1 => Just(Fault::Disconnect),
        3 => Just(Fault::Advance),
    ]
}

/// The server side: every state of `api` the registry went through, and its updates.
struct History {
    /// Global revision after each command, with `api`'s set then (None: unknown yet).
    states: Vec<(Revision, Option<Arc<ServiceSnapshot>>)>,
    /// `api`'s set by its own revision: what "a view the server really had" means.
    by_service_revision: BTreeMap<Revision, Arc<ServiceSnapshot>>,
    updates: Vec<Arc<ServiceUpdate>>,
}

fn history(ops: &[Op]) -> History {
    let mut registry = Registry::new(RegistryConfig::default());
    let meta = CommandMeta {
        at_ms: 1,
        principal: Principal::new("prop").unwrap(),
        actor: Actor::App,
    };
    let mut states = vec![(Revision::ZERO, None)];
    for op in ops {
        let _ = registry.apply(&command(op), &meta);
        states.push((registry.revision(), registry.snapshot(&key("api"))));
    }
    let by_service_revision = states
        .iter()
        .filter_map(|(_, s)| s.clone())
        .map(|s| (s.revision(), s))
        .collect();
    let updates = registry
        .changes_since(&Scope::Service(key("api")), Revision::ZERO)
        .unwrap();
    History {
        states,
        by_service_revision,
        updates,
    }
}

/// A client connection: the view, the server position it is at, and the stream it reads.
struct Connection {
    /// Index into `states` of the server's present.
    now: usize,
    /// Updates the current stream will deliver, in order (after the resume point, up to now).
    queue: std::collections::VecDeque<Arc<ServiceUpdate>>,
    /// The revision the stream resumed after.
    after: Revision,
}

impl Connection {
    /// (Re)connects: a snapshot when the view wants one (or has none), else a resume.
    fn connect(&mut self, view: &mut View, history: &History, now_ms: u64) {
        let (read_at, snapshot) = &history.states[self.now];
        if view.status(now_ms).resnapshot_pending {
            if let Some(snapshot) = snapshot {
                assert_eq!(
                    view.install(ServiceSnapshot::clone(snapshot), *read_at, now_ms),
                    Next::Continue
                );
            }
            self.after = *read_at;
        } else {
            self.after = view.resume_from().unwrap_or(Revision::ZERO);
        }
        self.refill(history);
    }

    /// Queues every update after `after` that exists at the server's present.
    fn refill(&mut self, history: &History) {
        let present = history.states[self.now].0;
        let last_queued = self.queue.back().map_or(self.after, |u| u.revision);
        self.queue.extend(
            history
                .updates
                .iter()
                .filter(|u| u.revision > last_queued && u.revision <= present)
                .cloned(),
        );
    }
}

fn assert_real(view: &View, history: &History) -> Result<(), TestCaseError> {
    if let Some(active) = view.active() {
        let real = history.by_service_revision.get(&active.revision());
        prop_assert!(
            real.is_some(),
            "active revision {} was never a state of the service",
            active.revision()
        );
        prop_assert_eq!(
            &**active,
            &MemberSet::from_snapshot(real.unwrap()),
            "the active set differs from the server's at its revision"
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// For any interleaving of updates, drops, duplicates, reorders and disconnects, the
    /// active view is always a set the server really had at the view's revision, and once
    /// the stream is healthy again the view converges to the server's current set.
    #[test]
    fn the_active_view_is_always_real_and_converges(ops in prop::collection::vec(op(), 1..60), faults in prop::collection::vec(fault(), 0..120), start in any::<prop::sample::Index>()) {
        let history = history(&ops);
        let mut view = View::new(key("api"));
        let mut link = Connection { now: start.index(history.states.len()), queue: Default::default(), after: Revision::ZERO };
        let mut clock = 0;
        link.connect(&mut view, &history, clock);
        for fault in faults {
            clock += 10;
            let next = match fault {
                Fault::Advance => {
                    link.now = (link.now + 1).min(history.states.len() - 1);
                    link.refill(&history);
                    Next::Continue
                }
                Fault::Deliver => link.queue.pop_front().map_or(Next::Continue, |u| view.on_update(&u, clock)),
                Fault::Drop => { link.queue.pop_front(); Next::Continue }
                Fault::Duplicate => match link.queue.front().cloned() {
                    Some(u) => { view.on_update(&u, clock); view.on_update(&u, clock) }
                    None => Next::Continue,
                },
                Fault::Reorder => {
                    if link.queue.len() >= 2 { link.queue.swap(0, 1); }
                    Next::Continue
                }
                Fault::Disconnect => {
                    link.queue.clear();
                    link.connect(&mut view, &history, clock);
                    Next::Continue
                }
            };
            assert_real(&view, &history)?;
            if let Next::Resnapshot(_) = next {
                link.queue.clear();
                link.connect(&mut view, &history, clock);
                assert_real(&view, &history)?;
            }
        }
        // Heal: the server's present is the end; the stream runs without faults.
        link.now = history.states.len() - 1;
        link.queue.clear();
        link.connect(&mut view, &history, clock);
        while let Some(update) = link.queue.pop_front() {
            prop_assert_eq!(view.on_update(&update, clock), Next::Continue);
            assert_real(&view, &history)?;
        }
        match &history.states.last().unwrap().1 {
            Some(server) => prop_assert_eq!(view.active().map(|a| &**a), Some(&MemberSet::from_snapshot(server))),
            None => prop_assert!(view.active().is_none()),
        }
    }
}

fn register(registry: &mut Registry, instance: u8) -> Arc<ServiceUpdate> {
    let meta = CommandMeta {
        at_ms: 1,
        principal: Principal::new("t").unwrap(),
        actor: Actor::App,
    };
    let op = Op::Register {
        other: false,
        instance,
        incarnation: 1,
        ip: instance,
    };
    registry.apply(&command(&op), &meta).unwrap().updates[0].clone()
}

/// SPEC C1: a gap keeps the old set and asks for a snapshot; the digest catches a mangled
/// update; status reports received, validated and active apart.
#[test]
fn a_gap_or_a_bad_digest_keeps_the_old_set_and_asks_for_a_snapshot() {
    let mut registry = Registry::new(RegistryConfig::default());
    register(&mut registry, 0);
    let mut view = View::new(key("api"));
    view.install(
        ServiceSnapshot::clone(&registry.snapshot(&key("api")).unwrap()),
        registry.revision(),
        0,
    );
    let _missed = register(&mut registry, 1);
    let after_gap = register(&mut registry, 2);
    assert!(matches!(view.on_update(&after_gap, 5), Next::Resnapshot(_)));
    let status = view.status(5);
    assert_eq!(
        (status.received, status.validated, status.active),
        (Revision(3), Revision(1), Some(Revision(1)))
    );
    assert!(status.resnapshot_pending);
    assert_eq!(view.active().unwrap().len(), 1, "the old set is kept, never emptied");

    let mut mangled = ServiceUpdate::clone(&after_gap);
    mangled.prev_revision = Revision(2);
    mangled.digest = muster_core::Digest(mangled.digest.0 ^ 1);
    // The snapshot above is at service revision 3 already; build one at 2 to apply onto.
    let mut at_two = View::new(key("api"));
    at_two.install(
        ServiceSnapshot::clone(&registry.snapshot_at(&key("api"), Revision(2)).unwrap().unwrap()),
        Revision(2),
        0,
    );
    assert!(matches!(
        at_two.on_update(&mangled, 1),
        Next::Resnapshot(muster_client::view::Resnapshot::DigestMismatch { .. })
    ));
    assert_eq!(at_two.active().unwrap().revision(), Revision(2));
}

/// A registry that lost its state counts from a lower revision and refuses to resume the
/// view's watch (`future_revision`): retrying the resume would be refused forever, so the
/// view keeps its set and asks for a snapshot.
#[test]
fn a_watch_refused_at_the_resume_point_keeps_the_set_and_asks_for_a_snapshot() {
    let mut registry = Registry::new(RegistryConfig::default());
    register(&mut registry, 0);
    let mut view = View::new(key("api"));
    view.install(
        ServiceSnapshot::clone(&registry.snapshot(&key("api")).unwrap()),
        registry.revision(),
        0,
    );
    assert!(!view.status(0).resnapshot_pending);
    let refusal = muster_core::api::ErrorDetail {
        code: "future_revision".into(),
        message: "revision 1 is past the current revision 0".into(),
    };
    assert!(matches!(
        view.on_refused(&refusal),
        Next::Resnapshot(muster_client::view::Resnapshot::Invalid(_))
    ));
    assert!(view.status(0).resnapshot_pending);
    assert_eq!(view.active().unwrap().len(), 1, "the old set is kept, never emptied");
}

/// SPEC C2: no view is `Unavailable`; within budget everything may use it; beyond it reads
/// continue only if configured and mutations fail closed; privileged effects have a tighter
/// budget; an authoritative empty set is an answer, not a reason to fall back.
#[test]
fn the_stale_budget_depends_on_the_operations_risk() {
    let budget = StaleBudget {
        budget_ms: 1_000,
        privileged_budget_ms: 100,
        stale_reads_allowed: true,
    };
    let mut view = View::new(key("api"));
    assert!(matches!(
        view.usable(Risk::ReadOnly, &budget, 0),
        Err(StaleError::Unavailable { .. })
    ));

    view.install(ServiceSnapshot::empty(key("api")), Revision(7), 1_000);
    let fresh = view.usable(Risk::Mutation, &budget, 1_050).unwrap();
    assert!(
        fresh.snapshot.is_empty() && !fresh.stale,
        "an empty set is returned as empty"
    );
    assert!(matches!(
        view.usable(Risk::Privileged, &budget, 1_200),
        Err(StaleError::Stale { budget_ms: 100, .. })
    ));

    let late = 1_000 + 5_000;
    assert!(view.usable(Risk::ReadOnly, &budget, late).unwrap().stale);
    assert!(matches!(
        view.usable(Risk::Mutation, &budget, late),
        Err(StaleError::Stale { age_ms: 5_000, .. })
    ));
    let strict = StaleBudget {
        stale_reads_allowed: false,
        ..budget
    };
    assert!(view.usable(Risk::ReadOnly, &strict, late).is_err());

    // A progress frame renews the confirmation: the same set is current again.
    view.on_progress(Revision(9), late);
    assert!(view.usable(Risk::Mutation, &budget, late + 10).is_ok());
    assert_eq!(view.resume_from(), Some(Revision(9)));
}

/// SPEC C1 step 1: the last-known-good set survives a restart with its revision, and a
/// damaged file is refused.
#[test]
fn the_last_known_good_set_round_trips_and_a_damaged_one_is_refused() {
    let mut registry = Registry::new(RegistryConfig::default());
    register(&mut registry, 0);
    register(&mut registry, 1);
    let mut view = View::new(key("api"));
    view.install(
        ServiceSnapshot::clone(&registry.snapshot(&key("api")).unwrap()),
        Revision(2),
        100,
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("api.lkg");
    assert!(muster_client::lkg::save(&view, 150, &path).unwrap());

    let saved = muster_client::lkg::load(&path).unwrap().unwrap();
    let mut restarted = View::new(key("api"));
    restarted.install_last_known_good(saved.snapshot, saved.current_to, saved.confirmed_ms);
    assert_eq!(restarted.active().map(|a| a.len()), Some(2));
    assert_eq!(restarted.resume_from(), Some(Revision(2)));
    assert_eq!(
        restarted.status(400).age_ms,
        Some(300),
        "age counts from the last confirmation, not the load"
    );
    assert!(
        restarted.status(400).resnapshot_pending,
        "a loaded set still wants a fresh snapshot"
    );

    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replacen("10.0.0.1", "10.0.0.9", 1);
    std::fs::write(&path, text).unwrap();
    assert!(
        muster_client::lkg::load(&path).is_err(),
        "a damaged set (its checksum fails) is not trusted"
    );
}
