//! The report for people (an aligned table with the targets, anchors and notes) and for
//! machines (pretty JSON). Pure.

use std::fmt::Write as _;
use std::time::Duration;

use crate::Workload;
use crate::report::{LatencySummary, Report, anchors};

impl Report {
    /// The report as pretty JSON.
    pub fn render_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|err| format!("{{\"error\":\"{err}\"}}"))
    }

    /// The report as a human table, with the targets and the anchor figures.
    pub fn render_table(&self) -> String {
        let plan = &self.plan;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "muster bench: {} connections, {} per workload (at most {} requests), {} watchers, {} changes",
            plan.connections,
            format_duration(plan.duration),
            thousands(plan.max_requests),
            thousands(plan.watchers as u64),
            plan.changes,
        );
        let load = self
            .load_average_at_start
            .map_or_else(String::new, |load| format!(", load average {load:.2} at start"));
        let _ = writeln!(
            out,
            "  machine: {} CPUs shared by the load generator and the systems under test{load}",
            self.cpus
        );
        for info in &self.systems {
            let how = if info.spawned { "spawned" } else { "running" };
            let pid = info
                .pid
                .map_or_else(|| "pid unknown".to_owned(), |p| format!("pid {p}"));
            let _ = writeln!(out, "  {:<6} {} ({how}, {pid})", info.system.name(), info.url);
        }
        let header = [
            "workload",
            "system",
            "requests",
            "errors",
            "throughput/s",
            "p50",
            "p99",
            "p99 CO",
            "max",
            "memory",
            "muster/etcd",
            "target",
        ];
        let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| (*h).to_owned()).collect()];
        for workload in &self.workloads {
            for (i, result) in workload.results.iter().enumerate() {
                let first = i == 0;
                // Convergence shows the server's commit→applied (its notes give the rest).
                let applied = result.convergence.as_ref().map(|c| LatencySummary {
                    p50_ms: c.applied.p50_ms as f64,
                    p99_ms: c.applied.p99_ms as f64,
                    max_ms: c.applied.max_ms as f64,
                    mean_ms: f64::NAN,
                    p99_corrected_ms: None,
                });
                let latency = |pick: fn(&LatencySummary) -> f64| {
                    result
                        .latency
                        .as_ref()
                        .or(applied.as_ref())
                        .map_or_else(|| "-".to_owned(), |l| format_ms(pick(l)))
                };
                let verdict = match workload.target_met {
                    Some(true) => "met",
                    Some(false) => "not met",
                    None => "n/a",
                };
                rows.push(vec![
                    if first {
                        workload.workload.name().to_owned()
                    } else {
                        String::new()
                    },
                    result.system.name().to_owned(),
                    thousands(result.requests),
                    thousands(result.errors),
                    // Fanout, watchers and xds are judged on latency and memory; their rate
                    // would mostly measure the pauses between changes.
                    if matches!(
                        workload.workload,
                        Workload::Watchers
                            | Workload::Fanout
                            | Workload::Xds
                            | Workload::Convergence
                            | Workload::Scale
                            | Workload::Mirror
                    ) {
                        "-".to_owned()
                    } else {
                        thousands(result.throughput_per_s.round() as u64)
                    },
                    latency(|l| l.p50_ms),
                    latency(|l| l.p99_ms),
                    // Corrected for coordinated omission (closed-loop request workloads only).
                    result
                        .latency
                        .and_then(|l| l.p99_corrected_ms)
                        .map_or_else(|| "-".to_owned(), format_ms),
                    latency(|l| l.max_ms),
                    result.memory.as_ref().map_or_else(
                        || "-".to_owned(),
                        |m| format!("{:.1} KiB/w", m.per_watcher_bytes / 1024.0),
                    ),
                    match (first, workload.ratio_muster_to_etcd) {
                        (true, Some(r)) => format!("{r:.2}×"),
                        (true, None) => "-".to_owned(),
                        (false, _) => String::new(),
                    },
                    if first {
                        format!("{}: {verdict}", workload.target.describe())
                    } else {
                        String::new()
                    },
                ]);
            }
        }
        let widths: Vec<usize> = (0..header.len())
            .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
            .collect();
        for row in &rows {
            let mut line = String::new();
            for (c, cell) in row.iter().enumerate() {
                let pad = widths[c] - cell.chars().count();
                // Names and verdicts read left to right; figures line up on the right.
                if c <= 1 || c == header.len() - 1 {
                    line.push_str(cell);
                    line.push_str(&" ".repeat(pad));
                } else {
                    line.push_str(&" ".repeat(pad));
                    line.push_str(cell);
                }
                line.push_str("  ");
            }
            let _ = writeln!(out, "{}", line.trim_end());
        }
        let _ = writeln!(
            out,
            "muster/etcd compares the figure the target judges: throughput (higher is better), \
             fanout p99 and memory per watcher (lower is better)."
        );
        let _ = writeln!(
            out,
            "fanout: requests = expected deliveries (watchers × changes), latency = commit sent → update frame received."
        );
        let _ = writeln!(
            out,
            "p99 CO: closed-loop p99 corrected for coordinated omission (hdrhistogram, the run's mean latency as the expected interval)."
        );
        for workload in &self.workloads {
            let _ = writeln!(
                out,
                "{}: issue anchors: {}",
                workload.workload.name(),
                anchors(workload.workload)
            );
            if let Some(load) = workload.load_average_at_end {
                let _ = writeln!(out, "{}: load average {load:.2} at its end", workload.workload.name());
            }
            for skipped in &workload.skipped {
                let _ = writeln!(out, "{}: skipped {skipped}", workload.workload.name());
            }
            for result in &workload.results {
                if let (Some(server), Some(client)) = (result.server_cores, result.client_cores) {
                    let _ = writeln!(
                        out,
                        "{} ({}): CPU: server {server:.2} cores, load generator {client:.2} cores",
                        workload.workload.name(),
                        result.system.name(),
                    );
                }
                if let Some(note) = &result.note {
                    let _ = writeln!(out, "{} ({}): {note}", workload.workload.name(), result.system.name());
                }
                if let Some(checks) = &result.checks {
                    let _ = write!(out, "{}", checks_notes(checks));
                }
                if let Some(consul) = &result.consul {
                    let _ = write!(out, "{}", consul_notes(consul));
                }
                if let Some(xds) = &result.xds {
                    let _ = write!(out, "{}", xds_notes(xds));
                }
                if let Some(convergence) = &result.convergence {
                    let _ = write!(out, "{}", convergence_notes(convergence));
                }
                if let Some(storm) = &result.storm {
                    let _ = write!(out, "{}", storm.notes());
                }
                if let Some(scale) = &result.scale {
                    let _ = write!(out, "{}", crate::scale::scale_notes(scale));
                }
                // The xds notes above give its memory, per ADS stream.
                if let Some(m) = result.memory.as_ref().filter(|_| result.xds.is_none()) {
                    let _ = writeln!(
                        out,
                        "{} ({}): RSS {} → {} with {} idle watch streams",
                        workload.workload.name(),
                        result.system.name(),
                        format_bytes(m.rss_before_bytes),
                        format_bytes(m.rss_after_bytes),
                        thousands(m.watchers),
                    );
                }
            }
        }
        out
    }
}

