//! Durations on the command line: `500ms`, `10s`, `2m`, `1h`, and sums such as `1m30s`.
//!
//! A unit is required: a bare `10` could mean seconds or milliseconds, and a TTL that is a
//! thousand times too short expires a fleet. Written by hand because the grammar is five
//! lines and a crate for it would be one more dependency to audit. Formatting lives in
//! [`muster_client::duration`], re-exported here.

use std::time::Duration;

/// The units, longest suffix first so that `ms` is not read as `m` followed by junk.
const UNITS: [(&str, u64); 4] = [("ms", 1), ("s", 1_000), ("m", 60_000), ("h", 3_600_000)];

/// Parses `text` (e.g. `10s`, `500ms`, `1m30s`) into a duration of whole milliseconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty duration: write e.g. 10s, 500ms or 2m".into());
    }
    let mut rest = text;
    let mut total_ms: u64 = 0;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(format!("'{text}': expected a number at '{rest}'"));
        }
        let (number, after) = rest.split_at(digits);
        let value: u64 = number
            .parse()
            .map_err(|_| format!("'{text}': the number {number} is too large"))?;
        let Some((unit, scale)) = UNITS.iter().find(|(unit, _)| after.starts_with(unit)) else {
            return Err(format!(
                "'{text}': '{number}' needs a unit: ms, s, m or h (e.g. {number}s)"
            ));
        };
        total_ms = value
            .checked_mul(*scale)
            .and_then(|ms| total_ms.checked_add(ms))
            .ok_or_else(|| format!("'{text}' is too long"))?;
        rest = &after[unit.len()..];
    }
    Ok(Duration::from_millis(total_ms))
}

/// Whole milliseconds, and their text in the form [`parse_duration`] reads back: the client
/// library owns them because its error messages and the API's `ttl_ms` use them too.
pub use muster_client::duration::{format_millis, millis};
