//! The leader task: the thin shell around [`muster_leader::LeaderEngine`] that reads the
//! clock, feeds the engine registry changes, carries out what it asks — proposals, probes,
//! replies — and reports back how they went (SPEC R4, L6, H2–H5).
//!
//! ```text
//!  Node (registry write lock) ──applied──▶ LeaderFeed ──Updates / Reset──▶ ┐
//!                                                                          ▼
//!     leader task: every TICK_MS (or the checker's next turn) ──▶ engine.tick(registry, now)
//!  renew, TTL report, in-flight (here or forwarded: `Gate::on_leader`) ──▶ engine.{renew, ttl_report, in_flight}
//!     (`Gate::ask` answers replies at once; the rest reaches `carry_out` ──▶ perform)
//!                                                                          │ outputs
//!                                                                          ▼
//!   perform: Propose ──spawn: Node::propose_as_leader──▶ engine.settled(tag, outcome) ──▶ perform …
//!            Probe   ──spawn: probe (I/O)────▶ engine.probe_result(id, result) ──▶ perform …
//!            Reply   ──▶ the waiting caller      Note ──▶ log, metrics
//! ```
//!
//! Every node runs the task; the engine acts only while the node leads (`Wiring::with_engine`
//! tells it when that changes). The feed only forwards updates of services that have (or
//! had) checks, so a registry without checks costs one set lookup per applied update.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use muster_consensus::ApplyObserver;
use muster_core::{Event, Principal, ServiceKey, ServiceUpdate};
use muster_health::probe::probe;
use muster_leader::{Note, Outcome, Output, Proposal};
use muster_registry::{Applied, Registry};
use tokio::sync::{mpsc, watch};

use crate::app::App;

/// The longest the task sleeps: a tick is due every `TICK_MS` anyway; this bounds a sleep
/// computed from a far checker turn.
const IDLE: Duration = Duration::from_secs(1);

/// What reaches the task from the apply path.
pub(crate) enum Message {
    /// Applied updates of services with checks.
    Updates(Vec<Arc<ServiceUpdate>>),
    /// The registry was replaced: the checker starts over from it.
    Reset,
}

/// The apply observer side: forwards updates of checked services to the task. It never takes
/// the engine's lock (the apply path holds the registry's write lock).
pub(crate) struct LeaderFeed {
    tx: mpsc::UnboundedSender<Message>,
    /// Services that ever had an endpoint with checks (their deletes matter too).
    checked: Mutex<HashSet<ServiceKey>>,
}

/// A feed and the receiver the task consumes.
pub(crate) fn channel() -> (Arc<LeaderFeed>, mpsc::UnboundedReceiver<Message>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let feed = Arc::new(LeaderFeed {
        tx,
        checked: Mutex::new(HashSet::new()),
    });
    (feed, rx)
}

impl ApplyObserver for LeaderFeed {
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

/// Runs until `stop` turns true.
pub(crate) async fn run(
    app: Arc<App>,
    mut messages: mpsc::UnboundedReceiver<Message>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let (outputs, wake_in) = app.wiring.with_engine(|engine, registry, now| {
            let outputs = engine.tick(registry, now);
            (outputs, engine.wake_at(now).saturating_sub(now.monotonic_ms))
        });
        perform(&app, outputs);
        let sleep = Duration::from_millis(wake_in).min(IDLE);
        tokio::select! {
            _ = stop.wait_for(|stopping| *stopping) => return,
            Some(message) = messages.recv() => match message {
                Message::Updates(updates) => app.wiring.with_engine(|engine, _, now| engine.applied(&updates, now)),
                Message::Reset => app.wiring.with_engine(|engine, registry, now| engine.reset(registry, now)),
            },
            () = tokio::time::sleep(sleep) => {}
        }
    }
}

/// Carries out what callers' questions to the engine (`Gate::ask`) left to do, until the
/// server is gone (its gate holds the only sender). Not tied to `stopping`: a TTL or
/// in-flight report during the shutdown grace still gets its proposal, as the node serves
/// until the grace ends. It holds the server weakly, so the server can be dropped.
pub(crate) async fn carry_out(app: std::sync::Weak<App>, mut asked: mpsc::UnboundedReceiver<Vec<Output>>) {
    while let Some(outputs) = asked.recv().await {
        let Some(app) = app.upgrade() else { return };
        perform(&app, outputs);
    }
}

/// Carries out the engine's outputs: proposals and probes in tasks of their own, whose
/// results go back into the engine (and their outputs through here again).
pub(crate) fn perform(app: &Arc<App>, outputs: Vec<Output>) {
    for output in outputs {
        match output {
            Output::Propose(proposal) => {
                let app = Arc::clone(app);
                tokio::spawn(async move {
                    let tag = proposal.tag;
                    let outcome = propose(&app, proposal).await;
                    let outputs = app
                        .wiring
                        .with_engine(|engine, registry, _| engine.settled(registry, tag, outcome));
                    perform(&app, outputs);
                });
            }
            Output::Probe(task) => {
                app.metrics.checker.probes.fetch_add(1, Ordering::Relaxed);
                let app = Arc::clone(app);
                tokio::spawn(async move {
                    let result = probe(&task.kind, task.timeout).await;
                    let outputs = app
                        .wiring
                        .with_engine(|engine, registry, now| engine.probe_result(registry, task.id, result, now));
                    perform(&app, outputs);
                });
            }
            Output::Reply { to, reply } => app.wiring.answer(to, reply),
            Output::Note(note) => log(app, note),
        }
    }
    let (in_flight, endpoints) = app.gate.checker_load();
    let stats = &app.metrics.checker;
    stats.in_flight.store(in_flight as u64, Ordering::Relaxed);
    stats.endpoints.store(endpoints as u64, Ordering::Relaxed);
}

