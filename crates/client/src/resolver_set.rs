//! Many services' resolvers over one namespace watch per (tenant, namespace) (SPEC C1, C2,
//! W4, K1): a client following ten services of a namespace holds one watch stream, not ten.
//!
//! ```text
//!  ResolverSet::resolve(key) ──▶ Resolver (the same type Resolver::start returns)
//!        │ first service of its namespace: spawn the namespace task; later ones join it
//!        ▼
//!  namespace task ◀── GET /v1/watch/{tenant}/{namespace}[?from_revision=R]
//!     snapshot(svc) / update(svc) ──▶ that service's View      (other services: ignored)
//!     progress / error / resync / closing ──▶ every View
//!     each View ──publish──▶ its Resolver's watch::Receiver; ──save──▶ its last-known-good
//! ```
//!
//! Each service keeps its own [`View`](crate::view::View), so everything a single-service
//! resolver guarantees holds per service: contiguous, digest-checked updates, the three
//! revisions and the age, the stale budget, last-known-good load and save. The namespace
//! stream's progress frames confirm every service at once (the server has sent everything in
//! the namespace up to that revision).
//!
//! # Reconnects and resume
//!
//! The watch resumes from the lowest revision every view is current to; when any view wants
//! a snapshot (no set yet, a loaded last-known-good, a gap, a digest mismatch, compaction) the
//! task opens a fresh watch, which begins with a snapshot of every service of the namespace.
//! Failures back off with jitter exactly like [`Resolver::start`](crate::resolver::Resolver).
//! A service that joins a running watch needs its snapshot: unless the stream is a fresh one
//! that has not delivered a frame yet, that costs one fresh watch (the known price of
//! sharing: the namespace is resnapshotted once per late joiner, not per frame).
//!
//! # Authorisation
//!
//! A namespace watch needs the caller's token to pass the namespace's watch gate; the server
//! then leaves out the services the token may not watch, whose views stay without a set
//! (`unavailable`, as for a refused single-service watch). A caller whose token only names
//! single services should use [`Resolver::start`](crate::resolver::Resolver) per service.
//!
//! # Lifetime
//!
//! A service leaves when its last resolver handle is dropped or stopped; the namespace task
//! ends when its last service has left, and the next `resolve` of that namespace starts a new
//! one. Resolving a service the set already follows returns a handle to the same resolver.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use muster_core::api::Frame;
use muster_core::{Label, NamespaceKey, Revision, ServiceKey};
use tokio::sync::{Notify, mpsc, watch};

use crate::http::{Client, ClientError};
use crate::resolver::{
    Feed, IDLE_TIMEOUT, Inner, MAX_BACKOFF, MIN_BACKOFF, Resolver, ResolverConfig, jittered, now_ms, parts,
};
use crate::seed::SplitMix64;
use crate::view::{Next, StaleBudget};

/// How the resolvers of a set behave unless told otherwise ([`ResolverSet::resolve_with`]).
#[derive(Debug, Clone, Default)]
pub struct ResolverSetConfig {
    /// How stale a view each kind of operation may use.
    pub budget: StaleBudget,
    /// A directory for the last-known-good sets, one file per service,
    /// `<tenant>.<namespace>.<service>.lkg` (labels hold no dots, so names cannot collide);
    /// none: not kept.
    pub last_known_good_dir: Option<PathBuf>,
}

/// A clonable factory of resolvers that share one watch per namespace.
#[derive(Debug, Clone)]
pub struct ResolverSet {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    client: Client,
    config: ResolverSetConfig,
    namespaces: Mutex<HashMap<NamespaceKey, Namespace>>,
}

/// The running task of one namespace, as the factory sees it.
#[derive(Debug)]
struct Namespace {
    joins: mpsc::UnboundedSender<Joining>,
    wake: Arc<Notify>,
    resolvers: HashMap<Label, Weak<Inner>>,
}

/// A service handed to a namespace task.
#[derive(Debug)]
struct Joining {
    feed: Feed,
    stopped: watch::Receiver<bool>,
}

