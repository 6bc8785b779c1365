//! The one place the lab reads the wall clock: the live lab measures real stale windows and
//! the shell reports how long a simulation took. Everything the simulation decides runs on
//! its virtual clock (STYLE.md rule 3); this is the I/O shell's opt-out from clippy.toml.

use std::time::{Duration, Instant};

/// Milliseconds since a start, on the monotonic clock.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stopwatch {
    started: Instant,
}

impl Stopwatch {
    /// Starts now.
    #[allow(
        clippy::disallowed_methods,
        reason = "the live lab and the timing line measure wall-clock time"
    )]
    pub(crate) fn start() -> Stopwatch {
        Stopwatch {
            started: Instant::now(),
        }
    }

    /// Time since the start.
    pub(crate) fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Whole milliseconds since the start.
    pub(crate) fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Sleeps until `ms` after the start.
    pub(crate) async fn sleep_until(&self, ms: u64) {
        let at = self.started + Duration::from_millis(ms);
        tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
    }
}
