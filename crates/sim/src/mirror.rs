//! The simulated mirror: a model of the server's mirror loop
//! (`crates/federation/src/mirror.rs`) that runs on whichever node of region b
//! leads, follows region a's `acme/prod/*` over the [`Wan`], and proposes what it hears as
//! [`Command::Mirror`]s on b's leader (`Node::propose_as_leader`, as the server does).
//!
//! ```text
//!  b's leader? ── no: wait a leadership poll ── a new leader or term: a new session
//!  session: from its position; none: from b's replicated cursor; fresh: no cursor
//!     no cursor  ──WAN──▶ a's node: every set of the namespace at R ──▶ Mirror{Replace, R}
//!     cursor C   ──WAN──▶ a's node: changes_since(C) up to R         ──▶ Mirror{Updates, R}
//!                                   nothing new, heartbeat due        ──▶ Mirror{Progress, R}
//!     compacted / refused as a gap ──▶ fresh snapshot;  lost / future revision / not
//!     committed ──▶ session over, resume from b's cursor after a doubling backoff
//! ```
//!
//! As in the server, the watch is opened on the peer's address. That is a load balancer
//! in front of a's nodes here: a's leader three times in four when a has one, any running
//! node otherwise, so a watch may begin on a follower that lags what b already holds. A
//! session keeps reading the node it opened on, leader or not, until the watch breaks. The watch's stream is modelled as
//! one read per poll: the read carries everything of the namespace up to the node's
//! revision, as the stream's frames up to a progress frame would.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use muster_core::federation::ImportScope;
use muster_core::{Actor, ErrorCode, Label, Principal, Revision, ServiceSnapshot, ServiceUpdate};
use muster_registry::{Command, CommandMeta, Mirror, MirrorChange, ReadError, Registry, Scope};

use crate::clock::Clock;
use crate::net::Net;
use crate::rng::SimRng;
use crate::run::lock;
use crate::trace::Trace;
use crate::wan::Wan;

/// How often the mirror looks for the next frames: the stream's latency, roughly.
const POLL: Duration = Duration::from_millis(50);
/// How often leadership is checked while b has no leader (the server's 200 ms).
const LEADERSHIP_POLL: Duration = Duration::from_millis(200);
/// A `Progress` at most this often while nothing changes (the server's heartbeat).
const HEARTBEAT_MS: u64 = 1_000;
/// Reconnect backoff: from the first value, doubling, to the last. The server's is 0.2–5 s;
/// the top is 2 s here so a run of ~20 simulated seconds still sees several reconnects.
const BACKOFF_MS: (u64, u64) = (200, 2_000);
/// How long a proposal may take before the mirror gives up on it: beyond the batcher's
/// 5 s write timeout, which `propose_as_leader` applies itself.
const PROPOSE_WAIT: Duration = Duration::from_secs(7);

/// What the mirror did, for the report.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct MirrorStats {
    /// Mirror commands committed with a change.
    pub changes: u64,
    /// Mirror commands committed as progress only.
    pub progress: u64,
    /// Fresh snapshots taken (compacted, or a gap).
    pub resnapshots: u64,
    /// Watches that broke (lost, refused, not committed).
    pub failures: u64,
}

/// How the beginning of a watch read on a's node.
enum Beginning {
    Snapshots(Vec<ServiceSnapshot>, Revision),
    Replay(Vec<ServiceUpdate>, Revision),
    Compacted,
    Future(Revision),
}

/// Where a watch is: which leader of b runs it, which node of a serves it, how far it read.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Session {
    leader: u64,
    term: u64,
    source: u64,
    position: Revision,
    last_proposed_ms: Option<u64>,
}

