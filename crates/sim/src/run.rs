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

use muster_consensus::Node;
use muster_core::{Principal, ServingState};
use muster_registry::{Command, CommandMeta, RegistryConfig};

use crate::clock::Clock;
use crate::cluster::Cluster;
use crate::duties::{Duties, ELECTION_GRACE_MS, GRACE_PREFIX, Request, TICK};
use crate::faults::{self, Fault};
use crate::invariants::acknowledged::Ack;
use crate::invariants::{Checks, Violation};
use crate::net::{Net, NetStats, Weather};
use crate::observer::hash_json;
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
/// How long a client waits for a write: beyond the batcher's own 5 s timeout.
const CLIENT_WAIT: Duration = Duration::from_secs(7);
/// How long the healed cluster may take to converge: many election timeouts.
const CONVERGE_WITHIN_MS: u64 = 30_000;
/// The longest a drain's grace can be (the workload draws 0.3–3 s).
const MAX_GRACE_MS: u64 = 3_000;

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Cluster size: 3 or 5.
    pub nodes: u64,
    /// Steps per seed.
    pub steps: u64,
    /// Print the trace.
    pub verbose: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            nodes: 3,
            steps: 250,
            verbose: false,
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
    /// The revision the cluster reached.
    pub revision: u64,
}

/// Runs one seed on a fresh current-thread runtime with a paused clock.
pub fn run_seed(seed: u64, options: &Options) -> Report {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    runtime.block_on(async {
        let mut sim = Sim::new(seed, options.clone()).await;
        sim.play().await;
        sim.report()
    })
}

struct Sim {
    seed: u64,
    options: Options,
    rng: SimRng,
    clock: Clock,
    cluster: Cluster,
    duties: Arc<Duties>,
    workload: Arc<Mutex<Workload>>,
    trace: Arc<Mutex<Trace>>,
    checks: Arc<Mutex<Checks>>,
    pending: BTreeMap<u64, Vec<(Fault, bool)>>,
    in_flight: Arc<AtomicUsize>,
    next_op: u64,
    sampled: BTreeMap<u64, (u64, u64)>,
    steps: u64,
    /// Nodes whose disk failed a write and whose supervisor has not restarted them yet.
    failed_disks: std::collections::BTreeSet<u64>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Sim {
    async fn new(seed: u64, options: Options) -> Sim {
        muster_consensus::seed_election_rng(SimRng::new(seed, 3).next_u64());
        let clock = Clock::start();
        let checks = Arc::new(Mutex::new(Checks::default()));
        let net = Arc::new(Net::new(SimRng::new(seed, 2)));
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
        let mut sim = Sim {
            seed,
            rng: SimRng::new(seed, 1),
            clock,
            cluster,
            duties,
            workload: Arc::new(Mutex::new(Workload::new())),
            trace: Arc::new(Mutex::new(Trace::new(options.verbose))),
            checks,
            pending: BTreeMap::new(),
            in_flight: Arc::new(AtomicUsize::new(0)),
            next_op: 0,
            sampled: BTreeMap::new(),
            steps: 0,
            failed_disks: std::collections::BTreeSet::new(),
            options,
        };
        for id in sim.cluster.ids() {
            sim.start(id).await;
            sim.duties.spawn(id);
        }
        sim.line(format!("seed {} cluster of {}", sim.seed, sim.options.nodes));
        sim
    }

    fn line(&self, line: String) {
        lock(&self.trace).line(self.clock.now_ms(), &line);
    }

    fn violated(&self) -> bool {
        lock(&self.checks).violation.is_some()
    }

    async fn start(&mut self, id: u64) {
        if let Err(error) = self.cluster.start(id).await {
            lock(&self.checks).fail("a crashed node restarts from its disk", Err(error));
        }
    }

    fn later(&mut self, low_ms: u64, high_ms: u64, fault: Fault, forced: bool) {
        let at = self.clock.now_ms() + self.rng.between(low_ms, high_ms);
        self.pending.entry(at).or_default().push((fault, forced));
    }

    async fn play(&mut self) {
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
            self.later(300, 3_000, Fault::Heal, true);
        }
        if self.rng.chance(280) {
            let fault = faults::draw(&mut self.rng, &self.cluster.ids());
            self.apply(fault, false).await;
        } else {
            let ops = lock(&self.workload).next(&mut self.rng);
            for op in ops {
                self.launch(op);
            }
        }
        let renewals = lock(&self.workload).renewals(&mut self.rng);
        for (lease, ttl) in renewals {
            self.launch(Op {
                what: format!("renew lease {} (ttl {ttl})", lease.0),
                kind: OpKind::Duty(Request::Renew(lease)),
                grant_ttl: None,
            });
        }
        let pause = self.rng.between(5, 120);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        self.sample(false);
    }

