//! The lease keeper task: the thin shell around [`LeaseDeadlines`] that reads the clock and
//! the registry, and proposes expiry (DESIGN "Leases off the log").
//!
//! Every [`TICK`] it proposes the leases whose deadlines passed as one `ExpireLeases`
//! command; every [`RECONCILE_EVERY`] ticks (and on the first) it reconciles the table with
//! the registry's leases, which gives every lease a deadline after a restart.
//!
//! Expiry asks the self-preservation brakes first (SPEC H5): a lease whose expiry would take
//! a serving endpoint out of a service that is losing too many at once (or is at its floor)
//! is held, and tried again every tick until the rate falls. The same tick deregisters
//! drained instances whose grace ended (`drains`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use muster_core::{Actor, LeaseId, Principal, ServiceKey, ServingState};
use muster_health::preservation::{Counts, Verdict, in_routing};
use muster_registry::{CommandMeta, Deregister, ExpireLeases};
use tokio::sync::watch;

use crate::app::App;
use crate::lease_deadlines::LeaseDeadlines;

/// How often deadlines are checked: 100 ms. Expiry is then at most 100 ms late, well under
/// the 1 s minimum TTL, and a tick that finds nothing expired is one ordered-set lookup.
pub(crate) const TICK: Duration = Duration::from_millis(100);

/// Ticks between reconciliations with the registry (5 s). Reconciling walks every lease,
/// which at a million leases takes tens of milliseconds under the registry's read lock, so it
/// runs rarely; grants and revocations update the table directly in between.
pub(crate) const RECONCILE_EVERY: u64 = 50;

/// Leases expired per command: 4,096 keeps one log entry in the tens of KiB and one apply
/// short; a larger backlog (after a long pause) drains over the next ticks.
pub(crate) const MAX_EXPIRE_BATCH: usize = 4096;

/// The principal the keeper's commands are logged under.
const KEEPER_PRINCIPAL: &str = "muster-lease-keeper";

/// What a new leader adds to every lease's TTL before expiring anything: more than an
/// election timeout (600 ms at most), so a renewal sent to the old leader during the election
/// is not lost.
const ELECTION_GRACE_MS: u64 = 1_000;

/// The principal of deregistrations at the end of a drain's grace.
const DRAIN_PRINCIPAL: &str = "muster-drain";

/// Runs until `stop` turns true.
pub(crate) async fn run(app: Arc<App>, mut stop: watch::Receiver<bool>) {
    let principal = Principal::new(KEEPER_PRINCIPAL).expect("a valid principal");
    let drain_principal = Principal::new(DRAIN_PRINCIPAL).expect("a valid principal");
    let mut ticker = tokio::time::interval(TICK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut leading = false;
    for tick in 0_u64.. {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stop.wait_for(|stopping| *stopping) => return,
        }
        // Only the leader keeps deadlines and expires (SPEC R4); a node that just took over
        // gives every lease a whole TTL plus an election's time before expiring anything,
        // since renewals went to the old leader.
        if !app.node.is_leader() {
            leading = false;
            continue;
        }
        if !leading {
            take_over(&app);
            leading = true;
        } else if tick % RECONCILE_EVERY == 0 {
            reconcile(&app);
        }
        let now = app.clock.now_ms();
        end_drains(&app, &drain_principal, now).await;
        let expired = app.leases().expired(now, MAX_EXPIRE_BATCH);
        let expired = unprotected(&app, expired, now);
        if expired.is_empty() {
            continue;
        }
        let meta = CommandMeta {
            at_ms: app.clock.unix_ms(now),
            principal: principal.clone(),
            actor: Actor::Owner,
        };
        let command = ExpireLeases {
            leases: expired.clone(),
        };
        match app.node.propose(command.into(), meta).await {
            Ok(Ok(_)) => {
                let mut leases = app.leases();
                for id in expired {
                    leases.forget(id);
                }
            }
            Ok(Err(rejection)) => tracing::warn!(%rejection, "lease expiry refused; retrying next tick"),
            Err(error) => tracing::warn!(%error, "lease expiry not committed; retrying next tick"),
        }
    }
}

/// The deadline table of a node that just became leader: every live lease at now + TTL +
/// [`ELECTION_GRACE_MS`].
fn take_over(app: &App) {
    let live: Vec<_> = app.node.read(|registry| {
        registry
            .leases()
            .map(|lease| (lease.id, lease.ttl_ms.saturating_add(ELECTION_GRACE_MS)))
            .collect()
    });
    let now = app.clock.now_ms();
    let mut leases = app.leases();
    *leases = LeaseDeadlines::new();
    LeaseDeadlines::reconcile(&mut leases, live, now);
    tracing::info!(leases = leases.len(), "leading: lease deadlines taken over");
}

