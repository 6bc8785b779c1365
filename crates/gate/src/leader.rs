//! The leader engine's shell state (SPEC R4, L6, H2–H5): the one [`LeaderEngine`] a node keeps,
//! which term it last took leadership in, and the callers waiting for its replies. Every
//! event runs through [`LeaderLink::with_engine`], which first tells the engine whether this
//! node leads.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use muster_consensus::Node;
use muster_health::checker::CheckerConfig;
use muster_health::preservation::Brakes;
use muster_leader::{LeaderEngine, Now, Reply, ReplyTo};
use muster_registry::Registry;
use rand_core::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;
use tokio::sync::oneshot;

use crate::clock::ServerClock;

/// The time as the engine takes it.
#[must_use]
pub fn now(clock: &ServerClock) -> Now {
    let monotonic_ms = clock.now_ms();
    Now {
        monotonic_ms,
        unix_ms: clock.unix_ms(monotonic_ms),
    }
}

/// The engine a node drives: the checker's jitter from a seeded generator.
pub type Engine = LeaderEngine<Xoshiro256PlusPlus>;

/// The leader's duties and the callers waiting on them.
pub struct LeaderLink {
    /// The leader's duties (locked before the registry is read, never the other way).
    engine: Mutex<Engine>,
    /// Callers waiting for the engine's reply.
    replies: Mutex<HashMap<ReplyTo, oneshot::Sender<Reply>>>,
    next_reply: AtomicU64,
    /// The Raft term the engine last took leadership over in (0: not leading).
    led_term: AtomicU64,
}

impl LeaderLink {
    /// An engine with the checker's limits and the self-preservation brakes; `seed` only has
    /// to differ between servers and runs (the checker's jitter).
    #[must_use]
    pub fn new(checker: CheckerConfig, brakes: Brakes, seed: u64) -> LeaderLink {
        LeaderLink {
            engine: Mutex::new(LeaderEngine::new(
                checker,
                brakes,
                Xoshiro256PlusPlus::seed_from_u64(seed),
            )),
            replies: Mutex::new(HashMap::new()),
            next_reply: AtomicU64::new(0),
            led_term: AtomicU64::new(0),
        }
    }

    /// The engine, locked.
    pub fn engine(&self) -> MutexGuard<'_, Engine> {
        self.engine.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs one engine event over `node`'s registry as it is now. The engine first learns
    /// whether this node leads: a node that just took over starts from the registry it reads
    /// here. Lock order: engine, then registry (the apply path never takes the engine's lock).
    /// The time is read under the engine's lock, so events reach the engine in time order: a
    /// renewal that read its time before a tick expired its lease cannot run after it.
    pub fn with_engine<T>(
        &self,
        node: &Node,
        clock: &ServerClock,
        event: impl FnOnce(&mut Engine, &Registry, Now) -> T,
    ) -> T {
        let mut engine = self.engine();
        let now = now(clock);
        let term = node.leading_term();
        let leader = term.is_some();
        // The term the engine took over in (0: none), changed only under the engine's lock.
        let taken_over = self.led_term.swap(term.unwrap_or(0), Ordering::Relaxed);
        node.read(|registry| {
            if leader && engine.is_leading() && taken_over != term.unwrap_or(0) {
                // Lost and regained leadership between two events: start over, with the
                // election grace, as any new leader does.
                engine.lost_leadership();
                tracing::info!(
                    term,
                    "leading again in a new term: deadlines and checks taken over afresh"
                );
            }
            if leader && !engine.is_leading() {
                engine.became_leader(registry, now);
                let (leases, drains, checked) = (
                    engine.leases().len(),
                    registry.drain_count(),
                    engine.checker().endpoints(),
                );
                let message = "leading: lease deadlines, drains and checks taken over";
                // A leader change is news in a cluster; a single node leads from its start,
                // which prints one line and no more (SPEC O2).
                if node.members().len() > 1 {
                    tracing::info!(leases, drains, checked, term, "{message}");
                } else {
                    tracing::debug!(leases, drains, checked, term, "{message}");
                }
            } else if !leader && engine.is_leading() {
                engine.lost_leadership();
                tracing::info!("no longer leading: deadlines and checks handed over");
            }
            event(&mut engine, registry, now)
        })
    }

    /// A fresh reply slot: the engine answers it with [`LeaderLink::answer`].
    pub fn reply_slot(&self) -> (ReplyTo, oneshot::Receiver<Reply>) {
        let to = ReplyTo(self.next_reply.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = oneshot::channel();
        self.replies
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(to, tx);
        (to, rx)
    }

    /// Forgets a reply slot nobody will answer.
    pub fn forget(&self, to: ReplyTo) {
        self.replies.lock().unwrap_or_else(PoisonError::into_inner).remove(&to);
    }

    /// Hands the engine's reply to its caller (gone callers are skipped).
    pub fn answer(&self, to: ReplyTo, reply: Reply) {
        let waiting = self.replies.lock().unwrap_or_else(PoisonError::into_inner).remove(&to);
        if let Some(waiting) = waiting {
            let _ = waiting.send(reply);
        }
    }
}
