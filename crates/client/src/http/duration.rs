//! Durations as the API carries them (whole milliseconds: `ttl_ms`) and as people read them
//! (`10s`, `1m30s`, `1500ms`: the text the CLI's duration parser accepts back).

use std::time::Duration;

/// Whole milliseconds of `duration`, saturating (no TTL or timeout comes near `u64::MAX`).
pub fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Formats milliseconds as `10s`, `1m30s`, `1h`, or `1500ms` when not whole seconds.
pub fn format_millis(ms: u64) -> String {
    if ms == 0 {
        return "0s".into();
    }
    if !ms.is_multiple_of(1_000) {
        return format!("{ms}ms");
    }
    let mut out = String::new();
    let mut seconds = ms / 1_000;
    for (unit, size) in [("h", 3_600), ("m", 60), ("s", 1)] {
        if seconds >= size {
            out.push_str(&format!("{}{unit}", seconds / size));
            seconds %= size;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_seconds_read_as_units_and_the_rest_as_milliseconds() {
        assert_eq!(format_millis(0), "0s");
        assert_eq!(format_millis(90_000), "1m30s");
        assert_eq!(format_millis(3_600_000), "1h");
        assert_eq!(format_millis(1_500), "1500ms");
        assert_eq!(millis(Duration::from_micros(2_500)), 2);
        assert_eq!(millis(Duration::MAX), u64::MAX);
    }
}
