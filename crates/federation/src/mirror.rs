//! The mirrors: while this node leads its region, one task per (peer, import) watches the
//! peer's API and proposes what it hears as [`Command::Mirror`]s (SPEC G2).
//!
//! ```text
//!  open watch (from the replicated cursor; none: snapshot*) ──frames──▶ batch of ready frames
//!     snapshot* progress(R) ──▶ Mirror{Replace(sets), cursor R}
//!     update*               ──▶ Mirror{Updates, cursor = last revision}
//!     progress(R), quiet    ──▶ Mirror{Progress, cursor R}, at most once per heartbeat
//!     compacted / resync / refused as a gap ──▶ a fresh snapshot
//!     closing / end / lost ──▶ resume from the cursor (after a jittered backoff when lost)
//! ```
//! The cursor lives in the replicated mirror table, so a new leader resumes where the old
//! one's last committed mirror left off: no re-list while the peer's history covers it.
//! Proposals go through [`Gate::propose_as_leader`](muster_gate::Gate::propose_as_leader): a deposed
//! leader's mirror cannot commit, and the registry refuses a cursor that steps back.

use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use muster_client::Client;
use muster_core::api::Frame;
use muster_core::federation::ImportScope;
use muster_core::{Actor, ErrorCode, Label, Principal, Revision, ServiceKey, ServiceSnapshot, ServiceUpdate};
use muster_registry::{Command, Mirror, MirrorChange};

use tokio::time::Instant;

use crate::region::{Federation, Peer};
use muster_gate::Gate;

/// The most frames one proposal carries: a burst of a busy peer becomes a few log entries
/// of bounded size, not one per frame nor one unbounded entry.
const MAX_BATCH: usize = 512;
/// Reconnect backoff after a failure: from the first value, doubling, to the last. A partition
/// heals into a resume within 5 s; an unreachable peer costs one attempt per 5 s.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(200), Duration::from_secs(5));
/// A watch silent this long is lost: three of a peer's default 5 s `progress` frames.
const IDLE_TIMEOUT: Duration = Duration::from_secs(15);

/// The mirrors for one term of leadership (a leader duty, `muster_leader::duties`): one
/// follower per import, until the runner aborts this when the term ends; the links then read
/// disconnected.
pub async fn lead(gate: Arc<Gate>, federation: Arc<Federation>) {
    /// Marks every link disconnected when the term's mirrors end.
    struct Disconnect(Arc<Federation>);
    impl Drop for Disconnect {
        fn drop(&mut self) {
            for link in self
                .0
                .links
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .values_mut()
            {
                link.connected = false;
            }
        }
    }
    let _disconnect = Disconnect(Arc::clone(&federation));
    forget_unconfigured(&gate, &federation).await;
    // The followers are this future's own, not tasks: aborting the term's duty drops them
    // with it, before `Disconnect` runs, so none outlives the term.
    let followers = federation
        .peers
        .iter()
        .flat_map(|peer| peer.imports.iter().map(move |import| (peer, import)))
        .map(|(peer, import)| follow(&gate, &federation, peer, import));
    futures_util::future::join_all(followers).await;
}

/// Forgets every held import the configuration no longer names (a peer or an import
/// removed): proposed once per leadership; one that fails is tried at the next.
async fn forget_unconfigured(gate: &Gate, federation: &Federation) {
    let stale: Vec<(Label, ImportScope, Revision)> = gate.read(|registry| {
        registry
            .mirrors()
            .filter(|held| {
                !federation
                    .peers
                    .iter()
                    .any(|peer| peer.name == held.region && peer.imports.contains(&held.import))
            })
            .map(|held| (held.region.clone(), held.import.clone(), held.cursor))
            .collect()
    });
    for (region, import, cursor) in stale {
        let principal = Principal::new(&format!("muster-mirror:{region}")).expect("a valid principal");
        let command = Command::Mirror(Mirror {
            region: region.clone(),
            import: import.clone(),
            cursor,
            change: MirrorChange::Forget,
        });
        match gate
            .propose_as_leader(command, gate.meta_as(Actor::Owner, &principal))
            .await
        {
            Ok(Ok(_)) => tracing::info!(%region, %import, "mirror: an import no longer configured is forgotten"),
            Ok(Err(rejection)) => tracing::warn!(%region, %import, %rejection, "mirror: forgetting refused"),
            Err(err) => tracing::warn!(%region, %import, %err, "mirror: forgetting not committed"),
        }
    }
}

/// How one watch ended.
enum Ended {
    /// The peer closed it (stopping, or the stream ended): resume from the cursor.
    Resume,
    /// The mirror must start over from a fresh snapshot.
    Resnapshot(String),
    /// The peer could not be reached or followed.
    Failed(String),
}

