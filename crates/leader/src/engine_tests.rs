//! The engine on virtual time over a real registry: each test names the failure it defends
//! against and asserts the exact outputs.

use std::collections::HashMap;

use muster_core::check::CheckStatus;
use muster_core::{
    Actor, AddressSpec, CheckSpec, EndpointSpec, Incarnation, InstanceId, Label, LeaseId, PortSpec, Principal,
    Protocol, Revision, ServiceKey, ServingState,
};
use muster_health::checker::{CheckerConfig, TtlReport};
use muster_health::hysteresis::ProbeResult;
use muster_health::preservation::{Brakes, PreservationConfig};
use muster_registry::{
    Command, CommandMeta, Deregister, Drain, ExpireLeases, LeaseSpec, Register, Registry, RegistryConfig, SetServing,
    Target,
};
use rand_core::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;

use crate::{
    Duty, InFlightReply, LeaderEngine, Note, Now, Outcome, Output, Proposal, RenewRefused, Reply, ReplyTo, Tag,
};

/// The proposing leader's wall clock when the test's commands commit.
const AT_MS: u64 = 10_000;

fn key() -> ServiceKey {
    ServiceKey::new("acme", "prod", "api").unwrap()
}

fn target(name: &str, incarnation: u64) -> Target {
    Target {
        key: key(),
        instance: InstanceId::new(name).unwrap(),
        incarnation: Incarnation(incarnation),
    }
}

fn meta(actor: Actor) -> CommandMeta {
    CommandMeta {
        at_ms: AT_MS,
        principal: Principal::new("tester").unwrap(),
        actor,
    }
}

fn spec(checks: Vec<CheckSpec>) -> EndpointSpec {
    EndpointSpec {
        addresses: vec![AddressSpec {
            ip: "10.0.0.1".into(),
            scope: None,
        }],
        ports: vec![PortSpec {
            name: "http".into(),
            port: 8080,
            protocol: Protocol::Http,
        }],
        checks,
        ..EndpointSpec::default()
    }
}

fn apply(registry: &mut Registry, command: Command, actor: Actor) -> Revision {
    registry.apply(&command, &meta(actor)).unwrap().revision
}

fn register(registry: &mut Registry, name: &str, lease: LeaseSpec) -> Option<LeaseId> {
    let command = Register {
        target: target(name, 1),
        spec: spec(Vec::new()),
        lease,
        expected_revision: None,
    };
    registry
        .apply(&command.into(), &meta(Actor::App))
        .unwrap()
        .lease
        .map(|l| l.id)
}

fn drain(registry: &mut Registry, name: &str, grace_ms: u64) -> Revision {
    let command = Drain {
        target: target(name, 1),
        reason: "shutdown".into(),
        grace_ms: Some(grace_ms),
        expected_revision: None,
    };
    apply(registry, command.into(), Actor::Owner)
}

fn engine(preservation: PreservationConfig) -> LeaderEngine<Xoshiro256PlusPlus> {
    let brakes = Brakes::new(preservation, HashMap::new());
    LeaderEngine::new(CheckerConfig::default(), brakes, Xoshiro256PlusPlus::seed_from_u64(7))
}

/// No brake in the way: every removal allowed.
fn no_brake() -> PreservationConfig {
    PreservationConfig {
        max_fraction: 1.0,
        floor: 0,
        ..PreservationConfig::default()
    }
}

/// Monotonic and wall clock both at `ms` (the wall clock of the test's commands).
fn at(ms: u64) -> Now {
    Now {
        monotonic_ms: ms,
        unix_ms: ms,
    }
}

fn deregister_cas(name: &str, revision: Revision) -> Command {
    Deregister {
        target: target(name, 1),
        expected_revision: Some(revision),
    }
    .into()
}

fn propose(tag: u64, duty: Duty, command: Command) -> Output {
    Output::Propose(Proposal {
        tag: Tag(tag),
        duty,
        command,
    })
}

fn proposed(outputs: &[Output]) -> Vec<Command> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::Propose(p) => Some(p.command.clone()),
            _ => None,
        })
        .collect()
}