/// The checks workload's figures: the probe schedule and detection per kind.
fn checks_notes(checks: &crate::ChecksSummary) -> String {
    let mut out = String::new();
    let mut sorted = checks.per_second.clone();
    sorted.sort_unstable();
    let (min, max) = (
        sorted.first().copied().unwrap_or(0),
        sorted.last().copied().unwrap_or(0),
    );
    let median = sorted.get(sorted.len() / 2).copied().unwrap_or(0);
    let _ = writeln!(
        out,
        "checks: {} endpoints at {} s: {} probes/s expected; per second over {} s: min {min}, median {median}, max {max} (largest deviation {:.1}%)",
        thousands(checks.endpoints),
        checks.interval_s,
        checks.expected_per_s,
        checks.per_second.len(),
        checks.max_deviation * 100.0
    );
    for kind in &checks.detection {
        let mut latencies = kind.latencies_ms.clone();
        latencies.sort_by(f64::total_cmp);
        let median = latencies.get(latencies.len() / 2).copied();
        let max = latencies.last().copied();
        let figures = match (median, max) {
            (Some(median), Some(max)) => format!("median {median:.0} ms, max {max:.0} ms"),
            _ => "no sample completed".to_owned(),
        };
        let failed = if kind.failed > 0 {
            format!(", {} failed", kind.failed)
        } else {
            String::new()
        };
        let verdict = match max {
            Some(max) if max <= kind.bound_ms => "within",
            Some(_) => "OVER",
            None => "n/a:",
        };
        let _ = writeln!(
            out,
            "checks: detection {}: {figures} over {} samples{failed}: {verdict} its bound {:.0} ms",
            kind.kind,
            kind.latencies_ms.len(),
            kind.bound_ms
        );
    }
    out
}