/// The mirror of one import of region a into region b.
pub struct SimMirror {
    /// Region a's name, as b's mirror table records it.
    pub region: Label,
    /// The import: `acme/prod/*`.
    pub import: ImportScope,
    /// Region a's nodes.
    pub source: Arc<Net>,
    /// Region b's nodes.
    pub target: Arc<Net>,
    /// The link between them.
    pub wan: Arc<Wan>,
    /// The clock.
    pub clock: Clock,
    /// Where it reports.
    pub trace: Arc<Mutex<Trace>>,
    /// What it did.
    pub stats: Arc<Mutex<MirrorStats>>,
    /// Set when the run ends.
    pub stop: Arc<AtomicBool>,
    /// Picks a's node when a has no leader.
    pub rng: SimRng,
}

/// How one round ended, when it ended the session.
enum Ended {
    Resnapshot(String),
    Failed(String),
}

impl SimMirror {
    fn line(&self, line: &str) {
        lock(&self.trace).line(self.clock.now_ms(), &format!("mirror: {line}"));
    }

    /// Runs until [`SimMirror::stop`] is set.
    pub async fn run(mut self) {
        let mut session: Option<Session> = None;
        let mut fresh = false;
        let mut backoff = BACKOFF_MS.0;
        while !self.stop.load(Ordering::Relaxed) {
            let leader = self
                .target
                .nodes()
                .into_iter()
                .find_map(|(id, node)| node.leading_term().map(|term| (id, term)));
            let Some((leader, term)) = leader else {
                session = None;
                tokio::time::sleep(LEADERSHIP_POLL).await;
                continue;
            };
            if session.is_some_and(|s| (s.leader, s.term) != (leader, term)) {
                session = None;
            }
            match self.round(leader, term, &mut session, fresh).await {
                Ok(()) => {
                    fresh = false;
                    backoff = BACKOFF_MS.0;
                    tokio::time::sleep(POLL).await;
                }
                Err(Ended::Resnapshot(why)) => {
                    self.line(&format!("taking a fresh snapshot: {why}"));
                    lock(&self.stats).resnapshots += 1;
                    session = None;
                    fresh = true;
                    tokio::time::sleep(POLL).await;
                }
                Err(Ended::Failed(why)) => {
                    self.line(&format!("watch broke: {why}; again in {backoff} ms"));
                    lock(&self.stats).failures += 1;
                    session = None;
                    tokio::time::sleep(Duration::from_millis(backoff)).await;
                    backoff = (backoff * 2).min(BACKOFF_MS.1);
                }
            }
        }
    }

    /// One read of the watch and, if it brought anything to commit, one proposal.
    async fn round(&mut self, leader: u64, term: u64, session: &mut Option<Session>, fresh: bool) -> Result<(), Ended> {
        let Some(node) = self.target.node(leader) else {
            return Err(Ended::Failed(format!("b's leader n{leader} stopped")));
        };
        let current = match *session {
            Some(s) => s,
            None => {
                let held = node.read(|r| r.mirror(&self.region, &self.import).map(|m| m.cursor));
                let from = held.filter(|c| !fresh && *c > Revision::ZERO).unwrap_or(Revision::ZERO);
                Session {
                    leader,
                    term,
                    source: self.pick_source(),
                    position: from,
                    last_proposed_ms: None,
                }
            }
        };
        let from = (current.position > Revision::ZERO).then_some(current.position);
        let (source, scope) = (Arc::clone(&self.source), self.import.clone());
        let read = self
            .wan
            .exchange(|| source.node(current.source).map(|n| n.read(|r| begin(r, &scope, from))))
            .await
            .map_err(|lost| Ended::Failed(lost.to_string()))?;
        let now = self.clock.now_ms();
        let heartbeat_due = current.last_proposed_ms.is_none_or(|at| now >= at + HEARTBEAT_MS);
        let (cursor, change) = match read {
            Beginning::Compacted => return Err(Ended::Resnapshot("a compacted past the cursor".into())),
            Beginning::Future(at) => {
                return Err(Ended::Failed(format!(
                    "a's n{} is at revision {at}, behind the cursor",
                    current.source
                )));
            }
            Beginning::Snapshots(sets, at) => (at, MirrorChange::Replace(sets)),
            Beginning::Replay(updates, at) if !updates.is_empty() => (at, MirrorChange::Updates(updates)),
            Beginning::Replay(_, at) if heartbeat_due => (at, MirrorChange::Progress),
            Beginning::Replay(..) => {
                *session = Some(current);
                return Ok(());
            }
        };
        let what = describe(&change, cursor);
        self.propose(&node, cursor, change).await?;
        self.line(&format!("n{leader} committed {what} (from a's n{})", current.source));
        *session = Some(Session {
            position: cursor,
            last_proposed_ms: Some(now),
            ..current
        });
        Ok(())
    }

