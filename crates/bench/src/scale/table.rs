//! The scale workload's part of the table report: one row per size, then what each row
//! depends on (the server's settings, log and snapshot, notes). Pure.

use std::fmt::Write as _;

use super::{CatchUpPath, ScaleSize, ScaleSummary};
use crate::load::load_text;
use crate::render::{format_bytes, format_ms, thousands};

const HEADER: [&str; 13] = [
    "endpoints",
    "fill/s",
    "reg p50",
    "reg p99",
    "p99 CO",
    "RSS",
    "bytes/endpoint",
    "SIGTERM stop",
    "restart (clean)",
    "restart (kill -9)",
    "catch-up",
    "via",
    "load",
];

fn ms(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), format_ms)
}

fn row(size: &ScaleSize) -> Vec<String> {
    let latency = |pick: fn(&crate::LatencySummary) -> Option<f64>| ms(size.registration.as_ref().and_then(pick));
    vec![
        thousands(size.endpoints),
        // Nothing to fill: the probe at the size before already passed this one.
        if size.filled == 0 {
            "-".to_owned()
        } else {
            thousands(size.fill_per_s.round() as u64)
        },
        latency(|l| Some(l.p50_ms)),
        latency(|l| Some(l.p99_ms)),
        latency(|l| l.p99_corrected_ms),
        size.rss_bytes.map_or_else(|| "-".to_owned(), format_bytes),
        size.bytes_per_endpoint
            .map_or_else(|| "-".to_owned(), |b| thousands(b.round() as u64)),
        ms(size.stop_ms),
        ms(size.restart_after_stop_ms),
        ms(size.restart_after_kill_ms),
        ms(size.catch_up_ms),
        match size.catch_up_path {
            Some(CatchUpPath::Snapshot) => "snapshot".to_owned(),
            Some(CatchUpPath::Log) => "log".to_owned(),
            None => "-".to_owned(),
        },
        format!(
            "{}→{}",
            load_text(size.load.load_average_at_start),
            load_text(size.load.load_average_at_end)
        ),
    ]
}

/// The scale figures as `scale:` lines under the main table.
pub(crate) fn scale_notes(summary: &ScaleSummary) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "scale: a one-member cluster at {} (pid {} at first): {} endpoints per service, a snapshot every {} log entries; \
         fill {} connections; probe {} connections for {} s or a tenth of the size",
        summary.url,
        summary.pid,
        thousands(summary.endpoints_per_service),
        thousands(summary.snapshot_every),
        summary.fill_connections,
        summary.probe_connections,
        summary.probe_seconds,
    );
    let mut rows: Vec<Vec<String>> = vec![HEADER.iter().map(|h| (*h).to_owned()).collect()];
    rows.extend(summary.sizes.iter().map(row));
    let widths: Vec<usize> = (0..HEADER.len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    for cells in &rows {
        let mut line = String::from("scale:   ");
        for (c, cell) in cells.iter().enumerate() {
            let pad = " ".repeat(widths[c] - cell.chars().count());
            // Figures line up on the right, the path and the load read left to right.
            if c >= HEADER.len() - 2 {
                line.push_str(cell);
                line.push_str(&pad);
            } else {
                line.push_str(&pad);
                line.push_str(cell);
            }
            line.push_str("  ");
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
    let baseline = summary
        .baseline_rss_bytes
        .map_or_else(|| "unknown".to_owned(), format_bytes);
    let _ = writeln!(
        out,
        "scale: bytes/endpoint = (RSS − the empty server's {baseline}) ÷ endpoints; restart = start → ready and the last \
         service read whole at its revision; catch-up = add sent → the new node \
         applied the leader's index and serves that read"
    );
    for size in &summary.sizes {
        let snapshot = match (size.snapshot_bytes, size.snapshot_index) {
            (Some(bytes), Some(index)) => format!("snapshot {} at index {}", format_bytes(bytes), thousands(index)),
            (Some(bytes), None) => format!("snapshot {}", format_bytes(bytes)),
            (None, _) => "no snapshot yet".to_owned(),
        };
        let _ = writeln!(
            out,
            "scale: at {}: {} services, log index {}, {snapshot}; filled {} in {:.2} s ({} failed); probe {} ({} failed); \
             member voter after {}",
            thousands(size.size),
            thousands(size.services),
            size.log_index.map_or_else(|| "?".to_owned(), thousands),
            thousands(size.filled),
            size.fill_seconds,
            thousands(size.fill_errors),
            thousands(size.probe_requests),
            thousands(size.probe_errors),
            ms(size.member_added_ms),
        );
        for note in &size.notes {
            let _ = writeln!(out, "scale: at {}: {note}", thousands(size.size));
        }
    }
    if let Some(stopped) = &summary.stopped {
        let _ = writeln!(out, "scale: STOPPED, later sizes not measured: {stopped}");
    }
    out
}
