use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};

use muster_core::{
    Actor, Address, CheckSpec, Endpoint, Locality, Observation, Principal, Provenance, Revision, ServiceKey,
};
use rand_core::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;

use super::*;
use crate::preservation::PreservationConfig;

fn key() -> ServiceKey {
    ServiceKey::new("acme", "prod", "api").unwrap()
}

fn check(url: &str, rise: u32, fall: u32) -> Check {
    CheckSpec {
        url: Some(url.into()),
        interval_ms: Some(1_000),
        timeout_ms: Some(500),
        rise: Some(rise),
        fall: Some(fall),
        ..CheckSpec::default()
    }
    .validate("c")
    .unwrap()
}

fn ttl(ttl_ms: u64) -> Check {
    CheckSpec {
        ttl_ms: Some(ttl_ms),
        ..CheckSpec::default()
    }
    .validate("c")
    .unwrap()
}

fn with_signal(mut check: Check, signal: Signal) -> Check {
    check.signal = signal;
    check
}

fn endpoint(n: u32, serving: ServingState, checks: Vec<Check>) -> Endpoint {
    let principal = Principal::new("test").unwrap();
    Endpoint {
        instance: InstanceId::new(&format!("i-{n}")).unwrap(),
        incarnation: Incarnation(1),
        addresses: vec![Address {
            ip: IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + n)),
            scope: None,
        }]
        .into(),
        ports: Box::default(),
        locality: Locality::default(),
        serving,
        weight: 100,
        capacity: None,
        labels: muster_core::Labels::default(),
        lease: None,
        revision: Revision(1),
        provenance: Provenance {
            registrar: principal.clone(),
            source_revision: None,
            policy_revision: Revision::ZERO,
        },
        observation: Observation {
            actor: Actor::App,
            principal,
            at_ms: 0,
            reason: "registered".into(),
        },
        checks: checks.into(),
    }
}

/// A checker over a tiny fake registry: the proposals it makes are applied to `states`, which
/// the brake counts.
struct Harness {
    checker: Checker<Xoshiro256PlusPlus>,
    brakes: Brakes,
    states: HashMap<InstanceId, ServingState>,
    proposals: Vec<Proposal>,
    held: Vec<String>,
    liveness: Vec<Health>,
}

impl Harness {
    fn new(config: CheckerConfig) -> Harness {
        Harness {
            checker: Checker::new(config, Xoshiro256PlusPlus::seed_from_u64(7)),
            brakes: Brakes::new(PreservationConfig::default(), HashMap::new()),
            states: HashMap::new(),
            proposals: Vec::new(),
            held: Vec::new(),
            liveness: Vec::new(),
        }
    }

    fn add(&mut self, endpoint: &Endpoint) {
        self.states.insert(endpoint.instance.clone(), endpoint.serving);
        self.checker.sync(&key(), endpoint, 0);
    }

    fn take(&mut self, decisions: impl IntoIterator<Item = Decision>) {
        for decision in decisions {
            match decision {
                Decision::Propose(proposal) => {
                    self.states.insert(proposal.instance.clone(), proposal.state);
                    self.proposals.push(proposal);
                }
                Decision::Note(proposal) => self.proposals.push(proposal),
                Decision::Held { reason, .. } => self.held.push(reason),
                Decision::Liveness { health, .. } => self.liveness.push(health),
            }
        }
    }

    /// Runs the schedule from `from_ms` to `to_ms` in 10 ms steps, answering every probe at
    /// once with `answer(instance, time)`; returns how many probes started in each second.
    fn run(
        &mut self,
        from_ms: u64,
        to_ms: u64,
        mut answer: impl FnMut(&ProbeId, u64) -> ProbeResult,
    ) -> HashMap<u64, u32> {
        let mut per_second = HashMap::new();
        let mut now = from_ms;
        while now < to_ms {
            let Harness {
                checker,
                brakes,
                states,
                ..
            } = self;
            let mut counts = |_: &ServiceKey| Counts::of(states.values().copied());
            let (probes, mut decisions) = checker.due(now, brakes, &mut counts);
            for probe in probes {
                *per_second.entry(now / 1_000).or_insert(0) += 1;
                let result = answer(&probe.id, now);
                decisions.extend(checker.record(probe.id, result, now, brakes, &mut counts));
            }
            self.take(decisions);
            now += 10;
        }
        per_second
    }

