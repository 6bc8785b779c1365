//! The server's clock: the one place the daemon reads time (STYLE.md rule 3 keeps the cores
//! clock-free; this shell hands them the time as a value).
//!
//! Monotonic milliseconds since start drive deadlines (tokio's clock, so tests may pause it);
//! Unix milliseconds for replies and [`CommandMeta::at_ms`](muster_registry::CommandMeta) are
//! the wall clock read once at start plus the monotonic time since, so they never jump back.

use tokio::time::Instant;

/// Monotonic and Unix time for the server.
#[derive(Debug, Clone, Copy)]
pub struct ServerClock {
    started: Instant,
    started_unix_ms: u64,
}

impl ServerClock {
    /// Reads the wall clock once.
    #[allow(
        clippy::disallowed_methods,
        reason = "the daemon's I/O shell: the wall clock is read once, at start, and passed on as a value"
    )]
    pub fn start() -> ServerClock {
        let started_unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        ServerClock {
            started: Instant::now(),
            started_unix_ms,
        }
    }

    /// Milliseconds since the server started, on the monotonic clock.
    pub fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// A monotonic time as Unix milliseconds.
    pub fn unix_ms(&self, monotonic_ms: u64) -> u64 {
        self.started_unix_ms.saturating_add(monotonic_ms)
    }

    /// Now, in Unix milliseconds.
    pub fn unix_now_ms(&self) -> u64 {
        self.unix_ms(self.now_ms())
    }
}
