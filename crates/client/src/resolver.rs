//! The resolver: the I/O shell that keeps one service's [`View`] current over a watch, and
//! hands it to callers (SPEC C1, C2).
//!
//! ```text
//!  last-known-good file ──load──▶ View ◀──frames── watch (from the view's revision, or a
//!                                   │               fresh "snapshot then stream" watch)
//!                                   ├──publish──▶ watch::Receiver<Arc<View>> (readers, Discover,
//!                                   │              Resolver::changes as a Stream)
//!                                   └──save─────▶ last-known-good file (when the set changes)
//! ```
//!
//! A [`Resolver`] is a handle: clones share one view and one background task, which stops
//! when the last handle is dropped or when [`Resolver::stop`] is called on any of them. The
//! task is either this module's one-service watch ([`Resolver::start`]) or a namespace watch
//! shared with other services ([`crate::resolver_set::ResolverSet`]); readers cannot tell.
//!
//! All decisions are the view's; this loop only connects, feeds frames, reconnects with
//! jittered exponential backoff, and publishes. A registry outage keeps the last set (the
//! view never empties itself); its age grows past the stale budget, where read-only picks go
//! on with that set and mutations fail closed (SPEC C2). Each transport failure is handed to
//! the view ([`View::on_transport_error`]) so that [`ViewStatus::last_error`] and the
//! `unavailable` error say why there is no view. The budget passing is logged once (WARN) and
//! the view becoming fresh again once (INFO), noticed at the next read, frame or reconnect
//! attempt (at most [`MAX_BACKOFF`] apart during an outage).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use muster_core::ServiceKey;
use rand_core::RngCore;
use tokio::sync::{Notify, watch};

use crate::http::Client;
use crate::lkg;
use crate::report::Reporter;
use crate::seed::SplitMix64;
use crate::view::{Next, Risk, StaleBudget, StaleError, Usable, View, ViewStatus};

/// First reconnect delay: quick enough that a restarted server is picked up at once.
pub(crate) const MIN_BACKOFF: Duration = Duration::from_millis(100);
/// Longest reconnect delay: 5 s keeps a fleet's reconnect storm spread out (jittered) while
/// staying well inside the default 30 s stale budget.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// A watch silent this long is lost: the server sends progress every 5 s, so three missed
/// progress frames.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(15);

/// How a resolver behaves.
#[derive(Debug, Clone, Default)]
pub struct ResolverConfig {
    /// How stale a view each kind of operation may use.
    pub budget: StaleBudget,
    /// Where to keep the last-known-good set across restarts (none: not kept).
    pub last_known_good: Option<PathBuf>,
}

/// Keeps one service's view current in the background. Clones share the view and the task.
#[derive(Debug, Clone)]
pub struct Resolver {
    inner: Arc<Inner>,
}

/// Logs a view passing its stale budget once (WARN) and becoming fresh again once (INFO),
/// shared by a resolver's handles and its feed (SPEC C2: report the view's age).
#[derive(Debug)]
pub(crate) struct StaleLog {
    key: ServiceKey,
    budget_ms: u64,
    past: AtomicBool,
}

impl StaleLog {
    fn new(key: ServiceKey, budget: &StaleBudget) -> StaleLog {
        StaleLog {
            key,
            budget_ms: budget.budget_ms,
            past: AtomicBool::new(false),
        }
    }

    /// Notes the view's age now (`None`: no set); logs only when it crosses the budget.
    fn observe(&self, age_ms: Option<u64>) {
        let Some(age_ms) = age_ms else { return };
        if age_ms > self.budget_ms {
            if !self.past.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    service = %self.key,
                    age_ms,
                    budget_ms = self.budget_ms,
                    "the view is beyond its stale budget: reads go on with the last known set, mutations fail closed"
                );
            }
        } else if self.past.swap(false, Ordering::Relaxed) {
            tracing::info!(service = %self.key, age_ms, "the view is fresh again");
        }
    }
}

/// What the handles share. Dropping it (the last handle) stops the feeding task.
#[derive(Debug)]
pub(crate) struct Inner {
    key: ServiceKey,
    budget: StaleBudget,
    stale_log: Arc<StaleLog>,
    views: watch::Receiver<Arc<View>>,
    stop: watch::Sender<bool>,
    /// Wakes a task that feeds many services (a namespace watch) to notice the stop.
    wake: Option<Arc<Notify>>,
}