    fn report(&mut self, n: u32, incarnation: u64, status: CheckStatus, now: u64) -> Result<(), ReportError> {
        let states = self.states.clone();
        let mut counts = |_: &ServiceKey| Counts::of(states.values().copied());
        let report = TtlReport {
            key: key(),
            instance: InstanceId::new(&format!("i-{n}")).unwrap(),
            incarnation: Incarnation(incarnation),
            status,
            note: None,
        };
        let decisions = self.checker.report(&report, now, &mut self.brakes, &mut counts)?;
        self.take(decisions);
        Ok(())
    }

    fn states_proposed(&self) -> Vec<ServingState> {
        self.proposals.iter().map(|p| p.state).collect()
    }
}

#[test]
fn ten_thousand_checks_at_ten_seconds_make_a_steady_thousand_probes_per_second() {
    let mut h = Harness::new(CheckerConfig::default());
    let ten_s = CheckSpec {
        url: Some("http://10.0.0.1:8080/healthz".into()),
        ..CheckSpec::default()
    }
    .validate("c")
    .unwrap();
    for n in 0..10_000 {
        h.add(&endpoint(n, ServingState::Ready, vec![ten_s.clone()]));
    }
    let per_second = h.run(0, 60_000, |_, _| ProbeResult::Pass);
    for second in 0..60 {
        let count = per_second.get(&second).copied().unwrap_or(0);
        assert!((800..=1_200).contains(&count), "second {second}: {count} probes");
    }
    let total: u32 = per_second.values().sum();
    assert!((59_000..=61_000).contains(&total), "{total} probes in 60 s");
}

#[test]
fn only_threshold_crossings_are_proposed_with_the_check_and_the_reason() {
    let mut h = Harness::new(CheckerConfig::default());
    h.add(&endpoint(
        1,
        ServingState::Starting,
        vec![check("http://10.0.0.1:80/healthz", 2, 3)],
    ));
    for n in 2..5 {
        h.add(&endpoint(n, ServingState::Ready, vec![]));
    }
    // Passing for 10 s, failing for 10 s, passing again.
    h.run(0, 30_000, |_, now| {
        if (10_000..20_000).contains(&now) {
            ProbeResult::Fail
        } else {
            ProbeResult::Pass
        }
    });
    assert_eq!(
        h.states_proposed(),
        [ServingState::Ready, ServingState::NotServing, ServingState::Ready],
        "about 30 probes, three crossings"
    );
    assert_eq!(
        h.proposals[1].reason,
        "http://10.0.0.1:80/healthz: 3 consecutive failures"
    );
    assert_eq!(
        h.proposals[2].reason,
        "http://10.0.0.1:80/healthz: 2 consecutive passes"
    );
    assert_eq!(h.proposals[1].incarnation, Incarnation(1));
}

#[test]
fn a_check_flapping_at_every_probe_changes_routing_no_more_than_damping_allows() {
    let mut h = Harness::new(CheckerConfig::default());
    h.add(&endpoint(
        1,
        ServingState::Ready,
        vec![check("tcp://10.0.0.1:80", 1, 1)],
    ));
    let mut flip = false;
    h.run(0, 600_000, |_, _| {
        flip = !flip;
        if flip { ProbeResult::Fail } else { ProbeResult::Pass }
    });
    // 600 probes, each one a crossing with rise = fall = 1; damping allows `flap_limit`
    // crossings per window, then holds `degraded` while it keeps flapping.
    let limit = CheckerConfig::default().flap_limit;
    assert!(h.proposals.len() <= limit + 1, "{:?}", h.states_proposed());
    assert_eq!(h.proposals.last().unwrap().state, ServingState::Degraded);
    assert!(h.proposals.last().unwrap().reason.contains("held degraded"));
}

#[test]
fn liveness_failures_are_reported_but_never_change_routing() {
    let mut h = Harness::new(CheckerConfig::default());
    let liveness = with_signal(check("http://10.0.0.1:80/live", 1, 2), Signal::Liveness);
    h.add(&endpoint(1, ServingState::Ready, vec![liveness]));
    h.run(0, 10_000, |_, _| ProbeResult::Fail);
    assert!(h.proposals.is_empty(), "{:?}", h.proposals);
    assert_eq!(h.liveness, [Health::Failing]);
}

