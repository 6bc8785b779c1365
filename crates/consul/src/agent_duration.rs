//! Go duration strings (`10s`, `1m30s`, `1.5h`, `500ms`, `300us`, `0`), as Consul clients
//! send them in check definitions (`Interval`, `Timeout`, `TTL`,
//! `DeregisterCriticalServiceAfter`) and in a blocking query's `wait`.
//!
//! The grammar is Go's `time.ParseDuration`: an optional sign, then one or more decimal
//! numbers (with an optional fraction) each followed by a unit (`ns`, `us`, `µs`, `μs`, `ms`,
//! `s`, `m`, `h`); `0` alone needs no unit. A negative duration means nothing here and is
//! refused. Precision is kept to the nanosecond, as Go does, and anything beyond
//! [`MAX_GO_DURATION`] (Go's own limit, about 292 years) is refused rather than wrapped.

use std::time::Duration;

/// Go's `time.Duration` is an `int64` of nanoseconds: nothing longer can be written.
pub(crate) const MAX_GO_DURATION: Duration = Duration::from_nanos(i64::MAX as u64);

/// Parses a Go duration string; the error says what is wrong, for a 400 body.
pub(crate) fn parse_go_duration(text: &str) -> Result<Duration, String> {
    let bad = |why: &str| format!("invalid duration {text:?}: {why}");
    let unsigned = match text.strip_prefix('-') {
        Some(rest) if rest.trim_start_matches(['0', '.']).is_empty() && !rest.is_empty() => rest,
        Some(_) => return Err(bad("a negative duration is not allowed")),
        None => text.strip_prefix('+').unwrap_or(text),
    };
    if unsigned == "0" {
        return Ok(Duration::ZERO);
    }
    if unsigned.is_empty() {
        return Err(bad("empty"));
    }
    let mut total: u128 = 0;
    let mut rest = unsigned;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| bad("missing unit (ns, us, ms, s, m, h)"))?;
        let (number, after) = rest.split_at(number_len);
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let unit_ns: u128 = match unit {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err(bad("missing unit (ns, us, ms, s, m, h)")),
            other => return Err(bad(&format!("unknown unit {other:?}"))),
        };
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
            return Err(bad("malformed number"));
        }
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| bad("number too large"))?
        };
        let mut part = whole.checked_mul(unit_ns).ok_or_else(|| bad("too long"))?;
        // The fraction, digit by digit, truncated below a nanosecond as Go truncates it.
        let mut scale = unit_ns;
        for digit in fraction.bytes() {
            scale /= 10;
            part += u128::from(digit - b'0') * scale;
        }
        total = total.checked_add(part).ok_or_else(|| bad("too long"))?;
        if total > MAX_GO_DURATION.as_nanos() {
            return Err(bad("longer than Go's maximum duration"));
        }
        rest = next;
    }
    Ok(Duration::from_nanos(total as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse_as_go_parses_them() {
        let cases = [
            ("10s", Duration::from_secs(10)),
            ("1m30s", Duration::from_secs(90)),
            ("500ms", Duration::from_millis(500)),
            ("1.5s", Duration::from_millis(1_500)),
            ("1.5h", Duration::from_secs(5_400)),
            (".5s", Duration::from_millis(500)),
            ("2h45m", Duration::from_secs(9_900)),
            ("300us", Duration::from_micros(300)),
            ("300\u{b5}s", Duration::from_micros(300)),
            ("7ns", Duration::from_nanos(7)),
            ("120000ms", Duration::from_secs(120)),
            ("0", Duration::ZERO),
            ("+5s", Duration::from_secs(5)),
            ("-0", Duration::ZERO),
            ("1.0000000001s", Duration::from_secs(1)),
        ];
        for (text, want) in cases {
            assert_eq!(parse_go_duration(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn malformed_negative_and_overlong_durations_are_refused_with_a_reason() {
        for (text, why) in [
            ("", "empty"),
            ("10", "missing unit"),
            ("s", "malformed"),
            ("10x", "unknown unit"),
            ("1d", "unknown unit"),
            ("1..5s", "malformed"),
            (".s", "malformed"),
            ("-5s", "negative"),
            ("3000000h", "maximum"),
            ("99999999999999999999999999999999999999999h", "too"),
            ("10 s", "unknown unit"),
        ] {
            let error = parse_go_duration(text).unwrap_err();
            assert!(error.contains(why), "{text:?}: {error}");
        }
    }
}
