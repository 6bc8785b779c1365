//! The set DNS and xDS serve for a service a failover policy covers (SPEC G1, D2, D5): the
//! local set, plus, while the decision spills, the admitted region's eligible endpoints
//! re-weighted to the spilled share (`muster_client::failover::Tiers`).
//!
//! ```text
//!  apply path (write lock): updates + mirrored keys ──▶ served(key) ──▶ DNS zone, xDS wake-up
//!  ticker (read lock, every heartbeat): covered keys ──▶ served(key) changed? ──▶ the same
//! ```
//!
//! The ticker catches what no command changes: a mirrored set passing its stale budget (its
//! region is partitioned away, so nothing is committed), which takes the spill away.
//!
//! A served set is versioned like a local one, so xDS can tell a new one from one it sent:
//! it is the local set with its own revision while nothing newer was served; a set that
//! changed otherwise (a spill, its end, a mirrored change) takes the registry's revision, and
//! at least one more than the last served, so every distinct content this node served has its
//! own revision (which may run past the registry's: an xDS acknowledgement counts for
//! convergence as the registry revision its set was built from, `Federation::acked_as`).
//! Served revisions are this node's own (another node of the region may number a spill
//! differently); an xDS client that moves between nodes is sent its resources again.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError};

use muster_client::failover::Tiers;
use muster_core::{Digest, Revision, ServiceKey, ServiceSnapshot};
use muster_registry::Registry;
use tokio::sync::watch;

use crate::read::decision;
use crate::region::Federation;
use muster_gate::Gate;

impl Federation {
    /// The set callers of `key` are served at `now_ms`: the registry's own set unless a
    /// policy covers the service.
    pub fn served(&self, registry: &Registry, key: &ServiceKey, now_ms: u64) -> Option<Arc<ServiceSnapshot>> {
        if self.policy(key).is_none() {
            return registry.known_snapshot(key);
        }
        let local = registry.snapshot(key);
        let decision = decision(self, registry, key, local.as_deref(), now_ms);
        // Only the spill region's set is read, and only its eligible records copied (`Tiers`).
        let mirrored = decision
            .as_ref()
            .filter(|d| d.spill)
            .and_then(|d| d.region.as_ref())
            .and_then(|region| registry.mirrored(key).find(|(import, _)| import.region == *region))
            .into_iter()
            .flat_map(|(_, set)| set.iter().map(|e| &**e));
        let tiers = Tiers::new(
            local.iter().flat_map(|set| set.iter().cloned()),
            decision.as_ref(),
            mirrored,
        );
        let built = registry.revision();
        let Some(spill) = tiers.spill else {
            let set = local?;
            let revision = self.served_revision(key, set.digest(), set.revision(), built);
            return Some(if revision == set.revision() {
                set
            } else {
                // Past a tier this node served: the same records at a revision of their own.
                Arc::new(ServiceSnapshot::from_endpoints(
                    key.clone(),
                    revision,
                    set.iter().cloned(),
                ))
            });
        };
        let mut served = ServiceSnapshot::empty(key.clone());
        for endpoint in tiers.local.into_iter().chain(spill.endpoints) {
            served.put(endpoint);
        }
        let revision = self.served_revision(key, served.digest(), built, built);
        served.set_revision(revision);
        Some(Arc::new(served))
    }

    /// The revision a served set of `digest` goes out at: the one it already went out at,
    /// else `base` or one past the last served, whichever is later. Records what it was built
    /// from (the registry's revision `built`) for [`Federation::acked_as`].
    fn served_revision(&self, key: &ServiceKey, digest: Digest, base: Revision, built: Revision) -> Revision {
        let mut memo = self.served.lock().unwrap_or_else(PoisonError::into_inner);
        let (revision, built) = match memo.get(key) {
            Some(&(held, revision, at)) if held == digest => (revision, at),
            Some(&(_, revision, _)) => (base.max(revision.next()), built),
            None => (base, built),
        };
        memo.insert(key.clone(), (digest, revision, built));
        revision
    }

    /// What an xDS client that acknowledged `key` at served revision `acked` holds, as a
    /// registry revision (for convergence, SPEC O3): `acked` for a service no tier covers; for
    /// a covered one at most the registry's revision its served set was built from, and
    /// `None` for an older served set than the last (nothing to say of it).
    pub fn acked_as(&self, key: &ServiceKey, acked: Revision) -> Option<Revision> {
        if self.policy(key).is_none() {
            return Some(acked);
        }
        let memo = self.served.lock().unwrap_or_else(PoisonError::into_inner);
        match memo.get(key) {
            Some(&(_, revision, built)) if revision == acked => Some(acked.min(built)),
            Some(_) => None,
            None => Some(acked),
        }
    }

