//! The `wait` of a blocking query (`?index=N&wait=30s`), as in Consul.

use std::time::Duration;

/// How long a blocking query waits when it names no `wait`: a minute, short enough that a
/// proxy's idle timeout rarely cuts it, long enough that an idle poller costs little.
pub(crate) const DEFAULT_WAIT: Duration = Duration::from_secs(60);

/// The longest wait honoured (longer ones are shortened, as Consul does): 5 minutes bounds how
/// long a request can pin a connection and how long a stopping server waits for it.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(300);

/// Parses `30s`, `500ms`, `5m` or a bare number of seconds, capped at [`MAX_WAIT`].
pub(crate) fn parse_wait(text: &str) -> Option<Duration> {
    let (digits, unit_ms) = if let Some(n) = text.strip_suffix("ms") {
        (n, 1)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1_000)
    } else if let Some(n) = text.strip_suffix('m') {
        (n, 60_000)
    } else {
        (text, 1_000)
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let value: u64 = digits.parse().ok()?;
    Some(Duration::from_millis(value.saturating_mul(unit_ms)).min(MAX_WAIT))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_parse_with_units_and_are_capped() {
        assert_eq!(parse_wait("30s"), Some(Duration::from_secs(30)));
        assert_eq!(parse_wait("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_wait("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_wait("7"), Some(Duration::from_secs(7)));
        assert_eq!(parse_wait("1h"), None);
        assert_eq!(parse_wait("10m"), Some(MAX_WAIT));
        assert_eq!(parse_wait("99999999999999999999s"), None);
        for bad in ["", "s", "ms", "-1s", "1.5s", "ten"] {
            assert_eq!(parse_wait(bad), None, "{bad:?}");
        }
    }
}
