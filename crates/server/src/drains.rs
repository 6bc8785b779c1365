//! Drains with a grace period (SPEC L6): after `drain` commits, the instance is deregistered
//! (fenced by its incarnation) when the grace ends, or as soon as it reports nothing in
//! flight. Pure: the lease keeper's tick asks [`Drains::due`] and proposes the deregisters.
//!
//! ```text
//!  drain --grace 30s ──commit──▶ add(target, now + 30s) ──tick: due(now)──▶ Deregister (owner)
//!                                        └── in-flight report of 0 ──take──▶ Deregister now
//! ```
//!
//! Like lease deadlines, grace deadlines live on the node that took the drain, not in the log:
//! after a restart a drained endpoint stays `draining` (out of routing) until its owner
//! deregisters it or its lease expires.

use std::collections::HashMap;

use muster_core::{Incarnation, InstanceId, ServiceKey};
use muster_registry::Target;

/// The longest grace a drain may ask for: an hour covers long-lived connections draining;
/// longer is an owner forgetting to deregister.
pub(crate) const MAX_GRACE_MS: u64 = 3_600_000;

/// Pending deregistrations by instance.
#[derive(Debug, Default)]
pub(crate) struct Drains {
    pending: HashMap<(ServiceKey, InstanceId), (Incarnation, u64)>,
}

impl Drains {
    /// Deregisters `target` at `deadline_ms` (a later drain of the same instance replaces it).
    pub(crate) fn add(&mut self, target: Target, deadline_ms: u64) {
        self.pending
            .insert((target.key, target.instance), (target.incarnation, deadline_ms));
    }

    /// Puts back a drain whose early end failed to commit; its grace ends it at once.
    pub(crate) fn restore(&mut self, target: Target) {
        self.pending
            .entry((target.key, target.instance))
            .or_insert((target.incarnation, 0));
    }

    /// The drains whose grace ended by `now_ms`, removed.
    pub(crate) fn due(&mut self, now_ms: u64) -> Vec<Target> {
        let due: Vec<(ServiceKey, InstanceId)> = self
            .pending
            .iter()
            .filter(|(_, (_, deadline))| *deadline <= now_ms)
            .map(|(slot, _)| slot.clone())
            .collect();
        due.into_iter()
            .filter_map(|slot| self.take(&slot.0, &slot.1, None))
            .collect()
    }

    /// Removes the pending drain of an instance (of `incarnation`, when given).
    pub(crate) fn take(
        &mut self,
        key: &ServiceKey,
        instance: &InstanceId,
        incarnation: Option<Incarnation>,
    ) -> Option<Target> {
        let slot = (key.clone(), instance.clone());
        let (pending, _) = *self.pending.get(&slot)?;
        if incarnation.is_some_and(|given| given != pending) {
            return None;
        }
        self.pending.remove(&slot);
        Some(Target {
            key: slot.0,
            instance: slot.1,
            incarnation: pending,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(instance: &str, incarnation: u64) -> Target {
        Target {
            key: ServiceKey::new("acme", "prod", "api").unwrap(),
            instance: InstanceId::new(instance).unwrap(),
            incarnation: Incarnation(incarnation),
        }
    }

    #[test]
    fn a_drain_is_due_when_its_grace_ends_and_only_once() {
        let mut drains = Drains::default();
        drains.add(target("a", 1), 1_000);
        drains.add(target("b", 1), 5_000);
        assert_eq!(drains.due(999), []);
        assert_eq!(drains.due(1_000), [target("a", 1)]);
        assert_eq!(drains.due(2_000), []);
        assert_eq!(drains.due(5_000), [target("b", 1)]);
    }

    #[test]
    fn an_in_flight_report_of_another_incarnation_takes_nothing() {
        let mut drains = Drains::default();
        drains.add(target("a", 2), 1_000);
        let key = ServiceKey::new("acme", "prod", "api").unwrap();
        let a = InstanceId::new("a").unwrap();
        assert_eq!(drains.take(&key, &a, Some(Incarnation(1))), None);
        assert_eq!(drains.take(&key, &a, Some(Incarnation(2))), Some(target("a", 2)));
        assert_eq!(drains.due(10_000), []);
    }
}
