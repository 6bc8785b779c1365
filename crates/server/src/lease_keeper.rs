//! The lease keeper task: the thin shell around [`LeaseDeadlines`] that reads the clock and
//! the registry, and proposes expiry (DESIGN "Leases off the log").
//!
//! Every [`TICK`] it proposes the leases whose deadlines passed as one `ExpireLeases`
//! command; every [`RECONCILE_EVERY`] ticks (and on the first) it reconciles the table with
//! the registry's leases, which gives every lease a deadline after a restart.

use std::sync::Arc;
use std::time::Duration;

use muster_core::{Actor, Principal};
use muster_registry::{CommandMeta, ExpireLeases};
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

/// Runs until `stop` turns true.
pub(crate) async fn run(app: Arc<App>, mut stop: watch::Receiver<bool>) {
    let principal = Principal::new(KEEPER_PRINCIPAL).expect("a valid principal");
    let mut ticker = tokio::time::interval(TICK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for tick in 0_u64.. {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stop.wait_for(|stopping| *stopping) => return,
        }
        if tick % RECONCILE_EVERY == 0 {
            reconcile(&app);
        }
        let now = app.clock.now_ms();
        let expired = app.leases().expired(now, MAX_EXPIRE_BATCH);
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

fn reconcile(app: &App) {
    let live: Vec<_> = app
        .node
        .read(|registry| registry.leases().map(|lease| (lease.id, lease.ttl_ms)).collect());
    let now = app.clock.now_ms();
    let mut leases = app.leases();
    LeaseDeadlines::reconcile(&mut leases, live, now);
}
