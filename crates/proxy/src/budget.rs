//! The retry budget (SPEC D3): retries may add at most a fraction of the requests of the last
//! ten seconds, plus a small floor per second so that a quiet listener can still retry a
//! connect failure. Pure: time is an input (STYLE.md rule 3).
//!
//! ```text
//!  request ──▶ deposit (this second's bucket)      retry? ──▶ retries in window + 1
//!                                                              ≤ floor × 10 + ratio × requests in window
//!  ten one-second buckets, the oldest reused as time moves on
//! ```
//!
//! Finagle's `RetryBudget` and linkerd's are the model: a budget, not a count per request,
//! because what kills a struggling backend is the fleet-wide multiplication of retries, and
//! a ratio bounds that multiplication at `1 + ratio` whatever fails.

/// The window the budget counts over, in one-second buckets.
const WINDOW_SECONDS: usize = 10;

/// How much retrying a listener may do.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BudgetConfig {
    /// Retries may add at most this fraction of the requests in the window (0.2: 20%).
    pub ratio: f64,
    /// Retries allowed per second whatever the traffic.
    pub min_per_second: u32,
}

impl Default for BudgetConfig {
    /// Finagle's defaults: 20% extra load at most, and 10 retries a second as a floor.
    fn default() -> Self {
        BudgetConfig {
            ratio: 0.2,
            min_per_second: 10,
        }
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    second: u64,
    requests: u64,
    retries: u64,
}

/// The budget of one listener.
#[derive(Debug, Clone)]
pub struct RetryBudget {
    config: BudgetConfig,
    buckets: [Bucket; WINDOW_SECONDS],
}

impl RetryBudget {
    /// An empty budget (only the floor is available).
    pub fn new(config: BudgetConfig) -> RetryBudget {
        RetryBudget {
            config,
            buckets: [Bucket::default(); WINDOW_SECONDS],
        }
    }

    fn bucket(&mut self, now_ms: u64) -> &mut Bucket {
        let second = now_ms / 1_000;
        let bucket = &mut self.buckets[(second % WINDOW_SECONDS as u64) as usize];
        if bucket.second != second {
            *bucket = Bucket {
                second,
                ..Bucket::default()
            };
        }
        bucket
    }

    /// One original request (not a retry) started.
    pub fn deposit(&mut self, now_ms: u64) {
        self.bucket(now_ms).requests += 1;
    }

    /// Takes one retry from the budget: `false` when it is spent.
    pub fn try_withdraw(&mut self, now_ms: u64) -> bool {
        let second = now_ms / 1_000;
        let live = |bucket: &&Bucket| second.saturating_sub(bucket.second) < WINDOW_SECONDS as u64;
        let requests: u64 = self.buckets.iter().filter(live).map(|b| b.requests).sum();
        let retries: u64 = self.buckets.iter().filter(live).map(|b| b.retries).sum();
        let allowed = u64::from(self.config.min_per_second) * WINDOW_SECONDS as u64
            + (self.config.ratio * requests as f64).floor() as u64;
        if retries < allowed {
            self.bucket(now_ms).retries += 1;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(ratio: f64, min_per_second: u32) -> RetryBudget {
        RetryBudget::new(BudgetConfig { ratio, min_per_second })
    }

    #[test]
    fn retries_add_at_most_the_ratio_of_requests() {
        let mut budget = budget(0.2, 0);
        for _ in 0..100 {
            budget.deposit(5_000);
        }
        let granted = (0..100).filter(|_| budget.try_withdraw(5_500)).count();
        assert_eq!(granted, 20);
    }

    #[test]
    fn the_floor_allows_retries_without_traffic() {
        let mut budget = budget(0.2, 1);
        let granted = (0..100).filter(|_| budget.try_withdraw(1_000)).count();
        assert_eq!(granted, 10, "one a second over the ten-second window");
    }

    #[test]
    fn requests_older_than_the_window_stop_counting() {
        let mut budget = budget(0.5, 0);
        for _ in 0..10 {
            budget.deposit(0);
        }
        assert!(budget.try_withdraw(9_999));
        // Ten seconds on, the deposits of second 0 are out of the window.
        assert!(!budget.try_withdraw(10_000));
        // Four new requests fund two retries, one of which (at 9.999 s) is still in the window.
        for _ in 0..4 {
            budget.deposit(10_000);
        }
        assert!(budget.try_withdraw(10_001));
        assert!(!budget.try_withdraw(10_002));
    }

    #[test]
    fn a_zero_budget_grants_nothing() {
        let mut budget = budget(0.0, 0);
        budget.deposit(0);
        assert!(!budget.try_withdraw(0));
    }
}
