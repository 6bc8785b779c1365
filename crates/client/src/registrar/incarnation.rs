//! Choosing incarnations: a new process must register with a higher incarnation than any
//! earlier process of the same instance (SPEC L2), and a process that loses its lease must
//! find one above its own tombstone without reaching the next process's.
//!
//! # The scheme
//! An incarnation is `generation × INCARNATION_STRIDE + k`: the generation is chosen once per
//! process start, `k` counts the times this process lost its lease and registered again (the
//! registry keeps a tombstone at the removed incarnation and refuses to register it again, so
//! the registrar moves to the next one). Two sources of a generation are offered:
//!
//! - [`incarnation_from_unix_ms`] / [`incarnation_at_start`]: the process's start time in
//!   Unix milliseconds. Needs no storage; assumes the wall clock does not step back by more
//!   than the time between two starts of one instance (NTP slews, it rarely steps; a host
//!   whose clock is reset on boot should use a counter instead).
//! - [`incarnation_from_counter`]: a counter the caller persists and increments on every
//!   start (a file, the orchestrator's restart count or deployment generation).
//!
//! Either way the stride leaves room for [`MAX_REREGISTRATIONS`] lease losses per process
//! before its incarnations could reach the next generation's.

use muster_core::Incarnation;

/// Incarnations per generation: 1,000 lease losses in one process is far beyond anything
/// but a registry that expires every lease (the registrar stops re-registering then), and
/// start times in ms × 1,000 stay below 2^53 until about 2250, so the numbers survive a
/// trip through JavaScript's doubles.
pub const INCARNATION_STRIDE: u64 = 1_000;

/// How many times a registrar registers again after losing its lease, at most.
pub const MAX_REREGISTRATIONS: u32 = (INCARNATION_STRIDE - 1) as u32;

/// The first incarnation of a process started at `unix_ms`.
pub fn incarnation_from_unix_ms(unix_ms: u64) -> Incarnation {
    Incarnation(unix_ms.saturating_mul(INCARNATION_STRIDE))
}

/// The first incarnation of the `generation`-th start of a process, for callers that persist
/// a start counter.
///
/// ```
/// use muster_client::{INCARNATION_STRIDE, incarnation_from_counter};
///
/// // Each start leaves room for the registrar's own re-registrations after a lost lease.
/// assert_eq!(incarnation_from_counter(2).0 - incarnation_from_counter(1).0, INCARNATION_STRIDE);
/// assert!(incarnation_from_counter(7) > incarnation_from_counter(6));
/// ```
pub fn incarnation_from_counter(generation: u64) -> Incarnation {
    Incarnation(generation.saturating_mul(INCARNATION_STRIDE))
}

/// The first incarnation of a process starting now, by the wall clock (see the module docs
/// for the assumption this makes). Call it once, at start.
pub fn incarnation_at_start() -> Incarnation {
    #[allow(
        clippy::disallowed_methods,
        reason = "an incarnation must be higher than every earlier process's: only the wall clock spans restarts"
    )]
    let now = std::time::SystemTime::now();
    let unix_ms = now.duration_since(std::time::UNIX_EPOCH).map_or(0, crate::http::millis);
    incarnation_from_unix_ms(unix_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_start_outranks_every_reregistration_of_an_earlier_one() {
        let first = incarnation_from_unix_ms(1_800_000_000_000);
        let last_reregistration = Incarnation(first.0 + u64::from(MAX_REREGISTRATIONS));
        assert!(incarnation_from_unix_ms(1_800_000_000_001) > last_reregistration);
        assert!(incarnation_from_counter(8) > Incarnation(incarnation_from_counter(7).0 + 999));
    }

    #[test]
    fn start_times_stay_exact_in_a_double_for_centuries() {
        // About the year 2250, in Unix ms.
        let far = incarnation_from_unix_ms(8_900_000_000_000);
        assert!(far.0 < 1 << 53);
        assert!(incarnation_at_start() > incarnation_from_unix_ms(1_700_000_000_000));
    }
}
