//! The watch hub (DESIGN "Encode once, send many"): told of every applied command, it encodes
//! each per-service update once and hands the same bytes to every watcher of that service and
//! of its namespace.
//!
//! ```text
//!  Node (registry write lock) ──applied──▶ WatchHub ──encode once──▶ Bytes
//!                                              │ per watcher: FrameQueue (bounded)
//!                                              ▼
//!                                 watch stream ─▶ HTTP body (NDJSON)
//! ```
//!
//! # Correctness
//! - No gap, no duplicate between a watch's initial frames and its live updates: the watch
//!   handler reads the registry and subscribes inside one `Node::read`, and the hub is told
//!   of applies under the registry's write lock, so a command is applied either before the
//!   read (and is in the initial frames) or after the subscription (and is queued).
//! - The hub's revision is published after the frames of that revision are queued, so a
//!   watcher that reads the revision and then finds its queue empty has sent everything up to
//!   it: that is what a `progress` frame promises.
//! - Memory is bounded: a watcher's queue holds at most `watch_queue_frames`; one that would
//!   overflow is dropped from the hub and left with a single `resync` frame.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use muster_consensus::ApplyObserver;
use muster_core::{NamespaceKey, Revision, ServiceKey};
use muster_registry::{Applied, Registry, Scope};
use tokio::sync::watch;

use crate::frame_queue::{FrameQueue, Pushed};
use crate::frames;

/// What the hub holds, for tests, metrics and the dashboard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WatchStats {
    /// Watchers subscribed.
    pub watchers: usize,
    /// Frames queued across all subscribed watchers.
    pub queued_frames: usize,
    /// The fullest subscribed watcher's queue: never more than `watch_queue_frames`.
    pub max_queued_frames: usize,
    /// Watchers told to resync since the server started.
    pub resyncs: u64,
}

type Queues = BTreeMap<u64, Arc<FrameQueue>>;

#[derive(Default)]
struct Subscribers {
    services: HashMap<ServiceKey, Queues>,
    namespaces: HashMap<NamespaceKey, Queues>,
    next_id: u64,
    closed: bool,
}

impl Subscribers {
    fn queues_mut(&mut self, scope: &Scope) -> Option<&mut Queues> {
        match scope {
            Scope::Service(key) => self.services.get_mut(key),
            Scope::Namespace(namespace) => self.namespaces.get_mut(namespace),
        }
    }

    fn remove(&mut self, scope: &Scope, id: u64) {
        let now_empty = self.queues_mut(scope).is_some_and(|queues| {
            queues.remove(&id);
            queues.is_empty()
        });
        if now_empty {
            match scope {
                Scope::Service(key) => self.services.remove(key),
                Scope::Namespace(namespace) => self.namespaces.remove(namespace),
            };
        }
    }

    fn all(&self) -> impl Iterator<Item = &Arc<FrameQueue>> {
        self.services
            .values()
            .chain(self.namespaces.values())
            .flat_map(BTreeMap::values)
    }
}

/// Fans applied updates out to watchers.
pub(crate) struct WatchHub {
    subscribers: Mutex<Subscribers>,
    /// The last applied revision: blocking queries and `progress` frames read it.
    revision: watch::Sender<Revision>,
    queue_frames: usize,
    resyncs: AtomicU64,
}

/// A watcher's place in the hub; dropping it unsubscribes.
pub(crate) struct Subscription {
    hub: Arc<WatchHub>,
    scope: Scope,
    id: u64,
    queue: Arc<FrameQueue>,
}

impl Subscription {
    /// The watcher's queue.
    pub(crate) fn queue(&self) -> &FrameQueue {
        &self.queue
    }

    /// The hub.
    pub(crate) fn hub(&self) -> &WatchHub {
        &self.hub
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.hub.lock().remove(&self.scope, self.id);
    }
}

