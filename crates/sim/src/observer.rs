//! Each node process's apply observer: reports every applied revision and every reset to
//! the invariants ([`crate::invariants::Checks`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use muster_consensus::ApplyObserver;
use muster_registry::{Applied, Registry};

use crate::clock::Clock;
use crate::invariants::Checks;
use crate::invariants::history::RevisionRecord;

/// The observer of one process of one node.
pub struct Recorder {
    /// The node.
    pub node: u64,
    /// Which start of the node this process is.
    pub process: u64,
    /// Where to report.
    pub checks: Arc<Mutex<Checks>>,
    /// The simulated clock.
    pub clock: Clock,
}

/// A stable hash of a value's JSON form.
pub fn hash_json<T: serde::Serialize>(value: &T) -> u64 {
    xxhash_rust::xxh3::xxh3_64(&serde_json::to_vec(value).expect("registry values serialise"))
}

impl Recorder {
    fn checks(&self) -> std::sync::MutexGuard<'_, Checks> {
        self.checks.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl ApplyObserver for Recorder {
    fn applied(&self, registry: &Registry, applied: &Applied) {
        if applied.unchanged.is_some() {
            return;
        }
        let trespass = crate::invariants::federation::local_write_check(registry, applied);
        if trespass.is_err() {
            self.checks().fail(
                "local writes to an instance mirrored from another region are refused",
                trespass,
            );
        }
        let record = RevisionRecord {
            hash: hash_json(applied),
            updates: applied.updates.clone(),
            leases_after: registry
                .leases()
                .map(|lease| (lease.id, lease.ttl_ms))
                .collect::<BTreeMap<_, _>>(),
            first_applied_ms: self.clock.now_ms(),
            node: self.node,
        };
        self.checks()
            .applied(self.node, self.process, applied.revision.0, record);
    }

    fn reset(&self, registry: &Registry) {
        self.checks().reset(self.node, self.process, registry.revision().0);
    }
}