    /// The node the peer's address reaches: mostly its leader, or any running node.
    fn pick_source(&mut self) -> u64 {
        let nodes = self.source.nodes();
        let leader = nodes.iter().find(|(_, n)| n.is_leader());
        if let Some((id, _)) = leader
            && self.rng.chance(750)
        {
            return *id;
        }
        let ids: Vec<u64> = nodes.keys().copied().collect();
        if ids.is_empty() { 0 } else { *self.rng.pick(&ids) }
    }

    async fn propose(
        &self,
        node: &muster_consensus::Node,
        cursor: Revision,
        change: MirrorChange,
    ) -> Result<(), Ended> {
        let progress = matches!(change, MirrorChange::Progress);
        let command = Command::Mirror(Mirror {
            region: self.region.clone(),
            import: self.import.clone(),
            cursor,
            change,
        });
        let meta = CommandMeta {
            at_ms: self.clock.now_ms(),
            principal: Principal::new(&format!("muster-mirror:{}", self.region.as_str())).expect("a valid principal"),
            actor: Actor::Owner,
        };
        match tokio::time::timeout(PROPOSE_WAIT, node.propose_as_leader(command, meta)).await {
            Ok(Ok(Ok(applied))) => {
                let mut stats = lock(&self.stats);
                if applied.unchanged.is_none() && !progress {
                    stats.changes += 1;
                } else {
                    stats.progress += 1;
                }
                Ok(())
            }
            Ok(Ok(Err(rejection))) if rejection.error_code() == ErrorCode::MirrorGap => {
                Err(Ended::Resnapshot(rejection.to_string()))
            }
            Ok(Ok(Err(rejection))) => Err(Ended::Failed(format!("refused: {rejection}"))),
            Ok(Err(error)) => Err(Ended::Failed(format!("not committed: {error}"))),
            Err(_) => Err(Ended::Failed("no answer in time".into())),
        }
    }
}

/// What a watch of `import` from `from` begins with on this registry (the server's
/// `watch::start`): every set when there is no cursor, else the changes since it.
fn begin(registry: &Registry, import: &ImportScope, from: Option<Revision>) -> Beginning {
    let at = registry.revision();
    let scope = Scope::Namespace(import.namespace.clone());
    match from {
        None => Beginning::Snapshots(
            registry
                .services(&import.namespace)
                .into_iter()
                .filter(|s| import.covers(s.key()))
                .map(|s| ServiceSnapshot::clone(&s))
                .collect(),
            at,
        ),
        Some(from) if from > at => Beginning::Future(at),
        Some(from) => match registry.changes_since(&scope, from) {
            Ok(updates) => Beginning::Replay(
                updates
                    .into_iter()
                    .filter(|u| import.covers(&u.key))
                    .map(|u| ServiceUpdate::clone(&u))
                    .collect(),
                at,
            ),
            Err(ReadError::Compacted { .. }) => Beginning::Compacted,
            Err(_) => Beginning::Future(at),
        },
    }
}

fn describe(change: &MirrorChange, cursor: Revision) -> String {
    match change {
        MirrorChange::Replace(sets) => format!("replace of {} sets at cursor {cursor}", sets.len()),
        MirrorChange::Updates(updates) => format!("{} updates to cursor {cursor}", updates.len()),
        MirrorChange::Progress => format!("progress to cursor {cursor}"),
        MirrorChange::Forget => format!("forget at cursor {cursor}"),
    }
}
