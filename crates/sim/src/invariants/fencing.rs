//! Invariant: **no older incarnation revives**.
//!
//! Walking the history in revision order, every instance has a fence: the highest
//! incarnation that was removed or replaced. A put of that instance at or below its fence
//! is a dead incarnation coming back (a delayed registration from a process that was
//! deregistered or replaced), however many unrelated revisions passed in between.
//!
//! The walk also remembers each removal's state just before it, for the drains invariant.

use std::collections::BTreeMap;

use muster_core::{Event, InstanceId, ServiceKey, ServingState};

use super::history::RevisionRecord;

#[derive(Default, Clone, Copy)]
struct Fence {
    highest_removed: Option<u64>,
    live: Option<(u64, ServingState)>,
}

/// Fences per instance.
#[derive(Default)]
pub struct Fencing {
    fences: BTreeMap<(ServiceKey, InstanceId), Fence>,
    /// (revision, instance) → serving state just before that revision removed it.
    pub removed_from: BTreeMap<(u64, InstanceId), ServingState>,
}

impl Fencing {
    /// Walks one revision.
    pub fn process(&mut self, revision: u64, record: &RevisionRecord) -> Result<(), String> {
        for update in &record.updates {
            for event in &update.events {
                let slot = (update.key.clone(), event.instance().clone());
                let fence = self.fences.entry(slot).or_default();
                match event {
                    Event::Put { endpoint } => {
                        let incarnation = endpoint.incarnation.0;
                        if let Some(fenced) = fence.highest_removed
                            && incarnation <= fenced
                        {
                            return Err(format!(
                                "revision {revision} put {}/{} back at incarnation {incarnation}, \
                                 but incarnation {fenced} was removed or replaced before",
                                update.key, endpoint.instance
                            ));
                        }
                        if let Some((old, _)) = fence.live
                            && old < incarnation
                        {
                            fence.highest_removed = Some(fence.highest_removed.unwrap_or(0).max(old));
                        }
                        fence.live = Some((incarnation, endpoint.serving));
                    }
                    Event::Delete {
                        instance, incarnation, ..
                    } => {
                        if let Some((_, serving)) = fence.live {
                            self.removed_from.insert((revision, instance.clone()), serving);
                        }
                        fence.highest_removed = Some(fence.highest_removed.unwrap_or(0).max(incarnation.0));
                        fence.live = None;
                    }
                }
            }
        }
        Ok(())
    }
}