/// The consul workload's figures: wake-ups per change against Consul's model, and CPU.
fn consul_notes(consul: &crate::ConsulSummary) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "consul: {} services, one blocking query each; {} changes, one per second: wake-ups per change median {} \
         (per change: {:?}), Consul's model {} (every waiter): ratio {:.4}{}",
        thousands(consul.services),
        consul.changes,
        consul.median_wakeups_per_change,
        consul.wakeups_per_change,
        thousands(consul.consul_model_wakeups_per_change),
        consul.ratio_to_consul_model,
        if consul.missed > 0 {
            format!(
                "; {} changes not seen by their service's query within the second",
                consul.missed
            )
        } else {
            String::new()
        },
    );
    let server = consul.server_wakeups.map_or_else(
        || "not exposed in /v1/metrics".to_owned(),
        |n| format!("{n} over {} changes", consul.changes),
    );
    let cores = consul
        .median_server_cores
        .map_or_else(|| "unknown (no PID)".to_owned(), |c| format!("{c:.3} cores"));
    let _ = writeln!(
        out,
        "consul: server-side wake-ups (blocking queries returned changed): {server}; server CPU per second, median: {cores}"
    );
    out
}

/// The xds workload's figures: push and ACK latency, per change, and memory per stream.
fn xds_notes(xds: &crate::XdsSummary) -> String {
    let mut out = String::new();
    let latency = |summary| latency_text(summary, "none arrived");
    let _ = writeln!(
        out,
        "xds: {} of {} ADS streams over {} HTTP/2 connections, {} changes: commit→push {}; commit→ACK (server's ledger) {}",
        thousands(xds.opened),
        thousands(xds.streams),
        thousands(xds.connections),
        xds.changes.len(),
        latency(xds.push),
        latency(xds.ack),
    );
    let _ = writeln!(
        out,
        "xds: fan-out alone (each change's first push → every stream's push) {}",
        latency(xds.fanout),
    );
    let all_acked = match (xds.median_all_acked_ms, xds.max_all_acked_ms) {
        (Some(median), Some(max)) => format!("median {}, max {}", format_ms(median), format_ms(max)),
        _ => "never".to_owned(),
    };
    let _ = writeln!(
        out,
        "xds: write → every stream acked: {all_acked}; {} pushes missed, {} changes not acked by every stream",
        thousands(xds.missed_pushes),
        xds.changes_not_all_acked,
    );
    for change in &xds.changes {
        let _ = writeln!(
            out,
            "xds:   revision {}: reply {}, pushed {} ({}), all acked {}",
            change.revision,
            format_ms(change.reply_ms),
            thousands(change.pushed),
            latency(change.push),
            change.all_acked_ms.map_or_else(|| "no".to_owned(), format_ms),
        );
    }
    if let (Some(before), Some(after), Some(kib)) = (xds.rss_before_bytes, xds.rss_after_bytes, xds.kib_per_stream) {
        let _ = writeln!(
            out,
            "xds: server RSS {} → {} with the streams open and idle: {kib:.1} KiB per stream",
            format_bytes(before),
            format_bytes(after),
        );
    }
    out
}