#[test]
fn startup_holds_starting_until_its_first_pass_then_readiness_decides() {
    let mut h = Harness::new(CheckerConfig::default());
    let startup = with_signal(check("http://10.0.0.1:80/started", 1, 3), Signal::Startup);
    let readiness = check("http://10.0.0.1:80/ready", 1, 3);
    h.add(&endpoint(1, ServingState::Starting, vec![startup, readiness]));
    h.run(0, 10_000, |id, _| {
        if id.check == 1 {
            ProbeResult::Pass
        } else {
            ProbeResult::Fail
        }
    });
    assert!(
        h.proposals.is_empty(),
        "readiness passes, startup not yet: still starting"
    );
    h.run(10_000, 20_000, |_, _| ProbeResult::Pass);
    assert_eq!(h.states_proposed(), [ServingState::Ready]);
    // Startup passed once and is done: its failures no longer count.
    h.run(20_000, 30_000, |id, _| {
        if id.check == 1 {
            ProbeResult::Pass
        } else {
            ProbeResult::Fail
        }
    });
    assert_eq!(h.states_proposed(), [ServingState::Ready]);
}

/// Trace: registered with a check against a backend answering 500 (or refusing, or timing
/// out) from its first probe, the endpoint stayed `starting` until its lease ran out (H2, H4).
/// It is proposed `not_serving` at the `fall`-th failure, by the checker, with the reason.
#[test]
fn a_check_failing_from_its_first_probe_is_proposed_not_serving_at_the_fall_th_failure() {
    let mut h = Harness::new(CheckerConfig::default());
    h.add(&endpoint(
        1,
        ServingState::Starting,
        vec![check("http://10.0.0.1:80/healthz", 2, 3)],
    ));
    let mut probes = 0;
    h.run(0, 10_000, |_, _| {
        probes += 1;
        ProbeResult::Fail
    });
    assert!(probes >= 9, "{probes}");
    assert_eq!(
        h.states_proposed(),
        [ServingState::NotServing],
        "one crossing, no repeats"
    );
    assert_eq!(
        h.proposals[0].reason,
        "http://10.0.0.1:80/healthz: 3 consecutive failures"
    );
    assert_eq!(h.proposals[0].incarnation, Incarnation(1));
    assert!(h.held.is_empty(), "a never-ready endpoint leaves no routing: no brake");
    // The backend comes up: `rise` passes bring it in.
    h.run(10_000, 13_000, |_, _| ProbeResult::Pass);
    assert_eq!(h.states_proposed(), [ServingState::NotServing, ServingState::Ready]);
}

#[test]
fn a_checker_that_cannot_run_a_new_check_says_unknown_from_starting() {
    let mut h = Harness::new(CheckerConfig::default());
    h.add(&endpoint(
        1,
        ServingState::Starting,
        vec![check("tcp://10.0.0.1:80", 2, 3)],
    ));
    h.run(0, 10_000, |_, _| ProbeResult::Unreachable);
    assert_eq!(h.states_proposed(), [ServingState::Unknown]);
    assert_eq!(
        h.proposals[0].reason,
        "tcp://10.0.0.1:80: the checker could not probe 3 times in a row"
    );
}

#[test]
fn a_checker_that_cannot_reach_its_target_says_unknown_not_not_serving() {
    let mut h = Harness::new(CheckerConfig::default());
    h.add(&endpoint(
        1,
        ServingState::Ready,
        vec![check("tcp://10.0.0.1:80", 2, 3)],
    ));
    h.add(&endpoint(2, ServingState::Ready, vec![]));
    h.add(&endpoint(3, ServingState::Ready, vec![]));
    h.add(&endpoint(4, ServingState::Ready, vec![]));
    h.run(0, 10_000, |_, _| ProbeResult::Unreachable);
    assert_eq!(h.states_proposed(), [ServingState::Unknown]);
    assert!(
        h.proposals[0].reason.contains("could not probe"),
        "{}",
        h.proposals[0].reason
    );
}