async fn propose(app: &App, proposal: Proposal) -> Outcome {
    let Proposal { duty, command, .. } = proposal;
    let principal = Principal::new(duty.principal()).expect("a valid principal");
    // Only an endpoint's command needs it (for the log below), and only when it fails.
    let target = crate::endpoint_log::command_target(&command)
        .map(|(key, instance, incarnation)| (key.clone(), instance.clone(), incarnation));
    // On this node only, never forwarded (`Node::propose_as_leader`): a duty decided on this
    // leader's deadlines and brakes is valid in its term only. Forwarded to the next leader
    // after a partition heals, a deposed leader's expiry would land after renewals the new
    // leader accepted and expire leases a majority kept alive (SPEC R4).
    match app
        .gate
        .propose_as_leader(command, app.gate.meta_as(duty.actor(), &principal))
        .await
    {
        Ok(Ok(applied)) => {
            crate::endpoint_log::duty_committed(duty, &applied);
            Outcome::Committed {
                revision: applied.revision,
                changed: applied.unchanged.is_none(),
            }
        }
        Ok(Err(rejection)) => {
            // A replaced, removed or lifted endpoint: the registry explains it.
            let revision = app.gate.read(Registry::revision);
            match &target {
                Some((key, instance, incarnation)) => crate::endpoint_log::endpoint_event!(
                    tracing::Level::DEBUG, key, instance, incarnation, revision,
                    code = rejection.code(), %rejection, ?duty, "proposal refused"
                ),
                None => tracing::debug!(%rejection, ?duty, "proposal refused"),
            }
            Outcome::Refused
        }
        Err(error) => {
            let revision = app.gate.read(Registry::revision);
            match &target {
                Some((key, instance, incarnation)) => crate::endpoint_log::endpoint_event!(
                    tracing::Level::WARN, key, instance, incarnation, revision,
                    %error, ?duty, "proposal not committed; the duty tries again"
                ),
                None => tracing::warn!(%error, ?duty, "proposal not committed; the duty tries again"),
            }
            Outcome::NotCommitted
        }
    }
}

fn log(app: &App, note: Note) {
    use crate::endpoint_log::endpoint_event;
    use tracing::Level;
    // The checker decides before its proposal commits: `revision`, `incarnation` and the
    // serving state are the record's as the decision saw it (SPEC O2); the committed change
    // is logged by `endpoint_log::duty_committed`.
    let record = |key: &ServiceKey, instance: &muster_core::InstanceId| {
        app.gate.read(|registry| {
            let endpoint = registry
                .snapshot(key)
                .and_then(|snapshot| snapshot.get(instance).cloned());
            match endpoint {
                Some(e) => (e.incarnation, e.revision, Some(e.serving)),
                None => (muster_core::Incarnation(0), registry.revision(), None),
            }
        })
    };
    match note {
        Note::Crossing {
            key,
            instance,
            state,
            reason,
        } => {
            app.metrics.checker.proposals.fetch_add(1, Ordering::Relaxed);
            // The state it crosses from is the registry's now: the proposal has not committed.
            let (incarnation, revision, from) = record(&key, &instance);
            app.metrics.transition(from, state);
            endpoint_event!(
                Level::INFO, key, instance, incarnation, revision, ?state, %reason,
                "checker: serving state crossed a threshold"
            );
        }
        Note::Held { key, instance, reason } => {
            app.metrics.checker.held.fetch_add(1, Ordering::Relaxed);
            let (incarnation, revision, _) = record(&key, &instance);
            // Once per held endpoint; the service's hold is the one WARN (`Note::Protection`).
            endpoint_event!(
                Level::INFO, key, instance, incarnation, revision, %reason,
                "checker: removal held by self-preservation"
            );
        }
        Note::Protection {
            key,
            active: true,
            serving,
            total,
        } => tracing::warn!(
            target: crate::endpoint_log::TARGET,
            tenant = %key.tenant, namespace = %key.namespace, service = %key.service, serving, total,
            "self-preservation: too many endpoints leaving at once; holding removals (protection_active)"
        ),
        Note::Protection { key, active: false, .. } => tracing::info!(
            target: crate::endpoint_log::TARGET,
            tenant = %key.tenant, namespace = %key.namespace, service = %key.service,
            "self-preservation ended: removals resume"
        ),
        Note::ExpiryHeld { lease, key, reason } => {
            app.metrics
                .expiries
                .add(Some(&key.tenant), crate::metrics::expiry::HELD, 1);
            tracing::debug!(
                target: crate::endpoint_log::TARGET,
                lease = lease.0, tenant = %key.tenant, namespace = %key.namespace, service = %key.service, %reason,
                "lease expiry held by self-preservation"
            );
        }
        Note::Liveness {
            key,
            instance,
            health,
            reason,
        } => {
            let (incarnation, revision, _) = record(&key, &instance);
            endpoint_event!(
                Level::WARN, key, instance, incarnation, revision, ?health, %reason,
                "checker: liveness check crossed a threshold (not routed on)"
            );
        }
    }
}
