//! The newest log entries in memory, as openraft appended them, so replication sends them
//! without reading them back from the log file and decoding them again.
//!
//! ```text
//!  append ──▶ tail (consecutive indices, ending at the last appended) ──▶ writer: fsync
//!  replication ◀── entries [start, end) if the tail covers start; else the log file
//! ```
//!
//! A profile of a 3-node cluster under registrations showed the leader decoding every batch
//! it replicated from redb's JSON (with serde's `untagged` buffering on top). openraft 0.9
//! waits for each append's flush before it replicates the entry, so what replication asks
//! for is almost always the newest few entries: exactly what the tail holds.
//!
//! # Correctness
//! - The tail holds consecutive indices ending at the last appended entry, and drops an
//!   entry from its front only once it is durable ([`LogTail::push`]). A range it cannot
//!   serve from its start is read from the file, after the writer has flushed everything
//!   handed to it (`log_store`'s barrier), as before the tail existed.
//! - Truncation and purges apply to the tail as to the file: an entry gone from one is gone
//!   from the other. An append at or below the last index held truncates there first, as
//!   the file's overwrite does.
//! - Memory is bounded: beyond the entries not yet durable, at most [`KEEP`] entries and
//!   [`KEEP_BYTES`] of their encoding.

use std::collections::VecDeque;

use crate::types::Entry;

/// Durable entries kept at most: a caught-up follower is a batch or two behind.
pub(crate) const KEEP: usize = 64;
/// Encoded bytes of durable entries kept at most (a batch can be ~1 MiB).
pub(crate) const KEEP_BYTES: usize = 8 << 20;

/// The newest appended entries, consecutive by index, with their encoded sizes.
#[derive(Debug, Default)]
pub(crate) struct LogTail {
    entries: VecDeque<(Entry, usize)>,
    bytes: usize,
}

impl LogTail {
    /// Appends `entry` (`size` bytes encoded). An entry at or below the last index held
    /// replaces the suffix from its index; one past a gap starts the tail again. Then drops
    /// durable entries from the front beyond [`KEEP`] and [`KEEP_BYTES`].
    pub(crate) fn push(&mut self, entry: Entry, size: usize, durable: u64) {
        let index = entry.log_id.index;
        self.truncate(index);
        if self
            .entries
            .back()
            .is_some_and(|(last, _)| last.log_id.index + 1 != index)
        {
            self.entries.clear();
            self.bytes = 0;
        }
        self.entries.push_back((entry, size));
        self.bytes += size;
        while (self.entries.len() > KEEP || self.bytes > KEEP_BYTES)
            && self.entries.front().is_some_and(|(e, _)| e.log_id.index <= durable)
        {
            self.pop_front();
        }
    }

    fn pop_front(&mut self) {
        if let Some((_, size)) = self.entries.pop_front() {
            self.bytes -= size;
        }
    }

    /// Entries `[start, end)` if the tail holds `start` (or starts at `start`): those of the
    /// range that exist; `None` when the log file must be read instead.
    pub(crate) fn range(&self, start: u64, end: u64) -> Option<Vec<Entry>> {
        let first = self.entries.front()?.0.log_id.index;
        if start < first {
            return None;
        }
        let skip = usize::try_from(start - first).ok()?;
        let take = usize::try_from(end.saturating_sub(start)).unwrap_or(usize::MAX);
        Some(
            self.entries
                .iter()
                .skip(skip)
                .take(take)
                .map(|(entry, _)| entry.clone())
                .collect(),
        )
    }

    /// Drops entries at `from` and after (a follower's conflicting suffix).
    pub(crate) fn truncate(&mut self, from: u64) {
        while self.entries.back().is_some_and(|(e, _)| e.log_id.index >= from) {
            if let Some((_, size)) = self.entries.pop_back() {
                self.bytes -= size;
            }
        }
    }

    /// Drops entries up to and including `upto` (covered by a snapshot).
    pub(crate) fn purge(&mut self, upto: u64) {
        while self.entries.front().is_some_and(|(e, _)| e.log_id.index <= upto) {
            self.pop_front();
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
            tail.push(entry(index), 1, 0);
        }
        // Nothing is durable: all are kept, whatever KEEP says.
        assert_eq!(indices(tail.range(1, 4)), Some(vec![1, 2, 3]));
        assert_eq!(indices(tail.range(n - 1, u64::MAX)), Some(vec![n - 1, n]));
        assert_eq!(indices(tail.range(n + 1, n + 5)), Some(vec![]), "nothing past the last");
        // Once durable, the front beyond KEEP goes, and the file must be read for it.
        tail.push(entry(n + 1), 1, n);
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
            tail.push(entry(index), 1, 0);
        }
        tail.truncate(8);
        assert_eq!(indices(tail.range(6, 20)), Some(vec![6, 7]));
        tail.purge(3);
        assert_eq!(tail.range(3, 5), None, "purged: ask the file, which has nothing either");
        assert_eq!(indices(tail.range(4, 6)), Some(vec![4, 5]));
        // An append after the truncation continues the tail.
        tail.push(entry(8), 1, 0);
        assert_eq!(indices(tail.range(7, 9)), Some(vec![7, 8]));
    }

    #[test]
    fn an_append_that_does_not_follow_starts_the_tail_again() {
        let mut tail = LogTail::default();
        tail.push(entry(1), 1, 0);
        tail.push(entry(2), 1, 0);
        tail.push(entry(40), 1, 0);
        assert_eq!(tail.range(2, 3), None, "2 is no longer held next to 40");
        assert_eq!(indices(tail.range(40, 41)), Some(vec![40]));
    }

    #[test]
    fn an_overwrite_replaces_the_suffix_and_bytes_bound_the_durable_part() {
        let mut tail = LogTail::default();
        for index in 1..=5 {
            tail.push(entry(index), 1, 0);
        }
        tail.push(entry(3), 1, 0);
        assert_eq!(indices(tail.range(1, 10)), Some(vec![1, 2, 3]), "4 and 5 were replaced");
        // Two durable entries of half the byte bound each, then a third: the first goes.
        let mut tail = LogTail::default();
        tail.push(entry(1), KEEP_BYTES / 2, 0);
        tail.push(entry(2), KEEP_BYTES / 2, 0);
        tail.push(entry(3), 1, 2);
        assert_eq!(tail.range(1, 4), None);
        assert_eq!(indices(tail.range(2, 4)), Some(vec![2, 3]));
    }
}
