//! One watched scope's broadcast log (SPEC W4): the frames of one service or one namespace,
//! encoded once, appended once, read by every watcher of the scope with its own cursor.
//!
//! ```text
//!   seq:      oldest ─────────────────────────────▶ head
//!   frames:  [f7|f8|f9|f10]        (at most `bound`; a slot is dropped once every
//!                ▲      ▲           watcher that was subscribed when it was appended read it)
//!   cursors: slow=8   fast=10      a cursor below `oldest` has lost frames: it lagged
//! ```
//!
//! Appending is O(1) whatever the number of watchers: it takes the list of waiting watchers'
//! wakers under the log's lock and wakes them after releasing it, instead of taking one mutex
//! and one notification per watcher. A watcher reads and, if there is nothing to read,
//! registers its waker under that same lock, so no append can fall between the two. A watcher that falls
//! `bound` frames behind finds its next frame evicted: it is *lagged*, which is exactly the
//! old per-watcher queue overflowing, and it ends with a single `resync`.
//!
//! A watcher is only an id: its cursor lives in the log's `watchers` map, under the log's
//! lock, and a watcher missing from the map has been cut off (lagged, or the topic was
//! reset). Resyncs are counted only where watchers are cut: one lagged watcher
//! (`Log::cut`), or all of them when the topic ends with `resync`.
//!
//! # Correctness
//! - A watcher registers one waker per wake round, the one of the task that polls it: a
//!   subscription must be polled from a single task (hyper polls a response body from its
//!   connection's task). Polling it from several tasks would need `will_wake` checks.
//! - A watcher's cursor starts at `head` when it subscribes, under the same lock as appends,
//!   so it reads exactly the frames appended after its subscription.
//! - Each slot counts the watchers that still have to read it; a watcher that leaves or is
//!   cut releases the slots it has not read, so a read frame is freed as soon as the slowest
//!   reader has it, and the log never holds more than `bound` frames.
//! - A watcher is cut at most once (it leaves the map), so each lagged or reset watcher
//!   counts one resync, whether its own read or the hub's stats found it lagged.
//! - Coalescing (a watcher [`COALESCE_BEHIND`] frames behind): the read hands out the
//!   backlog's updates without taking anything; the watcher encodes them outside the lock and
//!   gives the frames back with [`Topic::take_coalesced`], which re-checks that its cursor is
//!   still at the backlog's start before moving it to the end and releasing each slot once.
//!   Slots never change once appended and sequence numbers never repeat, so `(from, to)`
//!   names one backlog forever: the last coalesced one is kept and handed to every watcher
//!   found at the same place (encoded once). A coalesced update spans the first update's
//!   `prev_revision` to the last one's revision: a client whose view lies strictly inside
//!   that run sees a gap and resnapshots (never wrong data); a live watcher's view is always
//!   at its cursor, the run's start.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::Waker;

use bytes::Bytes;
use muster_core::ServiceUpdate;

/// How a topic ended.
#[derive(Debug, Clone)]
enum End {
    /// After the frames already appended (the server is stopping).
    Closing(Bytes),
    /// At once, dropping what is unread (the state was replaced).
    Resync(Bytes),
}

/// One appended frame (and the update it encodes, for coalescing) and how many watchers still
/// have to read it.
#[derive(Debug)]
struct Slot {
    frame: Option<(Bytes, Arc<ServiceUpdate>)>,
    unread_by: usize,
}

/// A watcher this many frames behind gets its backlog coalesced (SPEC K1): one update per
/// service instead of every superseded one. Below it a watcher reads the shared frames one
/// by one, so a short burst (a few updates landing between two polls of every watcher) costs
/// no per-watcher encoding; at 8 the backlog is a lag worth saving the client from. With a
/// `bound` below 8 a watcher is cut before it gets here, and never coalesces.
pub(crate) const COALESCE_BEHIND: u64 = 8;

/// The last coalesced backlog, shared by the watchers at the same place (encode once).
#[derive(Debug)]
struct Coalesced {
    from: u64,
    to: u64,
    frames: Arc<[Bytes]>,
}

