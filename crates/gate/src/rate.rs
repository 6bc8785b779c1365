//! Write rates (SPEC W4, S6): with authentication on, each principal's writes are paced by a
//! token bucket, so one registrar that loops (or a stolen token) cannot take the node's
//! whole write path — the Raft log, the disk, every watcher's fan-out — from the others.
//!
//! ```text
//!  write from principal p at now ─▶ bucket[p]: refill (now - then) × rate, at most burst
//!                                      ├─ a token left ─▶ take it, the write goes on
//!                                      └─ none ─▶ Throttled { retry_after_ms } (HTTP 429
//!                                                  rate_limited with Retry-After)
//! ```
//!
//! Pure: time comes in as milliseconds. Tokens are counted in thousandths, so a rate of
//! fewer than 1,000 writes a second still refills a little every millisecond.
//!
//! # Correctness
//! - A bucket never holds more than `burst` writes, and a refused write takes nothing.
//! - The table holds at most `MAX_IDLE` principals whose buckets are full: a full bucket
//!   is what a principal never seen before gets, so dropping one changes no verdict.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use muster_core::Principal;

/// Thousandths of a write.
const MILLI: u64 = 1_000;

/// Principals kept before full (idle) buckets are dropped.
const MAX_IDLE: usize = 4_096;

/// A sustained rate and the burst above it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Writes a second, sustained (at least 1).
    pub per_second: u64,
    /// Writes at once after an idle spell (at least 1).
    pub burst: u64,
}

/// A write refused for its principal's rate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{principal} is over its write rate ({per_second} a second, bursts of {burst}: \
     write_rate_per_principal, write_burst_per_principal); retry in {retry_after_ms} ms"
)]
pub struct Throttled {
    /// Whose writes.
    pub principal: Principal,
    /// When the next write would be taken.
    pub retry_after_ms: u64,
    /// The rate.
    pub per_second: u64,
    /// The burst.
    pub burst: u64,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// Thousandths of a write available at `at_ms`.
    milli: u64,
    at_ms: u64,
}

impl Bucket {
    /// The bucket at `now_ms`: refilled, at most `rate.burst`. A clock that went back
    /// refills nothing.
    fn at(self, now_ms: u64, rate: Rate) -> Bucket {
        let elapsed = now_ms.saturating_sub(self.at_ms);
        let milli = self
            .milli
            .saturating_add(elapsed.saturating_mul(rate.per_second))
            .min(rate.burst.saturating_mul(MILLI));
        Bucket {
            milli,
            at_ms: now_ms.max(self.at_ms),
        }
    }

    fn is_full(self, rate: Rate) -> bool {
        self.milli >= rate.burst.saturating_mul(MILLI)
    }
}

/// Every principal's bucket.
#[derive(Debug)]
pub struct WriteRates {
    rate: Rate,
    buckets: Mutex<HashMap<Principal, Bucket>>,
    refused: AtomicU64,
}

impl WriteRates {
    /// Buckets of `rate` (each part at least 1; the server's configuration checks that).
    pub fn new(rate: Rate) -> WriteRates {
        WriteRates {
            rate: Rate {
                per_second: rate.per_second.max(1),
                burst: rate.burst.max(1),
            },
            buckets: Mutex::default(),
            refused: AtomicU64::new(0),
        }
    }

    /// The rate.
    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// Takes one write for `principal` at `now_ms`, or says when one will be there.
    pub fn take(&self, principal: &Principal, now_ms: u64) -> Result<(), Throttled> {
        let rate = self.rate;
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        let full = Bucket {
            milli: rate.burst.saturating_mul(MILLI),
            at_ms: now_ms,
        };
        let bucket = buckets.get(principal).map_or(full, |bucket| bucket.at(now_ms, rate));
        if bucket.milli < MILLI {
            buckets.insert(principal.clone(), bucket);
            drop(buckets);
            self.refused.fetch_add(1, Ordering::Relaxed);
            return Err(Throttled {
                principal: principal.clone(),
                retry_after_ms: (MILLI - bucket.milli).div_ceil(rate.per_second),
                per_second: rate.per_second,
                burst: rate.burst,
            });
        }
        if !buckets.contains_key(principal) && buckets.len() >= MAX_IDLE {
            buckets.retain(|_, held| !held.at(now_ms, rate).is_full(rate));
        }
        buckets.insert(
            principal.clone(),
            Bucket {
                milli: bucket.milli - MILLI,
                at_ms: bucket.at_ms,
            },
        );
        Ok(())
    }

    /// Writes refused since start.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Principals with a bucket in the table.
    pub fn tracked(&self) -> usize {
        self.buckets.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn principal(name: &str) -> Principal {
        Principal::new(name).expect("a valid principal")
    }

    #[test]
    fn a_burst_is_taken_then_writes_come_at_the_rate() {
        let rates = WriteRates::new(Rate {
            per_second: 10,
            burst: 3,
        });
        let p = principal("registrar");
        for _ in 0..3 {
            assert_eq!(rates.take(&p, 1_000), Ok(()));
        }
        let refused = rates.take(&p, 1_000).expect_err("the burst is spent");
        assert_eq!(refused.retry_after_ms, 100, "one write every 100 ms at 10 a second");
        assert!(refused.to_string().contains("write_rate_per_principal"), "{refused}");
        assert!(rates.take(&p, 1_099).is_err(), "not yet");
        assert_eq!(rates.take(&p, 1_100), Ok(()));
        assert_eq!(rates.refused(), 2);
    }

    #[test]
    fn principals_are_paced_apart() {
        let rates = WriteRates::new(Rate {
            per_second: 1,
            burst: 1,
        });
        assert_eq!(rates.take(&principal("a"), 0), Ok(()));
        assert!(rates.take(&principal("a"), 0).is_err());
        assert_eq!(rates.take(&principal("b"), 0), Ok(()), "a's spent rate is not b's");
    }

    #[test]
    fn a_clock_that_goes_back_refills_nothing() {
        let rates = WriteRates::new(Rate {
            per_second: 1,
            burst: 1,
        });
        let p = principal("a");
        assert_eq!(rates.take(&p, 5_000), Ok(()));
        assert!(rates.take(&p, 1_000).is_err());
        assert!(rates.take(&p, 5_999).is_err());
        assert_eq!(rates.take(&p, 6_000), Ok(()));
    }

    #[test]
    fn idle_principals_are_forgotten_past_the_bound() {
        let rates = WriteRates::new(Rate {
            per_second: 1_000,
            burst: 1,
        });
        for i in 0..MAX_IDLE {
            assert_eq!(rates.take(&principal(&format!("p{i}")), 0), Ok(()));
        }
        assert_eq!(rates.tracked(), MAX_IDLE);
        // A second later every bucket is full again: the next newcomer clears them.
        assert_eq!(rates.take(&principal("newcomer"), 1_000), Ok(()));
        assert_eq!(rates.tracked(), 1);
    }

    proptest! {
        /// Over any run of writes, a principal gets at most burst + rate × elapsed of them,
        /// and a write refused was refused only when the bucket was empty.
        #[test]
        fn never_more_than_the_burst_and_the_rate(
            per_second in 1_u64..50,
            burst in 1_u64..20,
            gaps in proptest::collection::vec(0_u64..200, 1..300),
        ) {
            let rates = WriteRates::new(Rate { per_second, burst });
            let p = principal("p");
            let (mut now, mut taken) = (0_u64, 0_u64);
            for gap in gaps {
                now += gap;
                if rates.take(&p, now).is_ok() {
                    taken += 1;
                }
                prop_assert!(taken * 1_000 <= burst * 1_000 + now * per_second);
            }
        }
    }
}
