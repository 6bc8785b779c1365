//! A caller's failover tier, kept current (SPEC G1): the I/O shell over
//! [`Tiers`](crate::failover::Tiers). The region's server decides where a service's traffic
//! spills (`GET ...?federation=true`); this follows its decision and hands the tier's members
//! to a [`Picker`](crate::Picker), which balances over them beside the local view.
//!
//! ```text
//!  every `every`: snapshot_federated(key) ──Tiers::of──▶ spill members ──watch──▶ Picker
//! ```
//!
//! The tier is advisory: it is dropped when the server cannot be asked for
//! ten reads in a row, since a decision nobody confirms may point at
//! a region that is gone.

use std::sync::Arc;
use std::time::Duration;

use muster_core::ServiceKey;
use tokio::sync::watch;

use crate::Member;
use crate::failover::Tiers;
use crate::http::Client;

/// Reads in a row that may fail before the tier is dropped.
pub(crate) const FORGET_AFTER_FAILURES: u32 = 10;

/// The members of a service's failover tier: empty while the decision keeps traffic home.
#[derive(Debug, Clone)]
pub struct FailoverTier {
    members: watch::Receiver<Arc<[Arc<Member>]>>,
}

impl FailoverTier {
    /// Follows `key`'s failover decision, asking every `every`; the task ends when the last
    /// clone is dropped.
    pub fn start(client: Client, key: ServiceKey, every: Duration) -> FailoverTier {
        let (publish, members) = watch::channel(Arc::from(Vec::new()));
        tokio::spawn(follow(client, key, every, publish));
        FailoverTier { members }
    }

    /// A tier that does not change (tests, or a caller that decides itself).
    pub fn fixed(members: Vec<Arc<Member>>) -> FailoverTier {
        let (_, members) = watch::channel(Arc::from(members));
        FailoverTier { members }
    }

    /// The tier's members now; the same `Arc` until the tier changes.
    pub fn members(&self) -> Arc<[Arc<Member>]> {
        Arc::clone(&self.members.borrow())
    }

    /// Waits until the tier changes; `false` once it never will (the follower stopped, or a
    /// fixed tier).
    pub async fn changed(&mut self) -> bool {
        self.members.changed().await.is_ok()
    }
}

async fn follow(client: Client, key: ServiceKey, every: Duration, publish: watch::Sender<Arc<[Arc<Member>]>>) {
    let mut failures = 0;
    loop {
        let members = match client.snapshot_federated(&key).await {
            Ok(reply) => {
                failures = 0;
                Some(tier_members(&Tiers::of(&reply)))
            }
            Err(error) => {
                failures += 1;
                tracing::debug!(service = %key, %error, failures, "failover decision not read");
                (failures >= FORGET_AFTER_FAILURES).then(Vec::new)
            }
        };
        if let Some(members) = members {
            publish.send_if_modified(|held| {
                let changed = **held != *members;
                if changed {
                    *held = Arc::from(members);
                }
                changed
            });
        }
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = publish.closed() => return,
        }
    }
}

/// The spill tier's members, sorted by instance.
fn tier_members(tiers: &Tiers) -> Vec<Arc<Member>> {
    tiers
        .spill
        .iter()
        .flat_map(|spill| &spill.endpoints)
        .map(|endpoint| Arc::new(Member::from_endpoint(endpoint)))
        .collect()
}