/// The drain was taken by a follower, or by a leader that has since lost office: the node
/// that leads when the grace ends has never seen the request, and still ends the drain.
#[test]
fn a_drain_ends_at_its_committed_deadline_on_a_leader_that_never_saw_the_request() {
    let mut registry = Registry::new(RegistryConfig::default());
    register(&mut registry, "a", LeaseSpec::None);
    let drained_at = drain(&mut registry, "a", 300);
    let mut engine = engine(no_brake());
    engine.became_leader(&registry, at(AT_MS + 100));
    assert_eq!(engine.tick(&registry, at(AT_MS + 299)), []);
    let outputs = engine.tick(&registry, at(AT_MS + 300));
    assert_eq!(outputs, [propose(1, Duty::Drain, deregister_cas("a", drained_at))]);
    assert_eq!(
        engine.tick(&registry, at(AT_MS + 400)),
        [],
        "proposed once until it settles"
    );
    let revision = apply(&mut registry, deregister_cas("a", drained_at), Actor::Owner);
    let settled = engine.settled(
        &registry,
        Tag(1),
        Outcome::Committed {
            revision,
            changed: true,
        },
    );
    assert_eq!(settled, []);
    assert_eq!(engine.tick(&registry, at(AT_MS + 500)), []);
    assert_eq!(registry.snapshot(&key()).unwrap().len(), 0);
}

#[test]
fn a_drain_end_that_did_not_commit_is_proposed_again_at_the_next_tick() {
    let mut registry = Registry::new(RegistryConfig::default());
    register(&mut registry, "a", LeaseSpec::None);
    let drained_at = drain(&mut registry, "a", 0);
    let mut engine = engine(no_brake());
    engine.became_leader(&registry, at(AT_MS));
    assert_eq!(
        proposed(&engine.tick(&registry, at(AT_MS))),
        [deregister_cas("a", drained_at)]
    );
    assert_eq!(engine.settled(&registry, Tag(1), Outcome::NotCommitted), []);
    assert_eq!(
        engine.tick(&registry, at(AT_MS + 100)),
        [propose(2, Duty::Drain, deregister_cas("a", drained_at))]
    );
}

#[test]
fn an_in_flight_report_of_zero_ends_the_drain_and_answers_after_the_commit() {
    let mut registry = Registry::new(RegistryConfig::default());
    register(&mut registry, "a", LeaseSpec::None);
    let drained_at = drain(&mut registry, "a", 3_600_000);
    let mut engine = engine(no_brake());
    engine.became_leader(&registry, at(AT_MS));
    let nothing = |revision| Output::Reply {
        to: ReplyTo(9),
        reply: Reply::InFlight(InFlightReply::NothingEnded { revision }),
    };
    assert_eq!(
        engine.in_flight(&registry, target("a", 1), 4, ReplyTo(9)),
        [nothing(drained_at)]
    );
    assert_eq!(
        engine.in_flight(&registry, target("a", 2), 0, ReplyTo(9)),
        [nothing(drained_at)],
        "another incarnation's report ends nothing"
    );
    let outputs = engine.in_flight(&registry, target("a", 1), 0, ReplyTo(9));
    assert_eq!(outputs, [propose(1, Duty::Drain, deregister_cas("a", drained_at))]);
    let revision = apply(&mut registry, deregister_cas("a", drained_at), Actor::Owner);
    assert_eq!(
        engine.settled(
            &registry,
            Tag(1),
            Outcome::Committed {
                revision,
                changed: true
            }
        ),
        [Output::Reply {
            to: ReplyTo(9),
            reply: Reply::InFlight(InFlightReply::Ended { revision }),
        }]
    );
}

