//! The machine's load average beside a workload's figures: these runs share a small
//! machine with the server, the load generator and often a compiler, so a figure means
//! something only next to how busy the machine was while it was taken.

use serde::Serialize;

/// The 1-minute load average now, where `/proc/loadavg` exists.
pub(crate) fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| crate::codec::parse_load_average(&text))
}

/// The 1-minute load average when a workload (or one size of it) started and when it
/// ended; flattened into its summary's JSON as `load_average_at_start` and
/// `load_average_at_end`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct LoadSpan {
    /// When it started.
    pub load_average_at_start: Option<f64>,
    /// And when it ended.
    pub load_average_at_end: Option<f64>,
}

impl LoadSpan {
    /// A span that started at `start` and ends now.
    pub(crate) fn since(start: Option<f64>) -> LoadSpan {
        LoadSpan {
            load_average_at_start: start,
            load_average_at_end: load_average(),
        }
    }

    /// `load average 1.20 at start, 1.75 at end`, `?` for an unknown one.
    pub(crate) fn text(&self) -> String {
        format!(
            "load average {} at start, {} at end",
            load_text(self.load_average_at_start),
            load_text(self.load_average_at_end)
        )
    }
}

/// A load average with two decimals, or `?` when unknown.
pub(crate) fn load_text(load: Option<f64>) -> String {
    load.map_or_else(|| "?".to_owned(), |l| format!("{l:.2}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_span_reads_with_both_ends_and_marks_an_unknown_one() {
        let span = LoadSpan {
            load_average_at_start: Some(1.2),
            load_average_at_end: None,
        };
        assert_eq!(span.text(), "load average 1.20 at start, ? at end");
        let json = serde_json::to_value(span).unwrap();
        assert_eq!(json["load_average_at_start"], 1.2);
        assert!(json["load_average_at_end"].is_null());
    }
}
