//! The checker task: the thin shell around [`muster_health::checker::Checker`] that reads the
//! clock, runs probes, takes TTL reports and proposes what the pure core decides (SPEC H2).
//!
//! ```text
//!  Node (registry write lock) ──applied──▶ CheckFeed ──Updates / Reset──▶ ┐
//!  PUT .../check (TTL report) ──CheckerHandle──Report──────────────────────┤
//!                                                                         ▼
//!                            checker task: Checker::due(now) ──▶ spawn probe ──result──┐
//!                                 ▲                                                    │
//!                                 └──────────────── Checker::record ◀──────────────────┘
//!                                   │ Decision::Propose ──▶ spawn: propose SetServing
//!                                   │                         (actor checker, principal muster-checker)
//!                                   │ Held / Liveness ──▶ logged
//! ```
//!
//! The feed only forwards updates of services that have (or had) checks, so a registry without
//! checks costs one set lookup per applied update. Updates carry their revision: the task
//! skips those it already saw in the registry it read at start or after a reset.
//!
//! The brake counts a service's serving endpoints from the registry, minus the removals this
//! task proposed that have not committed yet, so a burst of failures cannot race past the
//! floor.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use muster_consensus::ApplyObserver;
use muster_core::api::CheckReportReply;
use muster_core::{Actor, Event, InstanceId, Principal, Revision, ServiceKey, ServiceUpdate, ServingState};
use muster_health::checker::{Checker, CheckerConfig, Decision, ProbeId, Proposal, TtlReport};
use muster_health::hysteresis::ProbeResult;
use muster_health::preservation::{Counts, in_routing};
use muster_health::probe::probe;
use muster_registry::{Applied, Registry, SetServing, Target};
use rand_core::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;
use tokio::sync::{mpsc, oneshot, watch};

use crate::app::App;
use crate::error::ApiError;

/// The principal the checker's commands are logged under: the observer of H4.
const CHECKER_PRINCIPAL: &str = "muster-checker";

/// The longest the task sleeps with nothing due: new work arrives as messages anyway.
const IDLE: Duration = Duration::from_secs(1);

/// What reaches the task from outside.
pub(crate) enum Message {
    /// Applied updates of services with checks.
    Updates(Vec<Arc<ServiceUpdate>>),
    /// The registry was replaced: resync everything.
    Reset,
    /// A TTL report, answered once any change it caused has committed.
    Report(TtlReport, oneshot::Sender<Result<CheckReportReply, ApiError>>),
}

/// Sends TTL reports to the checker task.
#[derive(Clone)]
pub(crate) struct CheckerHandle {
    tx: mpsc::UnboundedSender<Message>,
}

