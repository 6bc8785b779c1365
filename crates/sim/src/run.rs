//! One seed's run: start the cluster, play the schedule step by step (client operations,
//! faults, and the undoing of faults), check the invariants after every step, then heal,
//! let the cluster settle and check the end state.
//!
//! ```text
//!  seed ─┬─ schedule stream ──▶ step: fault? ops? renewals? ── sleep 5–120 ms ── sample + check
//!        ├─ network stream ──▶ every message's fate
//!        └─ election stream ─▶ openraft's timeouts (muster_consensus::seed_election_rng)
//!  end: heal ─ converge ─ quiet (longer than every TTL and grace) ─ converge ─ final checks
//! ```

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use muster_registry::{Command, RegistryConfig};

use crate::clock::Clock;
use crate::cluster::Cluster;
use crate::duties::{Duties, Request};
use crate::faults::{self, Fault};
use crate::invariants::{Checks, Violation};
use crate::net::{Net, NetStats, Weather};
use crate::observer::hash_json;
use crate::ops::OpTask;
use crate::regions::FederationReport;
use crate::rng::SimRng;
use crate::trace::Trace;
use crate::workload::{Op, OpKind, Workload};

/// Revisions of change history (and, before fencing moved to time, of tombstones) the
/// registry keeps: 32, far below the default, so a burst of unrelated writes outlives it
/// within one run.
const HISTORY_REVISIONS: u64 = 32;
/// A snapshot every 12 entries, and 4 entries kept behind it: snapshots are built all the
/// time while entries apply, and a follower that lagged a little installs one (possibly
/// while it builds its own).
const SNAPSHOT_EVERY: u64 = 12;
const KEEP_AFTER_SNAPSHOT: u64 = 4;

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Cluster size: 3 or 5.
    pub nodes: u64,
    /// Steps per seed.
    pub steps: u64,
    /// Print the trace.
    pub verbose: bool,
    /// Regions: 1, or 2 (region b mirrors region a's `prod/*`, see [`crate::regions`]).
    pub regions: u64,
    /// Only the faults the first traces were found with: no lost and regained leadership,
    /// no slow node ([`faults::draw_deep`]), appends paced at the real byte bound. A trace
    /// found before those faults replays so.
    pub shallow: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            nodes: 3,
            steps: 250,
            verbose: false,
            regions: 1,
            shallow: false,
        }
    }
}

/// One seed's outcome.
#[derive(Debug, Clone)]
pub struct Report {
    /// The seed.
    pub seed: u64,
    /// The hash of the whole trace.
    pub trace: u64,
    /// The first broken invariant, if any.
    pub violation: Option<Violation>,
    /// Steps played.
    pub steps: u64,
    /// Simulated time, ms.
    pub simulated_ms: u64,
    /// Network counts.
    pub net: NetStats,
    /// Writes acknowledged.
    pub acknowledged: usize,
    /// The revision the cluster reached (region a's, with two regions).
    pub revision: u64,
    /// With two regions: what the mirror did.
    pub federation: Option<FederationReport>,
    /// The faults injected (both regions' together, with two).
    pub faults: FaultCounts,
}

/// How many faults a run injected, by kind: a run that keeps every invariant proves
/// something only if faults happened in it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FaultCounts {
    /// Nodes crashed (a power cut, or a stop after a failed disk write).
    pub crashes: u64,
    /// Crashed nodes started again from their disk.
    pub restarts: u64,
    /// Partitions: a node isolated, one link cut one way, or the leader isolated while its
    /// lease expiry was in flight.
    pub partitions: u64,
    /// Disk writes made to fail.
    pub failed_disks: u64,
    /// Not injected: nodes their supervisor started again after Raft stopped on an error
    /// of its own ([`crate::supervisor`]).
    pub supervised: u64,
    /// Leaders isolated until another node led ([`Fault::Depose`]).
    pub deposed: u64,
    /// Deposed nodes seen leading again, in a later term.
    pub regained: u64,
    /// Nodes made slow, disk and network ([`Fault::SlowNode`]).
    pub slowed: u64,
}