    /// Samples every running node into the invariants (and the trace).
    fn sample(&mut self, always: bool) -> Vec<(u64, u64, u64)> {
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
                    self.later(200, 3_000, Fault::Restart(id), true);
                }
            }
            Fault::Restart(id) => {
                if !running.contains(&id) {
                    self.cluster.disks[&id].fail_next_writes(0);
                    self.start(id).await;
                    self.line(format!("fault ends: {described}"));
                }
            }
            Fault::Isolate(id) => {
                for other in self.cluster.ids().into_iter().filter(|o| *o != id) {
                    self.cluster.net.cut(id, other);
                    self.cluster.net.cut(other, id);
                }
                self.line(format!("fault: {described}"));
                self.later(500, 4_000, Fault::Heal, true);
            }
            Fault::CutOneWay(from, to) => {
                self.cluster.net.cut(from, to);
                self.line(format!("fault: {described}"));
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
                // The node stops on the failed write; its supervisor restarts the process.
                self.later(200, 1_000, Fault::Crash(id), true);
            }
            Fault::LeaderChangeDuringExpiry => {
                *lock(&self.duties.trap) = true;
                self.line(format!("fault armed: {described}"));
            }
        }
    }

    fn launch(&mut self, op: Op) {
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

    /// Heals everything, lets the cluster converge, waits out every TTL and grace with no
    /// renewal, converges again, and checks the end state.
    async fn finish(&mut self) {
        self.line("heal: every fault undone; no more client operations".into());
        self.pending.clear();
        self.cluster.net.heal();
        self.cluster.net.set_weather(Weather::CALM);
        for id in std::mem::take(&mut self.failed_disks) {
            // The supervisor's restart of a node whose disk failed.
            self.cluster.crash(id).await;
            self.duties.forget(id);
        }
        for id in self.cluster.ids() {
            self.cluster.disks[&id].set_write_delay(Duration::ZERO);
            self.cluster.disks[&id].fail_next_writes(0);
            if !self.cluster.running().contains(&id) {
                self.start(id).await;
            }
        }
        *lock(&self.duties.trap) = false;
        if !self.converge("after healing").await {
            return;
        }
        let max_ttl = lock(&self.workload)
            .leases
            .values()
            .copied()
            .max()
            .unwrap_or(0)
            .max(5_000);
        let quiet = max_ttl + ELECTION_GRACE_MS + MAX_GRACE_MS + 10 * TICK.as_millis() as u64 + 2_000;
        lock(&self.workload).leases.clear();
        tokio::time::sleep(Duration::from_millis(quiet)).await;
        if !self.converge("after the quiet period").await {
            return;
        }
        self.final_checks();
    }

    /// Waits until every node holds the same state, unchanged between two polls.
    async fn converge(&mut self, when: &str) -> bool {
        let mut previous = Vec::new();
        for _ in 0..CONVERGE_WITHIN_MS / 100 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if self.violated() {
                return false;
            }
            let states = self.sample(false);
            let settled = self.in_flight.load(Ordering::Relaxed) == 0;
            if settled
                && states.len() == self.options.nodes as usize
                && states.windows(2).all(|w| w[0] == w[1])
                && states == previous
            {
                self.line(format!("converged {when}"));
                return true;
            }
            previous = states;
        }
        lock(&self.checks).fail(
            "convergence after healing",
            Err(format!(
                "the nodes did not converge {when} within {CONVERGE_WITHIN_MS} ms"
            )),
        );
        false
    }

    fn final_checks(&mut self) {
        let nodes = self.cluster.net.nodes();
        let Some(node) = nodes.values().next() else { return };
        let lowest = nodes.values().map(|n| n.status().revision.0).min().unwrap_or(0);
        let now = self.clock.now_ms();
        let leases: Vec<u64> = node.read(|r| r.leases().map(|l| l.id.0).collect());
        let stuck = stuck_drains(node, now);
        let mut checks = lock(&self.checks);
        let acked = checks.acknowledged.check_final(&checks.history, lowest);
        checks.fail("every acknowledged write is present", acked);
        let expired = if leases.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "leases {leases:?} outlived every TTL with nobody renewing them"
            ))
        };
        checks.fail("a lease nobody renews expires", expired);
        let drained = match stuck.first() {
            None => Ok(()),
            Some(stuck) => Err(format!("{stuck} is still draining long after its grace")),
        };
        checks.fail("every drain's grace ends", drained);
    }

    fn report(&self) -> Report {
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
        }
    }
}

