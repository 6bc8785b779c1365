//! One service's state: its current snapshot, its tombstones and its retained history.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use muster_core::{Endpoint, Event, Incarnation, InstanceId, Revision, ServiceKey, ServiceSnapshot, ServiceUpdate};
use serde::{Deserialize, Serialize};

/// What remains of a removed instance: the highest incarnation it had, so that no command of
/// that or an older incarnation can bring it back, and when it was removed, so that a retried
/// deregistration returns the committed result. Kept as long as the change history that
/// removed it; a delayed command older than the retained history is beyond fencing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Tombstone {
    pub(crate) incarnation: Incarnation,
    pub(crate) revision: Revision,
}

/// One retained update with what it replaced, so a past revision can be read by undoing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Change {
    pub(crate) update: Arc<ServiceUpdate>,
    /// For each event, the record it replaced or removed (`None`: the event created it).
    pub(crate) before: Vec<Option<Arc<Endpoint>>>,
}

#[derive(Debug, Clone)]
pub(crate) struct ServiceState {
    /// Shared with the lease index.
    pub(crate) key: Arc<ServiceKey>,
    /// The current set, handed out by cloning the `Arc`.
    pub(crate) current: Arc<ServiceSnapshot>,
    pub(crate) tombstones: BTreeMap<InstanceId, Tombstone>,
    /// Retained changes, oldest first.
    pub(crate) history: VecDeque<Change>,
}

impl ServiceState {
    pub(crate) fn new(key: ServiceKey) -> ServiceState {
        ServiceState {
            current: Arc::new(ServiceSnapshot::empty(key.clone())),
            key: Arc::new(key),
            tombstones: BTreeMap::new(),
            history: VecDeque::new(),
        }
    }

    /// The highest incarnation known for an instance, live or removed.
    pub(crate) fn highest_incarnation(&self, instance: &InstanceId) -> Option<Incarnation> {
        let live = self.current.get(instance).map(|e| e.incarnation);
        let removed = self.tombstones.get(instance).map(|t| t.incarnation);
        live.max(removed)
    }

    /// Retained updates after `since`, oldest first.
    pub(crate) fn updates_after(&self, since: Revision) -> impl Iterator<Item = &Arc<ServiceUpdate>> {
        let start = self.history.partition_point(|c| c.update.revision <= since);
        self.history.range(start..).map(|c| &c.update)
    }

    /// The set as it was at `at`, by undoing the retained changes after it; `None` when the
    /// service did not exist yet. The caller checks that `at` is inside retained history.
    pub(crate) fn snapshot_at(&self, at: Revision) -> Option<Arc<ServiceSnapshot>> {
        if self.current.revision() <= at {
            return Some(Arc::clone(&self.current));
        }
        let mut past = ServiceSnapshot::clone(&self.current);
        for change in self.history.iter().rev().take_while(|c| c.update.revision > at) {
            for (event, before) in change.update.events.iter().zip(&change.before) {
                match before {
                    Some(endpoint) => past.put(Arc::clone(endpoint)),
                    None => past.remove(event.instance()),
                };
            }
            if change.update.prev_revision == Revision::ZERO {
                return None;
            }
            past.set_revision(change.update.prev_revision);
        }
        Some(Arc::new(past))
    }

    /// Drops retained changes at or before `floor`, and the tombstones as old.
    pub(crate) fn compact(&mut self, floor: Revision) {
        while self.history.front().is_some_and(|c| c.update.revision <= floor) {
            self.history.pop_front();
        }
        self.tombstones.retain(|_, t| t.revision > floor);
    }
}

/// A delete event for a removed record.
pub(crate) fn delete_event(removed: &Endpoint, reason: muster_core::DeleteReason) -> Event {
    Event::Delete {
        instance: removed.instance.clone(),
        incarnation: removed.incarnation,
        reason,
    }
}
