//! The watch hub (DESIGN "Encode once, send many"): told of every applied command, it encodes
//! each per-service update once and appends the same bytes to the broadcast log ([`Topic`])
//! of that service and of its namespace; every watcher reads the log with its own cursor.
//!
//! ```text
//!  Node (registry write lock) ──applied──▶ WatchHub ──encode once──▶ Bytes
//!                                              │ append: O(1), then wake the waiting watchers
//!                                              ▼
//!                               Topic (bounded ring, one per watched scope)
//!                                  │ cursor per watcher
//!                                  ▼
//!                 Subscription (a Stream) ─▶ HTTP body (NDJSON)
//!  progress ticker (one task) ──tick──▶ wakes every topic: idle watchers send `progress`
//! ```
//!
//! Under the registry lock the apply path encodes and appends once per update and watched
//! scope, then calls `Waker::wake` once per waiting watcher: no lock, queue or allocation per
//! watcher (the old per-watcher queues took ~15 ms per change at 10,000 watchers). Reading
//! the frame and writing it happen on the watchers' own tasks, outside the registry lock.
//!
//! # Correctness
//! - No gap, no duplicate between a watch's initial frames and its live updates: the watch
//!   handler reads the registry and subscribes inside one `Node::read`, and the hub is told
//!   of applies under the registry's write lock, so a command is applied either before the
//!   read (and is in the initial frames) or after the subscription (and is appended past the
//!   new watcher's cursor, which starts at the log's head).
//! - The hub's revision is published after the frames of that revision are appended, so a
//!   watcher that reads the revision and then finds nothing left in its log has sent
//!   everything up to it: that is what a `progress` frame promises.
//! - Memory is bounded: a topic's log holds at most `watch_queue_frames`; a watcher that falls
//!   further behind has lost a frame, is cut off (counted once, by itself or by
//!   [`WatchHub::stats`]) and gets a single `resync` frame.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use futures_util::Stream;
use muster_consensus::ApplyObserver;
use muster_core::{NamespaceKey, Revision, ServiceKey};
use muster_registry::{Applied, Registry, Scope};
use tokio::sync::watch;

use crate::coalesce::coalesce;
use crate::frames;
use crate::topic::{CutCounts, Read, Topic};

/// What the hub holds, for tests, metrics and the dashboard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WatchStats {
    /// Watchers subscribed (and not cut off).
    pub watchers: usize,
    /// Frames the subscribed watchers have yet to read, in total.
    pub queued_frames: usize,
    /// The largest backlog of one watcher: never more than `watch_queue_frames`.
    pub max_queued_frames: usize,
    /// Watchers told to resync since the server started.
    pub resyncs: u64,
    /// Of those, the ones cut off for falling a whole log behind.
    pub slow_consumers: u64,
    /// Bytes of the frames held for watchers that have yet to read them.
    pub outstanding_bytes: usize,
}

#[derive(Default)]
struct Topics {
    services: HashMap<ServiceKey, Arc<Topic>>,
    namespaces: HashMap<NamespaceKey, Arc<Topic>>,
    closed: bool,
}

impl Topics {
    fn all(&self) -> impl Iterator<Item = &Arc<Topic>> {
        self.services.values().chain(self.namespaces.values())
    }

    fn clear(&mut self) {
        self.services.clear();
        self.namespaces.clear();
    }
}

/// Fans applied updates out to watchers.
pub struct WatchHub {
    topics: Mutex<Topics>,
    /// The last applied revision: blocking queries and `progress` frames read it.
    revision: watch::Sender<Revision>,
    queue_frames: usize,
    /// Watchers told to resync, counted by the topics as they cut them off.
    resyncs: Arc<CutCounts>,
    /// Progress ticks so far: a watcher with nothing to send answers each new one.
    ticks: AtomicU64,
}