impl Inner {
    fn signal_stop(&self) {
        self.stop.send_replace(true);
        if let Some(wake) = &self.wake {
            wake.notify_one();
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.signal_stop();
    }
}

/// Milliseconds on the wall clock: ages must survive a restart (the last-known-good file
/// records when the server last confirmed its set), which a monotonic clock cannot span.
#[allow(
    clippy::disallowed_methods,
    reason = "the resolver is the I/O shell; views take this time as an input"
)]
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A fresh view of `key`, with the last-known-good set at `path` installed if there is one.
pub(crate) fn initial_view(key: &ServiceKey, path: Option<&Path>) -> View {
    let mut view = View::new(key.clone());
    if let Some(path) = path {
        match lkg::load(path) {
            Ok(Some(saved)) => view.install_last_known_good(saved.snapshot, saved.current_to, saved.confirmed_ms),
            Ok(None) => {}
            Err(error) => tracing::warn!(service = %key, %error, "last-known-good set ignored"),
        }
    }
    view
}

/// The feeding side of one resolver: its view, where it is published and saved.
#[derive(Debug)]
pub(crate) struct Feed {
    pub(crate) view: View,
    publish: watch::Sender<Arc<View>>,
    last_known_good: Option<PathBuf>,
    /// Tells the server which revision this view is current at (SPEC O3).
    reporter: Option<Arc<Reporter>>,
    stale_log: Arc<StaleLog>,
}

impl Drop for Feed {
    fn drop(&mut self) {
        if let Some(reporter) = &self.reporter {
            reporter.forget(self.view.key());
        }
    }
}

impl Feed {
    /// Changes the view with `step`, publishes it, and saves it when its set changed.
    pub(crate) async fn step(&mut self, step: impl FnOnce(&mut View) -> Next) -> Next {
        let before = self.view.active().map(|set| Arc::as_ptr(set) as usize);
        let next = step(&mut self.view);
        let changed = self.view.active().map(|set| Arc::as_ptr(set) as usize) != before;
        self.publish.send_replace(Arc::new(self.view.clone()));
        self.stale_log.observe(self.view.status(now_ms()).age_ms);
        if let (Some(reporter), Some(revision)) = (&self.reporter, self.view.resume_from()) {
            reporter.note(self.view.key(), revision, now_ms());
        }
        if changed && let Some(path) = &self.last_known_good {
            let (saved, path) = (self.view.clone(), path.clone());
            let written = tokio::task::spawn_blocking(move || lkg::save(&saved, now_ms(), &path)).await;
            if let Ok(Err(error)) = written {
                tracing::warn!(service = %self.view.key(), %error, "last-known-good set not saved");
            }
        }
        next
    }

    /// The watch could not be opened or was lost: the view keeps its set and reports `error`.
    pub(crate) async fn transport_error(&mut self, error: &crate::http::ClientError) {
        let why = error.to_string();
        self.step(|view| {
            view.on_transport_error(&why);
            Next::Continue
        })
        .await;
    }
}

/// A new resolver handle and the feed and stop signal its task drives.
pub(crate) fn parts(
    key: ServiceKey,
    config: ResolverConfig,
    wake: Option<Arc<Notify>>,
    reporter: Option<Arc<Reporter>>,
) -> (Resolver, Feed, watch::Receiver<bool>) {
    let view = initial_view(&key, config.last_known_good.as_deref());
    let (publish, views) = watch::channel(Arc::new(view.clone()));
    let (stop, stopped) = watch::channel(false);
    let stale_log = Arc::new(StaleLog::new(key.clone(), &config.budget));
    let resolver = Resolver {
        inner: Arc::new(Inner {
            key,
            budget: config.budget,
            stale_log: Arc::clone(&stale_log),
            views,
            stop,
            wake,
        }),
    };
    if let Some(reporter) = &reporter {
        reporter.follow(resolver.key());
    }
    let feed = Feed {
        view,
        publish,
        last_known_good: config.last_known_good,
        reporter,
        stale_log,
    };
    (resolver, feed, stopped)
}