/// A watcher's position in the log.
#[derive(Debug)]
struct Cursor {
    /// The sequence number of the next frame to read.
    next: u64,
    /// The log's wake round in which this watcher's waker is registered (see `Log::round`).
    /// A watcher is polled from one task (its connection's), so one waker per round is
    /// enough.
    registered_in: u64,
}

#[derive(Debug)]
struct Log {
    slots: VecDeque<Slot>,
    /// The sequence number the next frame gets.
    head: u64,
    end: Option<End>,
    /// The watchers still following the log, by id; a cut watcher is no longer here.
    watchers: BTreeMap<u64, Cursor>,
    /// The id the next watcher gets.
    next_id: u64,
    /// The wakers of the watchers waiting for the next append or end.
    waiting: Vec<Waker>,
    /// Counts the times `waiting` was emptied and woken, from 1: a watcher registers at most
    /// once per round, however often it is polled.
    round: u64,
    /// The hub's counts of watchers cut off, shared by all its topics.
    cuts: Arc<CutCounts>,
    /// The last coalesced backlog (see [`Read::Behind`]).
    coalesced: Option<Coalesced>,
}

/// Watchers cut off, counted by the topics that cut them (the hub's stats read them).
#[derive(Debug, Default)]
pub(crate) struct CutCounts {
    /// Watchers told to resync: lagged, or their topic's state was replaced.
    pub(crate) resyncs: AtomicU64,
    /// Of those, the slow consumers: watchers that fell a whole log behind.
    pub(crate) slow_consumers: AtomicU64,
}

impl Log {
    /// Empties `waiting`; wake them once the lock is released.
    fn take_waiting(&mut self) -> Vec<Waker> {
        self.round += 1;
        std::mem::take(&mut self.waiting)
    }

    fn oldest(&self) -> u64 {
        self.head - self.slots.len() as u64
    }

    /// Removes watcher `id` if it is still here, releasing the frames it has not read.
    fn remove(&mut self, id: u64) -> bool {
        let Some(cursor) = self.watchers.remove(&id) else {
            return false;
        };
        self.release(cursor.next, self.head);
        true
    }

    /// One watcher no longer needs the frames `from..to`: frees those nobody else still has
    /// to read.
    fn release(&mut self, from: u64, to: u64) {
        let oldest = self.oldest();
        for seq in from.max(oldest)..to {
            let slot = &mut self.slots[(seq - oldest) as usize];
            slot.unread_by = slot.unread_by.saturating_sub(1);
            if slot.unread_by == 0 {
                slot.frame = None;
            }
        }
        self.trim();
    }

    /// Cuts a lagged watcher off, counting its resync the first time.
    fn cut(&mut self, id: u64) {
        if self.remove(id) {
            self.cuts.resyncs.fetch_add(1, Ordering::Relaxed);
            self.cuts.slow_consumers.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn trim(&mut self) {
        while self.slots.front().is_some_and(|slot| slot.frame.is_none()) {
            self.slots.pop_front();
        }
    }
}

/// What a read found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Read {
    /// The next frame.
    Frame(Bytes),
    /// The watcher is [`COALESCE_BEHIND`] frames or more behind: its backlog coalesced, one
    /// frame per service, already taken (its cursor is at the head).
    Coalesced(Arc<[Bytes]>),
    /// The watcher is [`COALESCE_BEHIND`] frames or more behind and nobody coalesced this
    /// backlog yet: encode `updates` with [`coalesce`](crate::coalesce::coalesce) and hand the frames back with
    /// [`Topic::take_coalesced`]. Nothing was taken yet.
    Behind {
        /// The backlog's first sequence number.
        from: u64,
        /// Its end (exclusive).
        to: u64,
        /// Its updates, oldest first.
        updates: Vec<Arc<ServiceUpdate>>,
    },
    /// Nothing new yet.
    Empty,
    /// The watcher fell more than `bound` frames behind and was cut off (its resync is
    /// counted): it must resync.
    Lagged,
    /// The topic ended: send this last frame and stop.
    Last(Bytes),
}

/// What the hub needs to know about a topic for its stats.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Backlog {
    /// Watchers still following the topic.
    pub(crate) watchers: usize,
    /// Frames they have yet to read, in total.
    pub(crate) queued: usize,
    /// The largest backlog of one of them.
    pub(crate) max_queued: usize,
    /// The bytes of the frames held for them.
    pub(crate) bytes: usize,
}