/// The owner lifts the drain while the instance's last in-flight report is on its way: the
/// report must not deregister an instance that is serving again.
#[test]
fn a_late_in_flight_report_after_the_owner_lifted_the_drain_ends_nothing() {
    let mut registry = Registry::new(RegistryConfig::default());
    register(&mut registry, "a", LeaseSpec::None);
    let drained_at = drain(&mut registry, "a", 3_600_000);
    let mut engine = engine(no_brake());
    engine.became_leader(&registry, at(AT_MS));
    // The report is decided while the drain stands; the owner's ready commits first.
    let outputs = engine.in_flight(&registry, target("a", 1), 0, ReplyTo(1));
    assert_eq!(proposed(&outputs), [deregister_cas("a", drained_at)]);
    let ready = SetServing {
        target: target("a", 1),
        state: ServingState::Ready,
        reason: "rollback".into(),
        expected_revision: None,
    };
    let lifted_at = apply(&mut registry, ready.into(), Actor::Owner);
    let refused = registry.apply(&deregister_cas("a", drained_at), &meta(Actor::Owner));
    assert_eq!(refused.map_err(|r| r.code()).unwrap_err(), "revision_mismatch");
    assert_eq!(
        engine.settled(&registry, Tag(1), Outcome::Refused),
        [Output::Reply {
            to: ReplyTo(1),
            reply: Reply::InFlight(InFlightReply::NothingEnded { revision: lifted_at }),
        }]
    );
    // A report after the lift proposes nothing at all.
    assert_eq!(
        engine.in_flight(&registry, target("a", 1), 0, ReplyTo(2)),
        [Output::Reply {
            to: ReplyTo(2),
            reply: Reply::InFlight(InFlightReply::NothingEnded { revision: lifted_at }),
        }]
    );
    assert_eq!(
        engine.tick(&registry, at(AT_MS + 3_600_000)),
        [],
        "no grace left to end"
    );
    assert_eq!(registry.snapshot(&key()).unwrap().len(), 1);
}

#[test]
fn a_new_leader_gives_every_lease_its_ttl_plus_the_election_grace() {
    let mut registry = Registry::new(RegistryConfig::default());
    let quiet = register(&mut registry, "a", LeaseSpec::Grant { ttl_ms: 2_000 }).unwrap();
    let renewed = register(&mut registry, "b", LeaseSpec::Grant { ttl_ms: 2_000 }).unwrap();
    let mut engine = engine(no_brake());
    let tenant = Label::new("tenant", "acme").unwrap();
    assert_eq!(
        engine.renew(&registry, &tenant, renewed, at(0)),
        Err(RenewRefused::NotLeading)
    );
    engine.became_leader(&registry, at(0));
    assert_eq!(engine.leases().deadline(quiet), Some(3_000));
    let reply = engine.renew(&registry, &tenant, renewed, at(2_500)).unwrap();
    assert_eq!((reply.id, reply.deadline_unix_ms), (renewed, 4_500));
    let other = Label::new("tenant", "other").unwrap();
    assert_eq!(
        engine.renew(&registry, &other, renewed, at(2_500)),
        Err(RenewRefused::NotFound),
        "another tenant's lease is not found"
    );
    assert_eq!(engine.tick(&registry, at(2_999)), []);
    let expire = ExpireLeases { leases: vec![quiet] };
    assert_eq!(
        engine.tick(&registry, at(3_000)),
        [propose(1, Duty::LeaseKeeper, expire.clone().into())]
    );
    assert_eq!(engine.tick(&registry, at(3_100)), [], "proposed once until it settles");
    let revision = apply(&mut registry, expire.into(), Actor::Owner);
    assert_eq!(
        engine.settled(
            &registry,
            Tag(1),
            Outcome::Committed {
                revision,
                changed: true
            }
        ),
        []
    );
    assert_eq!(engine.leases().deadline(quiet), None);
    assert_eq!(
        engine.renew(&registry, &tenant, quiet, at(3_200)),
        Err(RenewRefused::NotFound)
    );
}

#[test]
fn a_follower_expires_nothing_and_a_deposed_leader_forgets_its_deadlines() {
    let mut registry = Registry::new(RegistryConfig::default());
    register(&mut registry, "a", LeaseSpec::Grant { ttl_ms: 1_000 });
    drain(&mut registry, "a", 0);
    let mut engine = engine(no_brake());
    assert_eq!(engine.tick(&registry, at(AT_MS + 60_000)), []);
    engine.became_leader(&registry, at(0));
    engine.lost_leadership();
    assert_eq!(engine.tick(&registry, at(AT_MS + 60_000)), []);
    assert_eq!(engine.leases().len(), 0);
    assert_eq!(
        engine.in_flight(&registry, target("a", 1), 0, ReplyTo(3)),
        [Output::Reply {
            to: ReplyTo(3),
            reply: Reply::NotLeading,
        }]
    );
}