impl Resolver {
    /// Starts following `key` over its own watch: loads the last-known-good set if configured
    /// (usable at once, within the stale budget), then connects.
    pub fn start(client: Client, key: ServiceKey, config: ResolverConfig) -> Resolver {
        let (resolver, feed, stopped) = parts(key, config, None, client.reporter());
        tokio::spawn(follow(client, feed, stopped));
        resolver
    }

    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.inner
    }

    pub(crate) fn from_inner(inner: Arc<Inner>) -> Resolver {
        Resolver { inner }
    }

    /// The service.
    pub fn key(&self) -> &ServiceKey {
        &self.inner.key
    }

    /// The current view.
    pub fn view(&self) -> Arc<View> {
        Arc::clone(&self.inner.views.borrow())
    }

    /// Received, validated and active revisions, the age of the active set, and why there is
    /// none (unknown service, last transport error).
    pub fn status(&self) -> ViewStatus {
        let status = self.view().status(now_ms());
        self.inner.stale_log.observe(status.age_ms);
        status
    }

    /// The stale budget this resolver's views are judged by.
    pub fn budget(&self) -> &StaleBudget {
        &self.inner.budget
    }

    /// The set an operation of this risk may use now, or why it may not. Read-only
    /// operations ([`Risk::ReadOnly`], what balancers use by default) keep the last known
    /// set beyond the stale budget, marked [`Usable::stale`]; mutations fail closed
    /// (SPEC C2). A service the server holds nothing of fails `unknown_service` at once.
    pub fn usable(&self, risk: Risk) -> Result<Usable, StaleError> {
        let usable = self.view().usable(risk, &self.inner.budget, now_ms());
        match &usable {
            Ok(usable) => self.inner.stale_log.observe(Some(usable.age_ms)),
            Err(StaleError::Stale { age_ms, .. }) if risk != Risk::Privileged => {
                self.inner.stale_log.observe(Some(*age_ms))
            }
            Err(_) => {}
        }
        usable
    }

    /// Waits for the first view, at most `timeout`, then answers as [`Resolver::usable`] for a
    /// read: the set, `unknown_service` as soon as the server says it holds nothing of the
    /// service, or `unavailable` with the last transport error when no view came in time.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = muster_testkit::server::InProcess::start().await;
    /// # let client = server.client();
    /// use std::time::Duration;
    /// use muster_client::{Resolver, ResolverConfig};
    ///
    /// let resolver = Resolver::start(client, "prod/web-typo".parse()?, ResolverConfig::default());
    /// let error = resolver.first_view(Duration::from_secs(5)).await.unwrap_err();
    /// assert_eq!(error.code(), "unknown_service");
    /// assert_eq!(error.to_string(), "unknown_service: the registry holds nothing of default/prod/web-typo");
    /// # Ok(()) }
    /// ```
    pub async fn first_view(&self, timeout: Duration) -> Result<Usable, StaleError> {
        let mut views = self.subscribe();
        // Timing out is no error here: `usable` says what there is, and why not.
        let _ = tokio::time::timeout(
            timeout,
            views.wait_for(|view| view.active().is_some() || view.is_unknown()),
        )
        .await;
        self.usable(Risk::ReadOnly)
    }

    /// Every published view, for a caller that reacts to changes (a balancer, `Discover`).
    pub fn subscribe(&self) -> watch::Receiver<Arc<View>> {
        self.inner.views.clone()
    }

    /// The published views as a [`futures_core::Stream`]: the current one at once, then each
    /// one published after it (a frame may publish a view whose set did not change: compare
    /// [`View::active`] by pointer to see set changes). A reader that lags sees the latest
    /// view, not every one in between. The stream ends when the resolver stops.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = muster_testkit::server::InProcess::start().await;
    /// # let client = server.client();
    /// use std::future::poll_fn;
    /// use std::pin::Pin;
    /// use futures_core::Stream;
    /// use muster_client::{Incarnation, InstanceId, Registration, Resolver, ResolverConfig, ServingState};
    ///
    /// let key: muster_client::ServiceKey = "prod/web".parse()?;
    /// let resolver = Resolver::start(client.clone(), key.clone(), ResolverConfig::default());
    /// let mut changes = resolver.changes();
    /// let web_1 = Registration::new(Incarnation(1)).address("10.0.0.7").port("http", 8080).serving(ServingState::Ready);
    /// client.register(&key, &InstanceId::new("web-1")?, web_1).await?;
    /// // With futures' StreamExt: `while let Some(view) = changes.next().await`.
    /// loop {
    ///     let view = poll_fn(|cx| Pin::new(&mut changes).poll_next(cx)).await.expect("the resolver runs");
    ///     if let Some(set) = view.active().filter(|set| !set.is_empty()) {
    ///         assert_eq!(set.len(), 1);
    ///         break;
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn changes(&self) -> ViewChanges {
        ViewChanges::new(self.subscribe())
    }

    /// Stops following, for every handle of this resolver, and returns once the task has
    /// let go of the view; the last view stays readable from earlier subscriptions.
    pub async fn stop(self) {
        let mut views = self.subscribe();
        self.inner.signal_stop();
        drop(self);
        // The task drops its sender when it stops: then `changed` fails.
        while views.changed().await.is_ok() {}
    }
}

