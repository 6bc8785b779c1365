//! Leader-only loops as duties (DESIGN "Third wave": leader-only loops are `muster-leader`
//! duties; SPEC R4): the Consul API's reaper, the federation mirrors. Each is started when
//! this node takes leadership in a term and aborted when that term ends, by one runner, so no
//! loop checks leadership itself and none outlives the term it was started in.
//!
//! ```text
//!  leadership() every `poll` ──▶ transition(held, seen) ──▶ Start(term): spawn every duty(term)
//!   (Some(term) while this node         │                  Stop: abort them (their drops run)
//!    leads and is ready)                └────────────────▶ Restart(term): Stop, then Start
//! ```
//!
//! The transition is a pure function ([`transition`]); the runner ([`Duties::run`]) is the
//! one I/O part of this crate: it spawns and aborts tokio tasks.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;

/// One duty's loop for a term: it may run forever; it is aborted when the term ends.
pub type DutyLoop = Pin<Box<dyn Future<Output = ()> + Send>>;

/// What starts a duty for a term.
type Start = Box<dyn Fn(u64) -> DutyLoop + Send + Sync>;

/// What the runner does on seeing leadership `seen` while holding duties for `held`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// Nothing changes.
    Keep,
    /// This node took leadership in the term: start every duty.
    Start(u64),
    /// This node no longer leads: abort every duty.
    Stop,
    /// Leadership moved to another term between two looks (lost and regained): abort the
    /// old term's duties and start them afresh, so nothing carries a deposed term's state.
    Restart(u64),
}

/// The transition from the term whose duties run (`held`) to the leadership seen now.
#[must_use]
pub fn transition(held: Option<u64>, seen: Option<u64>) -> Transition {
    match (held, seen) {
        (None, None) => Transition::Keep,
        (None, Some(term)) => Transition::Start(term),
        (Some(_), None) => Transition::Stop,
        (Some(held), Some(term)) if held == term => Transition::Keep,
        (Some(_), Some(term)) => Transition::Restart(term),
    }
}

/// The leader-only loops of a node.
#[derive(Default)]
pub struct Duties {
    duties: Vec<(&'static str, Start)>,
}

impl Duties {
    /// No duties.
    #[must_use]
    pub fn new() -> Duties {
        Duties::default()
    }

    /// Adds a duty: `start(term)` is its loop for one term of leadership.
    pub fn add(&mut self, name: &'static str, start: impl Fn(u64) -> DutyLoop + Send + Sync + 'static) {
        self.duties.push((name, Box::new(start)));
    }

    /// Whether there is nothing to run.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.duties.is_empty()
    }