/// reference/control-plane-state.txt, "Lease storm": every instance's lease lapses at once;
/// only the allowed fraction leaves, the rest are held and tried again next tick.
#[test]
fn lease_expiry_beyond_the_brakes_fraction_is_held() {
    let mut registry = Registry::new(RegistryConfig::default());
    let leases: Vec<LeaseId> = (0..4)
        .map(|i| register(&mut registry, &format!("i-{i}"), LeaseSpec::Grant { ttl_ms: 1_000 }).unwrap())
        .collect();
    let mut engine = engine(PreservationConfig {
        max_fraction: 0.5,
        min_endpoints: 0,
        ..PreservationConfig::default()
    });
    engine.became_leader(&registry, at(0));
    let outputs = engine.tick(&registry, at(2_000));
    let held: Vec<LeaseId> = outputs
        .iter()
        .filter_map(|o| match o {
            Output::Note(Note::ExpiryHeld { lease, .. }) => Some(*lease),
            _ => None,
        })
        .collect();
    assert_eq!(held, leases[2..]);
    assert_eq!(
        proposed(&outputs),
        [ExpireLeases {
            leases: leases[..2].to_vec()
        }
        .into()]
    );
    assert!(engine.brakes().protection_active(&key()));
    // The hold is told once, when it begins (SPEC H5), not with every held expiry.
    let protection = |outputs: &[Output]| -> Vec<bool> {
        outputs
            .iter()
            .filter_map(|o| match o {
                Output::Note(Note::Protection { active, .. }) => Some(*active),
                _ => None,
            })
            .collect()
    };
    assert_eq!(protection(&outputs), [true]);
    assert_eq!(protection(&engine.tick(&registry, at(3_000))), Vec::<bool>::new());
}

#[test]
fn a_ttl_report_is_answered_after_the_change_it_caused_settles() {
    let mut registry = Registry::new(RegistryConfig::default());
    let checked = Register {
        target: target("a", 1),
        spec: spec(vec![CheckSpec {
            ttl_ms: Some(5_000),
            rise: Some(1),
            ..CheckSpec::default()
        }]),
        lease: LeaseSpec::None,
        expected_revision: None,
    };
    apply(&mut registry, checked.into(), Actor::App);
    assert_eq!(
        registry.snapshot(&key()).unwrap().iter().next().unwrap().serving,
        ServingState::Starting
    );
    let mut engine = engine(no_brake());
    engine.became_leader(&registry, at(0));
    let report = TtlReport {
        key: key(),
        instance: InstanceId::new("a").unwrap(),
        incarnation: Incarnation(1),
        status: CheckStatus::Pass,
        note: None,
    };
    let outputs = engine.ttl_report(&registry, &report, ReplyTo(5), at(100));
    let [Output::Note(Note::Crossing { state, .. }), Output::Propose(proposal)] = outputs.as_slice() else {
        panic!("a crossing and its proposal, got {outputs:?}");
    };
    assert_eq!(*state, ServingState::Ready);
    assert_eq!(proposal.duty, Duty::Checker);
    let revision = registry
        .apply(&proposal.command, &meta(Actor::Checker))
        .unwrap()
        .revision;
    let answer = engine.settled(
        &registry,
        proposal.tag,
        Outcome::Committed {
            revision,
            changed: true,
        },
    );
    assert_eq!(
        answer,
        [Output::Reply {
            to: ReplyTo(5),
            reply: Reply::Report(Ok(muster_core::api::CheckReportReply {
                serving: ServingState::Ready,
                revision: Some(revision),
            })),
        }]
    );
    let stale = TtlReport {
        incarnation: Incarnation(2),
        ..report
    };
    let refused = engine.ttl_report(&registry, &stale, ReplyTo(6), at(200));
    assert!(
        matches!(refused.as_slice(), [Output::Reply { to: ReplyTo(6), reply: Reply::Report(Err(e)) }] if e.code() == "stale_incarnation"),
        "{refused:?}"
    );
}

