//! The one place the bench reads the wall clock. A benchmark measures real elapsed time by
//! definition, so this is the I/O shell's opt-out from clippy.toml's `Instant::now` ban
//! (STYLE.md rule 3); the pure core (histogram, report) only receives durations.

use std::time::Instant;

/// Now, on the monotonic clock.
#[allow(clippy::disallowed_methods, reason = "a load generator measures wall-clock latency")]
pub(crate) fn now() -> Instant {
    Instant::now()
}

/// Now as a tokio instant (for `timeout_at`).
pub(crate) fn tokio_now() -> tokio::time::Instant {
    tokio::time::Instant::from_std(now())
}

/// A run id that differs between runs: the wall clock's milliseconds.
#[allow(clippy::disallowed_methods, reason = "names a run uniquely; no logic depends on it")]
pub(crate) fn run_id() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
