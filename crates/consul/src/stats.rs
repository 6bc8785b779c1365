//! Counters of the Consul-compatible API's blocking queries, for metrics (SPEC O1) and the
//! bench's wake-up ratio.

use std::sync::atomic::{AtomicU64, Ordering};

/// Blocking queries and their wake-ups since the server started.
#[derive(Debug, Default)]
pub struct ConsulStats {
    blocking_queries: AtomicU64,
    wakeups: AtomicU64,
}

/// What [`ConsulStats`] counted, at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ConsulCounts {
    /// Blocking queries received (requests with an `index` that waited, or could have).
    pub blocking_queries: u64,
    /// Times a waiting blocking query was woken by a change of what it watches (its service,
    /// or its namespace for a namespace-wide query); a query that times out is not woken.
    pub wakeups: u64,
}

impl ConsulStats {
    /// One more blocking query.
    pub(crate) fn blocking_query(&self) {
        self.blocking_queries.fetch_add(1, Ordering::Relaxed);
    }

    /// One more wake-up.
    pub(crate) fn wakeup(&self) {
        self.wakeups.fetch_add(1, Ordering::Relaxed);
    }

    /// The counts now.
    pub fn counts(&self) -> ConsulCounts {
        ConsulCounts {
            blocking_queries: self.blocking_queries.load(Ordering::Relaxed),
            wakeups: self.wakeups.load(Ordering::Relaxed),
        }
    }
}
