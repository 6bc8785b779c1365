//! Connections that have not spoken yet (SPEC S6): accepted, but without a whole request
//! head. Under a full connection budget a new connection takes the place of the oldest of
//! them, so clients that connect and trickle (slowloris) cannot keep a listener's real
//! callers — on the cluster listener, its peers — out for a header read timeout at a time.
//! The table is the budget's (`descriptors::ConnectionBudget`), so the HTTP API, the Consul
//! API and xDS, which share one budget, make room for each other's callers.
//! A connection that has sent a request is never evicted this way: it is a caller.
//!
//! ```text
//!  accepted ─▶ enter() ─▶ Silent[id] ──first request head──▶ leave (spoke)
//!  budget full ─▶ evict_oldest() ─▶ its Notify fires ─▶ the connection closes, its slot returns
//! ```

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;

#[derive(Debug, Default)]
struct Table {
    next: u64,
    waiting: BTreeMap<u64, Arc<Notify>>,
}

/// The silent connections of every listener sharing a connection budget, oldest first.
#[derive(Debug, Clone, Default)]
pub struct Silent(Arc<Mutex<Table>>);

impl Silent {
    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new connection, silent until [`SilentSlot::spoke`].
    pub fn enter(&self) -> SilentSlot {
        let evict = Arc::new(Notify::new());
        let mut table = self.table();
        let id = table.next;
        table.next += 1;
        table.waiting.insert(id, Arc::clone(&evict));
        SilentSlot {
            silent: self.clone(),
            id,
            evict,
            spoke: AtomicBool::new(false),
        }
    }

    /// Tells the oldest silent connection to close, and forgets it; `false` when none is.
    pub fn evict_oldest(&self) -> bool {
        let oldest = self.table().waiting.pop_first();
        oldest.map(|(_, evict)| evict.notify_one()).is_some()
    }

    /// How many are silent.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.table().waiting.len()
    }
}

/// One connection's place among the silent ones; dropping it (the connection ended) leaves.
#[derive(Debug)]
pub struct SilentSlot {
    silent: Silent,
    id: u64,
    evict: Arc<Notify>,
    /// Set at the first request: every later one (keep-alive) takes no lock.
    spoke: AtomicBool,
}

impl SilentSlot {
    /// The connection sent a request head: it is no longer evicted for a newcomer.
    pub fn spoke(&self) {
        if !self.spoke.swap(true, Ordering::Relaxed) {
            self.silent.table().waiting.remove(&self.id);
        }
    }

    /// Fires when the connection is evicted.
    pub fn evicted(&self) -> &Notify {
        &self.evict
    }

    /// Whether the connection has sent a request: an eviction that raced with it (taken
    /// from the table just before the request came) is then ignored.
    pub fn has_spoken(&self) -> bool {
        self.spoke.load(Ordering::Relaxed)
    }
}

impl Drop for SilentSlot {
    fn drop(&mut self) {
        self.spoke();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_oldest_silent_connection_is_evicted_and_a_caller_never_is() {
        let silent = Silent::default();
        let first = silent.enter();
        let second = silent.enter();
        let third = silent.enter();
        first.spoke();
        assert_eq!(silent.len(), 2);
        assert!(silent.evict_oldest());
        // The second (the oldest still silent) is told; its permit is stored for it.
        tokio::time::timeout(std::time::Duration::from_secs(1), second.evicted().notified())
            .await
            .expect("the second connection is evicted");
        drop(third);
        assert!(
            !silent.evict_oldest(),
            "a caller that spoke is not evicted; the rest left"
        );
        drop(first);
        assert_eq!(silent.len(), 0);
    }
}