impl CheckerHandle {
    /// Hands a TTL report to the checker and waits for its answer.
    pub(crate) async fn report(&self, report: TtlReport) -> Result<CheckReportReply, ApiError> {
        let (reply, answer) = oneshot::channel();
        let stopped = || ApiError::unavailable("the health checker is not running (the server is stopping)");
        self.tx.send(Message::Report(report, reply)).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

/// The apply observer side: forwards updates of checked services to the task.
pub(crate) struct CheckFeed {
    tx: mpsc::UnboundedSender<Message>,
    /// Services that ever had an endpoint with checks (their deletes matter too).
    checked: Mutex<HashSet<ServiceKey>>,
}

/// A feed, the handle for reports, and the receiver the task consumes.
pub(crate) fn channel() -> (Arc<CheckFeed>, CheckerHandle, mpsc::UnboundedReceiver<Message>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let feed = Arc::new(CheckFeed {
        tx: tx.clone(),
        checked: Mutex::new(HashSet::new()),
    });
    (feed, CheckerHandle { tx }, rx)
}

impl ApplyObserver for CheckFeed {
    fn applied(&self, _registry: &Registry, applied: &Applied) {
        let mut checked = self.checked.lock().unwrap_or_else(PoisonError::into_inner);
        let relevant: Vec<Arc<ServiceUpdate>> = applied
            .updates
            .iter()
            .filter(|update| {
                let has_checks = update
                    .events
                    .iter()
                    .any(|event| matches!(event, Event::Put { endpoint } if !endpoint.checks.is_empty()));
                if has_checks && !checked.contains(&update.key) {
                    checked.insert(update.key.clone());
                }
                has_checks || checked.contains(&update.key)
            })
            .cloned()
            .collect();
        if !relevant.is_empty() {
            let _ = self.tx.send(Message::Updates(relevant));
        }
    }

    fn reset(&self, registry: &Registry) {
        // The services with checks in the new state: their later deletes and check-less
        // re-registrations must reach the task too.
        let mut checked = self.checked.lock().unwrap_or_else(PoisonError::into_inner);
        *checked = registry
            .all_services()
            .filter(|snapshot| snapshot.iter().any(|e| !e.checks.is_empty()))
            .map(|snapshot| snapshot.key().clone())
            .collect();
        let _ = self.tx.send(Message::Reset);
    }
}

/// What probe and proposal tasks report back.
enum Internal {
    Probed(ProbeId, ProbeResult),
    Proposed {
        key: ServiceKey,
        instance: InstanceId,
        removal: bool,
        committed: bool,
    },
}

/// The task's state beyond the pure checker.
struct Shell {
    app: Arc<App>,
    checker: Checker<Xoshiro256PlusPlus>,
    /// Removals proposed and not yet committed, per service.
    pending_removals: HashMap<ServiceKey, usize>,
    /// The registry revision the checker has caught up with.
    synced: Revision,
    internal: mpsc::UnboundedSender<Internal>,
    principal: Principal,
}

/// Runs until `stop` turns true.
pub(crate) async fn run(
    app: Arc<App>,
    config: CheckerConfig,
    mut messages: mpsc::UnboundedReceiver<Message>,
    mut stop: watch::Receiver<bool>,
) {
    let (internal, mut results) = mpsc::unbounded_channel();
    // Jitter only has to differ between servers and runs; the clock is the shell's input.
    let seed = app.clock.unix_now_ms();
    let mut shell = Shell {
        checker: Checker::new(config, Xoshiro256PlusPlus::seed_from_u64(seed)),
        app,
        pending_removals: HashMap::new(),
        synced: Revision::ZERO,
        internal,
        principal: Principal::new(CHECKER_PRINCIPAL).expect("a valid principal"),
    };
    shell.resync();
    let mut leading = false;
    loop {
        let now = shell.app.clock.now_ms();
        // Only the leader probes (issue 7 item 6); a node that takes over starts from the
        // registry as it is.
        if shell.app.node.is_leader() {
            if !leading {
                shell.resync();
                leading = true;
            }
            shell.start_due(now);
        } else {
            leading = false;
        }
        // Nothing due, or waiting for a limit: sleep until then (a probe result or a message
        // wakes the loop earlier).
        let sleep = match shell.checker.wake_at(now) {
            Some(at) if leading => Duration::from_millis(at.saturating_sub(now)).min(IDLE),
            _ => IDLE,
        };
        tokio::select! {
            _ = stop.wait_for(|stopping| *stopping) => return,
            Some(message) = messages.recv() => shell.message(message),
            Some(result) = results.recv() => shell.internal(result),
            () = tokio::time::sleep(sleep) => {}
        }
    }
}

impl Shell {
    fn counts(app: &App, pending: &HashMap<ServiceKey, usize>, key: &ServiceKey) -> Counts {
        let counts = app.counts(key);
        Counts {
            serving: counts.serving.saturating_sub(pending.get(key).copied().unwrap_or(0)),
            ..counts
        }
    }

    /// Starts the probes that are due and acts on TTL deadlines that passed.
    fn start_due(&mut self, now: u64) {
        let (probes, decisions) = {
            let mut brakes = self.app.brakes();
            brakes.expire(now);
            let (app, pending) = (&self.app, &self.pending_removals);
            self.checker
                .due(now, &mut brakes, &mut |key| Shell::counts(app, pending, key))
        };
        let stats = &self.app.checker_stats;
        stats.probes.fetch_add(probes.len() as u64, Ordering::Relaxed);
        stats
            .in_flight
            .store(self.checker.in_flight() as u64, Ordering::Relaxed);
        stats
            .endpoints
            .store(self.checker.endpoints() as u64, Ordering::Relaxed);
        for probe_task in probes {
            let internal = self.internal.clone();
            tokio::spawn(async move {
                let result = probe(&probe_task.kind, probe_task.timeout).await;
                let _ = internal.send(Internal::Probed(probe_task.id, result));
            });
        }
        for decision in decisions {
            self.act(decision);
        }
    }

    fn message(&mut self, message: Message) {
        match message {
            Message::Updates(updates) => {
                let now = self.app.clock.now_ms();
                for update in updates.iter().filter(|update| update.revision > self.synced) {
                    for event in &update.events {
                        match event {
                            Event::Put { endpoint } => self.checker.sync(&update.key, endpoint, now),
                            Event::Delete { instance, .. } => self.checker.remove(&update.key, instance),
                        }
                    }
                }
            }
            Message::Reset => self.resync(),
            Message::Report(report, reply) => self.report(&report, reply),
        }
    }

    fn internal(&mut self, result: Internal) {
        match result {
            Internal::Probed(id, result) => {
                let now = self.app.clock.now_ms();
                let decision = {
                    let mut brakes = self.app.brakes();
                    let (app, pending) = (&self.app, &self.pending_removals);
                    self.checker.record(id, result, now, &mut brakes, &mut |key| {
                        Shell::counts(app, pending, key)
                    })
                };
                if let Some(decision) = decision {
                    self.act(decision);
                }
            }
            Internal::Proposed {
                key,
                instance,
                removal,
                committed,
            } => {
                if removal && let Some(pending) = self.pending_removals.get_mut(&key) {
                    *pending = pending.saturating_sub(1);
                    if *pending == 0 {
                        self.pending_removals.remove(&key);
                    }
                }
                if !committed {
                    let registered = self.app.node.read(|registry| {
                        registry
                            .snapshot(&key)
                            .and_then(|snapshot| snapshot.get(&instance).map(|e| e.serving))
                    });
                    self.checker
                        .proposal_failed(&key, &instance, registered.unwrap_or(ServingState::Unknown));
                }
            }
        }
    }

    /// Forgets everything and takes in every endpoint with checks from the registry.
    fn resync(&mut self) {
        self.checker.clear();
        self.pending_removals.clear();
        let now = self.app.clock.now_ms();
        let (revision, services) = self.app.node.read(|registry| {
            let services: Vec<_> = registry.all_services().cloned().collect();
            (registry.revision(), services)
        });
        for snapshot in services {
            for endpoint in snapshot.iter().filter(|e| !e.checks.is_empty()) {
                self.checker.sync(snapshot.key(), endpoint, now);
            }
        }
        self.synced = revision;
        tracing::info!(endpoints = self.checker.endpoints(), %revision, "checker synced with the registry");
    }

    fn report(&mut self, report: &TtlReport, reply: oneshot::Sender<Result<CheckReportReply, ApiError>>) {
        let now = self.app.clock.now_ms();
        let decisions = {
            let mut brakes = self.app.brakes();
            let (app, pending) = (&self.app, &self.pending_removals);
            self.checker
                .report(report, now, &mut brakes, &mut |key| Shell::counts(app, pending, key))
        };
        let decisions = match decisions {
            Ok(decisions) => decisions,
            Err(error) => {
                let _ = reply.send(Err(ApiError::new(error.error_code(), error.to_string())));
                return;
            }
        };
        let proposals: Vec<Proposal> = decisions.into_iter().filter_map(|d| self.take(d)).collect();
        // Answer after the proposals commit, with the state the registry then holds.
        let app = Arc::clone(&self.app);
        let internal = self.internal.clone();
        let principal = self.principal.clone();
        let (key, instance) = (report.key.clone(), report.instance.clone());
        tokio::spawn(async move {
            let mut revision = None;
            for proposal in proposals {
                revision = propose(&app, &principal, &internal, proposal).await.or(revision);
            }
            let serving = app.node.read(|registry| {
                registry
                    .snapshot(&key)
                    .and_then(|snapshot| snapshot.get(&instance).map(|e| e.serving))
            });
            let _ = reply.send(Ok(CheckReportReply {
                serving: serving.unwrap_or(ServingState::Unknown),
                revision,
            }));
        });
    }

    /// Acts on a decision: a proposal is made in its own task; the rest is logged.
    fn act(&mut self, decision: Decision) {
        if let Some(proposal) = self.take(decision) {
            let app = Arc::clone(&self.app);
            let internal = self.internal.clone();
            let principal = self.principal.clone();
            tokio::spawn(async move { propose(&app, &principal, &internal, proposal).await });
        }
    }

    /// Logs a decision; a proposal is counted (as a pending removal, if it is one) and
    /// returned for the caller to propose.
    fn take(&mut self, decision: Decision) -> Option<Proposal> {
        match decision {
            Decision::Propose(proposal) => {
                self.app.checker_stats.proposals.fetch_add(1, Ordering::Relaxed);
                if !in_routing(proposal.state) {
                    *self.pending_removals.entry(proposal.key.clone()).or_insert(0) += 1;
                }
                tracing::info!(
                    service = %proposal.key, instance = %proposal.instance, state = ?proposal.state,
                    reason = %proposal.reason, "checker: serving state crossed a threshold"
                );
                Some(proposal)
            }
            Decision::Held { key, instance, reason } => {
                self.app.checker_stats.held.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(service = %key, %instance, %reason, "checker: removal held by self-preservation");
                None
            }
            Decision::Liveness {
                key,
                instance,
                health,
                reason,
            } => {
                tracing::warn!(
                    service = %key, %instance, ?health, %reason,
                    "checker: liveness check crossed a threshold (not routed on)"
                );
                None
            }
        }
    }
}

/// Proposes a checker's serving state and tells the task how it went; the committed
/// revision, if it committed.
async fn propose(
    app: &App,
    principal: &Principal,
    internal: &mpsc::UnboundedSender<Internal>,
    proposal: Proposal,
) -> Option<Revision> {
    let removal = !in_routing(proposal.state);
    let (key, instance) = (proposal.key.clone(), proposal.instance.clone());
    let command = SetServing {
        target: Target {
            key: proposal.key,
            instance: proposal.instance,
            incarnation: proposal.incarnation,
        },
        state: proposal.state,
        reason: proposal.reason,
        expected_revision: None,
    };
    let committed = match app
        .node
        .propose(command.into(), app.meta_as(Actor::Checker, principal))
        .await
    {
        // Accepted but unchanged (e.g. `drain_held`: an owner's drain outranks the checker):
        // settled, but no change to report.
        Ok(Ok(applied)) if applied.unchanged.is_some() => {
            let _ = internal.send(Internal::Proposed {
                key,
                instance,
                removal,
                committed: true,
            });
            return None;
        }
        Ok(Ok(applied)) => Some(applied.revision),
        Ok(Err(rejection)) => {
            // A replaced or removed endpoint: the feed brings the change that explains it.
            tracing::debug!(%rejection, "checker proposal refused");
            None
        }
        Err(error) => {
            tracing::warn!(%error, "checker proposal not committed; proposing again at the next result");
            None
        }
    };
    let _ = internal.send(Internal::Proposed {
        key,
        instance,
        removal,
        committed: committed.is_some(),
    });
    committed
}
