//! The resolver: the I/O shell that keeps one service's [`View`] current over a watch, and
//! hands it to callers (SPEC C1, C2).
//!
//! ```text
//!  last-known-good file ──load──▶ View ◀──frames── watch (from the view's revision, or a
//!                                   │               fresh "snapshot then stream" watch)
//!                                   ├──publish──▶ watch::Receiver<Arc<View>> (readers, Discover)
//!                                   └──save─────▶ last-known-good file (when the set changes)
//! ```
//!
//! All decisions are the view's; this loop only connects, feeds frames, reconnects with
//! jittered exponential backoff, and publishes. A registry outage keeps the last set (the
//! view never empties itself); its age grows until the stale budget says stop.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use muster_core::ServiceKey;
use rand_core::RngCore;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::http::Client;
use crate::lkg;
use crate::seed::SplitMix64;
use crate::view::{Next, Risk, StaleBudget, StaleError, Usable, View, ViewStatus};

/// First reconnect delay: quick enough that a restarted server is picked up at once.
const MIN_BACKOFF: Duration = Duration::from_millis(100);
/// Longest reconnect delay: 5 s keeps a fleet's reconnect storm spread out (jittered) while
/// staying well inside the default 30 s stale budget.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// A watch silent this long is lost: the server sends progress every 5 s, so three missed
/// progress frames.
const IDLE_TIMEOUT: Duration = Duration::from_secs(15);

/// How a resolver behaves.
#[derive(Debug, Clone, Default)]
pub struct ResolverConfig {
    /// How stale a view each kind of operation may use.
    pub budget: StaleBudget,
    /// Where to keep the last-known-good set across restarts (none: not kept).
    pub last_known_good: Option<PathBuf>,
}

/// Keeps one service's view current in the background.
#[derive(Debug)]
pub struct Resolver {
    key: ServiceKey,
    budget: StaleBudget,
    views: watch::Receiver<Arc<View>>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// Milliseconds on the wall clock: ages must survive a restart (the last-known-good file
/// records when the server last confirmed its set), which a monotonic clock cannot span.
#[allow(
    clippy::disallowed_methods,
    reason = "the resolver is the I/O shell; views take this time as an input"
)]
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Resolver {
    /// Starts following `key`: loads the last-known-good set if configured (usable at once,
    /// within the stale budget), then connects.
    pub fn start(client: Client, key: ServiceKey, config: ResolverConfig) -> Resolver {
        let mut view = View::new(key.clone());
        if let Some(path) = &config.last_known_good {
            match lkg::load(path) {
                Ok(Some(saved)) => view.install_last_known_good(saved.snapshot, saved.current_to, saved.confirmed_ms),
                Ok(None) => {}
                Err(error) => tracing::warn!(service = %key, %error, "last-known-good set ignored"),
            }
        }
        let (publish, views) = watch::channel(Arc::new(view.clone()));
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(follow(client, view, publish, stopped, config.last_known_good));
        Resolver {
            key,
            budget: config.budget,
            views,
            stop,
            task,
        }
    }

    /// The service.
    pub fn key(&self) -> &ServiceKey {
        &self.key
    }

    /// The current view.
    pub fn view(&self) -> Arc<View> {
        Arc::clone(&self.views.borrow())
    }

    /// Received, validated and active revisions and the age of the active set.
    pub fn status(&self) -> ViewStatus {
        self.view().status(now_ms())
    }

    /// The set an operation of this risk may use now, or why it may not.
    pub fn usable(&self, risk: Risk) -> Result<Usable, StaleError> {
        self.view().usable(risk, &self.budget, now_ms())
    }

    /// Every published view, for a caller that reacts to changes (a balancer, `Discover`).
    pub fn subscribe(&self) -> watch::Receiver<Arc<View>> {
        self.views.clone()
    }

    /// Stops following; the last view stays readable from earlier subscriptions.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

async fn follow(
    client: Client,
    mut view: View,
    publish: watch::Sender<Arc<View>>,
    mut stopped: watch::Receiver<bool>,
    last_known_good: Option<PathBuf>,
) {
    let key = view.key().clone();
    // Not from the key alone: every client of this service would then back off in step.
    let mut rng = SplitMix64::per_process(&key);
    let mut backoff = MIN_BACKOFF;
    loop {
        let from = if view.status(now_ms()).resnapshot_pending {
            None
        } else {
            view.resume_from()
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
                // A refusal (not an outage) of the resume point repeats on every retry: e.g.
                // `future_revision` from a registry that lost its state. Resnapshot instead.
                if let crate::http::ClientError::Api { body, .. } = &error
                    && !error.is_transient()
                    && from.is_some()
                {
                    view.on_refused(&body.error);
                    publish.send_replace(Arc::new(view.clone()));
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
            let before = view.active().map(|set| Arc::as_ptr(set) as usize);
            let next = match frame {
                Ok(Some((_, frame))) => {
                    backoff = MIN_BACKOFF;
                    view.on_frame(&frame, now_ms())
                }
                Ok(None) => break,
                Err(error @ crate::http::ClientError::BadReply { .. }) => view.on_undecodable(&error.to_string()),
                Err(error) => {
                    tracing::warn!(service = %key, %error, "watch lost; resuming");
                    break;
                }
            };
            let changed = view.active().map(|set| Arc::as_ptr(set) as usize) != before;
            publish.send_replace(Arc::new(view.clone()));
            if changed && let Some(path) = &last_known_good {
                let (saved, path) = (view.clone(), path.clone());
                let written = tokio::task::spawn_blocking(move || lkg::save(&saved, now_ms(), &path)).await;
                if let Ok(Err(error)) = written {
                    tracing::warn!(service = %key, %error, "last-known-good set not saved");
                }
            }
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
fn jittered(base: Duration, rng: &mut impl RngCore) -> Duration {
    let half = base.as_millis() as u64 / 2;
    Duration::from_millis(half + rng.next_u64() % (half * 2 + 1))
}

/// Sleeps, unless told to stop first (then returns `true`).
async fn pause(stopped: &mut watch::Receiver<bool>, delay: Duration) -> bool {
    tokio::select! {
        _ = stopped.wait_for(|stop| *stop) => true,
        _ = tokio::time::sleep(delay) => false,
    }
}
