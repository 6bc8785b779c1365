//! Invariant: **the same revision is the same change on every node**, and every node at
//! the same applied log index holds the same revision and the same state.
//!
//! Each node's observer reports every applied revision with a hash of what it applied (its
//! updates, digests and lease); the first report of a revision becomes the record, and
//! every later one — another node, or the same node replaying its log after a restart —
//! must match it. The driver also samples each node between steps: (applied index →
//! revision) and (applied index → hash of the exported state) must be functions across
//! nodes. A
//! snapshot that is not a consistent cut, or an entry applied twice, breaks one of these.

use std::collections::BTreeMap;
use std::sync::Arc;

use muster_core::{LeaseId, ServiceUpdate};

/// What the first node to apply a revision saw.
#[derive(Debug, Clone)]
pub struct RevisionRecord {
    /// Hash of the serialised `Applied`.
    pub hash: u64,
    /// Its updates.
    pub updates: Vec<Arc<ServiceUpdate>>,
    /// The leases that existed after it, with their TTLs.
    pub leases_after: BTreeMap<LeaseId, u64>,
    /// When it was first applied (simulated ms).
    pub first_applied_ms: u64,
    /// Which node first applied it.
    pub node: u64,
}

/// Every revision applied anywhere, and the samples.
#[derive(Default)]
pub struct History {
    /// Revision → its record.
    pub revisions: BTreeMap<u64, RevisionRecord>,
    /// Applied log index → (revision, node that reported it first).
    by_index: BTreeMap<u64, (u64, u64)>,
    /// Applied log index → (exported state hash, node that reported it first). Keyed by
    /// index, not revision: replicated policy changes the state without a new revision.
    states: BTreeMap<u64, (u64, u64)>,
}

impl History {
    /// A node applied `revision`; `Err` when it differs from the record.
    pub fn applied(&mut self, node: u64, revision: u64, record: RevisionRecord) -> Result<(), String> {
        match self.revisions.get(&revision) {
            None => {
                self.revisions.insert(revision, record);
                Ok(())
            }
            Some(first) if first.hash == record.hash => Ok(()),
            Some(first) => Err(format!(
                "node {node} applied revision {revision} as {:?}, node {} applied it as {:?}",
                summary(&record.updates),
                first.node,
                summary(&first.updates)
            )),
        }
    }

    /// A sample of one node between steps.
    pub fn sample(&mut self, node: u64, applied_index: u64, revision: u64, state_hash: u64) -> Result<(), String> {
        match self.by_index.get(&applied_index) {
            None => {
                self.by_index.insert(applied_index, (revision, node));
            }
            Some((seen, other)) if *seen != revision => {
                return Err(format!(
                    "at applied index {applied_index} node {node} is at revision {revision}, node {other} was at {seen}"
                ));
            }
            Some(_) => {}
        }
        match self.states.get(&applied_index) {
            None => {
                self.states.insert(applied_index, (state_hash, node));
            }
            Some((seen, other)) if *seen != state_hash => {
                return Err(format!(
                    "at applied index {applied_index} (revision {revision}) node {node}'s state differs from node {other}'s"
                ));
            }
            Some(_) => {}
        }
        Ok(())
    }

    /// The highest revision anyone applied.
    pub fn highest(&self) -> u64 {
        self.revisions.keys().next_back().copied().unwrap_or(0)
    }
}

/// A short description of a revision's updates, for a failure message.
pub fn summary(updates: &[Arc<ServiceUpdate>]) -> String {
    let mut parts = Vec::new();
    for update in updates {
        for event in &update.events {
            parts.push(match event {
                muster_core::Event::Put { endpoint } => format!(
                    "put {}#{} {:?} lease {:?}",
                    endpoint.instance, endpoint.incarnation.0, endpoint.serving, endpoint.lease
                ),
                muster_core::Event::Delete {
                    instance,
                    incarnation,
                    reason,
                } => format!("delete {instance}#{} {reason:?}", incarnation.0),
            });
        }
    }
    if parts.is_empty() {
        "(no endpoint change)".to_owned()
    } else {
        parts.join(", ")
    }
}