#[test]
fn ttl_checks_follow_reports_and_fail_without_one() {
    let mut h = Harness::new(CheckerConfig::default());
    h.add(&endpoint(1, ServingState::Starting, vec![ttl(2_000)]));
    h.add(&endpoint(2, ServingState::Ready, vec![]));
    h.add(&endpoint(3, ServingState::Ready, vec![]));
    h.add(&endpoint(4, ServingState::Ready, vec![]));
    h.report(1, 1, CheckStatus::Pass, 500).unwrap();
    assert_eq!(h.states_proposed(), [ServingState::Ready]);
    h.report(1, 1, CheckStatus::Warn, 1_000).unwrap();
    assert_eq!(h.proposals.last().unwrap().state, ServingState::Degraded);
    assert_eq!(
        h.proposals.last().unwrap().reason,
        "ttl 2000ms: reported warn (1 consecutive warnings)"
    );
    // Silence: one TTL after the last report the check fails.
    h.run(1_000, 2_990, |_, _| ProbeResult::Pass);
    assert_eq!(h.proposals.len(), 2, "the deadline has not passed yet");
    h.run(2_990, 3_020, |_, _| ProbeResult::Pass);
    let last = h.proposals.last().unwrap();
    assert_eq!(last.state, ServingState::NotServing);
    assert!(last.reason.contains("no report within 2000 ms"), "{}", last.reason);
}

#[test]
fn bad_ttl_reports_are_refused_with_codes_and_change_nothing() {
    let mut h = Harness::new(CheckerConfig::default());
    h.add(&endpoint(1, ServingState::Starting, vec![ttl(2_000)]));
    h.add(&endpoint(
        2,
        ServingState::Starting,
        vec![check("tcp://10.0.0.1:80", 1, 1)],
    ));
    let codes: Vec<&str> = [
        h.report(1, 2, CheckStatus::Pass, 0),
        h.report(2, 1, CheckStatus::Pass, 0),
        h.report(9, 1, CheckStatus::Pass, 0),
    ]
    .iter()
    .map(|r| r.as_ref().unwrap_err().code())
    .collect();
    assert_eq!(codes, ["stale_incarnation", "no_ttl_check", "not_found"]);
    assert!(h.proposals.is_empty());
}

/// reference/control-plane-state.txt, "Health checker causes fleet eviction": a shared
/// dependency slows down and every instance's deep check fails at once. The checker removes
/// only what the brake allows; the rest keep serving and the service says protection is
/// active.
#[test]
fn trace_health_checker_causes_fleet_eviction() {
    let mut h = fleet(10, "http://10.0.0.1:80/deep");
    h.run(0, 20_000, |_, now| {
        if now < 5_000 {
            ProbeResult::Pass
        } else {
            ProbeResult::Fail
        }
    });
    let removed = in_state(&h, ServingState::NotServing);
    assert_eq!(removed, 3, "30% of 10 may leave within the window");
    assert_eq!(in_state(&h, ServingState::Ready), 7);
    assert!(h.brakes.protection_active(&key()));
    assert_eq!(h.brakes.protected(), [key()]);
    assert!(
        h.held.iter().all(|why| why.contains("protection_active")),
        "{:?}",
        h.held
    );
    // Each held endpoint is told once (logged once), not at every one of its probes.
    assert_eq!(h.held.len(), 7, "{:?}", h.held);
    // The dependency recovers: the removed ones come back, nothing else moved.
    h.run(20_000, 30_000, |_, _| ProbeResult::Pass);
    assert!(h.states.values().all(|s| *s == ServingState::Ready));
}

/// A harness tracking `n` ready endpoints `i-0`.. of one service, each with one readiness
/// check of `url` (rise 2, fall 3, every second).
fn fleet(n: u32, url: &str) -> Harness {
    let mut h = Harness::new(CheckerConfig::default());
    for i in 0..n {
        h.add(&endpoint(i, ServingState::Ready, vec![check(url, 2, 3)]));
    }
    h
}

/// How many endpoints the harness holds in `state`.
fn in_state(h: &Harness, state: ServingState) -> usize {
    h.states.values().filter(|s| **s == state).count()
}

/// The probe id's endpoint number of instance `i-{n}`.
fn endpoint_id(h: &Harness, n: u32) -> u64 {
    h.checker.by_instance[&(key(), InstanceId::new(&format!("i-{n}")).unwrap())]
}