fn reconcile(app: &App) {
    let live: Vec<_> = app
        .node
        .read(|registry| registry.leases().map(|lease| (lease.id, lease.ttl_ms)).collect());
    let now = app.clock.now_ms();
    let mut leases = app.leases();
    LeaseDeadlines::reconcile(&mut leases, live, now);
}

/// The expired leases whose expiry the brakes allow: a lease is held (kept for the next tick)
/// when removing any serving endpoint attached to it is held.
fn unprotected(app: &App, expired: Vec<LeaseId>, now: u64) -> Vec<LeaseId> {
    if expired.is_empty() {
        return expired;
    }
    // One read: each lease's endpoints (and whether they serve), and each touched service's
    // counts, computed once however many of its endpoints are in the batch.
    let (attached, service_counts) = app.node.read(|registry| {
        let mut service_counts: HashMap<ServiceKey, Counts> = HashMap::new();
        let attached: Vec<(LeaseId, Vec<(ServiceKey, bool)>)> = expired
            .iter()
            .map(|id| {
                let endpoints = registry
                    .lease_endpoints(*id)
                    .into_iter()
                    .map(|(key, instance)| {
                        let snapshot = registry.snapshot(&key);
                        let serving = snapshot
                            .as_ref()
                            .and_then(|snapshot| snapshot.get(&instance).map(|e| in_routing(e.serving)))
                            .unwrap_or(false);
                        service_counts.entry(key.clone()).or_insert_with(|| {
                            snapshot.map_or_else(Counts::default, |s| Counts::of(s.iter().map(|e| e.serving)))
                        });
                        (key, serving)
                    })
                    .collect();
                (*id, endpoints)
            })
            .collect();
        (attached, service_counts)
    });
    let mut brakes = app.brakes();
    brakes.expire(now);
    // Serving endpoints already let go in this batch, per service: the registry does not
    // show them gone yet.
    let mut leaving: HashMap<ServiceKey, usize> = HashMap::new();
    let mut allowed = Vec::with_capacity(attached.len());
    'leases: for (id, endpoints) in attached {
        // All of a lease's endpoints leave together or none does: check them all, then
        // count them.
        let mut this_lease: HashMap<&ServiceKey, usize> = HashMap::new();
        for (key, _) in endpoints.iter().filter(|(_, serving)| *serving) {
            let mut counts = service_counts.get(key).copied().unwrap_or_default();
            counts.serving = counts.serving.saturating_sub(leaving.get(key).copied().unwrap_or(0));
            let pending = this_lease.get(key).copied().unwrap_or(0);
            if let Verdict::Hold(why) = brakes.check(key, counts, pending, now) {
                tracing::debug!(lease = id.0, service = %key, %why, "lease expiry held by self-preservation");
                continue 'leases;
            }
            *this_lease.entry(key).or_insert(0) += 1;
        }
        for (key, count) in this_lease {
            for _ in 0..count {
                brakes.record(key, now);
            }
            *leaving.entry(key.clone()).or_insert(0) += count;
        }
        allowed.push(id);
    }
    allowed
}

/// Deregisters (as the owner, fenced by incarnation) the drained instances whose grace ended
/// — only if still draining: compare-and-swap on the record's revision, so an owner who lifted
/// the drain meanwhile keeps the instance.
async fn end_drains(app: &App, principal: &Principal, now: u64) {
    let due = app.drains().due(now);
    for target in due {
        let draining = app.node.read(|registry| {
            registry
                .snapshot(&target.key)
                .and_then(|snapshot| snapshot.get(&target.instance).cloned())
                .filter(|e| e.incarnation == target.incarnation && e.serving == ServingState::Draining)
                .map(|e| e.revision)
        });
        let Some(revision) = draining else {
            tracing::debug!(service = %target.key, instance = %target.instance, "drain grace ended; no longer draining");
            continue;
        };
        let command = Deregister {
            target,
            expected_revision: Some(revision),
        };
        match app
            .node
            .propose(command.into(), app.meta_as(Actor::Owner, principal))
            .await
        {
            Ok(Ok(_)) => {}
            // Already gone, or replaced by a newer incarnation: nothing left to end.
            Ok(Err(rejection)) => tracing::debug!(%rejection, "drain grace ended; deregister refused"),
            Err(error) => tracing::warn!(%error, "drain grace ended; deregister not committed"),
        }
    }
}