    /// Looks at `leadership` every `poll` (`Some(term)` while this node leads in `term` and
    /// may act) and runs the duties of the term it leads in, until `stopping` turns true (or
    /// its sender is dropped); then aborts them, and returns once they are dropped. A term's
    /// loops are aborted and dropped before the next term's start.
    pub async fn run(
        self,
        mut leadership: impl FnMut() -> Option<u64> + Send,
        poll: Duration,
        mut stopping: watch::Receiver<bool>,
    ) {
        let mut held: Option<u64> = None;
        let mut running = JoinSet::new();
        loop {
            if *stopping.borrow() {
                running.shutdown().await;
                return;
            }
            match transition(held, leadership()) {
                Transition::Keep => {}
                Transition::Stop => {
                    tracing::info!(term = held, "leadership ended: leader duties stopped");
                    running.shutdown().await;
                    held = None;
                }
                Transition::Start(term) | Transition::Restart(term) => {
                    // The old term's loops are gone (aborted and dropped) before the new ones start.
                    running.shutdown().await;
                    for (name, start) in &self.duties {
                        tracing::debug!(duty = name, term, "leader duty started");
                        running.spawn(start(term));
                    }
                    held = Some(term);
                }
            }
            // Reap the aborted and the finished, so the set does not grow.
            while running.try_join_next().is_some() {}
            tokio::select! {
                () = tokio::time::sleep(poll) => {}
                changed = stopping.changed() => if changed.is_err() {
                    // The server is gone without saying it stops: so are its duties.
                    running.shutdown().await;
                    return;
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    #[test]
    fn a_duty_starts_with_a_term_stops_without_one_and_restarts_on_a_new_one() {
        assert_eq!(transition(None, None), Transition::Keep);
        assert_eq!(transition(None, Some(3)), Transition::Start(3));
        assert_eq!(transition(Some(3), Some(3)), Transition::Keep);
        assert_eq!(transition(Some(3), None), Transition::Stop);
        assert_eq!(transition(Some(3), Some(5)), Transition::Restart(5));
    }

    /// Counts a duty's starts by term, and which of its loops are alive (a loop's guard
    /// decrements `alive` when the runner aborts it).
    struct Probe {
        started: std::sync::Mutex<Vec<u64>>,
        alive: AtomicU64,
    }

    struct Alive(Arc<Probe>);

    impl Drop for Alive {
        fn drop(&mut self) {
            self.0.alive.fetch_sub(1, Ordering::SeqCst);
        }
    }

    async fn settle() {
        for _ in 0..5 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn duties_run_only_while_this_node_leads_and_a_lost_and_regained_leadership_starts_them_afresh() {
        // Trace (SPEC R4): a deposed leader's loop must not act in a term it does not lead,
        // and a leadership lost and regained between two looks is a new term of its own.
        let probe = Arc::new(Probe {
            started: std::sync::Mutex::new(Vec::new()),
            alive: AtomicU64::new(0),
        });
        let mut duties = Duties::new();
        let on_start = Arc::clone(&probe);
        duties.add("probe", move |term| {
            let probe = Arc::clone(&on_start);
            probe.started.lock().unwrap().push(term);
            probe.alive.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                let _alive = Alive(probe);
                std::future::pending::<()>().await;
            })
        });
        // 0: not leading; n: leading in term n.
        let term = Arc::new(AtomicU64::new(0));
        let seen = Arc::clone(&term);
        let (stop, stopping) = watch::channel(false);
        let runner = tokio::spawn(duties.run(
            move || Some(seen.load(Ordering::SeqCst)).filter(|t| *t != 0),
            Duration::from_millis(1),
            stopping,
        ));

        settle().await;
        assert!(probe.started.lock().unwrap().is_empty(), "no duty while following");
        term.store(4, Ordering::SeqCst);
        settle().await;
        assert_eq!(*probe.started.lock().unwrap(), vec![4]);
        assert_eq!(probe.alive.load(Ordering::SeqCst), 1);

        term.store(0, Ordering::SeqCst);
        settle().await;
        assert_eq!(probe.alive.load(Ordering::SeqCst), 0, "aborted when leadership ended");

        term.store(6, Ordering::SeqCst);
        settle().await;
        term.store(9, Ordering::SeqCst);
        settle().await;
        assert_eq!(*probe.started.lock().unwrap(), vec![4, 6, 9]);
        assert_eq!(
            probe.alive.load(Ordering::SeqCst),
            1,
            "term 6's loop aborted before term 9's started"
        );

        stop.send(true).unwrap();
        runner.await.unwrap();
        assert_eq!(probe.alive.load(Ordering::SeqCst), 0, "aborted when the server stops");
    }

    #[tokio::test(start_paused = true)]
    async fn the_runner_ends_with_its_duties_when_the_stop_signal_is_dropped() {
        // A server dropped without `stop()`: the runner must not spin on a closed channel
        // with its duties alive.
        let alive = Arc::new(AtomicU64::new(0));
        let mut duties = Duties::new();
        let counted = Arc::clone(&alive);
        duties.add("probe", move |_| {
            let alive = Arc::clone(&counted);
            alive.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                let _guard = Decrement(alive);
                std::future::pending::<()>().await;
            })
        });
        let (stop, stopping) = watch::channel(false);
        let runner = tokio::spawn(duties.run(|| Some(1), Duration::from_millis(1), stopping));
        settle().await;
        assert_eq!(alive.load(Ordering::SeqCst), 1);
        drop(stop);
        tokio::time::timeout(Duration::from_secs(5), runner)
            .await
            .expect("the runner returns")
            .unwrap();
        assert_eq!(alive.load(Ordering::SeqCst), 0);
    }

    struct Decrement(Arc<AtomicU64>);

    impl Drop for Decrement {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::SeqCst);
        }
    }
}
