//! The lab's input units: durations with a unit and an optional fraction (`2.5s`, `500ms`,
//! `1m`), and counts that may be a share of the fleet (`50` or `10%`).
//!
//! Unlike the server's flags, lab durations take decimals: the reference heartbeat is 2.5 s.
//! A unit is still required, for the same reason (`--ttl 2` could be 2 ms or 2 s).

/// Units, longest suffix first so that `ms` is not read as `m`.
const UNITS: [(&str, f64); 4] = [("ms", 1.0), ("s", 1_000.0), ("m", 60_000.0), ("h", 3_600_000.0)];

/// Parses `2.5s`, `500ms`, `1m`, `1h` into whole milliseconds.
pub fn parse_ms(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let Some((unit, scale)) = UNITS.iter().find(|(unit, _)| text.ends_with(unit)) else {
        return Err(format!("'{text}' needs a unit: ms, s, m or h (e.g. 2.5s, 500ms)"));
    };
    let number = &text[..text.len() - unit.len()];
    let value: f64 = number
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite() && *v >= 0.0 && !number.starts_with('+'))
        .ok_or_else(|| format!("'{text}': '{number}' is not a non-negative number"))?;
    let ms = value * scale;
    if ms > 1e15 {
        return Err(format!("'{text}' is too long"));
    }
    if (ms - ms.round()).abs() > 1e-6 {
        return Err(format!("'{text}' is not a whole number of milliseconds"));
    }
    Ok(ms.round() as u64)
}

/// Milliseconds as the shortest text [`parse_ms`] reads back: `2.5s`, `500ms`, `10s`.
pub fn format_ms(ms: u64) -> String {
    if ms < 1_000 {
        format!("{ms}ms")
    } else if ms.is_multiple_of(1_000) {
        format!("{}s", ms / 1_000)
    } else {
        let seconds = ms as f64 / 1_000.0;
        format!("{seconds}s")
    }
}

/// Parses `50` (a count) or `10%` (a share of `of`, rounded to the nearest instance).
pub fn parse_share(text: &str, of: u32) -> Result<u32, String> {
    let text = text.trim();
    if let Some(percent) = text.strip_suffix('%') {
        let value: f64 = percent
            .parse()
            .ok()
            .filter(|v: &f64| (0.0..=100.0).contains(v))
            .ok_or_else(|| format!("'{text}': a percentage between 0% and 100%"))?;
        return Ok((value / 100.0 * f64::from(of)).round() as u32);
    }
    text.parse()
        .map_err(|_| format!("'{text}': a count (e.g. 50) or a percentage (e.g. 10%)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_decimals_and_need_a_unit() {
        assert_eq!(parse_ms("2.5s"), Ok(2_500));
        assert_eq!(parse_ms("500ms"), Ok(500));
        assert_eq!(parse_ms("1m"), Ok(60_000));
        assert_eq!(parse_ms("0.01s"), Ok(10));
        assert!(parse_ms("2").unwrap_err().contains("needs a unit"));
        assert!(parse_ms("-1s").is_err());
        assert!(parse_ms("0.5ms").unwrap_err().contains("whole number"));
        for ms in [0, 10, 500, 2_500, 10_000, 60_000] {
            assert_eq!(parse_ms(&format_ms(ms)), Ok(ms), "{}", format_ms(ms));
        }
    }

    #[test]
    fn shares_are_counts_or_percentages_of_the_fleet() {
        assert_eq!(parse_share("10%", 500), Ok(50));
        assert_eq!(parse_share("50", 500), Ok(50));
        assert_eq!(parse_share("12.5%", 80), Ok(10));
        assert!(parse_share("120%", 500).is_err());
        assert!(parse_share("ten", 500).is_err());
    }
}