impl ResolverSet {
    /// A set of resolvers talking to the server through `client`.
    pub fn new(client: Client, config: ResolverSetConfig) -> ResolverSet {
        ResolverSet {
            shared: Arc::new(Shared {
                client,
                config,
                namespaces: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// A resolver of `key` with the set's configuration, sharing its namespace's watch.
    pub fn resolve(&self, key: ServiceKey) -> Resolver {
        let config = &self.shared.config;
        let last_known_good = config
            .last_known_good_dir
            .as_ref()
            .map(|dir| dir.join(format!("{}.{}.{}.lkg", key.tenant, key.namespace, key.service)));
        self.resolve_with(
            key,
            ResolverConfig {
                budget: config.budget,
                last_known_good,
            },
        )
    }

    /// A resolver of `key` with its own configuration, sharing its namespace's watch. A
    /// service the set already follows keeps the resolver (and configuration) it has.
    pub fn resolve_with(&self, key: ServiceKey, config: ResolverConfig) -> Resolver {
        let namespace = key.namespace_key();
        let mut namespaces = self.shared.namespaces.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(running) = namespaces.get_mut(&namespace) {
            running.resolvers.retain(|_, resolver| resolver.strong_count() > 0);
            if let Some(inner) = running.resolvers.get(&key.service).and_then(Weak::upgrade) {
                return Resolver::from_inner(inner);
            }
        }
        let wake = namespaces
            .get(&namespace)
            .filter(|running| !running.joins.is_closed())
            .map_or_else(|| Arc::new(Notify::new()), |running| Arc::clone(&running.wake));
        let (resolver, feed, stopped) = parts(
            key.clone(),
            config,
            Some(Arc::clone(&wake)),
            self.shared.client.reporter(),
        );
        let mut joining = Joining { feed, stopped };
        if let Some(running) = namespaces.get_mut(&namespace) {
            match running.joins.send(joining) {
                Ok(()) => {
                    running.resolvers.insert(key.service, Arc::downgrade(resolver.inner()));
                    return resolver;
                }
                // The task has just ended: start another.
                Err(mpsc::error::SendError(returned)) => joining = returned,
            }
        }
        let (joins, receiver) = mpsc::unbounded_channel();
        joins.send(joining).expect("the receiver is held here");
        tokio::spawn(follow_namespace(
            self.shared.client.clone(),
            namespace.clone(),
            receiver,
            Arc::clone(&wake),
        ));
        let mut resolvers = HashMap::new();
        resolvers.insert(key.service, Arc::downgrade(resolver.inner()));
        namespaces.insert(namespace, Namespace { joins, wake, resolvers });
        resolver
    }
}

/// One followed service inside a namespace task.
struct Tracked {
    feed: Feed,
    stopped: watch::Receiver<bool>,
}

impl Tracked {
    /// Stopped explicitly, or every handle dropped (the stop sender with them).
    fn is_stopped(&self) -> bool {
        *self.stopped.borrow() || self.stopped.has_changed().is_err()
    }
}

/// The namespace task's services, by service name.
#[derive(Default)]
struct Services(BTreeMap<Label, Tracked>);

impl Services {
    /// Takes `joining` in; whether it needs a snapshot (no resumable view).
    fn join(&mut self, joining: Joining) -> bool {
        let needs_snapshot = joining.feed.view.shared_resume_from().is_none();
        let service = joining.feed.view.key().service.clone();
        self.0.insert(
            service,
            Tracked {
                feed: joining.feed,
                stopped: joining.stopped,
            },
        );
        needs_snapshot
    }

    fn prune(&mut self) {
        self.0.retain(|_, tracked| !tracked.is_stopped());
    }

    /// Where the namespace watch may resume: the lowest revision every view is current to,
    /// or `None` (a fresh watch) when any view wants a snapshot.
    fn resume_from(&self) -> Option<Revision> {
        self.0
            .values()
            .map(|tracked| tracked.feed.view.shared_resume_from())
            .try_fold(None, |lowest: Option<Revision>, from| {
                let from = from?;
                Some(Some(lowest.map_or(from, |lowest| lowest.min(from))))
            })
            .flatten()
    }

    /// Applies one frame to the views it concerns; `Resnapshot` when any view asks for one.
    async fn on_frame(&mut self, namespace: &NamespaceKey, frame: &Frame) -> Next {
        let about = match frame {
            Frame::Snapshot { snapshot, .. } => Some(snapshot.key()),
            Frame::Update(update) => Some(&update.key),
            Frame::Progress { .. } | Frame::Error { .. } | Frame::Resync { .. } | Frame::Closing { .. } => None,
        };
        match about {
            Some(key) => {
                if key.tenant != namespace.tenant || key.namespace != namespace.namespace {
                    tracing::warn!(namespace = %namespace, service = %key, "a namespace watch sent another namespace's frame; ignored");
                    return Next::Continue;
                }
                match self.0.get_mut(&key.service) {
                    Some(tracked) => tracked.feed.step(|view| view.on_frame(frame, now_ms())).await,
                    // A service of the namespace nobody here follows.
                    None => Next::Continue,
                }
            }
            None => self.each(|view| view.on_frame(frame, now_ms())).await,
        }
    }

    /// Applies `step` to every view; `Resnapshot` when any asks for one.
    async fn each(&mut self, step: impl Fn(&mut crate::view::View) -> Next) -> Next {
        let mut next = Next::Continue;
        for tracked in self.0.values_mut() {
            if let Next::Resnapshot(why) = tracked.feed.step(&step).await {
                next = Next::Resnapshot(why);
            }
        }
        next
    }
}

/// Why a namespace stream was left.
enum Left {
    /// Reconnect after a backoff pause (a failure, a doubt, the server ended the stream).
    Pause,
    /// Reconnect at once (a service joined that needs a snapshot).
    Now,
}

async fn follow_namespace(
    client: Client,
    namespace: NamespaceKey,
    mut joins: mpsc::UnboundedReceiver<Joining>,
    wake: Arc<Notify>,
) {
    let mut services = Services::default();
    // Not from the namespace alone: every client of it would then back off in step.
    let mut rng = SplitMix64::per_process(&namespace);
    let mut backoff = MIN_BACKOFF;
    loop {
        while let Ok(joining) = joins.try_recv() {
            services.join(joining);
        }
        services.prune();
        if services.0.is_empty() {
            // Refuse further joins, then take any sent before the refusal.
            joins.close();
            while let Ok(joining) = joins.try_recv() {
                services.join(joining);
            }
            services.prune();
            if services.0.is_empty() {
                return;
            }
        }
        let from = services.resume_from();
        tracing::debug!(namespace = %namespace, from = ?from, services = services.0.len(), "namespace watch");
        let opened = tokio::select! {
            _ = wake.notified() => continue,
            opened = client.watch_namespace(&namespace, from, IDLE_TIMEOUT) => opened,
        };
        let mut stream = match opened {
            Ok(stream) => stream,
            Err(error) => {
                tracing::warn!(namespace = %namespace, %error, "namespace watch failed; the last sets stay in use");
                for tracked in services.0.values_mut() {
                    tracked.feed.transport_error(&error).await;
                }
                // As for one service: a refused resume point repeats on every retry.
                if let ClientError::Api { body, .. } = &error
                    && !error.is_transient()
                    && from.is_some()
                {
                    services.each(|view| view.on_refused(&body.error)).await;
                }
                if pause(&wake, &mut services, jittered(backoff, &mut rng)).await {
                    continue;
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
        };
        let fresh = from.is_none();
        let mut frames_seen = false;
        let left = loop {
            tokio::select! {
                _ = wake.notified() => {
                    services.prune();
                    if services.0.is_empty() {
                        break Left::Now;
                    }
                }
                Some(joining) = joins.recv() => {
                    // A fresh stream that has sent nothing yet will carry its snapshot.
                    if services.join(joining) && (!fresh || frames_seen) {
                        break Left::Now;
                    }
                }
                frame = stream.next_frame() => {
                    frames_seen = true;
                    let next = match frame {
                        Ok(Some((_, frame))) => {
                            backoff = MIN_BACKOFF;
                            services.on_frame(&namespace, &frame).await
                        }
                        Ok(None) => break Left::Pause,
                        Err(error @ ClientError::BadReply { .. }) => {
                            services.each(|view| view.on_undecodable(&error.to_string())).await
                        }
                        Err(error) => {
                            tracing::warn!(namespace = %namespace, %error, "namespace watch lost; resuming");
                            for tracked in services.0.values_mut() {
                                tracked.feed.transport_error(&error).await;
                            }
                            break Left::Pause;
                        }
                    };
                    if let Next::Resnapshot(why) = next {
                        tracing::info!(namespace = %namespace, ?why, "resnapshot");
                        break Left::Pause;
                    }
                }
            }
        };
        if let Left::Pause = left {
            pause(&wake, &mut services, jittered(backoff, &mut rng)).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }
}

/// Sleeps for `delay`, cut short when every service has left (then returns `true`).
async fn pause(wake: &Notify, services: &mut Services, delay: std::time::Duration) -> bool {
    let sleep = tokio::time::sleep(delay);
    tokio::pin!(sleep);
    loop {
        tokio::select! {
            _ = &mut sleep => return false,
            _ = wake.notified() => {
                services.prune();
                if services.0.is_empty() {
                    return true;
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "resolver_set_tests.rs"]
mod tests;
