//! Two regions (`--regions 2`, SPEC G2): two independent simulated clusters, each with its
//! own workload and faults, played in lockstep on one clock; region b imports region a's
//! `acme/prod/*` through the simulated mirror ([`crate::mirror`]) over the WAN
//! ([`crate::wan`]), which the federation schedule partitions and heals.
//!
//! ```text
//!  step: WAN fault? ─ a.act ─ b.act ─ trespass in b? ─ pause ─ sample a, b ─ federation checks
//!  end:  heal the WAN ─ a.finish ∥ b.finish ─ wait until b's mirror is a's sets ─ final checks
//! ```
//!
//! A region partition cuts the WAN for 2.5–6 s; half of them also hold both regions' own
//! faults meanwhile, so that a partition with both regions otherwise healthy is common
//! enough to judge "a partition stops neither" (both regions commit local writes while
//! calm). A trespass is a local write in b to an instance b mirrors and does not hold
//! locally: the registry must refuse it (`mirrored_read_only`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use muster_core::federation::ImportScope;
use muster_core::{Actor, Incarnation, Label, ServingState};
use muster_registry::{Command, Deregister, LeaseSpec, Register, SetServing, Target};

use crate::invariants::federation::{Federation, MirrorSample, local_commits};
use crate::mirror::{MirrorStats, SimMirror};
use crate::rng::SimRng;
use crate::run::{Options, Region, Report, Sim, lock};
use crate::trace::Trace;
use crate::wan::{Wan, WanStats, WanWeather};
use crate::workload::{Op, OpKind};

/// A region partition starts at a step with this chance, per thousand: about one per
/// 15 simulated seconds (a step is ~60 ms), so most runs see one or two, and the mirror
/// has time to follow between them.
const PARTITION_CHANCE: u64 = 4;
/// WAN weather (loss, long delays) starts with this chance, per thousand.
const WEATHER_CHANCE: u64 = 5;
/// A trespass is launched in b with this chance per step, per thousand.
const TRESPASS_CHANCE: u64 = 60;
/// A region must have been calm this long within a partition to be judged on its local
/// commits: an election (0.3–0.6 s timeouts) and the writes that follow fit well within.
const JUDGE_CALM_MS: u64 = 2_000;
/// How long b's mirror may take to match a after both settled: backoffs (≤ 2 s), a fresh
/// snapshot and a heartbeat, several times over.
const SETTLE_WITHIN_MS: u64 = 20_000;

/// What federation did in one run.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FederationReport {
    /// The mirror's counts.
    pub mirror: MirrorStats,
    /// The WAN's counts.
    pub wan: WanStats,
    /// Region partitions.
    pub partitions: u64,
    /// Region-partition windows in which a calm region was judged on its local commits.
    pub judged: u64,
    /// Local writes in b to instances it mirrors (each must be refused).
    pub trespasses: u64,
    /// Sets b mirrored at the end.
    pub mirrored_sets: usize,
}

/// Runs one seed with two regions.
pub(crate) fn run_seed(seed: u64, options: &Options) -> Report {
    let runtime = crate::run::paused_runtime();
    runtime.block_on(async {
        let mut a = Sim::new(seed, options.clone(), Region::Named("a")).await;
        let b_seed = SimRng::new(seed, 7).next_u64();
        let mut b = Sim::new(b_seed, options.clone(), Region::Named("b")).await;
        let mut fed = Fed::new(seed, options, &a, &b);
        fed.play(&mut a, &mut b).await;
        fed.report(&a, &b)
    })
}

/// A region partition: when it started, and each region's (sample time, operations
/// launched by then) at every step since.
struct Partition {
    start_ms: u64,
    launched: [Vec<(u64, u64)>; 2],
}

enum WanEvent {
    Heal,
    Calm,
}

struct Fed {
    steps: u64,
    rng: SimRng,
    wan: Arc<Wan>,
    region: Label,
    import: ImportScope,
    stats: Arc<Mutex<MirrorStats>>,
    stop: Arc<AtomicBool>,
    invariants: Federation,
    trace: Arc<Mutex<Trace>>,
    pending: BTreeMap<u64, Vec<WanEvent>>,
    partition: Option<Partition>,
    /// Per region: since when it has been calm (the last sample that was not).
    calm_since_ms: [u64; 2],
    report: FederationReport,
}

