//! A watcher's place in the hub: its topic, its id there (the cursor lives in the topic), and the loop that turns them into the
//! stream's live frames (updates, `progress` on the hub's ticks, a final `resync` or
//! `closing`).
//!
//! ```text
//!  poll: read log at cursor ─┬─ frame ─────────────▶ send
//!                            ├─ ≥ 8 behind ────────▶ coalesce the backlog (one update per
//!                            │                       service, shared by watchers at the same
//!                            │                       place) ──▶ send each
//!                            ├─ lagged ────────────▶ resync, end
//!                            ├─ ended ─────────────▶ resync | closing, end
//!                            └─ empty (waker registered) ─┬─ new tick ─▶ progress(revision)
//!                                                         └─ else ────▶ Pending
//! ```
//!
//! The subscription is itself the [`Stream`] of live frames: no future, timer or channel per
//! watcher, only its cursor in the topic.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use futures_util::Stream;
use muster_registry::Scope;

use crate::coalesce::coalesce;
use crate::frames;
use crate::hub::WatchHub;
use crate::topic::{Read, Topic};

/// What the watcher has next, without waiting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Next {
    /// A frame to send.
    Frame(Bytes),
    /// Nothing yet.
    Empty,
    /// The stream is over (its last frame was returned before).
    Done,
}

/// A watcher's place in the hub; dropping it unsubscribes.
pub(crate) struct Subscription {
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
    pub(crate) fn new(hub: Arc<WatchHub>, scope: Scope, topic: Arc<Topic>, id: u64, tick: u64) -> Self {
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
    pub(crate) fn try_next(&mut self) -> Next {
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
