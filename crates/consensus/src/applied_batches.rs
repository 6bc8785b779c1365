//! Exactly-once application of retried batches (SPEC R6): which batch each proposing session
//! applied last, and what it gave.
//!
//! ```text
//!  follower batcher ──batch {origin 2, session s, seq 7}──▶ leader commits at index 40
//!         ▲ reply lost                                          │ applied: record (2, s) → 7, verdicts
//!         └──retry, same id──▶ leader (or the next one) commits again at index 41
//!                                                               │ seen (2, s) at 7: answer the recorded
//!                                                               ▼ verdicts, apply nothing
//! ```
//!
//! # Correctness
//! - A node's batcher has one batch in flight at a time and numbers them from 1 per session,
//!   so a batch with a higher number than the session's last applied one is new; an equal
//!   number is a retry of that batch (its verdicts are answered again); a lower number is a
//!   late copy of a batch the proposer already stopped waiting for (it answered `no_quorum`,
//!   "may or may not commit"): it is skipped, so it is applied at most once too.
//! - The table is part of the replicated state: every replica applies the same entries, so
//!   every replica holds the same table, and it is written into every snapshot with the
//!   registry, at the same cut.
//! - Memory is bounded by count and by time: [`MAX_SESSIONS`] sessions, the least recently
//!   applied one forgotten first; and a session's verdicts are let go [`KEEP_VERDICTS_MS`]
//!   after its newest batch, by the log's own clock (the newest `at_ms` of the batch being
//!   applied, the same on every replica), once [`KEEP_VERDICTS_ENTRIES`] entries have passed
//!   too (a proposer's clock may be off). Its number is kept, so a late copy is still
//!   stale; a retry after that finds no verdicts and is answered as stale too, which is safe
//!   because the proposer stopped waiting one write timeout (5 s) after it proposed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::types::{BatchId, Outcome};

/// Sessions remembered: 1,024. A session is one start of one node; a thousand restarts
/// within one write timeout is far beyond any real cluster, and each session costs one
/// batch's verdicts.
pub(crate) const MAX_SESSIONS: usize = 1024;

/// How long a session's newest verdicts are kept after it was proposed: twelve write
/// timeouts.
pub(crate) const KEEP_VERDICTS_MS: u64 = 60_000;

/// And how many log entries past it, at least: the time is the proposers' wall clocks, so a
/// node whose clock runs minutes ahead must not take a retry's verdicts away while the retry
/// can still come (one write timeout: far fewer entries than this at any write rate here).
pub(crate) const KEEP_VERDICTS_ENTRIES: u64 = 100_000;

/// What the state machine must do with a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seen {
    /// Not applied before: apply it.
    New,
    /// The session's newest batch again: answer these verdicts, apply nothing.
    Retry(Outcome),
    /// Older than the session's newest batch: apply nothing; nobody waits for it.
    Stale,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Last {
    origin: u64,
    session: u64,
    seq: u64,
    /// The log index it was applied at: the eviction order.
    log_index: u64,
    /// When it was proposed (its newest `at_ms`; 0 in snapshots written before this).
    #[serde(default)]
    at_ms: u64,
    outcome: Outcome,
    /// Whether `outcome` was let go (then it is empty).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    dropped: bool,
}

/// The newest batch applied per (origin, session). Stored as a list (JSON keys are strings).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Vec<Last>", into = "Vec<Last>")]
pub(crate) struct AppliedBatches {
    sessions: BTreeMap<(u64, u64), Last>,
}

impl From<Vec<Last>> for AppliedBatches {
    fn from(list: Vec<Last>) -> AppliedBatches {
        let sessions = list
            .into_iter()
            .map(|last| ((last.origin, last.session), last))
            .collect();
        AppliedBatches { sessions }
    }
}

impl From<AppliedBatches> for Vec<Last> {
    fn from(batches: AppliedBatches) -> Vec<Last> {
        batches.sessions.into_values().collect()
    }
}

impl AppliedBatches {
    /// How a batch with `id` stands.
    pub(crate) fn seen(&self, id: BatchId) -> Seen {
        match self.sessions.get(&(id.origin, id.session)) {
            None => Seen::New,
            Some(last) if id.seq > last.seq => Seen::New,
            Some(last) if id.seq == last.seq && !last.dropped => Seen::Retry(last.outcome.clone()),
            Some(_) => Seen::Stale,
        }
    }