async fn follow(gate: &Gate, federation: &Federation, peer: &Peer, import: &ImportScope) {
    let mut builder = Client::builder(peer.url.clone());
    if let Some(token) = &peer.token {
        builder = builder.token(token.expose());
    }
    let client = match builder.build() {
        Ok(client) => client,
        Err(err) => {
            federation.with_link(&peer.name, import, |l| l.last_error = Some(err.to_string()));
            return;
        }
    };
    let mut fresh = false;
    let mut backoff = BACKOFF.0;
    let cursor = || gate.read(|r| r.mirror(&peer.name, import).map(|m| m.cursor));
    loop {
        let before = cursor();
        let ended = follow_once(gate, federation, peer, import, &client, &mut fresh).await;
        federation.with_link(&peer.name, import, |l| l.connected = false);
        // A watch that got somewhere was healthy: the next failure starts the backoff over.
        if cursor() > before {
            backoff = BACKOFF.0;
        }
        let pause = match ended {
            // A fresh snapshot still owed stays owed (`follow_once` clears it once one commits).
            // A peer that ends every stream at once must not be reconnected to in a busy loop.
            Ended::Resume => {
                tokio::time::sleep(BACKOFF.0).await;
                false
            }
            Ended::Resnapshot(why) => {
                tracing::info!(region = %peer.name, %import, why, "mirror: taking a fresh snapshot");
                federation.with_link(&peer.name, import, |l| {
                    l.resnapshots += 1;
                    l.last_error = Some(why);
                });
                // A second fresh snapshot in a row waits too: one refused again (a peer node
                // behind the held cursor) must not turn into a busy loop against the peer.
                let again = fresh;
                fresh = true;
                again
            }
            Ended::Failed(why) => {
                tracing::debug!(region = %peer.name, %import, why, "mirror: peer unreachable");
                federation.with_link(&peer.name, import, |l| l.last_error = Some(why));
                true
            }
        };
        if pause {
            // Jitter from the clock's low bits: reconnecting mirrors do not move in step.
            let jitter = u64::from(gate.clock.unix_now_ms().to_le_bytes()[0]) % 100;
            tokio::time::sleep(backoff.mul_f64(0.5 + jitter as f64 / 200.0)).await;
            backoff = (backoff * 2).min(BACKOFF.1);
        }
    }
}

