//! How many log entries one AppendEntries to a follower carries (SPEC R5: a slow follower
//! always catches up).
//!
//! openraft 0.9 sends up to `max_payload_entries` entries per AppendEntries and gives each
//! request one heartbeat interval (100 ms) to be answered; on a timeout it sends the same
//! range again at once. A follower that needs longer than that for a full batch — a debug
//! build decoding 300 entries of 1,024 registrations, a throttled CPU, a slow disk — never
//! answers in time, and the batch is resent forever. Nor is a batch bounded in bytes:
//! 300 entries of 1,024 registrations can exceed the cluster listener's body limit
//! ([`MAX_RPC_BYTES`]), and such a request is refused every time.
//!
//! The pacer sits in front of each peer connection and bounds both. It answers openraft
//! with `PayloadTooLarge` and an entry hint (openraft's own mechanism for a transport that
//! cannot carry a request), so openraft sends a shorter range at once:
//!
//! ```text
//!  openraft ── append(n entries) ──▶ admit(n):  n > limit?        ──▶ Shrink(limit)
//!                                    fits(n, bytes): too many bytes? ─▶ Shrink(n · max/bytes)
//!                                    send ── answered ──▶ limit grows by a quarter (≤ MAX)
//!                                         └─ dropped (openraft's timeout) ──▶ limit halves
//! ```
//!
//! A send openraft dropped is seen at the next call (nothing is awaited that could see it
//! earlier): the connection objects live as long as the replication stream.
//!
//! # Correctness
//!
//! - An admitted request of more than one entry is at most `max_bytes` long; a single entry
//!   is always admitted (it cannot be split), so progress never stops on the pacer.
//! - The limit is always in `1..=MAX_APPEND_ENTRIES`; a follower that keeps timing out is
//!   sent one entry at a time, and each entry it does append is never resent (openraft
//!   resends from the follower's matching index), so it catches up at its own pace.
//! - Pure: no clock, no I/O; the transport tells it what happened.

/// Entries per AppendEntries at most: openraft's default `max_payload_entries`, kept (and
/// set explicitly in the node's configuration, which must agree). At 1,024 registrations
/// per entry that is 300k registrations a request, beyond what a healthy follower needs.
pub const MAX_APPEND_ENTRIES: u64 = 300;

/// The cluster listener's body limit: an append of many entries, or a snapshot chunk
/// ([`crate::SNAPSHOT_CHUNK_BYTES`] raw behind a small head). Requests above it are refused
/// with 413 before Raft sees them.
pub const MAX_RPC_BYTES: usize = 64 * 1024 * 1024;

/// Bytes per AppendEntries of more than one entry: an eighth of [`MAX_RPC_BYTES`], so a
/// request stays far inside the listener's limit, and about 70 ms on a 1 Gbit/s link — inside
/// the 100 ms openraft allows an append, which the time rule below would enforce anyway.
pub const MAX_APPEND_BYTES: usize = MAX_RPC_BYTES / 8;

// A request of MAX_APPEND_BYTES and its JSON frame fit the listener with room to spare.
const _: () = assert!(MAX_APPEND_BYTES + 1024 * 1024 <= MAX_RPC_BYTES);

/// What to do with an append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pace {
    /// Send it.
    Send,
    /// Refuse it and ask openraft for at most this many entries (≥ 1).
    Shrink(u64),
}

/// Paces the appends to one follower (see the module doc).
#[derive(Debug, Clone)]
pub struct AppendPacer {
    limit: u64,
    max_bytes: usize,
    /// Entries of the send in flight: still set at the next call when openraft dropped it.
    in_flight: Option<u64>,
}

impl Default for AppendPacer {
    fn default() -> Self {
        AppendPacer::new(MAX_APPEND_BYTES)
    }
}

impl AppendPacer {
    /// A pacer that admits full batches of at most `max_bytes` (more for a single entry).
    pub fn new(max_bytes: usize) -> AppendPacer {
        AppendPacer {
            limit: MAX_APPEND_ENTRIES,
            max_bytes,
            in_flight: None,
        }
    }

    /// The entries a request may carry now.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Before encoding a request of `entries`: a send still marked in flight was dropped by
    /// openraft's timeout, so the follower needs smaller batches; over the limit, shrink.
    pub fn admit(&mut self, entries: u64) -> Pace {
        if let Some(dropped) = self.in_flight.take() {
            self.limit = (dropped / 2).clamp(1, self.limit);
        }
        if entries > self.limit {
            return Pace::Shrink(self.limit);
        }
        Pace::Send
    }

    /// After encoding the request of `entries` to `bytes`: over the byte bound (and more
    /// than one entry), shrink to the share of entries that fits, and keep that as the
    /// limit; otherwise the send begins.
    pub fn fits(&mut self, entries: u64, bytes: usize) -> Pace {
        if entries > 1 && bytes > self.max_bytes {
            let fitting = (entries as u128 * self.max_bytes as u128 / bytes as u128) as u64;
            self.limit = fitting.clamp(1, entries - 1);
            return Pace::Shrink(self.limit);
        }
        if entries > 0 {
            self.in_flight = Some(entries);
        }
        Pace::Send
    }