type NextView = Pin<Box<dyn Future<Output = Option<(Arc<View>, watch::Receiver<Arc<View>>)>> + Send>>;

/// A resolver's views as a stream ([`Resolver::changes`]).
pub struct ViewChanges {
    next: Option<NextView>,
}

impl std::fmt::Debug for ViewChanges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ViewChanges")
            .field("ended", &self.next.is_none())
            .finish()
    }
}

impl ViewChanges {
    fn new(views: watch::Receiver<Arc<View>>) -> ViewChanges {
        ViewChanges {
            next: Some(Box::pin(next_view(views, true))),
        }
    }
}

async fn next_view(
    mut views: watch::Receiver<Arc<View>>,
    first: bool,
) -> Option<(Arc<View>, watch::Receiver<Arc<View>>)> {
    if !first {
        views.changed().await.ok()?;
    }
    let view = Arc::clone(&views.borrow_and_update());
    Some((view, views))
}

impl futures_core::Stream for ViewChanges {
    type Item = Arc<View>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Arc<View>>> {
        let Some(next) = self.next.as_mut() else {
            return Poll::Ready(None);
        };
        match next.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some((view, views))) => {
                self.next = Some(Box::pin(next_view(views, false)));
                Poll::Ready(Some(view))
            }
            Poll::Ready(None) => {
                self.next = None;
                Poll::Ready(None)
            }
        }
    }
}

async fn follow(client: Client, mut feed: Feed, mut stopped: watch::Receiver<bool>) {
    let key = feed.view.key().clone();
    // Not from the key alone: every client of this service would then back off in step.
    let mut rng = SplitMix64::per_process(&key);
    let mut backoff = MIN_BACKOFF;
    loop {
        let from = if feed.view.status(now_ms()).resnapshot_pending {
            None
        } else {
            feed.view.resume_from()
        };
        tracing::debug!(service = %key, from = ?from, "watch");
        let opened = tokio::select! {
            _ = stopped.wait_for(|stop| *stop) => return,
            opened = client.watch_service(&key, from, IDLE_TIMEOUT) => opened,
        };
        let mut stream = match opened {
            Ok(stream) => stream,
            Err(error) => {
                tracing::warn!(service = %key, %error, "watch failed; the last set stays in use");
                feed.transport_error(&error).await;
                // A refusal (not an outage) of the resume point repeats on every retry: e.g.
                // `future_revision` from a registry that lost its state. Resnapshot instead.
                if let crate::http::ClientError::Api { body, .. } = &error
                    && !error.is_transient()
                    && from.is_some()
                {
                    feed.step(|view| view.on_refused(&body.error)).await;
                }
                if pause(&mut stopped, jittered(backoff, &mut rng)).await {
                    return;
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
        };
        loop {
            let frame = tokio::select! {
                _ = stopped.wait_for(|stop| *stop) => return,
                frame = stream.next_frame() => frame,
            };
            let next = match frame {
                Ok(Some((_, frame))) => {
                    backoff = MIN_BACKOFF;
                    feed.step(|view| view.on_frame(&frame, now_ms())).await
                }
                Ok(None) => break,
                Err(error @ crate::http::ClientError::BadReply { .. }) => {
                    feed.step(|view| view.on_undecodable(&error.to_string())).await
                }
                Err(error) => {
                    tracing::warn!(service = %key, %error, "watch lost; resuming");
                    feed.transport_error(&error).await;
                    break;
                }
            };
            if let Next::Resnapshot(why) = next {
                tracing::info!(service = %key, ?why, "resnapshot");
                break;
            }
        }
        if pause(&mut stopped, jittered(backoff, &mut rng)).await {
            return;
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// `base` ± 50%, so a fleet that lost the same server does not come back in step.
pub(crate) fn jittered(base: Duration, rng: &mut impl RngCore) -> Duration {
    let half = base.as_millis() as u64 / 2;
    Duration::from_millis(half + rng.next_u64() % (half * 2 + 1))
}

/// Sleeps, unless told to stop first (then returns `true`).
pub(crate) async fn pause(stopped: &mut watch::Receiver<bool>, delay: Duration) -> bool {
    tokio::select! {
        _ = stopped.wait_for(|stop| *stop) => true,
        _ = tokio::time::sleep(delay) => false,
    }
}