/// The reason a TTL report's proposal carries, applied to the registry (what Consul's
/// `Output` shows), and the revision it committed at (`None` when nothing was proposed).
fn report_note(
    engine: &mut LeaderEngine<Xoshiro256PlusPlus>,
    registry: &mut Registry,
    note: &str,
    now_ms: u64,
) -> Option<Revision> {
    let report = TtlReport {
        key: key(),
        instance: InstanceId::new("a").unwrap(),
        incarnation: Incarnation(1),
        status: CheckStatus::Pass,
        note: Some(note.to_owned()),
    };
    let outputs = engine.ttl_report(registry, &report, ReplyTo(now_ms), at(now_ms));
    let proposal = outputs.iter().find_map(|o| match o {
        Output::Propose(proposal) => Some(proposal.clone()),
        _ => None,
    })?;
    // Committed at the report's time, so a record's time shows which write set it.
    let at = CommandMeta {
        at_ms: AT_MS + now_ms,
        ..meta(Actor::Checker)
    };
    let applied = registry.apply(&proposal.command, &at).unwrap();
    engine.settled(
        registry,
        proposal.tag,
        Outcome::Committed {
            revision: applied.revision,
            changed: applied.unchanged.is_none(),
        },
    );
    applied.unchanged.is_none().then_some(applied.revision)
}

/// SPEC H4 (the app's words for what its check saw): a TTL report's note is the reason
/// recorded with the state it sets; a changed note while the state holds is recorded on its
/// own, at most once per `NOTE_EVERY_MS`; one longer than the registry's text limit is cut,
/// never refused.
#[test]
fn a_ttl_note_is_the_recorded_reason_and_a_changed_one_is_recorded_once_a_minute() {
    use muster_health::checker::NOTE_EVERY_MS;
    let mut registry = Registry::new(RegistryConfig::default());
    apply(
        &mut registry,
        muster_registry::RaiseFormat { format: 3 }.into(),
        Actor::Owner,
    );
    let checked = Register {
        target: target("a", 1),
        spec: spec(vec![CheckSpec {
            ttl_ms: Some(600_000),
            rise: Some(1),
            ..CheckSpec::default()
        }]),
        lease: LeaseSpec::None,
        expected_revision: None,
    };
    apply(&mut registry, checked.into(), Actor::App);
    let mut engine = engine(no_brake());
    engine.became_leader(&registry, at(0));
    let endpoint = |registry: &Registry| registry.snapshot(&key()).unwrap().iter().next().unwrap().clone();

    assert!(report_note(&mut engine, &mut registry, "all good", 100).is_some());
    let now = endpoint(&registry);
    assert_eq!(
        (now.serving, now.observation.reason.as_str()),
        (ServingState::Ready, "all good")
    );
    assert_eq!(now.observation.actor, Actor::Checker);
    let first_at = now.observation.at_ms;

    // The same note, then a changed one within the minute: nothing is proposed.
    assert_eq!(report_note(&mut engine, &mut registry, "all good", 200), None);
    assert_eq!(report_note(&mut engine, &mut registry, "3 jobs queued", 300), None);
    assert_eq!(endpoint(&registry).observation.reason, "all good");
    // A minute after the last record, the changed note is recorded, the state unchanged.
    let revision = report_note(&mut engine, &mut registry, "3 jobs queued", 100 + NOTE_EVERY_MS).unwrap();
    let now = endpoint(&registry);
    assert_eq!(now.revision, revision);
    assert_eq!(
        (now.serving, now.observation.reason.as_str()),
        (ServingState::Ready, "3 jobs queued")
    );

    // The time recorded is the transition's, not the note's (SPEC H4; Consul's reaper counts
    // "critical since" from it).
    assert_eq!(now.observation.at_ms, first_at);

    // Longer than the registry's limit (256 bytes by default): cut at a character boundary
    // (byte 256 falls inside an `é`).
    let long = format!("a{}", "é".repeat(200));
    report_note(&mut engine, &mut registry, &long, 100 + 2 * NOTE_EVERY_MS).unwrap();
    let reason = endpoint(&registry).observation.reason.clone();
    assert_eq!(reason.len(), 255);
    assert!(long.starts_with(reason.as_str()));

    // Control characters (a multi-line output) become spaces: the write is never refused.
    report_note(&mut engine, &mut registry, "disk ok\nqueue ok", 100 + 3 * NOTE_EVERY_MS).unwrap();
    assert_eq!(endpoint(&registry).observation.reason, "disk ok queue ok");
}