/// Draining endpoints whose committed grace ended more than an election and a tick ago.
fn stuck_drains(node: &Node, now: u64) -> Vec<String> {
    node.read(|r| {
        let mut stuck = Vec::new();
        for service in r.all_services() {
            for endpoint in service.iter() {
                if endpoint.serving != ServingState::Draining {
                    continue;
                }
                let grace = endpoint
                    .observation
                    .reason
                    .strip_prefix(GRACE_PREFIX)
                    .and_then(|rest| rest.trim_end_matches("ms").parse::<u64>().ok());
                if let Some(grace) = grace
                    && endpoint.observation.at_ms + grace + ELECTION_GRACE_MS + 2_000 < now
                {
                    stuck.push(format!(
                        "{}/{}#{} (drained at {} ms, grace {grace} ms)",
                        service.key(),
                        endpoint.instance,
                        endpoint.incarnation.0,
                        endpoint.observation.at_ms
                    ));
                }
            }
        }
        stuck
    })
}

/// One client operation in flight.
struct OpTask {
    id: u64,
    via: u64,
    sent: u64,
    op: Op,
    node: Option<Node>,
    duties: Arc<Duties>,
    workload: Arc<Mutex<Workload>>,
    trace: Arc<Mutex<Trace>>,
    checks: Arc<Mutex<Checks>>,
    clock: Clock,
    in_flight: Arc<AtomicUsize>,
}

impl OpTask {
    async fn run(self) {
        let outcome = match self.op.kind.clone() {
            OpKind::Propose(command, actor) => self.propose(command, actor).await,
            OpKind::Duty(request) => self.duty(request).await,
        };
        lock(&self.trace).line(
            self.clock.now_ms(),
            &format!("op {} via n{}: {} → {outcome}", self.id, self.via, self.op.what),
        );
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
    }

    async fn propose(&self, command: Command, actor: muster_core::Actor) -> String {
        let Some(node) = &self.node else {
            return "node down".into();
        };
        let meta = CommandMeta {
            at_ms: self.sent,
            principal: Principal::new("sim-client").expect("a valid principal"),
            actor,
        };
        let result = tokio::time::timeout(CLIENT_WAIT, node.propose(command, meta)).await;
        match result {
            Ok(Ok(Ok(applied))) => {
                let committed = applied.unchanged.is_none().then(|| hash_json(&applied));
                if let (Some(lease), Some(ttl)) = (applied.lease, self.op.grant_ttl) {
                    lock(&self.workload).leases.insert(lease.id, ttl);
                }
                let ack = Ack {
                    what: format!("op {} ({})", self.id, self.op.what),
                    revision: applied.revision.0,
                    committed,
                };
                let mut checks = lock(&self.checks);
                let checks = &mut *checks;
                let acked = checks.acknowledged.ack(self.id, ack, &checks.history);
                checks.fail("every acknowledged write is present", acked);
                match applied.unchanged {
                    None => format!("revision {}", applied.revision.0),
                    Some(why) => format!("unchanged ({why:?}) at revision {}", applied.revision.0),
                }
            }
            Ok(Ok(Err(rejection))) => format!("refused: {}", rejection.code()),
            Ok(Err(error)) => format!("failed: {error}"),
            Err(_) => "no answer in time".into(),
        }
    }

    async fn duty(&self, request: Request) -> String {
        let renewing = match &request {
            Request::Renew(lease) => Some(*lease),
            _ => None,
        };
        match self.duties.request(self.via, request).await {
            Ok(done) => {
                if let Some(lease) = renewing {
                    let ttl = lock(&self.workload).leases.get(&lease).copied();
                    let ttl = ttl.or_else(|| lock(&self.checks).leases.ttl(lease));
                    if let Some(ttl) = ttl {
                        let mut checks = lock(&self.checks);
                        let renewed = checks.leases.renewed(lease, ttl, self.sent);
                        checks.fail(
                            "leases: grants mint once, and no lease leaves before its floor",
                            renewed,
                        );
                    }
                }
                done
            }
            Err(error) => format!("failed: {error}"),
        }
    }
}