/// A bounded broadcast log of encoded frames.
#[derive(Debug)]
pub(crate) struct Topic {
    log: Mutex<Log>,
    bound: usize,
}

impl Topic {
    /// A topic keeping at most `bound` unread frames (at least one), counting the watchers it
    /// cuts off in `cuts`.
    pub(crate) fn new(bound: usize, cuts: Arc<CutCounts>) -> Topic {
        Topic {
            log: Mutex::new(Log {
                slots: VecDeque::new(),
                head: 0,
                end: None,
                watchers: BTreeMap::new(),
                next_id: 0,
                waiting: Vec::new(),
                round: 1,
                cuts,
                coalesced: None,
            }),
            bound: bound.max(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a watcher, reading from the next frame appended; returns its id.
    pub(crate) fn join(&self) -> u64 {
        let mut log = self.lock();
        let id = log.next_id;
        log.next_id += 1;
        let cursor = Cursor {
            next: log.head,
            registered_in: 0,
        };
        log.watchers.insert(id, cursor);
        id
    }

    /// Removes watcher `id`, releasing the frames it has not read; true if none is left.
    pub(crate) fn leave(&self, id: u64) -> bool {
        let mut log = self.lock();
        log.remove(id);
        log.watchers.is_empty()
    }

    /// Appends a frame for every current watcher, evicting the oldest at the bound, and
    /// wakes them. Does nothing once ended.
    pub(crate) fn append(&self, frame: Bytes, update: Arc<ServiceUpdate>) {
        let mut log = self.lock();
        if log.end.is_some() || log.watchers.is_empty() {
            return;
        }
        if log.slots.len() >= self.bound {
            log.slots.pop_front();
        }
        let unread_by = log.watchers.len();
        log.slots.push_back(Slot {
            frame: Some((frame, update)),
            unread_by,
        });
        log.head += 1;
        let waiting = log.take_waiting();
        drop(log);
        waiting.into_iter().for_each(Waker::wake);
    }

    /// Ends the topic: `closing` after what each watcher has left to read. The first end
    /// wins.
    pub(crate) fn end_with_closing(&self, closing: Bytes) {
        self.end(End::Closing(closing));
    }

    /// Ends the topic with `resync` at once: every watcher still here is cut off (and
    /// counted) and what is unread is dropped. The first end wins.
    pub(crate) fn end_with_resync(&self, resync: Bytes) {
        self.end(End::Resync(resync));
    }

    fn end(&self, end: End) {
        let mut log = self.lock();
        if log.end.is_none() {
            if matches!(end, End::Resync(_)) {
                let cut = log.watchers.len() as u64;
                log.cuts.resyncs.fetch_add(cut, Ordering::Relaxed);
                log.watchers.clear();
                log.slots.clear();
                log.coalesced = None;
            }
            log.end = Some(end);
        }
        let waiting = log.take_waiting();
        drop(log);
        waiting.into_iter().for_each(Waker::wake);
    }

    /// The next frame for watcher `id`, advancing its cursor; with a `waker`, registers it to
    /// be woken by the next append or end when there is nothing to read.
    pub(crate) fn read(&self, id: u64, waker: Option<&Waker>) -> Read {
        let mut guard = self.lock();
        let log = &mut *guard;
        if let Some(End::Resync(last)) = &log.end {
            return Read::Last(last.clone());
        }
        let oldest = log.oldest();
        let Some(cursor) = log.watchers.get_mut(&id) else {
            return Read::Lagged;
        };
        let next = cursor.next;
        if next < oldest {
            log.cut(id);
            return Read::Lagged;
        }
        if log.head - next >= COALESCE_BEHIND {
            let head = log.head;
            if let Some(coalesced) = &log.coalesced
                && (coalesced.from, coalesced.to) == (next, head)
            {
                let frames = Arc::clone(&coalesced.frames);
                cursor.next = head;
                log.release(next, head);
                return Read::Coalesced(frames);
            }
            let updates = log
                .slots
                .range((next - oldest) as usize..)
                .map(|slot| slot.frame.as_ref().map(|(_, update)| Arc::clone(update)))
                .collect::<Option<Vec<_>>>();
            // Every watcher subscribed before an append counts in its slot's `unread_by`, so
            // the slots from this watcher's cursor on are all still there.
            return updates.map_or(Read::Lagged, |updates| Read::Behind {
                from: next,
                to: head,
                updates,
            });
        }
        if next < log.head {
            cursor.next = next + 1;
            let slot = &mut log.slots[(next - oldest) as usize];
            slot.unread_by = slot.unread_by.saturating_sub(1);
            let frame = if slot.unread_by == 0 {
                slot.frame.take().map(|(frame, _)| frame)
            } else {
                slot.frame.as_ref().map(|(frame, _)| frame.clone())
            };
            log.trim();
            // Every watcher subscribed before the append counts in `unread_by`, so the
            // frame is still there for this one.
            return frame.map_or(Read::Lagged, Read::Frame);
        }
        if let Some(End::Closing(last)) = &log.end {
            return Read::Last(last.clone());
        }
        if let Some(waker) = waker
            && std::mem::replace(&mut cursor.registered_in, log.round) != log.round
        {
            log.waiting.push(waker.clone());
        }
        Read::Empty
    }

    /// Watcher `id` coalesced its backlog `from..to` (from [`Read::Behind`]) into `frames`:
    /// takes the backlog and keeps the frames for the next watcher at the same place. `None`
    /// if the watcher was cut off meanwhile (it must resync) or is not at `from`.
    pub(crate) fn take_coalesced(&self, id: u64, from: u64, to: u64, frames: Arc<[Bytes]>) -> Option<Arc<[Bytes]>> {
        let mut guard = self.lock();
        let log = &mut *guard;
        // Slots of `from..to` evicted meanwhile do not matter: the frames were built from
        // the updates taken with the backlog, and `release` skips what is gone.
        let cursor = log.watchers.get_mut(&id)?;
        if cursor.next != from {
            return None;
        }
        cursor.next = to;
        log.release(from, to);
        log.coalesced = Some(Coalesced {
            from,
            to,
            frames: Arc::clone(&frames),
        });
        Some(frames)
    }

    /// Wakes every waiting watcher (progress ticks).
    pub(crate) fn wake_all(&self) {
        let waiting = self.lock().take_waiting();
        waiting.into_iter().for_each(Waker::wake);
    }

    /// The watchers' backlogs; lagged watchers are cut (and counted) here, so a watcher
    /// that stopped reading leaves the stats even before it notices.
    pub(crate) fn backlog(&self) -> Backlog {
        let mut log = self.lock();
        let oldest = log.oldest();
        let lagged: Vec<u64> = log
            .watchers
            .iter()
            .filter(|(_, cursor)| cursor.next < oldest)
            .map(|(&id, _)| id)
            .collect();
        for id in lagged {
            log.cut(id);
        }
        let mut backlog = Backlog::default();
        for cursor in log.watchers.values() {
            let queued = (log.head - cursor.next) as usize;
            backlog.watchers += 1;
            backlog.queued += queued;
            backlog.max_queued = backlog.max_queued.max(queued);
        }
        backlog.bytes = log
            .slots
            .iter()
            .filter_map(|slot| slot.frame.as_ref())
            .map(|(frame, _)| frame.len())
            .sum();
        backlog
    }
}

#[cfg(test)]
#[path = "topic_tests.rs"]
mod tests;
