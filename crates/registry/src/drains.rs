//! Drain deadlines as committed state (SPEC L6): a `Drain` with a grace records when the
//! grace ends, so whichever node leads — now or after a leader change, a restart or a
//! snapshot install — ends the drain at the same time.
//!
//! ```text
//!  Drain {grace_ms} at at_ms ──commit──▶ table[(key, instance)] = (incarnation, at_ms + grace)
//!  SetServing (not draining), a newer incarnation,
//!  Deregister / Evict / expiry              ──commit──▶ entry removed (the drain is lifted)
//!  leader: drains_due(now) ──▶ Deregister {expected_revision: record's revision}   (CAS)
//! ```
//!
//! The deadline is on the proposing leader's wall clock (`CommandMeta::at_ms`), fixed in the
//! log: every replica holds the same table, and a new leader compares it with its own wall
//! clock (clocks of members are assumed close; a skew of seconds shortens or lengthens a
//! grace by that much, never loses it).
//!
//! # Correctness
//! - An entry exists only for a live, draining record of the same incarnation: every commit
//!   that puts a record not draining (or of another incarnation) or deletes it removes the
//!   entry in the same revision.
//! - The table is persistent (`imbl`), so cloning a registry for a snapshot stays cheap.

use imbl::{OrdMap, OrdSet};
use muster_core::{Incarnation, InstanceId, ServiceKey};
use serde::{Deserialize, Serialize};

/// The longest grace a drain may ask for: an hour covers long-lived connections draining;
/// longer is an owner forgetting to deregister.
pub const MAX_DRAIN_GRACE_MS: u64 = 3_600_000;

/// When a drained instance is to be deregistered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainDeadline {
    /// The service.
    pub key: ServiceKey,
    /// The instance.
    pub instance: InstanceId,
    /// The drained incarnation.
    pub incarnation: Incarnation,
    /// Unix milliseconds on the proposing leader's clock: the drain's `at_ms` plus its grace.
    pub deadline_ms: u64,
}

/// Drain deadlines by instance and by time.
#[derive(Debug, Clone, Default)]
pub(crate) struct DrainTable {
    by_instance: OrdMap<(ServiceKey, InstanceId), DrainDeadline>,
    by_deadline: OrdSet<(u64, ServiceKey, InstanceId)>,
}

impl DrainTable {
    /// Records a drain (replacing an earlier one of the same instance).
    pub(crate) fn set(&mut self, drain: DrainDeadline) {
        self.clear(&drain.key, &drain.instance);
        self.by_deadline
            .insert((drain.deadline_ms, drain.key.clone(), drain.instance.clone()));
        self.by_instance
            .insert((drain.key.clone(), drain.instance.clone()), drain);
    }

    /// Lifts an instance's drain, if it has one.
    pub(crate) fn clear(&mut self, key: &ServiceKey, instance: &InstanceId) {
        if let Some(old) = self.by_instance.remove(&(key.clone(), instance.clone())) {
            self.by_deadline.remove(&(old.deadline_ms, old.key, old.instance));
        }
    }

    /// An instance's drain deadline.
    pub(crate) fn get(&self, key: &ServiceKey, instance: &InstanceId) -> Option<&DrainDeadline> {
        self.by_instance.get(&(key.clone(), instance.clone()))
    }

    /// Every drain, by service and instance.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &DrainDeadline> {
        self.by_instance.values()
    }

    /// The drains whose deadline is at or before `now_ms`, earliest first.
    pub(crate) fn due(&self, now_ms: u64) -> impl Iterator<Item = &DrainDeadline> {
        self.by_deadline
            .iter()
            .take_while(move |(deadline, _, _)| *deadline <= now_ms)
            .filter_map(|(_, key, instance)| self.get(key, instance))
    }

    /// How many drains have a deadline.
    pub(crate) fn len(&self) -> usize {
        self.by_instance.len()
    }
}