    /// Lets go of what was remembered of services no longer covered (`covered`, sorted, as
    /// [`Federation::covered`] gives it): the served-set memo and the last decisions would
    /// otherwise grow with every covered service ever seen. A served revision that ran past
    /// the registry's (`now`) is kept until the registry passes it, so a service that comes
    /// back is never served at a revision older than one this node already served for it.
    pub fn forget_uncovered(&self, covered: &[ServiceKey], now: Revision) {
        let gone = |key: &ServiceKey| covered.binary_search(key).is_err();
        self.served
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|key, (_, revision, _)| !gone(key) || *revision > now);
        self.forget_decisions(|key| gone(key));
    }

    /// Every service a policy covers that this region holds or mirrors, sorted.
    pub fn covered(&self, registry: &Registry) -> Vec<ServiceKey> {
        let mut keys: Vec<ServiceKey> = registry
            .mirrors()
            .flat_map(|m| m.sets.keys().cloned())
            .chain(registry.all_services().map(|s| s.key().clone()))
            .filter(|key| self.policy(key).is_some())
            .collect();
        keys.sort();
        keys.dedup();
        keys
    }
}

/// Re-serves covered services whose served set changed with no command, every heartbeat,
/// on every node, until the server stops: `changed(key, served set, registry revision)` is
/// told under the registry's read lock (the server stages it in the DNS zone and wakes xDS).
pub async fn run_ticker(
    gate: Arc<Gate>,
    federation: Arc<Federation>,
    changed: impl Fn(&ServiceKey, Option<Arc<ServiceSnapshot>>, Revision) + Send,
    mut stopping: watch::Receiver<bool>,
) {
    let mut published: HashMap<ServiceKey, Option<(Digest, Revision)>> = HashMap::new();
    loop {
        tokio::select! {
            () = tokio::time::sleep(federation.heartbeat) => {}
            _ = stopping.wait_for(|stop| *stop) => return,
        }
        // Staged under the read lock, with the time read there: the apply path stages under
        // the write lock, so a newer set staged there is never overwritten by an older one.
        gate.read(|registry| {
            let now_ms = gate.clock.unix_now_ms();
            let covered = federation.covered(registry);
            published.retain(|key, _| covered.binary_search(key).is_ok());
            federation.forget_uncovered(&covered, registry.revision());
            for key in covered {
                let served = federation.served(registry, &key, now_ms);
                let seen = served.as_ref().map(|set| (set.digest(), set.revision()));
                if published.get(&key) == Some(&seen) {
                    continue;
                }
                changed(&key, served, registry.revision());
                published.insert(key, seen);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(service: &str) -> ServiceKey {
        ServiceKey::new("default", "prod", service).unwrap()
    }

    #[test]
    fn what_is_remembered_of_a_service_no_longer_covered_is_let_go_once_the_registry_passed_it() {
        // Trace: services under a failover policy come and go (one per deploy); the memo
        // kept every one ever served.
        let federation = serde_json::from_value::<crate::region::FederationConfig>(serde_json::json!({
            "region": "b",
            "peer": [{"name": "a", "url": "http://127.0.0.1:7070", "import": ["prod/*"]}],
            "policy": [{"service": "prod/*", "failover": ["a"]}],
        }))
        .unwrap()
        .resolve()
        .unwrap()
        .unwrap();
        let digest = ServiceSnapshot::empty(key("x")).digest();
        for (service, at) in [("kept", 5), ("gone", 6), ("ran-past", 9)] {
            federation.served_revision(&key(service), digest, Revision(at), Revision(at));
        }
        federation.remember(&key("gone"), |_| muster_core::federation::FailoverDecision {
            spill: false,
            region: None,
            share_percent: 0,
            reason: muster_core::federation::FailoverReason::LocalSufficient,
            local_eligible: 1,
            local_total: 1,
            required: 1,
            spill_capacity: 0,
            candidates: Vec::new(),
        });
        federation.forget_uncovered(&[key("kept")], Revision(7));
        let memo = federation.served.lock().unwrap();
        let mut left: Vec<&str> = memo.keys().map(|k| k.service.as_str()).collect();
        left.sort_unstable();
        assert_eq!(
            left,
            ["kept", "ran-past"],
            "a revision past the registry's waits for it"
        );
        drop(memo);
        assert!(federation.remembered(&key("gone")).is_none());
        federation.forget_uncovered(&[key("kept")], Revision(9));
        assert_eq!(federation.served.lock().unwrap().len(), 1);
    }
}