/// Before format 3 the registry records no note on its own: a mixed cluster's older members
/// would apply it differently.
#[test]
fn before_format_3_a_changed_note_with_no_crossing_changes_nothing() {
    let mut registry = Registry::new(RegistryConfig::default());
    let checked = Register {
        target: target("a", 1),
        spec: spec(vec![CheckSpec {
            ttl_ms: Some(600_000),
            rise: Some(1),
            ..CheckSpec::default()
        }]),
        lease: LeaseSpec::None,
        expected_revision: None,
    };
    apply(&mut registry, checked.into(), Actor::App);
    let mut engine = engine(no_brake());
    engine.became_leader(&registry, at(0));
    // The crossing's reason is the note at any format.
    assert!(report_note(&mut engine, &mut registry, "all good", 100).is_some());
    let revision = registry.revision();
    assert_eq!(
        report_note(
            &mut engine,
            &mut registry,
            "changed",
            100 + 2 * muster_health::checker::NOTE_EVERY_MS
        ),
        None
    );
    assert_eq!(registry.revision(), revision);
}

/// reference/control-plane-state.txt, "Health checker causes fleet eviction": every probe
/// fails at once; the first removal is proposed, the next is held by the brake while the
/// first has not even committed (it counts as gone).
#[test]
fn a_failing_probe_proposes_not_serving_and_the_brake_holds_the_next_removal() {
    let mut registry = Registry::new(RegistryConfig::default());
    for name in ["a", "b"] {
        let checked = Register {
            target: target(name, 1),
            spec: EndpointSpec {
                serving: Some(ServingState::Ready),
                ..spec(vec![CheckSpec {
                    url: Some("http://10.0.0.1:8080/healthz".into()),
                    interval_ms: Some(1_000),
                    timeout_ms: Some(500),
                    fall: Some(1),
                    ..CheckSpec::default()
                }])
            },
            lease: LeaseSpec::None,
            expected_revision: None,
        };
        apply(&mut registry, checked.into(), Actor::App);
    }
    let mut engine = engine(PreservationConfig {
        max_fraction: 0.5,
        min_endpoints: 0,
        ..PreservationConfig::default()
    });
    engine.became_leader(&registry, at(0));
    // Every first probe falls within the first interval.
    let probes: Vec<_> = engine
        .tick(&registry, at(1_000))
        .into_iter()
        .filter_map(|o| match o {
            Output::Probe(probe) => Some(probe.id),
            _ => None,
        })
        .collect();
    assert_eq!(probes.len(), 2);
    let first = engine.probe_result(&registry, probes[0], ProbeResult::Fail, at(1_100));
    let [Output::Note(Note::Crossing { state, .. }), Output::Propose(proposal)] = first.as_slice() else {
        panic!("a crossing and its proposal, got {first:?}");
    };
    assert_eq!(*state, ServingState::NotServing);
    assert_eq!((proposal.tag, proposal.duty), (Tag(1), Duty::Checker));
    let second = engine.probe_result(&registry, probes[1], ProbeResult::Fail, at(1_100));
    assert!(
        matches!(
            second.as_slice(),
            [
                Output::Note(Note::Held { .. }),
                Output::Note(Note::Protection { active: true, .. })
            ]
        ),
        "{second:?}"
    );
    assert!(engine.brakes().protection_active(&key()));
}