    /// The send of `entries` came back (`ok`: with an answer from the follower, whatever it
    /// said; not a transport failure). A full batch answered in time lets the next one grow.
    pub fn answered(&mut self, entries: u64, ok: bool) {
        self.in_flight = None;
        if ok && entries >= self.limit {
            self.limit = (self.limit + self.limit.div_ceil(4)).min(MAX_APPEND_ENTRIES);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Trace (wave-2 notes): a debug-build follower joining at ~5,000 endpoints timed out on
    /// every 300-entry batch, and the same batch was resent forever.
    #[test]
    fn a_batch_dropped_by_the_timeout_halves_the_next_until_one_entry() {
        let mut pacer = AppendPacer::default();
        let mut sent = MAX_APPEND_ENTRIES;
        let mut limits = Vec::new();
        for _ in 0..12 {
            assert_eq!(pacer.admit(sent), Pace::Send);
            assert_eq!(pacer.fits(sent, 1_000), Pace::Send);
            // openraft drops the send (its timeout); the next call sees it.
            match pacer.admit(sent) {
                Pace::Shrink(hint) => sent = hint,
                Pace::Send => panic!("a dropped batch of {sent} was admitted again whole"),
            }
            limits.push(sent);
            if sent == 1 {
                break;
            }
        }
        assert_eq!(limits, vec![150, 75, 37, 18, 9, 4, 2, 1]);
        // One entry is always sent, however often it times out.
        for _ in 0..3 {
            assert_eq!(pacer.admit(1), Pace::Send);
            assert_eq!(pacer.fits(1, 1_000), Pace::Send);
        }
        assert_eq!(pacer.limit(), 1);
    }

    #[test]
    fn answered_full_batches_grow_the_limit_back_to_the_maximum_and_no_further() {
        let mut pacer = AppendPacer::default();
        pacer.fits(10, 100);
        assert_eq!(pacer.admit(10), Pace::Shrink(5));
        let mut rounds = 0;
        while pacer.limit() < MAX_APPEND_ENTRIES {
            let n = pacer.limit();
            assert_eq!(pacer.admit(n), Pace::Send);
            assert_eq!(pacer.fits(n, 100), Pace::Send);
            pacer.answered(n, true);
            rounds += 1;
            assert!(rounds < 100, "the limit stopped growing at {}", pacer.limit());
        }
        pacer.answered(MAX_APPEND_ENTRIES, true);
        assert_eq!(pacer.limit(), MAX_APPEND_ENTRIES);
    }

    #[test]
    fn a_short_batch_or_a_failed_send_does_not_grow_the_limit() {
        let mut pacer = AppendPacer::default();
        pacer.fits(8, 100);
        pacer.admit(1); // 8 dropped: limit 4
        assert_eq!(pacer.limit(), 4);
        pacer.fits(2, 100);
        pacer.answered(2, true);
        assert_eq!(pacer.limit(), 4, "a batch below the limit says nothing of a larger one");
        pacer.fits(4, 100);
        pacer.answered(4, false);
        assert_eq!(pacer.limit(), 4, "an unreachable follower says nothing of its pace");
    }

    /// Trace (wave-2 notes): 1,024 registrations per entry × 300 entries per AppendEntries
    /// can exceed the 64 MiB node-to-node body limit, and such a request is refused forever.
    #[test]
    fn a_request_over_the_byte_bound_shrinks_to_the_share_that_fits() {
        let mut pacer = AppendPacer::new(1_000);
        assert_eq!(pacer.admit(300), Pace::Send);
        assert_eq!(pacer.fits(300, 3_000), Pace::Shrink(100));
        assert_eq!(pacer.admit(300), Pace::Shrink(100), "the shrunk limit is kept");
        assert_eq!(pacer.fits(100, 1_000), Pace::Send);
        // Uneven entries: the share is an estimate, refused again until it fits.
        let mut pacer = AppendPacer::new(1_000);
        assert_eq!(pacer.fits(3, 1_001), Pace::Shrink(2));
        assert_eq!(pacer.fits(2, 1_001), Pace::Shrink(1));
        // One entry cannot be split: it is sent whatever its size.
        assert_eq!(pacer.fits(1, 50_000), Pace::Send);
    }

    #[test]
    fn heartbeats_pass_and_mark_nothing_in_flight() {
        let mut pacer = AppendPacer::default();
        assert_eq!(pacer.fits(0, 200), Pace::Send);
        assert_eq!(
            pacer.admit(MAX_APPEND_ENTRIES),
            Pace::Send,
            "a dropped heartbeat shrinks nothing"
        );
    }
}
