//! The closed-loop driver: `workers` tasks, each with one request in flight, until the time
//! bound or the shared count bound is reached, whichever first. Each worker records into its
//! own histogram; they are merged at the end, so recording never contends.
//!
//! ```text
//!  ticket = next.fetch_add(1) ──▶ op(ticket) ──▶ record latency (ok) / count error
//!        ▲                                                   │
//!        └──────────── until deadline or ticket ≥ max ◀──────┘
//! ```

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::clock::now;
use crate::histogram::Histogram;

/// What a closed-loop run measured.
#[derive(Debug, Clone)]
pub(crate) struct Outcome {
    /// Operations attempted.
    pub(crate) requests: u64,
    /// Operations that failed.
    pub(crate) errors: u64,
    /// From the start until the last in-flight operation finished.
    pub(crate) elapsed: Duration,
    /// Latencies of the successful operations.
    pub(crate) latencies: Histogram,
    /// The first failure's message, to tell the reader what went wrong.
    pub(crate) first_error: Option<String>,
}

struct Worker {
    requests: u64,
    errors: u64,
    latencies: Histogram,
    first_error: Option<String>,
}

/// Runs `op(ticket)` for tickets 0, 1, 2... on `workers` concurrent tasks, until `duration`
/// has passed or `max` tickets were taken.
pub(crate) async fn closed_loop<F, Fut>(workers: usize, duration: Duration, max: u64, op: F) -> Outcome
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), String>> + Send + 'static,
{
    let op = Arc::new(op);
    let next = Arc::new(AtomicU64::new(0));
    let start = now();
    let deadline = start + duration;
    let mut tasks = Vec::with_capacity(workers);
    for _ in 0..workers {
        let (op, next) = (Arc::clone(&op), Arc::clone(&next));
        tasks.push(tokio::spawn(async move {
            let mut worker = Worker {
                requests: 0,
                errors: 0,
                latencies: Histogram::new(),
                first_error: None,
            };
            loop {
                let started = now();
                if started >= deadline {
                    break;
                }
                let ticket = next.fetch_add(1, Ordering::Relaxed);
                if ticket >= max {
                    break;
                }
                let result = op(ticket).await;
                worker.requests += 1;
                match result {
                    Ok(()) => worker.latencies.record(now() - started),
                    Err(err) => {
                        worker.errors += 1;
                        worker.first_error.get_or_insert(err);
                    }
                }
            }
            worker
        }));
    }
    let mut outcome = Outcome {
        requests: 0,
        errors: 0,
        elapsed: Duration::ZERO,
        latencies: Histogram::new(),
        first_error: None,
    };
    for task in tasks {
        match task.await {
            Ok(worker) => {
                outcome.requests += worker.requests;
                outcome.errors += worker.errors;
                outcome.latencies.merge(&worker.latencies);
                if outcome.first_error.is_none() {
                    outcome.first_error = worker.first_error;
                }
            }
            Err(err) => {
                outcome.errors += 1;
                outcome
                    .first_error
                    .get_or_insert_with(|| format!("a worker failed: {err}"));
            }
        }
    }
    outcome.elapsed = now() - start;
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    // Count bounds, not time: these tests never depend on how fast the machine is.

    #[tokio::test]
    async fn the_count_bound_stops_every_worker_after_max_tickets() {
        let seen = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&seen);
        let outcome = closed_loop(8, Duration::from_secs(3_600), 1_000, move |_| {
            counter.fetch_add(1, Ordering::Relaxed);
            async { Ok(()) }
        })
        .await;
        assert_eq!(outcome.requests, 1_000);
        assert_eq!(seen.load(Ordering::Relaxed), 1_000);
        assert_eq!(outcome.latencies.count(), 1_000);
    }

    #[tokio::test]
    async fn failures_are_counted_and_the_first_is_kept() {
        let outcome = closed_loop(1, Duration::from_secs(3_600), 10, |ticket| async move {
            if ticket % 2 == 1 {
                Err(format!("ticket {ticket} refused"))
            } else {
                Ok(())
            }
        })
        .await;
        assert_eq!((outcome.requests, outcome.errors), (10, 5));
        assert_eq!(outcome.latencies.count(), 5, "only successes have a latency");
        assert_eq!(outcome.first_error.as_deref(), Some("ticket 1 refused"));
    }

    #[tokio::test]
    async fn every_ticket_is_taken_exactly_once() {
        let taken = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = Arc::clone(&taken);
        closed_loop(16, Duration::from_secs(3_600), 500, move |ticket| {
            log.lock().unwrap().push(ticket);
            async { Ok(()) }
        })
        .await;
        let mut taken = taken.lock().unwrap().clone();
        taken.sort_unstable();
        assert_eq!(taken, (0..500).collect::<Vec<_>>());
    }
}