    /// Records a new batch's verdicts, applied at `log_index` and proposed at `at_ms`, and
    /// lets go of every session's verdicts older than [`KEEP_VERDICTS_MS`] by that clock.
    pub(crate) fn record(&mut self, id: BatchId, log_index: u64, at_ms: u64, outcome: Outcome) {
        for last in self.sessions.values_mut() {
            let old = at_ms.saturating_sub(last.at_ms) > KEEP_VERDICTS_MS
                && log_index.saturating_sub(last.log_index) > KEEP_VERDICTS_ENTRIES;
            if !last.dropped && old {
                last.outcome = Outcome(Vec::new());
                last.dropped = true;
            }
        }
        let last = Last {
            origin: id.origin,
            session: id.session,
            seq: id.seq,
            log_index,
            at_ms,
            outcome,
            dropped: false,
        };
        self.sessions.insert((id.origin, id.session), last);
        if self.sessions.len() > MAX_SESSIONS {
            let oldest = self
                .sessions
                .iter()
                .min_by_key(|(_, last)| last.log_index)
                .map(|(session, _)| *session);
            if let Some(oldest) = oldest {
                self.sessions.remove(&oldest);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(session: u64, seq: u64) -> BatchId {
        BatchId {
            origin: 2,
            session,
            seq,
        }
    }

    fn outcome(n: usize) -> Outcome {
        Outcome(vec![Err(muster_core::Rejection::NotFound { subject: "x".into() }); n])
    }

    #[test]
    fn a_retry_of_the_newest_batch_answers_its_verdicts_and_older_ones_are_stale() {
        let mut batches = AppliedBatches::default();
        assert_eq!(batches.seen(id(9, 1)), Seen::New);
        batches.record(id(9, 1), 10, 0, outcome(1));
        assert_eq!(batches.seen(id(9, 1)), Seen::Retry(outcome(1)));
        batches.record(id(9, 2), 11, 0, outcome(2));
        assert_eq!(batches.seen(id(9, 2)), Seen::Retry(outcome(2)));
        assert_eq!(batches.seen(id(9, 1)), Seen::Stale);
        // Another session of the same node starts its own numbering.
        assert_eq!(batches.seen(id(10, 1)), Seen::New);
    }

    #[test]
    fn the_least_recently_applied_session_is_forgotten_beyond_the_bound() {
        let mut batches = AppliedBatches::default();
        for session in 0..=MAX_SESSIONS as u64 {
            batches.record(id(session, 1), 100 + session, 0, outcome(0));
        }
        assert_eq!(batches.sessions.len(), MAX_SESSIONS);
        assert_eq!(batches.seen(id(0, 1)), Seen::New, "the oldest session is gone");
        assert_eq!(batches.seen(id(1, 1)), Seen::Retry(outcome(0)));
    }

    #[test]
    fn a_sessions_verdicts_are_let_go_by_the_logs_clock_and_its_late_copies_stay_stale() {
        // Trace: sessions of nodes restarted long ago each held a whole batch's verdicts
        // (up to 1,024 of them) until a thousand newer sessions pushed them out.
        let mut batches = AppliedBatches::default();
        let far = 11 + KEEP_VERDICTS_ENTRIES;
        batches.record(id(1, 7), 10, 1_000, outcome(1_024));
        batches.record(id(2, 1), far, 1_000 + KEEP_VERDICTS_MS, outcome(1));
        assert_eq!(
            batches.seen(id(1, 7)),
            Seen::Retry(outcome(1_024)),
            "still within the window"
        );
        // A proposer whose clock runs far ahead: the time says old, the log does not.
        batches.record(id(3, 1), 12, 1_000_000_000, outcome(1));
        assert_eq!(
            batches.seen(id(1, 7)),
            Seen::Retry(outcome(1_024)),
            "a clock alone lets nothing go"
        );
        batches.record(id(2, 2), far + 1, 1_001 + KEEP_VERDICTS_MS, outcome(1));
        assert_eq!(
            batches.seen(id(1, 7)),
            Seen::Stale,
            "its verdicts are gone, nobody waits"
        );
        assert_eq!(batches.seen(id(1, 6)), Seen::Stale);
        assert_eq!(batches.seen(id(1, 8)), Seen::New);
        let session = &batches.sessions[&(2, 1)]; // origin 2, session 1
        assert!(session.outcome.0.is_empty() && session.dropped);
        // The same on a replica that restored the table from a snapshot.
        let restored: AppliedBatches = serde_json::from_slice(&serde_json::to_vec(&batches).unwrap()).unwrap();
        assert_eq!(restored, batches);
        // A snapshot written before the clock was kept still reads (its sessions count as old).
        let legacy = r#"[{"origin":2,"session":3,"seq":4,"log_index":5,"outcome":[]}]"#;
        let legacy: AppliedBatches = serde_json::from_str(legacy).unwrap();
        assert_eq!(legacy.seen(id(3, 5)), Seen::New);
    }
}
