//! Everything derived from the registry hears of each apply, in order: one observer that
//! fans out to the watch hub, the checker's feed, DNS and the audit trail.

use std::sync::Arc;

use muster_consensus::{ApplyObserver, Judged};
use muster_registry::{Applied, Registry};

/// Observers called in order, under the registry's write lock: each must be quick.
pub(crate) struct Observers(pub(crate) Vec<Arc<dyn ApplyObserver>>);

impl ApplyObserver for Observers {
    fn applied(&self, registry: &Registry, applied: &Applied) {
        for observer in &self.0 {
            observer.applied(registry, applied);
        }
    }

    fn judged(&self, judged: &Judged<'_>) {
        for observer in &self.0 {
            observer.judged(judged);
        }
    }

    fn reset(&self, registry: &Registry) {
        for observer in &self.0 {
            observer.reset(registry);
        }
    }
}
