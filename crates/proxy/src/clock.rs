//! The proxy's one clock read: milliseconds on a monotonic clock, for ejection times and the
//! retry budget's window (the cores take it as an input, STYLE.md rule 3).

use std::sync::OnceLock;
use std::time::Instant;

/// Milliseconds since the proxy first read the clock.
#[allow(
    clippy::disallowed_methods,
    reason = "the proxy is an I/O shell; its cores take this time as an input"
)]
pub(crate) fn now_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64
}