impl std::ops::AddAssign for FaultCounts {
    fn add_assign(&mut self, other: FaultCounts) {
        self.crashes += other.crashes;
        self.restarts += other.restarts;
        self.partitions += other.partitions;
        self.failed_disks += other.failed_disks;
        self.supervised += other.supervised;
        self.deposed += other.deposed;
        self.regained += other.regained;
        self.slowed += other.slowed;
    }
}

/// A current-thread runtime on a paused clock: the simulation's time is virtual.
pub(crate) fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime")
}

/// Runs one seed on a fresh current-thread runtime with a paused clock.
pub fn run_seed(seed: u64, options: &Options) -> Report {
    if options.regions == 2 {
        return crate::regions::run_seed(seed, options);
    }
    let runtime = paused_runtime();
    runtime.block_on(async {
        let mut sim = Sim::new(seed, options.clone(), Region::Only).await;
        sim.play().await;
        sim.report()
    })
}

/// Which cluster a [`Sim`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Region {
    /// The only one (`--regions 1`).
    Only,
    /// Region `a` or `b` of two: its trace lines say which, and its clients name their
    /// instances apart (`i-` in a, `b-` in b), so b's own writes are not all refused as
    /// writes to a's mirrored instances.
    Named(&'static str),
}

/// One cluster's run.
pub(crate) struct Sim {
    seed: u64,
    pub(crate) options: Options,
    rng: SimRng,
    /// Draws the later faults and their ends, apart from `rng`: with them off
    /// (`Options::shallow`) the first schedule is exactly as it was; with them on, the same
    /// seed plays the same first faults, though what they meet differs.
    deep_rng: SimRng,
    pub(crate) clock: Clock,
    pub(crate) cluster: Cluster,
    pub(crate) duties: Arc<Duties>,
    pub(crate) workload: Arc<Mutex<Workload>>,
    pub(crate) trace: Arc<Mutex<Trace>>,
    pub(crate) checks: Arc<Mutex<Checks>>,
    pub(crate) pending: BTreeMap<u64, Vec<(Fault, bool)>>,
    pub(crate) in_flight: Arc<AtomicUsize>,
    /// Operations launched so far.
    pub(crate) next_op: u64,
    sampled: BTreeMap<u64, (u64, u64)>,
    pub(crate) steps: u64,
    /// Nodes whose disk failed a write and whose supervisor has not restarted them yet.
    pub(crate) failed_disks: std::collections::BTreeSet<u64>,
    /// While set, the schedule draws no new fault (a scheduled undoing still happens).
    pub(crate) hold_faults: bool,
    /// The faults injected so far.
    pub(crate) faults: FaultCounts,
    /// Nodes deposed, with the term they led in then: one seen leading in a later term has
    /// regained its leadership.
    deposed: BTreeMap<u64, u64>,
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Sim {
    pub(crate) async fn new(seed: u64, options: Options, region: Region) -> Sim {
        let mut sim = Sim::unstarted(seed, options, region);
        for id in sim.cluster.ids() {
            sim.start(id).await;
            sim.duties.spawn(id);
        }
        sim.line(format!("seed {} cluster of {}", sim.seed, sim.options.nodes));
        sim
    }

    /// The simulation with no node started yet.
    pub(crate) fn unstarted(seed: u64, options: Options, region: Region) -> Sim {
        muster_consensus::seed_election_rng(SimRng::new(seed, 3).next_u64());
        let clock = Clock::start();
        let checks = Arc::new(Mutex::new(Checks::default()));
        let append_bytes = match options.shallow {
            true => muster_consensus::append_pacer::MAX_APPEND_BYTES,
            false => crate::net::SIM_APPEND_BYTES,
        };
        let net = Arc::new(Net::new(SimRng::new(seed, 2), append_bytes));
        let registry = RegistryConfig {
            history_revisions: HISTORY_REVISIONS,
            ..RegistryConfig::default()
        };
        let cluster = Cluster::new(
            seed,
            options.nodes,
            Arc::clone(&net),
            Arc::clone(&checks),
            clock,
            registry,
            SNAPSHOT_EVERY,
            KEEP_AFTER_SNAPSHOT,
        );
        let duties = Duties::new(Arc::clone(&net), clock, Arc::clone(&checks));
        let (workload, trace) = match region {
            Region::Only => (Workload::new(), Trace::new(options.verbose)),
            Region::Named(name) => (
                Workload::with_prefix(if name == "a" { "i-" } else { "b-" }),
                Trace::labelled(options.verbose, &format!("{name}| ")),
            ),
        };
        Sim {
            seed,
            rng: SimRng::new(seed, 1),
            deep_rng: SimRng::new(seed, 4),
            clock,
            cluster,
            duties,
            workload: Arc::new(Mutex::new(workload)),
            trace: Arc::new(Mutex::new(trace)),
            checks,
            pending: BTreeMap::new(),
            in_flight: Arc::new(AtomicUsize::new(0)),
            next_op: 0,
            sampled: BTreeMap::new(),
            steps: 0,
            failed_disks: std::collections::BTreeSet::new(),
            hold_faults: false,
            faults: FaultCounts::default(),
            deposed: BTreeMap::new(),
            options,
        }
    }

    pub(crate) fn line(&self, line: String) {
        lock(&self.trace).line(self.clock.now_ms(), &line);
    }

    pub(crate) fn violated(&self) -> bool {
        lock(&self.checks).violation.is_some()
    }

    pub(crate) async fn start(&mut self, id: u64) {
        if let Err(error) = self.cluster.start(id).await {
            lock(&self.checks).fail("a crashed node restarts from its disk", Err(error));
        }
    }

    fn later(&mut self, low_ms: u64, high_ms: u64, fault: Fault, forced: bool) {
        let at = self.clock.now_ms() + self.rng.between(low_ms, high_ms);
        self.pending.entry(at).or_default().push((fault, forced));
    }

    pub(crate) async fn play(&mut self) {
        for _ in 0..self.options.steps {
            self.step().await;
            self.steps += 1;
            if self.violated() {
                return;
            }
        }
        self.finish().await;
    }

    async fn step(&mut self) {
        self.act().await;
        let pause = self.rng.between(5, 120);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        self.sample(false);
    }

    /// One step up to its pause: due fault ends, then a new fault or client operations,
    /// then renewals.
    pub(crate) async fn act(&mut self) {
        self.supervise().await;
        let now = self.clock.now_ms();
        let due: Vec<u64> = self.pending.range(..=now).map(|(at, _)| *at).collect();
        for at in due {
            for (fault, forced) in self.pending.remove(&at).unwrap_or_default() {
                self.apply(fault, forced).await;
            }
        }
        let trapped = lock(&self.duties.trapped).take();
        if let Some(leader) = trapped {
            self.line(format!(
                "fault: leader {leader} isolated while its lease expiry was in flight"
            ));
            self.faults.partitions += 1;
            self.later(300, 3_000, Fault::Heal, true);
        }
        if self.rng.chance(280) && !self.hold_faults {
            let fault = faults::draw(&mut self.rng, &self.cluster.ids());
            self.apply(fault, false).await;
        } else {
            let ops = lock(&self.workload).next(&mut self.rng);
            for op in ops {
                self.launch(op);
            }
        }
        if !self.options.shallow && !self.hold_faults && self.deep_rng.chance(25) {
            let fault = faults::draw_deep(&mut self.deep_rng, &self.cluster.ids());
            self.apply(fault, false).await;
        }
        let renewals = lock(&self.workload).renewals(&mut self.rng);
        for (lease, ttl) in renewals {
            self.launch(Op {
                what: format!("renew lease {} (ttl {ttl})", lease.0),
                kind: OpKind::Duty(Request::Renew(lease)),
                grant_ttl: None,
            });
        }
    }

    /// Whether no fault of this cluster is in force: every node runs on a calm network
    /// with every link up (a slow disk still commits, so it counts as calm).
    pub(crate) fn calm(&self) -> bool {
        self.cluster.running().len() == self.options.nodes as usize
            && self.failed_disks.is_empty()
            && self.cluster.net.cuts().is_empty()
            && self.cluster.net.weather() == Weather::CALM
            && self.cluster.net.slow().is_empty()
    }

    /// Samples every running node into the invariants (and the trace).
    pub(crate) fn sample(&mut self, always: bool) -> Vec<(u64, u64, u64)> {
        let mut states = Vec::new();
        let mut summary = Vec::new();
        for (id, node) in self.cluster.net.nodes() {
            let status = node.status();
            let at = (status.applied_index, status.revision.0);
            let hash = node.read(|r| hash_json(&r.export()));
            if always || self.sampled.get(&id) != Some(&at) {
                self.sampled.insert(id, at);
                lock(&self.checks).sample(id, at.0, at.1, hash);
            }
            if let (Some(term), Some(deposed_in)) = (node.leading_term(), self.deposed.get(&id))
                && term > *deposed_in
            {
                self.deposed.remove(&id);
                self.faults.regained += 1;
                lock(&self.trace).line(self.clock.now_ms(), &format!("node {id} leads again, in term {term}"));
            }
            summary.push(format!(
                "n{id}:{}/{}/{}{}",
                at.0,
                at.1,
                hash & 0xffff,
                if node.is_leader() { "*" } else { "" }
            ));
            states.push((at.0, at.1, hash));
        }
        self.line(format!("state {}", summary.join(" ")));
        states
    }

    async fn apply(&mut self, fault: Fault, forced: bool) {
        let running = self.cluster.running();
        let max_down = (self.options.nodes - 1) / 2;
        let down = self.options.nodes as usize - running.len();
        let described = format!("{fault:?}");
        match fault {
            Fault::Crash(id) => {
                if !forced && down >= max_down as usize {
                    return;
                }
                if self.cluster.crash(id).await {
                    self.failed_disks.remove(&id);
                    self.duties.forget(id);
                    self.line(format!("fault: {described}"));
                    self.faults.crashes += 1;
                    self.later(200, 3_000, Fault::Restart(id), true);
                }
            }
            Fault::Restart(id) => {
                if !running.contains(&id) {
                    self.cluster.disks[&id].fail_next_writes(0);
                    self.start(id).await;
                    self.line(format!("fault ends: {described}"));
                    self.faults.restarts += 1;
                }
            }
            Fault::Isolate(id) => {
                self.isolate(id);
                self.line(format!("fault: {described}"));
                self.faults.partitions += 1;
                self.later(500, 4_000, Fault::Heal, true);
            }
            Fault::CutOneWay(from, to) => {
                self.cluster.net.cut(from, to);
                self.line(format!("fault: {described}"));
                self.faults.partitions += 1;
                self.later(300, 3_000, Fault::Heal, true);
            }
            Fault::Heal => {
                self.cluster.net.heal();
                self.line(format!("fault ends: {described}"));
            }
            Fault::Weather(weather) => {
                self.cluster.net.set_weather(weather);
                self.line(format!("fault: {described}"));
                if weather != Weather::CALM {
                    self.later(1_000, 5_000, Fault::Weather(Weather::CALM), true);
                }
            }
            Fault::SlowDisk(id, ms) => {
                self.cluster.disks[&id].set_write_delay(Duration::from_millis(ms));
                self.line(format!("fault: {described}"));
                if ms > 0 {
                    self.later(500, 3_000, Fault::SlowDisk(id, 0), true);
                }
            }
            Fault::FailDisk(id, count) => {
                if !running.contains(&id) || (!forced && down >= max_down as usize) {
                    return;
                }
                self.cluster.disks[&id].fail_next_writes(count);
                self.failed_disks.insert(id);
                self.line(format!("fault: {described}"));
                self.faults.failed_disks += 1;
                // The node stops on the failed write; its supervisor restarts the process.
                self.later(200, 1_000, Fault::Crash(id), true);
            }
            Fault::LeaderChangeDuringExpiry => {
                *lock(&self.duties.trap) = true;
                self.line(format!("fault armed: {described}"));
            }
            Fault::Depose => {
                // An isolated leader keeps believing it leads (openraft steps down only on a
                // higher term): the leader is the one leading in the highest term.
                let Some((leader, term)) = self.leader(None) else {
                    return;
                };
                self.isolate(leader);
                self.deposed.insert(leader, term);
                self.line(format!("fault: {described} node {leader} (leading in term {term})"));
                self.faults.deposed += 1;
                self.faults.partitions += 1;
                self.later_deep(1_500, 3_000, Fault::Regain(leader));
            }
            Fault::Regain(deposed) => {
                self.cluster.net.heal();
                match self.leader(Some(deposed)) {
                    Some((leader, _)) => {
                        self.isolate(leader);
                        self.line(format!(
                            "fault: {described}: node {deposed} healed, node {leader} isolated"
                        ));
                        self.faults.partitions += 1;
                        self.later_deep(1_000, 3_000, Fault::Heal);
                    }
                    None => self.line(format!("fault ends: {described}")),
                }
            }
            Fault::SlowNode(id, factor) => {
                self.cluster.net.set_slow(id, factor);
                let write = if factor > 1 { faults::SLOW_WRITE_MS } else { 0 };
                self.cluster.disks[&id].set_write_delay(Duration::from_millis(write));
                if factor > 1 {
                    self.line(format!("fault: {described}"));
                    self.faults.slowed += 1;
                    self.later_deep(1_000, 6_000, Fault::SlowNode(id, 1));
                } else {
                    self.line(format!("fault ends: {described}"));
                }
            }
        }
    }

    /// The running node leading in the highest term, `but` aside, and that term.
    fn leader(&self, but: Option<u64>) -> Option<(u64, u64)> {
        self.cluster
            .net
            .nodes()
            .into_iter()
            .filter(|(id, _)| Some(*id) != but)
            .filter_map(|(id, node)| node.leading_term().map(|term| (id, term)))
            .max_by_key(|(_, term)| *term)
    }

    /// Schedules the end of a later fault, drawn from their own stream.
    fn later_deep(&mut self, low_ms: u64, high_ms: u64, fault: Fault) {
        let at = self.clock.now_ms() + self.deep_rng.between(low_ms, high_ms);
        self.pending.entry(at).or_default().push((fault, true));
    }

    /// Cuts every link of node `id`, both ways.
    fn isolate(&self, id: u64) {
        for other in self.cluster.ids().into_iter().filter(|o| *o != id) {
            self.cluster.net.cut(id, other);
            self.cluster.net.cut(other, id);
        }
    }

    pub(crate) fn launch(&mut self, op: Op) {
        self.next_op += 1;
        let id = self.next_op;
        let ids = self.cluster.ids();
        let via = *self.rng.pick(&ids);
        let sent = self.clock.now_ms();
        if let Some(ttl) = op.grant_ttl {
            lock(&self.checks).leases.grant_sent(ttl, sent);
        }
        if let OpKind::Propose(Command::RevokeLease(revoke), _) = &op.kind {
            lock(&self.checks).leases.revoke_sent(revoke.lease);
        }
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        let task = OpTask {
            id,
            via,
            sent,
            op,
            node: self.cluster.net.node(via),
            duties: Arc::clone(&self.duties),
            workload: Arc::clone(&self.workload),
            trace: Arc::clone(&self.trace),
            checks: Arc::clone(&self.checks),
            clock: self.clock,
            in_flight: Arc::clone(&self.in_flight),
        };
        tokio::spawn(task.run());
    }

    pub(crate) fn report(&self) -> Report {
        let nodes = self.cluster.net.nodes();
        let revision = nodes.values().map(|n| n.status().revision.0).max().unwrap_or(0);
        let checks = lock(&self.checks);
        Report {
            seed: self.seed,
            trace: lock(&self.trace).digest(),
            violation: checks.violation.clone(),
            steps: self.steps,
            simulated_ms: self.clock.now_ms(),
            net: self.cluster.net.stats(),
            acknowledged: checks.acknowledged.len(),
            revision,
            federation: None,
            faults: self.faults,
        }
    }
}