/// Trace (a newcomer's small service): 4 checked endpoints, one already failing, a second
/// backend killed; the killed one stayed `ready` (and in DNS) while a WARN repeated every
/// probe. A service smaller than `min_endpoints` has no brake: both leave.
#[test]
fn a_small_service_loses_its_failing_endpoints_without_a_brake() {
    let mut h = fleet(4, "http://10.0.0.1:80/healthz");
    let (first, second) = (endpoint_id(&h, 0), endpoint_id(&h, 1));
    h.run(0, 10_000, |id, now| match id.endpoint {
        e if e == first => ProbeResult::Fail,
        e if e == second && now >= 3_000 => ProbeResult::Refused,
        _ => ProbeResult::Pass,
    });
    let not_serving: Vec<_> = ["i-0", "i-1"]
        .iter()
        .map(|i| h.states[&InstanceId::new(i).unwrap()])
        .collect();
    assert_eq!(not_serving, [ServingState::NotServing; 2]);
    assert!(h.held.is_empty(), "{:?}", h.held);
    assert!(!h.brakes.protection_active(&key()));
}

/// SPEC H5, direct evidence: in a service of 10 (30%: 3 removals a minute), five backends
/// killed one after another within the window, each refusing connections alone, all leave:
/// a rolling kill is not a correlated loss. Without the evidence (a plain failure), the
/// fourth would be held.
#[test]
fn killed_backends_refusing_one_at_a_time_pass_the_brake() {
    for (result, left) in [(ProbeResult::Refused, 5), (ProbeResult::Fail, 3)] {
        let mut h = fleet(10, "http://10.0.0.1:80/healthz");
        let killed: Vec<(u64, u64)> = (0..5)
            .map(|n| (endpoint_id(&h, n), 2_000 + u64::from(n) * 8_000))
            .collect();
        h.run(0, 45_000, |id, now| {
            if killed.iter().any(|(e, at)| *e == id.endpoint && now >= *at) {
                result
            } else {
                ProbeResult::Pass
            }
        });
        let removed = in_state(&h, ServingState::NotServing);
        assert_eq!(removed, left, "{result:?}: {:?}", h.held);
    }
}

/// The fleet-eviction trace with refusals: every endpoint refusing at once is not one
/// endpoint's death, so the brake holds as for any correlated failure.
#[test]
fn a_whole_fleet_refusing_at_once_is_still_held() {
    let mut h = fleet(10, "http://10.0.0.1:80/deep");
    h.run(0, 20_000, |_, now| {
        if now < 5_000 {
            ProbeResult::Pass
        } else {
            ProbeResult::Refused
        }
    });
    let removed = in_state(&h, ServingState::NotServing);
    assert_eq!(removed, 3, "30% of 10 may leave within the window");
    assert!(h.brakes.protection_active(&key()));
}

#[test]
fn concurrency_and_budget_bound_the_probes_started() {
    let mut h = Harness::new(CheckerConfig {
        max_in_flight: 5,
        budget_per_s: 8,
        ..CheckerConfig::default()
    });
    for n in 0..100 {
        h.add(&endpoint(
            n,
            ServingState::Ready,
            vec![check("tcp://10.0.0.1:80", 1, 1)],
        ));
    }
    let mut counts = |_: &ServiceKey| Counts::default();
    let (probes, _) = h.checker.due(1_000, &mut h.brakes, &mut counts);
    assert_eq!(probes.len(), 5, "at most 5 in flight");
    assert_eq!(h.checker.due(1_000, &mut h.brakes, &mut counts).0.len(), 0);
    for probe in &probes {
        h.checker
            .record(probe.id, ProbeResult::Pass, 1_000, &mut h.brakes, &mut counts);
    }
    assert_eq!(
        h.checker.due(1_000, &mut h.brakes, &mut counts).0.len(),
        3,
        "8 per second"
    );
    assert_eq!(h.checker.in_flight(), 3);
}