impl Fed {
    fn new(seed: u64, options: &Options, a: &Sim, b: &Sim) -> Fed {
        let region = Label::new("region", "a").expect("a valid region name");
        let import = ImportScope::parse("acme", "prod/*").expect("a valid import");
        let wan = Arc::new(Wan::new(SimRng::new(seed, 9)));
        let stats = Arc::new(Mutex::new(MirrorStats::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let trace = Arc::new(Mutex::new(Trace::labelled(options.verbose, "fed| ")));
        let mirror = SimMirror {
            region: region.clone(),
            import: import.clone(),
            source: Arc::clone(&a.cluster.net),
            target: Arc::clone(&b.cluster.net),
            wan: Arc::clone(&wan),
            clock: b.clock,
            trace: Arc::clone(&trace),
            stats: Arc::clone(&stats),
            stop: Arc::clone(&stop),
            rng: SimRng::new(seed, 10),
        };
        tokio::spawn(mirror.run());
        Fed {
            steps: options.steps,
            rng: SimRng::new(seed, 8),
            wan,
            region,
            invariants: Federation::new(import.clone()),
            import,
            stats,
            stop,
            trace,
            pending: BTreeMap::new(),
            partition: None,
            calm_since_ms: [0; 2],
            report: FederationReport::default(),
        }
    }

    fn line(&self, at_ms: u64, line: &str) {
        lock(&self.trace).line(at_ms, line);
    }

    async fn play(&mut self, a: &mut Sim, b: &mut Sim) {
        for _ in 0..self.steps {
            self.act(a, b);
            a.act().await;
            b.act().await;
            self.trespass(b);
            let pause = self.rng.between(5, 120);
            tokio::time::sleep(Duration::from_millis(pause)).await;
            a.sample(false);
            b.sample(false);
            a.steps += 1;
            b.steps += 1;
            self.check(a, b);
            if a.violated() || b.violated() {
                return;
            }
        }
        self.heal(a, b);
        self.wan.set_weather(WanWeather::CALM);
        self.pending.clear();
        tokio::join!(a.finish(), b.finish());
        if !a.violated() && !b.violated() {
            self.settle(a, b).await;
        }
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Due WAN events, then perhaps a new WAN fault.
    fn act(&mut self, a: &mut Sim, b: &mut Sim) {
        let now = a.clock.now_ms();
        let due: Vec<u64> = self.pending.range(..=now).map(|(at, _)| *at).collect();
        for at in due {
            for event in self.pending.remove(&at).unwrap_or_default() {
                match event {
                    WanEvent::Heal => self.heal(a, b),
                    WanEvent::Calm => {
                        self.wan.set_weather(WanWeather::CALM);
                        self.line(now, "WAN weather ends");
                    }
                }
            }
        }
        if self.partition.is_none() && self.rng.chance(PARTITION_CHANCE) {
            let held = self.rng.chance(500);
            self.wan.set_cut(true);
            a.hold_faults = held;
            b.hold_faults = held;
            self.partition = Some(Partition {
                start_ms: now,
                launched: [vec![(now, a.next_op)], vec![(now, b.next_op)]],
            });
            self.report.partitions += 1;
            let until = now + self.rng.between(2_500, 6_000);
            self.pending.entry(until).or_default().push(WanEvent::Heal);
            self.line(now, &format!("fault: regions partitioned (local faults held: {held})"));
        } else if self.rng.chance(WEATHER_CHANCE) {
            let weather = WanWeather {
                loss: self.rng.between(50, 300),
                delay_ms: (20, self.rng.between(60, 300)),
            };
            self.wan.set_weather(weather);
            let until = now + self.rng.between(1_000, 5_000);
            self.pending.entry(until).or_default().push(WanEvent::Calm);
            self.line(now, &format!("fault: WAN weather {weather:?}"));
        }
    }

    /// Ends a region partition and judges it: each region calm for long enough within it,
    /// whose clients wrote, committed local writes meanwhile (SPEC G2). Only operations
    /// launched a second or more before the heal count: one step of the other region can
    /// take long (a node's shutdown waits out its in-flight replication), and writes sent
    /// just before the heal may still be on their way.
    fn heal(&mut self, a: &mut Sim, b: &mut Sim) {
        let Some(partition) = self.partition.take() else { return };
        let now = a.clock.now_ms();
        self.wan.set_cut(false);
        a.hold_faults = false;
        b.hold_faults = false;
        self.line(now, "fault ends: regions partition healed");
        for (i, sim) in [&*a, &*b].into_iter().enumerate() {
            let from = self.calm_since_ms[i].max(partition.start_ms);
            let launched = &partition.launched[i];
            let at = |ms: u64| launched.iter().rev().find(|(t, _)| *t <= ms).map_or(0, |(_, ops)| *ops);
            let sent = at(now.saturating_sub(1_000)).saturating_sub(at(from));
            if now < from + JUDGE_CALM_MS || sent == 0 {
                continue;
            }
            self.report.judged += 1;
            let commits = local_commits(&lock(&sim.checks).history, from, now);
            let stalled = if commits == 0 {
                Err(format!(
                    "region {} committed no local write from {from} to {now} ms while partitioned from \
                     its peer, calm, with {sent} operations sent",
                    ["a", "b"][i],
                ))
            } else {
                Ok(())
            };
            lock(&sim.checks).fail("a partition between regions stops neither", stalled);
        }
    }

    /// Now and then, a local write in b to an instance b mirrors from a and does not hold.
    fn trespass(&mut self, b: &mut Sim) {
        if !self.rng.chance(TRESPASS_CHANCE) {
            return;
        }
        let Some(node) = b.cluster.net.nodes().into_values().next() else {
            return;
        };
        let candidates: Vec<Target> = node.read(|r| {
            r.mirror(&self.region, &self.import)
                .into_iter()
                .flat_map(|m| m.sets.values())
                .flat_map(|set| {
                    let local = r.snapshot(set.key());
                    set.iter()
                        .filter(move |e| local.as_ref().is_none_or(|l| l.get(&e.instance).is_none()))
                        .map(|e| Target {
                            key: set.key().clone(),
                            instance: e.instance.clone(),
                            incarnation: e.incarnation,
                        })
                })
                .collect()
        });
        if candidates.is_empty() {
            return;
        }
        let target = self.rng.pick(&candidates).clone();
        let what = format!("trespass on mirrored {}/{}", target.key.service, target.instance);
        // A registration is b's own record beside the mirror (allowed); the others address
        // the mirrored record and must be refused.
        let (what, command): (String, Command) = match self.rng.below(4) {
            0 => (
                format!("{what}: register #{}", target.incarnation.0 + 1),
                Register {
                    target: Target {
                        incarnation: Incarnation(target.incarnation.0 + 1),
                        ..target
                    },
                    spec: muster_core::EndpointSpec {
                        addresses: vec![muster_core::AddressSpec {
                            ip: "10.9.0.1".into(),
                            scope: None,
                        }],
                        ..muster_core::EndpointSpec::default()
                    },
                    lease: LeaseSpec::None,
                    expected_revision: None,
                }
                .into(),
            ),
            2 => (
                format!("{what}: set-serving NotServing"),
                SetServing {
                    target,
                    state: ServingState::NotServing,
                    reason: "trespass".into(),
                    expected_revision: None,
                }
                .into(),
            ),
            _ => (
                format!("{what}: deregister"),
                Deregister {
                    target,
                    expected_revision: None,
                }
                .into(),
            ),
        };
        self.report.trespasses += 1;
        b.launch(Op {
            what,
            kind: OpKind::Propose(command, Actor::Owner),
            grant_ttl: None,
        });
    }

    /// After a step: walk a's history, check every replica of b, track calm.
    fn check(&mut self, a: &Sim, b: &Sim) {
        let walked = self.invariants.walk_source(&lock(&a.checks).history);
        lock(&a.checks).fail("region a's history follows on (federation's walk)", walked);
        for sample in self.samples(b) {
            self.check_sample(b, &sample);
        }
        let now = a.clock.now_ms();
        for (i, sim) in [a, b].into_iter().enumerate() {
            if !sim.calm() {
                self.calm_since_ms[i] = now;
            }
            if let Some(partition) = &mut self.partition {
                partition.launched[i].push((now, sim.next_op));
            }
        }
    }

    fn check_sample(&mut self, b: &Sim, sample: &MirrorSample) {
        let cursor = self.invariants.check_cursor(sample);
        let provenance = self.invariants.check_provenance(sample);
        let agreement = self.invariants.check_agreement(sample);
        let mut checks = lock(&b.checks);
        checks.fail("mirror cursors are monotonic on every replica", cursor);
        checks.fail("a mirrored set is its region's set at its source revision", provenance);
        checks.fail(
            "every replica at the same applied index holds the same mirror table",
            agreement,
        );
    }

    fn samples(&self, b: &Sim) -> Vec<MirrorSample> {
        b.cluster
            .net
            .nodes()
            .into_iter()
            .map(|(id, node)| {
                let applied = node.status().applied_index;
                let process = b.cluster.process(id);
                node.read(|r| MirrorSample::read(id, process, applied, r, &self.region, &self.import))
            })
            .collect()
    }

    /// Both regions settled: waits until every replica of b mirrors a's current sets at a's
    /// revision, and fails if that does not happen in time (SPEC G2: no resurrection, no
    /// loss).
    async fn settle(&mut self, a: &Sim, b: &Sim) {
        let mut last = Err("never sampled".to_owned());
        for _ in 0..SETTLE_WITHIN_MS / 100 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let walked = self.invariants.walk_source(&lock(&a.checks).history);
            lock(&a.checks).fail("region a's history follows on (federation's walk)", walked);
            let Some(source) = a.cluster.net.nodes().into_values().next() else {
                return;
            };
            let (sets, revision) = source.read(|r| (r.services(&self.import.namespace), r.revision().0));
            let samples = self.samples(b);
            for sample in &samples {
                self.check_sample(b, sample);
            }
            last = samples
                .iter()
                .try_for_each(|s| self.invariants.check_final(s, &sets, revision));
            if last.is_ok() && samples.len() == b.cluster.ids().len() {
                self.report.mirrored_sets = samples.first().map_or(0, |s| s.sets.len());
                self.line(
                    a.clock.now_ms(),
                    &format!("b's mirror is a's sets at revision {revision}"),
                );
                return;
            }
        }
        let last = last.map_err(|e| format!("{e} ({SETTLE_WITHIN_MS} ms after both regions settled)"));
        lock(&b.checks).fail("after the final heal, b's mirror is a's current sets", last);
    }

    fn report(&mut self, a: &Sim, b: &Sim) -> Report {
        let (ra, rb) = (a.report(), b.report());
        self.report.mirror = *lock(&self.stats);
        self.report.wan = self.wan.stats();
        let fed_trace = lock(&self.trace).digest();
        let trace = xxhash_rust::xxh3::xxh3_64(&[ra.trace, rb.trace, fed_trace].map(u64::to_le_bytes).concat());
        let named = |region: &str, v: crate::invariants::Violation| crate::invariants::Violation {
            detail: format!("region {region}: {}", v.detail),
            ..v
        };
        let violation = ra
            .violation
            .map(|v| named("a", v))
            .or_else(|| rb.violation.map(|v| named("b", v)));
        let mut net = ra.net;
        net.sent += rb.net.sent;
        net.lost += rb.net.lost;
        net.duplicated += rb.net.duplicated;
        let mut faults = ra.faults;
        faults += rb.faults;
        Report {
            seed: ra.seed,
            trace,
            violation,
            steps: ra.steps,
            simulated_ms: ra.simulated_ms,
            net,
            acknowledged: ra.acknowledged + rb.acknowledged,
            revision: ra.revision,
            federation: Some(self.report),
            faults,
        }
    }
}
