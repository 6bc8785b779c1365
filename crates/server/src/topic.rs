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
//! # Correctness
//! - A watcher registers one waker per wake round, the one of the task that polls it: a
//!   subscription must be polled from a single task (hyper polls a response body from its
//!   connection's task). Polling it from several tasks would need `will_wake` checks.
//! - A watcher's cursor starts at `head` when it subscribes, under the same lock as appends,
//!   so it reads exactly the frames appended after its subscription.
//! - Each slot counts the watchers that still have to read it; a watcher that leaves
//!   releases the slots it has not read, so a read frame is freed as soon as the slowest
//!   reader has it, and the log never holds more than `bound` frames.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::Waker;

use bytes::Bytes;

/// How a topic ended.
#[derive(Debug, Clone)]
enum End {
    /// After the frames already appended (the server is stopping).
    Closing(Bytes),
    /// At once, dropping what is unread (the state was replaced).
    Resync(Bytes),
}

/// One appended frame and how many watchers still have to read it.
#[derive(Debug)]
struct Slot {
    frame: Option<Bytes>,
    unread_by: usize,
}

/// A watcher's position, shared with the hub so that stats can see its backlog.
#[derive(Debug)]
pub(crate) struct Cursor {
    /// The watcher's id in its topic.
    id: u64,
    /// The sequence number of the next frame to read.
    next: AtomicU64,
    /// Set once the watcher has been counted as lagged (by itself or by the hub's stats).
    cut: AtomicBool,
    /// The log's wake round in which this watcher's waker is registered (see `Log::round`).
    /// A watcher is polled from one task (its connection's), so one waker per round is
    /// enough.
    registered_in: AtomicU64,
}

impl Cursor {
    fn is_cut(&self) -> bool {
        self.cut.load(Ordering::Acquire)
    }
}

#[derive(Debug)]
struct Log {
    slots: VecDeque<Slot>,
    /// The sequence number the next frame gets.
    head: u64,
    end: Option<End>,
    watchers: BTreeMap<u64, Arc<Cursor>>,
    /// The wakers of the watchers waiting for the next append or end.
    waiting: Vec<Waker>,
    /// Counts the times `waiting` was emptied and woken, from 1: a watcher registers at most
    /// once per round, however often it is polled.
    round: u64,
}

impl Log {
    fn new() -> Log {
        Log {
            slots: VecDeque::new(),
            head: 0,
            end: None,
            watchers: BTreeMap::new(),
            waiting: Vec::new(),
            round: 1,
        }
    }

    /// Empties `waiting`; wake them once the lock is released.
    fn take_waiting(&mut self) -> Vec<Waker> {
        self.round += 1;
        std::mem::take(&mut self.waiting)
    }

    fn oldest(&self) -> u64 {
        self.head - self.slots.len() as u64
    }

    fn release(&mut self, from: u64) {
        let oldest = self.oldest();
        for seq in from.max(oldest)..self.head {
            let slot = &mut self.slots[(seq - oldest) as usize];
            slot.unread_by = slot.unread_by.saturating_sub(1);
            if slot.unread_by == 0 {
                slot.frame = None;
            }
        }
        self.trim();
    }

    fn trim(&mut self) {
        while self.slots.front().is_some_and(|slot| slot.frame.is_none()) {
            self.slots.pop_front();
        }
    }

    /// Cuts a lagged watcher off: it stops counting as a reader. True the first time.
    fn cut(&mut self, cursor: &Cursor) -> bool {
        if cursor.cut.swap(true, Ordering::AcqRel) {
            return false;
        }
        if self.watchers.remove(&cursor.id).is_some() {
            self.release(cursor.next.load(Ordering::Acquire));
        }
        true
    }
}

/// What a read found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Read {
    /// The next frame.
    Frame(Bytes),
    /// Nothing new yet.
    Empty,
    /// The watcher fell more than `bound` frames behind: it must resync. `newly` is true for
    /// the read that found out (the hub counts one resync per watcher).
    Lagged {
        /// First found by this read.
        newly: bool,
    },
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
    /// Watchers found lagged (and cut) by this look.
    pub(crate) newly_cut: usize,
}

/// A bounded broadcast log of encoded frames.
#[derive(Debug)]
pub(crate) struct Topic {
    log: Mutex<Log>,
    bound: usize,
}