#[test]
fn results_for_an_endpoint_that_left_or_was_replaced_are_ignored() {
    let mut h = Harness::new(CheckerConfig::default());
    h.add(&endpoint(
        1,
        ServingState::Ready,
        vec![check("tcp://10.0.0.1:80", 1, 1)],
    ));
    let mut counts = |_: &ServiceKey| Counts::default();
    let (probes, _) = h.checker.due(1_000, &mut h.brakes, &mut counts);
    assert_eq!(probes.len(), 1);
    let mut replaced = endpoint(1, ServingState::Ready, vec![check("tcp://10.0.0.1:80", 1, 1)]);
    replaced.incarnation = Incarnation(2);
    h.checker.sync(&key(), &replaced, 1_000);
    assert_eq!(h.checker.in_flight(), 0);
    let stale = h
        .checker
        .record(probes[0].id, ProbeResult::Fail, 1_100, &mut h.brakes, &mut counts);
    assert_eq!(stale, None);
    h.checker.remove(&key(), &replaced.instance);
    assert_eq!(h.checker.endpoints(), 0);
    assert_eq!(h.checker.due(10_000, &mut h.brakes, &mut counts).0, []);
}

#[test]
fn a_restart_resumes_a_ready_record_without_sending_it_back_to_starting() {
    let mut h = Harness::new(CheckerConfig::default());
    let startup = with_signal(check("http://10.0.0.1:80/started", 1, 3), Signal::Startup);
    h.add(&endpoint(
        1,
        ServingState::Ready,
        vec![startup, check("tcp://10.0.0.1:80", 2, 3)],
    ));
    for n in 2..5 {
        h.add(&endpoint(n, ServingState::Ready, vec![]));
    }
    // It resumed `ready`: failures count toward `fall` at once (from `starting` they would
    // never cross), and the startup check that already passed is not probed again.
    let (mut readiness_probes, mut startup_probes) = (0, 0);
    h.run(0, 10_000, |id, _| {
        if id.check == 1 {
            readiness_probes += 1;
        } else {
            startup_probes += 1;
        }
        ProbeResult::Fail
    });
    assert_eq!(startup_probes, 0, "a startup check that already passed is done");
    assert!(readiness_probes >= 3, "{readiness_probes}");
    assert_eq!(
        h.states_proposed(),
        [ServingState::NotServing],
        "the third failure crosses"
    );
    assert_eq!(h.proposals[0].reason, "tcp://10.0.0.1:80: 3 consecutive failures");
}

#[test]
fn a_startup_check_the_checker_cannot_reach_never_lets_the_endpoint_start() {
    let mut h = Harness::new(CheckerConfig::default());
    let startup = with_signal(check("http://10.0.0.1:80/started", 1, 2), Signal::Startup);
    h.add(&endpoint(1, ServingState::Starting, vec![startup]));
    h.run(0, 10_000, |_, _| ProbeResult::Unreachable);
    assert!(
        h.proposals.iter().all(|p| p.state != ServingState::Ready),
        "{:?}",
        h.states_proposed()
    );
    h.run(10_000, 12_000, |_, _| ProbeResult::Pass);
    assert_eq!(h.proposals.last().map(|p| p.state), Some(ServingState::Ready));
}

/// An owner drains an instance and it starts failing its check (normal while it stops): the
/// checker's report is not a removal from routing (a draining endpoint is out already), so
/// it spends none of the brake's budget.
#[test]
fn failures_of_a_drained_endpoint_spend_no_self_preservation_budget() {
    let mut h = Harness::new(CheckerConfig::default());
    for n in 1..5 {
        h.add(&endpoint(
            n,
            ServingState::Ready,
            vec![check("tcp://10.0.0.1:80", 1, 1)],
        ));
    }
    let drained = endpoint(1, ServingState::Draining, vec![check("tcp://10.0.0.1:80", 1, 1)]);
    h.states.insert(drained.instance.clone(), ServingState::Draining);
    h.checker.sync(&key(), &drained, 0);
    let failing = [InstanceId::new("i-1").unwrap(), InstanceId::new("i-2").unwrap()];
    // Endpoints are numbered in the order they were added: 0 is i-1, 1 is i-2.
    h.run(0, 3_000, |id, _| {
        if id.endpoint <= 1 {
            ProbeResult::Fail
        } else {
            ProbeResult::Pass
        }
    });
    // i-1 (draining) is reported not serving without the brake; i-2's failure is the
    // service's one allowed removal (30% of 4, at least one).
    assert_eq!(h.states[&failing[0]], ServingState::NotServing);
    assert_eq!(h.states[&failing[1]], ServingState::NotServing);
    assert!(h.held.is_empty(), "{:?}", h.held);
}