async fn follow_once(
    gate: &Gate,
    federation: &Federation,
    peer: &Peer,
    import: &ImportScope,
    client: &Client,
    fresh: &mut bool,
) -> Ended {
    let held = gate.read(|r| r.mirror(&peer.name, import).map(|m| m.cursor));
    let from = held.filter(|c| !*fresh && *c > Revision::ZERO);
    let opened = match &import.service {
        Some(service) => {
            let key = ServiceKey {
                tenant: import.namespace.tenant.clone(),
                namespace: import.namespace.namespace.clone(),
                service: service.clone(),
            };
            client.watch_service(&key, from, IDLE_TIMEOUT).await
        }
        None => client.watch_namespace(&import.namespace, from, IDLE_TIMEOUT).await,
    };
    let mut watch = match opened {
        Ok(watch) => watch,
        Err(err) => return Ended::Failed(err.to_string()),
    };
    federation.with_link(&peer.name, import, |l| {
        l.connected = true;
        l.last_error = None;
    });
    let mirror = Mirroring {
        gate,
        federation,
        peer,
        import,
    };
    // Before the first progress frame of a watch without a cursor, the peer sends every set.
    let mut snapshots: Option<Vec<ServiceSnapshot>> = from.is_none().then(Vec::new);
    // The cursor only ever moves to a `progress` revision: everything up to it has been sent.
    // An update's own revision is no cursor: a lagging watcher's coalesced backlog comes in
    // per-service order, and one revision's updates of several services may straddle two
    // batches. Updates past the cursor are applied anyway; replaying them after a resume is
    // a no-op (each set skips updates at or before its own revision).
    let mut cursor = from.unwrap_or(Revision::ZERO);
    let mut last_heard: Option<Instant> = None;
    loop {
        let first = match watch.next_frame().await {
            Ok(Some((_, frame))) => frame,
            Ok(None) => return Ended::Resume,
            Err(err) => return Ended::Failed(err.to_string()),
        };
        let mut frames = vec![first];
        // What ended the stream while draining, kept for after this batch is proposed.
        let mut tail = None;
        while frames.len() < MAX_BATCH {
            match watch.next_frame().now_or_never() {
                Some(Ok(Some((_, frame)))) => frames.push(frame),
                Some(Ok(None)) => {
                    tail = Some(Ended::Resume);
                    break;
                }
                Some(Err(err)) => {
                    tail = Some(Ended::Failed(err.to_string()));
                    break;
                }
                None => break,
            }
        }
        let mut updates: Vec<ServiceUpdate> = Vec::new();
        let mut progress: Option<Revision> = None;
        let mut ended = None;
        for frame in frames {
            match frame {
                Frame::Snapshot { snapshot, .. } => {
                    if let Some(sets) = snapshots.as_mut() {
                        sets.push(snapshot);
                    }
                }
                Frame::Update(update) => {
                    mirror.seen(update.revision);
                    updates.push(update);
                }
                Frame::Progress { revision } => {
                    mirror.seen(revision);
                    match snapshots.take() {
                        Some(sets) => {
                            if let Err(ended) = mirror.propose(revision, MirrorChange::Replace(sets)).await {
                                return ended;
                            }
                            // From here on a lost watch resumes from this snapshot's cursor.
                            *fresh = false;
                            cursor = revision;
                            last_heard = Some(Instant::now());
                        }
                        None => progress = progress.max(Some(revision)),
                    }
                }
                Frame::Error { error, .. } if error.code == ErrorCode::Compacted.as_str() => {
                    ended = Some(Ended::Resnapshot(format!(
                        "the peer compacted past the cursor: {}",
                        error.message
                    )));
                    break;
                }
                Frame::Error { error, .. } => {
                    ended = Some(Ended::Failed(format!("{}: {}", error.code, error.message)));
                    break;
                }
                // Too far behind for the peer's queue: its history may still cover the
                // cursor, so resume from it (a `compacted` answer then asks for a snapshot).
                Frame::Resync { .. } | Frame::Closing { .. } => {
                    ended = Some(Ended::Resume);
                    break;
                }
            }
        }
        let next = progress.map_or(cursor, |p| p.max(cursor));
        let due = last_heard.is_none_or(|at| at.elapsed() >= federation.heartbeat);
        let change = if !updates.is_empty() {
            Some(MirrorChange::Updates(updates))
        } else if progress.is_some() && due {
            // Heard from the peer: the set's age starts over, even when nothing changed.
            Some(MirrorChange::Progress)
        } else {
            None
        };
        if let Some(change) = change {
            if let Err(ended) = mirror.propose(next, change).await {
                return ended;
            }
            cursor = next;
            last_heard = Some(Instant::now());
        }
        if let Some(ended) = ended.or(tail) {
            return ended;
        }
    }
}

/// One import's mirror, proposing.
struct Mirroring<'a> {
    gate: &'a Gate,
    federation: &'a Federation,
    peer: &'a Peer,
    import: &'a ImportScope,
}

impl Mirroring<'_> {
    /// Notes the newest peer revision the watch has shown.
    fn seen(&self, revision: Revision) {
        self.federation.with_link(&self.peer.name, self.import, |l| {
            if revision > l.peer_revision {
                l.peer_revision = revision;
                l.behind_since.get_or_insert_with(Instant::now);
            }
        });
    }

    /// Notes what a committed proposal brought here: caught up once it reaches what the
    /// watch has shown.
    fn committed(&self, applied: Revision) {
        self.federation.with_link(&self.peer.name, self.import, |l| {
            l.applied = l.applied.max(applied);
            if l.applied >= l.peer_revision {
                l.behind_since = None;
            }
        });
    }

    async fn propose(&self, cursor: Revision, change: MirrorChange) -> Result<(), Ended> {
        let applied = match &change {
            MirrorChange::Updates(updates) => updates.iter().map(|u| u.revision).fold(cursor, Revision::max),
            MirrorChange::Replace(_) | MirrorChange::Progress | MirrorChange::Forget => cursor,
        };
        let command = Command::Mirror(Mirror {
            region: self.peer.name.clone(),
            import: self.import.clone(),
            cursor,
            change,
        });
        let principal = Principal::new(&format!("muster-mirror:{}", self.peer.name)).expect("a valid principal");
        match self
            .gate
            .propose_as_leader(command, self.gate.meta_as(Actor::Owner, &principal))
            .await
        {
            Ok(Ok(_)) => {
                self.committed(applied);
                Ok(())
            }
            Ok(Err(rejection)) if rejection.error_code() == ErrorCode::MirrorGap => {
                Err(Ended::Resnapshot(rejection.to_string()))
            }
            Ok(Err(rejection)) => Err(Ended::Failed(rejection.to_string())),
            Err(err) => Err(Ended::Failed(format!("not committed here: {err}"))),
        }
    }
}
