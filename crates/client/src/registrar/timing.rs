//! The registrar's delays: renewal at a third of the TTL, retries, backoff, all spread by a
//! jitter drawn from an injected RNG (STYLE.md rule 3), so tests can pin every instant.

use std::time::Duration;

use rand_core::RngCore;

/// Renew after a third of the TTL: two thirds of it remain for retries if the renewal fails,
/// and a renewal reply that arrives late still lands well inside the lease.
pub const RENEW_DIVISOR: u32 = 3;

/// After a failed renewal, retry every tenth of the TTL: about six more attempts before a
/// lease renewed at a third of its TTL runs out, without hammering a struggling registry.
pub const RENEW_RETRY_DIVISOR: u32 = 10;

/// A renewal call may take a quarter of the TTL before it counts as failed: renewal is an
/// in-memory update on the server, so a slower answer means trouble, and the retry must come
/// while the lease still runs.
pub const RENEW_TIMEOUT_DIVISOR: u32 = 4;

/// Every scheduled delay is spread by ±10 % (in per mille): enough that a fleet started
/// together (a deploy, a registry restart) does not renew in lock-step, small enough that
/// renewals stay near a third of the TTL.
pub const JITTER_PERMILLE: u64 = 100;

/// First retry delay of a failed registration, set-serving, drain or deregistration: 200 ms
/// rides out a leader change without flooding a registry that is starting.
pub const BACKOFF_MIN: Duration = Duration::from_millis(200);

/// Longest retry delay: 10 s keeps the time to recover after an outage short while a fleet
/// of thousands retries at a rate the registry absorbs.
pub const BACKOFF_MAX: Duration = Duration::from_secs(10);

/// The longest granted TTL the registrar schedules by: a day. The registry grants at most an
/// hour by default; a larger grant (a misconfigured or broken server) is taken as a day, which
/// only renews earlier than needed, and keeps every `Instant` sum and jitter product far from
/// the overflow that would panic the registrar's task.
pub const MAX_SCHEDULED_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// A TTL the registry granted, as the registrar schedules by it (at most
/// [`MAX_SCHEDULED_TTL`]).
pub fn granted_ttl(ttl_ms: u64) -> Duration {
    Duration::from_millis(ttl_ms).min(MAX_SCHEDULED_TTL)
}

/// The jittered delay until the next renewal of a lease with this TTL.
pub fn renew_interval<R: RngCore + ?Sized>(rng: &mut R, ttl_ms: u64) -> Duration {
    jitter(rng, granted_ttl(ttl_ms) / RENEW_DIVISOR)
}

/// The jittered delay before retrying a failed renewal of a lease with this TTL.
pub fn renew_retry<R: RngCore + ?Sized>(rng: &mut R, ttl_ms: u64) -> Duration {
    jitter(rng, granted_ttl(ttl_ms) / RENEW_RETRY_DIVISOR)
}

/// The jittered delay before retry number `failures` (1-based): doubling from
/// [`BACKOFF_MIN`], capped at [`BACKOFF_MAX`].
pub fn backoff<R: RngCore + ?Sized>(rng: &mut R, failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    let delay = BACKOFF_MIN.saturating_mul(1 << doublings).min(BACKOFF_MAX);
    jitter(rng, delay)
}

/// `delay` scaled by a factor drawn uniformly from 1 ± [`JITTER_PERMILLE`]‰.
pub fn jitter<R: RngCore + ?Sized>(rng: &mut R, delay: Duration) -> Duration {
    let draw = u64::from(rng.next_u32());
    let permille = 1_000 - JITTER_PERMILLE + ((draw * (2 * JITTER_PERMILLE + 1)) >> 32);
    delay * u32::try_from(permille).unwrap_or(1_000) / 1_000
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seed::SplitMix64;

    #[test]
    fn an_absurd_grant_schedules_like_a_day_instead_of_overflowing() {
        let mut rng = SplitMix64::from_identity(&"ttl");
        assert_eq!(granted_ttl(u64::MAX), MAX_SCHEDULED_TTL);
        assert!(renew_interval(&mut rng, u64::MAX) <= MAX_SCHEDULED_TTL / 2);
        assert!(renew_retry(&mut rng, u64::MAX) <= MAX_SCHEDULED_TTL / 5);
    }

    #[test]
    fn jitter_spans_exactly_ninety_to_one_hundred_ten_percent() {
        let mut rng = SplitMix64::from_identity(&"jitter");
        let second = Duration::from_secs(1);
        let draws: Vec<Duration> = (0..10_000).map(|_| jitter(&mut rng, second)).collect();
        let (min, max) = (draws.iter().min().unwrap(), draws.iter().max().unwrap());
        assert!(
            *min >= Duration::from_millis(900) && *min < Duration::from_millis(905),
            "{min:?}"
        );
        assert!(
            *max <= Duration::from_millis(1_100) && *max > Duration::from_millis(1_095),
            "{max:?}"
        );
        let mean = draws.iter().sum::<Duration>() / 10_000;
        assert!(mean.abs_diff(second) < Duration::from_millis(5), "{mean:?}");
    }
}