impl Topic {
    /// A topic keeping at most `bound` unread frames (at least one).
    pub(crate) fn new(bound: usize) -> Topic {
        Topic {
            log: Mutex::new(Log::new()),
            bound: bound.max(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds watcher `id`, reading from the next frame appended.
    pub(crate) fn join(&self, id: u64) -> Arc<Cursor> {
        let mut log = self.lock();
        let cursor = Arc::new(Cursor {
            id,
            next: AtomicU64::new(log.head),
            cut: AtomicBool::new(false),
            registered_in: AtomicU64::new(0),
        });
        log.watchers.insert(id, Arc::clone(&cursor));
        cursor
    }

    /// Removes the watcher, releasing the frames it has not read; true if none is left.
    pub(crate) fn leave(&self, cursor: &Cursor) -> bool {
        let mut log = self.lock();
        if let Some(cursor) = log.watchers.remove(&cursor.id) {
            log.release(cursor.next.load(Ordering::Acquire));
        }
        log.watchers.is_empty()
    }

    /// Appends a frame for every current watcher, evicting the oldest at the bound, and
    /// wakes them. Does nothing once ended.
    pub(crate) fn append(&self, frame: Bytes) {
        let mut log = self.lock();
        if log.end.is_some() || log.watchers.is_empty() {
            return;
        }
        if log.slots.len() >= self.bound {
            log.slots.pop_front();
        }
        let unread_by = log.watchers.len();
        log.slots.push_back(Slot {
            frame: Some(frame),
            unread_by,
        });
        log.head += 1;
        let waiting = log.take_waiting();
        drop(log);
        waiting.into_iter().for_each(Waker::wake);
    }

    /// Ends the topic: `closing` after what each watcher has left to read, or `resync` at
    /// once. The first end wins.
    pub(crate) fn end_with_closing(&self, closing: Bytes) {
        self.end(End::Closing(closing));
    }

    /// See [`Topic::end_with_closing`].
    pub(crate) fn end_with_resync(&self, resync: Bytes) {
        self.end(End::Resync(resync));
    }

    fn end(&self, end: End) {
        let mut log = self.lock();
        if log.end.is_none() {
            log.end = Some(end);
        }
        let waiting = log.take_waiting();
        drop(log);
        waiting.into_iter().for_each(Waker::wake);
    }

    /// The next frame for `cursor`, advancing it; with a `waker`, registers it to be woken
    /// by the next append or end when there is nothing to read.
    pub(crate) fn read(&self, cursor: &Cursor, waker: Option<&Waker>) -> Read {
        let mut log = self.lock();
        if let Some(End::Resync(last)) = &log.end {
            return Read::Last(last.clone());
        }
        if cursor.is_cut() {
            return Read::Lagged { newly: false };
        }
        let next = cursor.next.load(Ordering::Acquire);
        if next < log.oldest() {
            return Read::Lagged { newly: log.cut(cursor) };
        }
        if next < log.head {
            let oldest = log.oldest();
            let slot = &mut log.slots[(next - oldest) as usize];
            slot.unread_by = slot.unread_by.saturating_sub(1);
            let frame = if slot.unread_by == 0 {
                slot.frame.take()
            } else {
                slot.frame.clone()
            };
            cursor.next.store(next + 1, Ordering::Release);
            log.trim();
            // Every watcher subscribed before the append counts in `unread_by`, so the
            // frame is still there for this one.
            return frame.map_or(Read::Lagged { newly: false }, Read::Frame);
        }
        if let Some(End::Closing(last)) = &log.end {
            return Read::Last(last.clone());
        }
        if let Some(waker) = waker
            && cursor.registered_in.swap(log.round, Ordering::AcqRel) != log.round
        {
            log.waiting.push(waker.clone());
        }
        Read::Empty
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
        let lagged: Vec<Arc<Cursor>> = log
            .watchers
            .values()
            .filter(|cursor| cursor.next.load(Ordering::Acquire) < oldest)
            .cloned()
            .collect();
        let mut backlog = Backlog::default();
        for cursor in &lagged {
            backlog.newly_cut += usize::from(log.cut(cursor));
        }
        for cursor in log.watchers.values() {
            let queued = (log.head - cursor.next.load(Ordering::Acquire)) as usize;
            backlog.watchers += 1;
            backlog.queued += queued;
            backlog.max_queued = backlog.max_queued.max(queued);
        }
        backlog
    }

    /// How many watchers follow the topic.
    pub(crate) fn watchers(&self) -> usize {
        self.lock().watchers.len()
    }
}

#[cfg(test)]
#[path = "topic_tests.rs"]
mod tests;