impl WatchHub {
    /// A hub whose watchers may fall `queue_frames` frames behind.
    pub fn new(queue_frames: usize) -> Arc<WatchHub> {
        Arc::new(WatchHub {
            topics: Mutex::new(Topics::default()),
            revision: watch::Sender::new(Revision::ZERO),
            queue_frames,
            resyncs: Arc::new(CutCounts::default()),
            ticks: AtomicU64::new(0),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Topics> {
        self.topics.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Subscribes to a service or a namespace; `None` once the hub is closed. Call it inside
    /// `Node::read`, together with the read that starts the watch (see "Correctness").
    pub fn subscribe(self: &Arc<Self>, scope: Scope) -> Option<Subscription> {
        let mut topics = self.lock();
        if topics.closed {
            return None;
        }
        let new_topic = || Arc::new(Topic::new(self.queue_frames, Arc::clone(&self.resyncs)));
        let topic = match &scope {
            Scope::Service(key) => Arc::clone(topics.services.entry(key.clone()).or_insert_with(new_topic)),
            Scope::Namespace(namespace) => {
                Arc::clone(topics.namespaces.entry(namespace.clone()).or_insert_with(new_topic))
            }
        };
        let id = topic.join();
        drop(topics);
        Some(Subscription::new(Arc::clone(self), scope, topic, id, self.tick()))
    }

    /// A watcher leaves; its topic goes when it was the last one.
    fn leave(&self, scope: &Scope, topic: &Arc<Topic>, id: u64) {
        let mut topics = self.lock();
        if !topic.leave(id) {
            return;
        }
        let current = match scope {
            Scope::Service(key) => topics.services.get(key),
            Scope::Namespace(namespace) => topics.namespaces.get(namespace),
        };
        if current.is_some_and(|current| Arc::ptr_eq(current, topic)) {
            match scope {
                Scope::Service(key) => topics.services.remove(key),
                Scope::Namespace(namespace) => topics.namespaces.remove(namespace),
            };
        }
    }

    /// The last applied revision.
    pub fn revision(&self) -> Revision {
        *self.revision.borrow()
    }

    /// Follows the last applied revision.
    pub fn revisions(&self) -> watch::Receiver<Revision> {
        self.revision.subscribe()
    }

    /// Progress ticks so far.
    pub fn tick(&self) -> u64 {
        self.ticks.load(Ordering::Acquire)
    }

    /// One progress tick: every idle watcher sends `progress`. False once the hub is closed.
    ///
    /// The wakes happen after the hub's lock is released: `applied` needs that lock while it
    /// holds the registry's write lock, so waking 10,000 idle watchers under it would stall
    /// commits for the whole tick.
    pub fn progress_tick(&self) -> bool {
        let topics: Vec<Arc<Topic>> = {
            let topics = self.lock();
            if topics.closed {
                return false;
            }
            self.ticks.fetch_add(1, Ordering::AcqRel);
            topics.all().cloned().collect()
        };
        for topic in topics {
            topic.wake_all();
        }
        true
    }

    /// Ticks every `interval` until the hub closes: one timer for all watchers, instead of
    /// one per stream re-armed after every frame.
    pub async fn run_progress_ticker(self: Arc<Self>, interval: Duration) {
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        // A late tick (a busy machine) is not worth a burst of progress frames.
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            if !self.progress_tick() {
                return;
            }
        }
    }

    /// The server is stopping: every watcher gets `closing` after what it has left to read,
    /// and no new watcher is accepted.
    pub fn close(&self) {
        let mut topics = self.lock();
        topics.closed = true;
        let closing = frames::closing(self.revision());
        for topic in topics.all() {
            topic.end_with_closing(closing.clone());
        }
        topics.clear();
    }

    /// What the hub holds; watchers found lagged are cut off (and counted) here.
    pub fn stats(&self) -> WatchStats {
        let topics = self.lock();
        let mut stats = WatchStats::default();
        for topic in topics.all() {
            let backlog = topic.backlog();
            stats.watchers += backlog.watchers;
            stats.queued_frames += backlog.queued;
            stats.max_queued_frames = stats.max_queued_frames.max(backlog.max_queued);
            stats.outstanding_bytes += backlog.bytes;
        }
        stats.resyncs = self.resyncs.resyncs.load(Ordering::Relaxed);
        stats.slow_consumers = self.resyncs.slow_consumers.load(Ordering::Relaxed);
        stats
    }

    /// How many watchers follow one service's topic and its namespace's (the dashboard's
    /// overview, SPEC U2); lagged watchers are cut off here, as in [`WatchHub::stats`].
    pub fn watchers(&self, scope: &Scope) -> usize {
        let topics = self.lock();
        let topic = match scope {
            Scope::Service(key) => topics.services.get(key),
            Scope::Namespace(namespace) => topics.namespaces.get(namespace),
        };
        topic.map_or(0, |topic| topic.backlog().watchers)
    }

    fn publish(&self, revision: Revision) {
        self.revision.send_if_modified(|current| {
            let newer = revision > *current;
            if newer {
                *current = revision;
            }
            newer
        });
    }
}

impl ApplyObserver for WatchHub {
    fn applied(&self, _registry: &Registry, applied: &Applied) {
        let topics = self.lock();
        for update in &applied.updates {
            let by_service = topics.services.get(&update.key);
            let by_namespace = if topics.namespaces.is_empty() {
                None
            } else {
                topics.namespaces.get(&update.key.namespace_key())
            };
            if by_service.is_none() && by_namespace.is_none() {
                continue;
            }
            let frame = frames::encode_update(update);
            for topic in by_service.into_iter().chain(by_namespace) {
                topic.append(frame.clone(), Arc::clone(update));
            }
        }
        drop(topics);
        self.publish(applied.revision);
    }

    fn reset(&self, registry: &Registry) {
        let mut topics = self.lock();
        let resync = frames::resync(registry.revision());
        for topic in topics.all() {
            topic.end_with_resync(resync.clone());
        }
        topics.clear();
        drop(topics);
        self.revision.send_replace(registry.revision());
    }
}

// --- a watcher's place in the hub -------------------------------------------------------
//
// A subscription: its topic, its id there (the cursor lives in the topic), and the loop that
// turns them into the stream's live frames (updates, `progress` on the hub's ticks, a final `resync` or
// `closing`).
//
// ```text
//  poll: read log at cursor ─┬─ frame ─────────────▶ send
//                            ├─ ≥ 8 behind ────────▶ coalesce the backlog (one update per
//                            │                       service, shared by watchers at the same
//                            │                       place) ──▶ send each
//                            ├─ lagged ────────────▶ resync, end
//                            ├─ ended ─────────────▶ resync | closing, end
//                            └─ empty (waker registered) ─┬─ new tick ─▶ progress(revision)
//                                                         └─ else ────▶ Pending
// ```
//
// The subscription is itself the [`Stream`] of live frames: no future, timer or channel per
// watcher, only its cursor in the topic.

/// What the watcher has next, without waiting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// A frame to send.
    Frame(Bytes),
    /// Nothing yet.
    Empty,
    /// The stream is over (its last frame was returned before).
    Done,
}

/// A watcher's place in the hub; dropping it unsubscribes.
pub struct Subscription {
    hub: Arc<WatchHub>,
    scope: Scope,
    topic: Arc<Topic>,
    /// The watcher's id in its topic.
    id: u64,
    /// The last progress tick this watcher answered.
    seen_tick: u64,
    /// Coalesced frames still to send, and the next one's index. They are sent before
    /// anything else, even a `resync` end that came meanwhile: they are a consistent prefix of
    /// the old state, which the resync then replaces.
    pending: Option<(Arc<[Bytes]>, usize)>,
    done: bool,
}

impl Subscription {
    fn new(hub: Arc<WatchHub>, scope: Scope, topic: Arc<Topic>, id: u64, tick: u64) -> Self {
        Subscription {
            hub,
            scope,
            topic,
            id,
            seen_tick: tick,
            pending: None,
            done: false,
        }
    }

    /// The next frame if there is one now: an update, or a last `resync`/`closing`.
    #[cfg(test)]
    pub fn try_next(&mut self) -> Next {
        self.next_now(None)
    }

    /// Queues a coalesced backlog and returns its first frame (a backlog of updates always
    /// coalesces to at least one).
    fn send_coalesced(&mut self, frames: Arc<[Bytes]>, waker: Option<&Waker>) -> Next {
        if frames.is_empty() {
            return self.next_now(waker);
        }
        self.pending = Some((frames, 0));
        self.next_now(waker)
    }

    fn next_now(&mut self, waker: Option<&Waker>) -> Next {
        if let Some((frames, next)) = &mut self.pending {
            let frame = frames[*next].clone();
            *next += 1;
            if *next == frames.len() {
                self.pending = None;
            }
            return Next::Frame(frame);
        }
        if self.done {
            return Next::Done;
        }
        match self.topic.read(self.id, waker) {
            Read::Frame(frame) => Next::Frame(frame),
            Read::Coalesced(frames) => self.send_coalesced(frames, waker),
            Read::Behind { from, to, updates } => {
                let frames: Arc<[Bytes]> = coalesce(&updates).iter().map(frames::encode_update).collect();
                match self.topic.take_coalesced(self.id, from, to, frames) {
                    Some(frames) => self.send_coalesced(frames, waker),
                    None => {
                        self.done = true;
                        Next::Frame(frames::resync(self.hub.revision()))
                    }
                }
            }
            Read::Empty => Next::Empty,
            Read::Last(last) => {
                self.done = true;
                Next::Frame(last)
            }
            Read::Lagged => {
                self.done = true;
                Next::Frame(frames::resync(self.hub.revision()))
            }
        }
    }
}

/// The live frames: updates, `progress` when the hub ticks and nothing is pending, and a
/// last `resync` or `closing`.
impl Stream for Subscription {
    type Item = Bytes;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        let this = self.get_mut();
        match this.next_now(Some(cx.waker())) {
            Next::Frame(frame) => return Poll::Ready(Some(frame)),
            Next::Done => return Poll::Ready(None),
            Next::Empty => {}
        }
        let tick = this.hub.tick();
        if tick == this.seen_tick {
            return Poll::Pending;
        }
        this.seen_tick = tick;
        // Read the revision before looking at the log again: frames of a revision are
        // appended before it is published, so an empty log now means everything up to
        // `revision` has been sent.
        let revision = this.hub.revision();
        Poll::Ready(match this.next_now(Some(cx.waker())) {
            Next::Frame(frame) => Some(frame),
            Next::Done => None,
            Next::Empty => Some(frames::progress(revision)),
        })
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.hub.leave(&self.scope, &self.topic, self.id);
    }
}

#[cfg(test)]
#[path = "hub_tests.rs"]
mod tests;
