//! Parked requests (SPEC W4, E1): how the blocking queries of one API ended, and how many
//! wait now, for the metrics. Their slots are the admission table's (`Hold::Parked`).

use std::sync::atomic::{AtomicU64, Ordering};

/// Blocking queries of one API: how they ended and how many wait now.
#[derive(Debug, Default)]
pub struct BlockingStats {
    /// Returned because what they watch changed.
    pub changed: AtomicU64,
    /// Returned when their wait ran out with nothing changed.
    pub timed_out: AtomicU64,
    /// Returned early because the server is stopping.
    pub stopped: AtomicU64,
    /// Ended because the client went away (its connection closed while it waited).
    pub gone: AtomicU64,
    /// Waiting now.
    pub waiting: AtomicU64,
}

/// How a blocking query ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Woken {
    /// What it watches changed.
    Changed,
    /// Its wait ran out.
    TimedOut,
    /// The server is stopping.
    Stopped,
    /// The client went away while it waited: the request was dropped, not answered.
    Gone,
}

impl BlockingStats {
    /// Counts a query that starts waiting, until the guard returned says how it ended: by
    /// [`Waiting::end`], or by being dropped unanswered (the client hung up and hyper dropped
    /// the request's future), which counts as [`Woken::Gone`] so `waiting` never drifts up.
    pub fn begin(&self) -> Waiting<'_> {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        Waiting {
            stats: self,
            woken: Woken::Gone,
        }
    }
}

/// A blocking query counted as waiting; see [`BlockingStats::begin`].
#[derive(Debug)]
pub struct Waiting<'s> {
    stats: &'s BlockingStats,
    woken: Woken,
}

impl Waiting<'_> {
    /// Counts how the query ended.
    pub fn end(mut self, woken: Woken) {
        self.woken = woken;
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.stats.waiting.fetch_sub(1, Ordering::Relaxed);
        let counter = match self.woken {
            Woken::Changed => &self.stats.changed,
            Woken::TimedOut => &self.stats.timed_out,
            Woken::Stopped => &self.stats.stopped,
            Woken::Gone => &self.stats.gone,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}