/// The convergence workload's figures: commit→applied (the server's), commit→DNS-answer (the
/// probe's), subscribers and stragglers, per change.
pub(crate) fn convergence_notes(c: &crate::ConvergenceSummary) -> String {
    let mut out = String::new();
    let a = &c.applied;
    let _ = writeln!(
        out,
        "convergence: {} resolvers of {} ({} opened), {} of {} changes: commit→applied (server's ledger, {} samples) \
         p50 {} ms, p90 {} ms, p99 {} ms, p999 {} ms, max {} ms",
        thousands(c.watchers),
        c.service,
        thousands(c.opened),
        c.changes.len(),
        c.changes_asked,
        thousands(a.samples as u64),
        a.p50_ms,
        a.p90_ms,
        a.p99_ms,
        a.p999_ms,
        a.max_ms,
    );
    let dns = match (&c.dns_skipped, c.dns) {
        (Some(why), _) => format!("not probed: {why}"),
        (None, Some(l)) => format!(
            "p50 {}, p99 {}, max {}",
            format_ms(l.p50_ms),
            format_ms(l.p99_ms),
            format_ms(l.max_ms)
        ),
        (None, None) => "never answered the new IP".to_owned(),
    };
    let _ = writeln!(
        out,
        "convergence: write returned → DNS answer with the new IP: {dns}{}",
        if c.dns_missed > 0 {
            format!("; {} changes missed", c.dns_missed)
        } else {
            String::new()
        }
    );
    let _ = writeln!(
        out,
        "convergence: after the last change: {} live, {} applied ({}), {} stragglers{}, {} silent; \
         {} changes not applied by all within the bound; load average {}",
        thousands(c.live as u64),
        thousands(c.applied_subscribers as u64),
        if c.converged { "converged" } else { "not converged" },
        c.stragglers_total,
        if c.stragglers.is_empty() {
            String::new()
        } else {
            format!(" ({})", c.stragglers.join("; "))
        },
        c.silent_total,
        c.changes_not_converged,
        c.load_average_at_end
            .map_or_else(|| "unknown".to_owned(), |l| format!("{l:.2} at the end")),
    );
    let ms = |v: Option<f64>| v.map_or_else(|| "no".to_owned(), format_ms);
    for change in &c.changes {
        let _ = writeln!(
            out,
            "convergence:   revision {}: reply {}, DNS {}, all applied (polled) {}, ledger: {} applied, p50 {} ms, p99 {} ms",
            change.revision,
            format_ms(change.reply_ms),
            ms(change.dns_ms),
            ms(change.all_applied_ms),
            change.applied.map_or_else(|| "?".to_owned(), |n| thousands(n as u64)),
            change.p50_ms.map_or_else(|| "?".to_owned(), |v| v.to_string()),
            change.p99_ms.map_or_else(|| "?".to_owned(), |v| v.to_string()),
        );
    }
    out
}

/// `1234567` → `1,234,567`.
pub(crate) fn thousands(value: u64) -> String {
    let digits = value.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// Milliseconds with three significant figures: `812 µs`, `2.31 ms`, `48.2 ms`, `1.23 s`.
pub(crate) fn format_ms(ms: f64) -> String {
    if ms < 1.0 {
        format!("{:.0} µs", ms * 1_000.0)
    } else if ms < 10.0 {
        format!("{ms:.2} ms")
    } else if ms < 1_000.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{:.2} s", ms / 1_000.0)
    }
}

/// A latency summary as `p50 …, p99 …, max …` (with the p99 corrected for coordinated
/// omission, `(CO …)`, where the summary has one), or `none` when nothing was measured.
pub(crate) fn latency_text(summary: Option<LatencySummary>, none: &str) -> String {
    summary.map_or_else(
        || none.to_owned(),
        |l| {
            let co = l
                .p99_corrected_ms
                .map_or_else(String::new, |v| format!(" (CO {})", format_ms(v)));
            format!(
                "p50 {}, p99 {}{co}, max {}",
                format_ms(l.p50_ms),
                format_ms(l.p99_ms),
                format_ms(l.max_ms)
            )
        },
    )
}

/// `12.3 MiB`, or `?` when unknown.
pub(crate) fn mib_text(bytes: Option<u64>) -> String {
    bytes.map_or_else(
        || "?".to_owned(),
        |b| format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0)),
    )
}

fn format_duration(duration: Duration) -> String {
    format_ms(duration.as_secs_f64() * 1_000.0)
}

pub(crate) fn format_bytes(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_formatted_for_people() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(format_ms(0.8124), "812 µs");
        assert_eq!(format_ms(2.314), "2.31 ms");
        assert_eq!(format_ms(48.23), "48.2 ms");
        assert_eq!(format_ms(1_230.0), "1.23 s");
    }
}
