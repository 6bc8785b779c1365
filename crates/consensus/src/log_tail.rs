//! The newest log entries in memory, as openraft appended them, so a leader replicates them
//! without waiting for its own fsync and without decoding them back from the log file.
//!
//! ```text
//!  append ──▶ tail (consecutive indices, ending at the last appended) ──▶ writer: fsync
//!                 │                                                      (in parallel)
//!  replication ◀──┘ entries [start, end) if the tail covers start; else the log file
//! ```
//!
//! Raft lets a leader send an entry to its followers while it writes the entry to its own
//! disk (the thesis' §10.2.1): the leader counts itself toward the quorum only once its own
//! flush is done (openraft's `LogFlushed` callback), so nothing is acknowledged earlier than
//! before. Reading the entry from the log file instead meant waiting for that flush first,
//! so each batch paid the leader's fsync and then the follower's, one after the other.
//!
//! # Correctness
//! - The tail holds consecutive indices ending at the last appended entry, and drops an
//!   entry from its front only once it is durable ([`LogTail::push`]). A range it cannot
//!   serve from its start is read from the file, after the writer has flushed everything
//!   handed to it (`log_store`'s barrier), as before the tail existed.
//! - Truncation and purges apply to the tail as to the file: an entry gone from one is gone
//!   from the other.

use std::collections::VecDeque;

use crate::types::Entry;

/// Durable entries kept beyond the ones not yet flushed: enough for a follower a few
/// batches behind; a batch is at most ~1 MiB, so the tail stays bounded.
pub(crate) const KEEP: usize = 64;

/// The newest appended entries, consecutive by index.
#[derive(Debug, Default)]
pub(crate) struct LogTail {
    entries: VecDeque<Entry>,
}

impl LogTail {
    /// Appends `entry`; when it does not follow the last one held, the tail starts again
    /// from it. Then drops durable entries from the front beyond [`KEEP`].
    pub(crate) fn push(&mut self, entry: Entry, durable: u64) {
        if self
            .entries
            .back()
            .is_some_and(|last| last.log_id.index + 1 != entry.log_id.index)
        {
            self.entries.clear();
        }
        self.entries.push_back(entry);
        while self.entries.len() > KEEP && self.entries.front().is_some_and(|e| e.log_id.index <= durable) {
            self.entries.pop_front();
        }
    }

    /// Entries `[start, end)` if the tail holds `start` (or starts at `start`): those of the
    /// range that exist; `None` when the log file must be read instead.
    pub(crate) fn range(&self, start: u64, end: u64) -> Option<Vec<Entry>> {
        let first = self.entries.front()?.log_id.index;
        if start < first {
            return None;
        }
        let skip = usize::try_from(start - first).ok()?;
        let take = usize::try_from(end.saturating_sub(start)).unwrap_or(usize::MAX);
        Some(self.entries.iter().skip(skip).take(take).cloned().collect())
    }

    /// Drops entries at `from` and after (a follower's conflicting suffix).
    pub(crate) fn truncate(&mut self, from: u64) {
        while self.entries.back().is_some_and(|e| e.log_id.index >= from) {
            self.entries.pop_back();
        }
    }

    /// Drops entries up to and including `upto` (covered by a snapshot).
    pub(crate) fn purge(&mut self, upto: u64) {
        while self.entries.front().is_some_and(|e| e.log_id.index <= upto) {
            self.entries.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, EntryPayload, LogId};

    use super::*;

    fn entry(index: u64) -> Entry {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Blank,
        }
    }

    fn indices(entries: Option<Vec<Entry>>) -> Option<Vec<u64>> {
        entries.map(|entries| entries.iter().map(|e| e.log_id.index).collect())
    }

    #[test]
    fn entries_not_yet_durable_are_served_and_never_dropped() {
        let mut tail = LogTail::default();
        let n = KEEP as u64 * 2;
        for index in 1..=n {
            tail.push(entry(index), 0);
        }
        // Nothing is durable: all are kept, whatever KEEP says.
        assert_eq!(indices(tail.range(1, 4)), Some(vec![1, 2, 3]));
        assert_eq!(indices(tail.range(n - 1, u64::MAX)), Some(vec![n - 1, n]));
        assert_eq!(indices(tail.range(n + 1, n + 5)), Some(vec![]), "nothing past the last");
        // Once durable, the front beyond KEEP goes, and the file must be read for it.
        tail.push(entry(n + 1), n);
        assert_eq!(tail.range(1, 2), None);
        assert_eq!(
            indices(tail.range(n + 1 - KEEP as u64 + 1, n + 2)).map(|v| v.len()),
            Some(KEEP)
        );
    }

    #[test]
    fn truncation_and_purges_remove_what_they_remove_from_the_file() {
        let mut tail = LogTail::default();
        for index in 1..=10 {
            tail.push(entry(index), 0);
        }
        tail.truncate(8);
        assert_eq!(indices(tail.range(6, 20)), Some(vec![6, 7]));
        tail.purge(3);
        assert_eq!(tail.range(3, 5), None, "purged: ask the file, which has nothing either");
        assert_eq!(indices(tail.range(4, 6)), Some(vec![4, 5]));
        // An append after the truncation continues the tail.
        tail.push(entry(8), 0);
        assert_eq!(indices(tail.range(7, 9)), Some(vec![7, 8]));
    }

    #[test]
    fn an_append_that_does_not_follow_starts_the_tail_again() {
        let mut tail = LogTail::default();
        tail.push(entry(1), 0);
        tail.push(entry(2), 0);
        tail.push(entry(40), 0);
        assert_eq!(tail.range(2, 3), None, "2 is no longer held next to 40");
        assert_eq!(indices(tail.range(40, 41)), Some(vec![40]));
    }
}
