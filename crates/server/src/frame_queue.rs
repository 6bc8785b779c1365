//! One watcher's bounded queue of encoded frames (SPEC W4).
//!
//! The hub pushes shared [`Bytes`] (encoded once for every watcher); the watcher's stream pops
//! them. The queue never holds more than its bound: a push that would exceed it fails, and the
//! hub then [`overflow`](FrameQueue::overflow)s the queue, which drops what it holds and leaves
//! only a final `resync` frame. A queue with a final frame is finished: the stream sends what
//! is left and ends.

use std::collections::VecDeque;
use std::sync::Mutex;

use bytes::Bytes;
use tokio::sync::Notify;

/// What a push did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pushed {
    /// Queued (or dropped because the queue is already finished).
    Queued,
    /// The queue is at its bound; nothing was queued.
    Full,
}

/// What a pop found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Popped {
    /// The next frame.
    Frame(Bytes),
    /// Nothing yet.
    Empty,
    /// Finished, and everything has been popped.
    Done,
}

#[derive(Debug, Default)]
struct State {
    frames: VecDeque<Bytes>,
    finished: bool,
}

/// A bounded single-consumer frame queue.
#[derive(Debug)]
pub(crate) struct FrameQueue {
    state: Mutex<State>,
    /// Wakes the consumer; `notify_one` keeps a permit, so a push between the consumer's
    /// check and its wait is not lost.
    notify: Notify,
    bound: usize,
}

impl FrameQueue {
    /// A queue holding at most `bound` frames (at least one).
    pub(crate) fn new(bound: usize) -> FrameQueue {
        FrameQueue {
            state: Mutex::new(State::default()),
            notify: Notify::new(),
            bound: bound.max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Queues a frame unless the queue is full.
    pub(crate) fn push(&self, frame: Bytes) -> Pushed {
        let mut state = self.lock();
        if state.finished {
            return Pushed::Queued;
        }
        if state.frames.len() >= self.bound {
            return Pushed::Full;
        }
        state.frames.push_back(frame);
        drop(state);
        self.notify.notify_one();
        Pushed::Queued
    }

    /// Drops every queued frame and finishes with `last` (a `resync`).
    pub(crate) fn overflow(&self, last: Bytes) {
        let mut state = self.lock();
        state.frames.clear();
        state.frames.push_back(last);
        state.finished = true;
        drop(state);
        self.notify.notify_one();
    }

    /// Finishes after the queued frames with `last` (a `closing` or `resync`), which may go one
    /// past the bound. Does nothing if already finished.
    pub(crate) fn finish(&self, last: Bytes) {
        let mut state = self.lock();
        if state.finished {
            return;
        }
        state.frames.push_back(last);
        state.finished = true;
        drop(state);
        self.notify.notify_one();
    }

    /// The next frame, if any.
    pub(crate) fn try_pop(&self) -> Popped {
        let mut state = self.lock();
        match state.frames.pop_front() {
            Some(frame) => Popped::Frame(frame),
            None if state.finished => Popped::Done,
            None => Popped::Empty,
        }
    }

    /// Waits until something may have been pushed.
    pub(crate) async fn changed(&self) {
        self.notify.notified().await;
    }

    /// How many frames are queued.
    pub(crate) fn len(&self) -> usize {
        self.lock().frames.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(text: &'static str) -> Bytes {
        Bytes::from_static(text.as_bytes())
    }

    #[test]
    fn a_full_queue_refuses_and_overflow_leaves_only_the_resync() {
        let queue = FrameQueue::new(2);
        assert_eq!(queue.push(frame("1")), Pushed::Queued);
        assert_eq!(queue.push(frame("2")), Pushed::Queued);
        assert_eq!(queue.push(frame("3")), Pushed::Full);
        assert_eq!(queue.len(), 2);
        queue.overflow(frame("resync"));
        assert_eq!(queue.len(), 1);
        assert_eq!(queue.push(frame("4")), Pushed::Queued, "a finished queue drops pushes");
        assert_eq!(queue.try_pop(), Popped::Frame(frame("resync")));
        assert_eq!(queue.try_pop(), Popped::Done);
    }

    #[test]
    fn finish_keeps_queued_frames_before_the_last() {
        let queue = FrameQueue::new(1);
        queue.push(frame("1"));
        queue.finish(frame("closing"));
        queue.finish(frame("again"));
        assert_eq!(queue.try_pop(), Popped::Frame(frame("1")));
        assert_eq!(queue.try_pop(), Popped::Frame(frame("closing")));
        assert_eq!(queue.try_pop(), Popped::Done);
    }

    #[tokio::test]
    async fn a_push_before_the_wait_is_not_lost() {
        let queue = FrameQueue::new(4);
        assert_eq!(queue.try_pop(), Popped::Empty);
        queue.push(frame("1"));
        tokio::time::timeout(std::time::Duration::from_secs(5), queue.changed())
            .await
            .expect("the permit was kept");
        assert_eq!(queue.try_pop(), Popped::Frame(frame("1")));
    }
}
