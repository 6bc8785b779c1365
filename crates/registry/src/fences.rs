//! The fence table: what remains of removed instances, kept for a time, not for a number of
//! revisions (SPEC L7).
//!
//! ```text
//!  fences:     service ──▶ instance ──▶ Fence { incarnation, revision, removed_at_ms }
//!  by_removal: (removed_at_ms, service, instance), oldest first ──▶ pruned on every commit
//! ```
//!
//! A removed instance's record goes; its fence keeps only the highest incarnation it had (no
//! command of that or an older incarnation may bring it back), the revision that removed it
//! (a retried deregistration returns the committed result) and when, in the log's time (the
//! command's [`CommandMeta::at_ms`](crate::CommandMeta), never earlier than the latest time
//! committed: [`crate::Registry::clock_ms`]; logged with the command, so every replica
//! prunes alike). Unrelated writes do not shorten a fence's life: it holds for
//! `fence_retention_ms` of the policy, and memory is bounded by the removals within that
//! time, one small entry each.
//!
//! # Correctness
//! - A fence is in force while `removed_at_ms + fence_retention_ms > now` for the `now` of
//!   the command being judged; an expired fence that has not been pruned yet is ignored the
//!   same way, so pruning (on commit) never changes a verdict.
//! - `by_removal` holds exactly one entry per fence, so pruning costs O(log n) per fence.
//! - The table outlives the services it names: a released empty service keeps its fences.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use muster_core::{Incarnation, InstanceId, Revision, ServiceKey};

/// What remains of one removed instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fence {
    /// The highest incarnation the instance had (or a remover fenced).
    pub(crate) incarnation: Incarnation,
    /// The revision that removed it.
    pub(crate) revision: Revision,
    /// When it was removed, in the log's time.
    pub(crate) removed_at_ms: u64,
}

impl Fence {
    /// Whether this fence still holds at `now_ms`.
    fn holds(&self, now_ms: u64, retention_ms: u64) -> bool {
        self.removed_at_ms.saturating_add(retention_ms) > now_ms
    }
}

/// Every fence in force (and those expired but not yet pruned).
#[derive(Debug, Clone, Default)]
pub(crate) struct FenceTable {
    fences: BTreeMap<Arc<ServiceKey>, BTreeMap<InstanceId, Fence>>,
    by_removal: BTreeSet<(u64, Arc<ServiceKey>, InstanceId)>,
}

impl FenceTable {
    /// The fence on an instance, if one holds at `now_ms`.
    pub(crate) fn get(
        &self,
        key: &ServiceKey,
        instance: &InstanceId,
        now_ms: u64,
        retention_ms: u64,
    ) -> Option<&Fence> {
        self.fences
            .get(key)?
            .get(instance)
            .filter(|fence| fence.holds(now_ms, retention_ms))
    }

    /// When the last of `key`'s fenced instances was removed, in the log's time; `None`
    /// when none is fenced.
    pub(crate) fn last_removal_ms(&self, key: &ServiceKey) -> Option<u64> {
        self.fences.get(key)?.values().map(|fence| fence.removed_at_ms).max()
    }

    /// Fences an instance, replacing any earlier fence on it.
    pub(crate) fn insert(&mut self, key: &Arc<ServiceKey>, instance: InstanceId, fence: Fence) {
        self.remove(key, &instance);
        self.by_removal
            .insert((fence.removed_at_ms, Arc::clone(key), instance.clone()));
        self.fences.entry(Arc::clone(key)).or_default().insert(instance, fence);
    }

    /// Lifts the fence on an instance (a higher incarnation is live again: it fences itself).
    pub(crate) fn remove(&mut self, key: &Arc<ServiceKey>, instance: &InstanceId) {
        let Some(service) = self.fences.get_mut(key) else {
            return;
        };
        let Some(fence) = service.remove(instance) else {
            return;
        };
        if service.is_empty() {
            self.fences.remove(key);
        }
        self.by_removal
            .remove(&(fence.removed_at_ms, Arc::clone(key), instance.clone()));
    }

    /// Drops every fence that no longer holds at `now_ms`; returns the services left with no
    /// fence at all, sorted.
    pub(crate) fn prune(&mut self, now_ms: u64, retention_ms: u64) -> Vec<ServiceKey> {
        let mut unfenced = Vec::new();
        while let Some((removed_at_ms, key, instance)) = self.by_removal.first() {
            if removed_at_ms.saturating_add(retention_ms) > now_ms {
                break;
            }
            let (key, instance) = (Arc::clone(key), instance.clone());
            self.remove(&key, &instance);
            if !self.fences.contains_key(&key) {
                unfenced.push(ServiceKey::clone(&key));
            }
        }
        unfenced.sort();
        unfenced
    }

    /// The services with at least one fence, sorted.
    pub(crate) fn services(&self) -> impl Iterator<Item = &Arc<ServiceKey>> {
        self.fences.keys()
    }

    /// Every fence, by service then instance.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&Arc<ServiceKey>, &InstanceId, &Fence)> {
        self.fences
            .iter()
            .flat_map(|(key, service)| service.iter().map(move |(instance, fence)| (key, instance, fence)))
    }
}