impl WatchHub {
    /// A hub whose watchers may queue `queue_frames` frames each.
    pub(crate) fn new(queue_frames: usize) -> Arc<WatchHub> {
        Arc::new(WatchHub {
            subscribers: Mutex::new(Subscribers::default()),
            revision: watch::Sender::new(Revision::ZERO),
            queue_frames,
            resyncs: AtomicU64::new(0),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Subscribers> {
        self.subscribers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Subscribes to a service or a namespace; `None` once the hub is closed. Call it inside
    /// `Node::read`, together with the read that starts the watch (see "Correctness").
    pub(crate) fn subscribe(self: &Arc<Self>, scope: Scope) -> Option<Subscription> {
        let mut subscribers = self.lock();
        if subscribers.closed {
            return None;
        }
        let id = subscribers.next_id;
        subscribers.next_id += 1;
        let queue = Arc::new(FrameQueue::new(self.queue_frames));
        let queues = match &scope {
            Scope::Service(key) => subscribers.services.entry(key.clone()).or_default(),
            Scope::Namespace(namespace) => subscribers.namespaces.entry(namespace.clone()).or_default(),
        };
        queues.insert(id, Arc::clone(&queue));
        Some(Subscription {
            hub: Arc::clone(self),
            scope,
            id,
            queue,
        })
    }

    /// The last applied revision.
    pub(crate) fn revision(&self) -> Revision {
        *self.revision.borrow()
    }

    /// Follows the last applied revision.
    pub(crate) fn revisions(&self) -> watch::Receiver<Revision> {
        self.revision.subscribe()
    }

    /// The server is stopping: every watcher gets `closing` after what it has queued, and no
    /// new watcher is accepted.
    pub(crate) fn close(&self) {
        let mut subscribers = self.lock();
        subscribers.closed = true;
        let closing = frames::closing(self.revision());
        for queue in subscribers.all() {
            queue.finish(closing.clone());
        }
        subscribers.services.clear();
        subscribers.namespaces.clear();
    }

    /// What the hub holds.
    pub(crate) fn stats(&self) -> WatchStats {
        let subscribers = self.lock();
        let mut stats = WatchStats {
            resyncs: self.resyncs.load(Ordering::Relaxed),
            ..WatchStats::default()
        };
        for queue in subscribers.all() {
            let len = queue.len();
            stats.watchers += 1;
            stats.queued_frames += len;
            stats.max_queued_frames = stats.max_queued_frames.max(len);
        }
        stats
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
        let mut subscribers = self.lock();
        let mut overflowed: Vec<(Scope, u64)> = Vec::new();
        let mut resync: Option<Bytes> = None;
        for update in &applied.updates {
            let namespace = update.key.namespace_key();
            let by_service = subscribers.services.get(&update.key);
            let by_namespace = subscribers.namespaces.get(&namespace);
            if by_service.is_none() && by_namespace.is_none() {
                continue;
            }
            let frame = frames::encode_update(update);
            let targets = by_service
                .into_iter()
                .flatten()
                .map(|(id, queue)| (Scope::Service(update.key.clone()), *id, queue))
                .chain(
                    by_namespace
                        .into_iter()
                        .flatten()
                        .map(|(id, queue)| (Scope::Namespace(namespace.clone()), *id, queue)),
                );
            for (scope, id, queue) in targets {
                if queue.push(frame.clone()) == Pushed::Full {
                    let last = resync.get_or_insert_with(|| frames::resync(applied.revision));
                    queue.overflow(last.clone());
                    overflowed.push((scope, id));
                }
            }
        }
        self.resyncs.fetch_add(overflowed.len() as u64, Ordering::Relaxed);
        for (scope, id) in &overflowed {
            subscribers.remove(scope, *id);
        }
        drop(subscribers);
        self.publish(applied.revision);
    }

    fn reset(&self, registry: &Registry) {
        let mut subscribers = self.lock();
        let resync = frames::resync(registry.revision());
        let count = subscribers.all().count();
        for queue in subscribers.all() {
            queue.overflow(resync.clone());
        }
        self.resyncs.fetch_add(count as u64, Ordering::Relaxed);
        subscribers.services.clear();
        subscribers.namespaces.clear();
        drop(subscribers);
        self.revision.send_replace(registry.revision());
    }
}

#[cfg(test)]
#[path = "hub_tests.rs"]
mod tests;
