//! One service's state: its current snapshot and its retained history. What fences its
//! removed instances lives apart, in the registry's [`FenceTable`](crate::fences::FenceTable),
//! which outlives a released service.

use std::collections::VecDeque;
use std::sync::Arc;

use muster_core::{Endpoint, Event, Revision, ServiceKey, ServiceSnapshot, ServiceUpdate};
use serde::{Deserialize, Serialize};

/// One retained update with what it replaced, so a past revision can be read by undoing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Change {
    pub(crate) update: Arc<ServiceUpdate>,
    /// For each event, the record it replaced or removed (`None`: the event created it).
    /// Shared, so cloning the registry for a snapshot (and exporting it) allocates nothing per
    /// retained change: a snapshot's transient copy stays a few large buffers, not tens of
    /// thousands of small ones interleaved with live state (SPEC R5, the soak's flat memory).
    pub(crate) before: Arc<[Option<Arc<Endpoint>>]>,
}

#[derive(Debug, Clone)]
pub(crate) struct ServiceState {
    /// Shared with the lease index.
    pub(crate) key: Arc<ServiceKey>,
    /// The current set, handed out by cloning the `Arc`.
    pub(crate) current: Arc<ServiceSnapshot>,
    /// Retained changes, oldest first.
    pub(crate) history: VecDeque<Change>,
}

impl ServiceState {
    pub(crate) fn new(key: ServiceKey) -> ServiceState {
        ServiceState {
            current: Arc::new(ServiceSnapshot::empty(key.clone())),
            key: Arc::new(key),
            history: VecDeque::new(),
        }
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
            for (event, before) in change.update.events.iter().zip(change.before.iter()) {
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

    /// Drops retained changes at or before `floor`.
    pub(crate) fn compact(&mut self, floor: Revision) {
        while self.history.front().is_some_and(|c| c.update.revision <= floor) {
            self.history.pop_front();
        }
    }

    /// Whether nothing of this service needs keeping: no endpoints and no retained history.
    /// Such a service is released (its fences stay in the fence table).
    pub(crate) fn is_released(&self) -> bool {
        self.current.is_empty() && self.history.is_empty()
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