/// Syncs `n` endpoints of `tenant`'s `prod/api`, one 1 s TCP check each, numbered from `first`.
fn add_fleet(h: &mut Harness, tenant: &str, first: u32, n: u32) {
    let key = ServiceKey::new(tenant, "prod", "api").unwrap();
    for i in first..first + n {
        let endpoint = endpoint(i, ServingState::Ready, vec![check("tcp://10.0.0.1:80", 1, 1)]);
        h.checker.sync(&key, &endpoint, 0);
    }
}

/// Runs `due` every 10 ms up to `to_ms`; `answer` says whether a probe's result comes back at
/// once (else it hangs). Returns how many probes of endpoint ids at or above `victim` started.
fn probes_of(h: &mut Harness, to_ms: u64, victim: u64, answer: impl Fn(&ProbeId) -> bool) -> usize {
    let mut started = 0;
    let mut counts = |_: &ServiceKey| Counts::default();
    for now in (0..to_ms).step_by(10) {
        let (probes, _) = h.checker.due(now, &mut h.brakes, &mut counts);
        for probe in probes {
            if probe.id.endpoint >= victim {
                started += 1;
            }
            if answer(&probe.id) {
                h.checker
                    .record(probe.id, ProbeResult::Pass, now, &mut h.brakes, &mut counts);
            }
        }
    }
    started
}

#[test]
fn a_tenant_whose_fleet_outruns_the_budget_cannot_starve_another_tenants_probes() {
    // Trace: tenant acme registers 100 checks at 1 s against a budget of 10 probes/s; its
    // backlog grows without end, and globex's one check, queued behind it, waited longer
    // every turn: its failures were detected later and later.
    let mut h = Harness::new(CheckerConfig {
        budget_per_s: 10,
        tenant_budget_per_s: 5,
        ..CheckerConfig::default()
    });
    add_fleet(&mut h, "acme", 0, 100);
    add_fleet(&mut h, "globex", 100, 1);
    let victim = probes_of(&mut h, 10_000, 100, |_| true);
    assert!(
        victim >= 9,
        "globex's check ran {victim} times in 10 s at a 1 s interval"
    );
}

#[test]
fn a_tenant_whose_targets_all_hang_cannot_take_every_probe_slot() {
    // Trace: every acme target accepts and never answers; its probes held all max_in_flight
    // slots to their timeouts, and no other tenant's probe could start.
    let mut h = Harness::new(CheckerConfig {
        max_in_flight: 10,
        tenant_max_in_flight: 5,
        ..CheckerConfig::default()
    });
    add_fleet(&mut h, "acme", 0, 50);
    add_fleet(&mut h, "globex", 50, 1);
    let victim = probes_of(&mut h, 5_000, 50, |id| id.endpoint >= 50);
    assert!(
        victim >= 4,
        "globex's check ran {victim} times in 5 s at a 1 s interval"
    );
    assert!(
        h.checker.in_flight() <= 5,
        "acme holds at most its share: {}",
        h.checker.in_flight()
    );
}

#[test]
fn a_check_on_a_refused_target_is_never_probed_and_fails() {
    // Trace: a check aimed at the leader's own loopback (with auth on) or at the metadata
    // service must neither be probed nor ever pass.
    let mut h = Harness::new(CheckerConfig::default());
    h.checker
        .set_target_policy(crate::target::TargetPolicy::new(false, &[]).unwrap());
    h.add(&endpoint(
        1,
        ServingState::Ready,
        vec![check("http://169.254.169.254:80/latest/meta-data", 1, 1)],
    ));
    h.add(&endpoint(
        2,
        ServingState::Ready,
        vec![check("tcp://127.0.0.1:6379", 1, 1)],
    ));
    let per_second = h.run(0, 3_000, |_, _| ProbeResult::Pass);
    assert!(per_second.is_empty(), "nothing was probed: {per_second:?}");
    // Two endpoints are too few for a brake (`min_endpoints`): both leave, for that reason.
    assert_eq!(h.states[&InstanceId::new("i-1").unwrap()], ServingState::NotServing);
    assert_eq!(h.states[&InstanceId::new("i-2").unwrap()], ServingState::NotServing);
    assert!(h.held.is_empty(), "{:?}", h.held);
    for reason in h.proposals.iter().map(|p| &p.reason) {
        assert!(reason.contains("check_target_refused"), "{reason}");
    }
}
