//! The report: per setup, what was measured and what was expected, as JSON (`--json`), an
//! aligned terminal table and Markdown (`--out`). Pure: built from [`Run`]s, no clock, so the
//! same seed prints the same bytes.

use serde::Serialize;

use crate::expect::{Expected, expected};
use crate::scenario::{Discovery, Refresh, Scenario, Setup};
use crate::sim::{Run, describe};

/// A whole lab run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// `simulation` (virtual clock) or `live` (real server, real sockets, wall clock).
    pub mode: &'static str,
    /// The scenario every setup ran on.
    pub scenario: ScenarioSummary,
    /// One entry per setup, in the order asked for.
    pub setups: Vec<SetupReport>,
}

/// The scenario, in report units.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScenarioSummary {
    /// Instances at the start.
    pub instances: u32,
    /// Instances that crash (or drain and stop).
    pub killed: u32,
    /// When, in seconds.
    pub crash_at_s: f64,
    /// The run's length in seconds.
    pub duration_s: f64,
    /// The clock's step in milliseconds (live: the resolution of the failure record).
    pub tick_ms: u64,
    /// Callers.
    pub callers: u32,
    /// Requests per second per caller.
    pub rate_per_caller: u32,
    /// The report window for failed requests, in seconds.
    pub window_s: f64,
    /// The seed.
    pub seed: u64,
}

impl ScenarioSummary {
    /// The summary of `scenario`.
    pub fn of(scenario: &Scenario) -> ScenarioSummary {
        ScenarioSummary {
            instances: scenario.instances,
            killed: scenario.killed,
            crash_at_s: seconds(scenario.crash_at_ms),
            duration_s: seconds(scenario.duration_ms),
            tick_ms: scenario.tick_ms,
            callers: scenario.callers,
            rate_per_caller: scenario.rate_per_caller,
            window_s: seconds(scenario.window_ms),
            seed: scenario.seed,
        }
    }
}

/// One setup's figures, each with its expectation in [`SetupReport::expected`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SetupReport {
    /// The setup's name.
    pub name: String,
    /// What it is, in words.
    pub description: String,
    /// The lease TTL (`null` for the hard-coded list).
    pub ttl_s: Option<f64>,
    /// The mean heartbeat interval (`null` for the hard-coded list).
    pub heartbeat_interval_s: Option<f64>,
    /// `none`, `cache` or `watch`.
    pub refresh: &'static str,
    /// The callers' cache lifetime, for `cache`.
    pub cache_s: Option<f64>,
    /// Failed requests.
    pub failed: u64,
    /// From the crash to the last failed request, plus one tick (0 without failures).
    pub stale_window_s: f64,
    /// Heartbeats that reached the registry, per second.
    pub heartbeats_per_s: f64,
    /// Registry lookups by callers, per second (the initial lookup excluded).
    pub lookups_per_s: f64,
    /// Failed requests per report window.
    pub failed_per_window: Vec<u64>,
    /// Failed requests per second.
    pub failed_per_s: Vec<u64>,
    /// Requests sent.
    pub requests: u64,
    /// Failed requests that found no endpoint at all.
    pub unroutable: u64,
    /// Watch deliveries per second.
    pub watch_deliveries_per_s: f64,
    /// Registrations after the start (lost leases).
    pub reregistrations: u64,
    /// Live instances removed by the registry (a silence outlasting the TTL).
    pub evicted_alive: u64,
    /// The fewest endpoints registered at any time.
    pub min_registered: usize,
    /// Ejections started by callers.
    pub ejections: u64,
    /// Seconds during which self-preservation held expiries.
    pub protection_s: f64,
    /// The analytic expectations.
    pub expected: Expected,
    /// The live lab's own figures (absent from simulated setups).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub live: Option<LiveFigures>,
}

/// What a live setup (SPEC X2) adds: how its callers reach the fleet, how the killed
/// instances stop, and the proxy's retry counters.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LiveFigures {
    /// `client-library` (each caller resolves and picks itself) or `muster-proxy` (each caller
    /// connects to an in-process proxy's TCP listener, SPEC D3).
    pub via: &'static str,
    /// `crash` (killed at once) or `drain` (drained, then stopped once every view has seen it).
    pub stop: &'static str,
    /// With `drain`: the least time from the drain to the stop, in seconds.
    pub drain_grace_s: Option<f64>,
    /// With `drain`: from the drain until every caller's view (the proxy's included) had it.
    pub drain_seen_s: Option<f64>,
    /// With `crash`: from the crash until every library caller's view had dropped the killed
    /// instances (their leases expired and the removal reached them); `None` if that did not
    /// happen within the run. No library request started after it can reach a killed one, so
    /// the stale window ends before it: the order the live test checks.
    pub removed_seen_s: Option<f64>,
    /// Requests of this setup in flight when the killed instances stopped.
    pub in_flight_at_stop: u64,
    /// Retries the proxy sent (connect failures retried on another endpoint); 0 for the
    /// client library, whose callers do not retry.
    pub retries: u64,
    /// Retries the proxy wanted but its retry budget refused.
    pub budget_exhausted: u64,
}

fn seconds(ms: u64) -> f64 {
    ms as f64 / 1_000.0
}

impl SetupReport {
    /// The report of `setup`'s `run` on `scenario`.
    pub fn from_run(scenario: &Scenario, setup: &Setup, run: &Run) -> SetupReport {
        let duration_s = seconds(scenario.duration_ms);
        let registry = setup.registry_setup();
        let (refresh, cache_s) = match registry.map(|r| r.refresh) {
            None => ("none", None),
            Some(Refresh::Cache { period_ms }) => ("cache", Some(seconds(period_ms))),
            Some(Refresh::Watch { .. }) => ("watch", None),
        };
        SetupReport {
            name: setup.name.clone(),
            description: describe(setup),
            ttl_s: registry.map(|r| seconds(r.ttl_ms)),
            heartbeat_interval_s: registry.map(|r| seconds(r.heartbeat_ms)),
            refresh,
            cache_s,
            failed: run.failed,
            stale_window_s: run.last_failed_ms.map_or(0.0, |last| {
                seconds((last + scenario.tick_ms).saturating_sub(scenario.crash_at_ms))
            }),
            heartbeats_per_s: run.heartbeats as f64 / duration_s,
            lookups_per_s: run.lookups as f64 / duration_s,
            failed_per_window: run.failed_per_window.clone(),
            failed_per_s: run.failed_per_second.clone(),
            requests: run.requests,
            unroutable: run.unroutable,
            watch_deliveries_per_s: run.watch_deliveries as f64 / duration_s,
            reregistrations: run.reregistrations,
            evicted_alive: run.evicted_alive,
            min_registered: if matches!(setup.discovery, Discovery::HardCoded) {
                scenario.instances as usize
            } else {
                run.min_registered
            },
            ejections: run.ejections,
            protection_s: seconds(run.protection_ticks * scenario.tick_ms),
            expected: expected(scenario, setup, run),
            live: None,
        }
    }
}

/// Left-aligned first column, right-aligned others, two spaces apart.
fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            let pad = widths[c] - cell.chars().count();
            if c == 0 {
                line.push_str(cell);
                line.push_str(&" ".repeat(pad));
            } else {
                line.push_str("  ");
                line.push_str(&" ".repeat(pad));
                line.push_str(cell);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

impl Report {
    /// `{"mode":..., "scenario":{...}, "setups":[...]}`, one line.
    pub fn render_json(&self) -> String {
        serde_json::to_string(self).expect("a report always serialises")
    }

    /// The scenario in one line.
    pub fn headline(&self) -> String {
        let s = &self.scenario;
        format!(
            "muster lab ({}): {} instances, {} crash at {} s, {} s run{}, {} callers × {} req/s, seed {}",
            self.mode,
            s.instances,
            s.killed,
            s.crash_at_s,
            s.duration_s,
            if self.mode == "simulation" {
                format!(" in {} ms ticks", s.tick_ms)
            } else {
                String::new()
            },
            s.callers,
            s.rate_per_caller,
            s.seed
        )
    }

    /// The figures beside their expectations.
    pub fn summary_rows(&self) -> Vec<Vec<String>> {
        let mut rows = vec![vec![
            "setup".to_owned(),
            "failed".into(),
            "expected".into(),
            "stale window".into(),
            "bound".into(),
            "heartbeats/s".into(),
            "expected".into(),
            "lookups/s".into(),
            "expected".into(),
        ]];
        for setup in &self.setups {
            rows.push(vec![
                setup.name.clone(),
                setup.failed.to_string(),
                match (setup.expected.failed, setup.expected.failed_at_most) {
                    (Some(expected), _) => format!("{expected:.0}"),
                    (None, Some(bound)) => format!("≤ {bound:.0}"),
                    (None, None) => "—".to_owned(),
                },
                format!("{:.2} s", setup.stale_window_s),
                setup
                    .expected
                    .stale_window_bound_s
                    .map_or("—".to_owned(), |b| format!("≤ {b:.2} s")),
                format!("{:.1}", setup.heartbeats_per_s),
                format!("{:.1}", setup.expected.heartbeats_per_s),
                format!("{:.2}", setup.lookups_per_s),
                format!("{:.2}", setup.expected.lookups_per_s),
            ]);
        }
        rows
    }

    /// Failed requests per window, one row per setup.
    pub fn window_rows(&self) -> Vec<Vec<String>> {
        let window = self.scenario.window_s;
        let windows = self.setups.iter().map(|s| s.failed_per_window.len()).max().unwrap_or(0);
        let mut header = vec!["failed per window".to_owned()];
        header.extend((0..windows).map(|w| format!("{}-{}s", w as f64 * window, (w + 1) as f64 * window)));
        let mut rows = vec![header];
        for setup in &self.setups {
            let mut row = vec![setup.name.clone()];
            row.extend(setup.failed_per_window.iter().map(u64::to_string));
            rows.push(row);
        }
        rows
    }

    /// The terminal rendering.
    pub fn render_table(&self) -> String {
        let mut out = format!("{}\n\n", self.headline());
        out.push_str(&table(&self.summary_rows()));
        out.push('\n');
        out.push_str(&table(&self.window_rows()));
        let notes: Vec<String> = self.setups.iter().filter_map(extras).collect();
        if !notes.is_empty() {
            out.push('\n');
            for note in notes {
                out.push_str(&note);
                out.push('\n');
            }
        }
        out
    }
}

/// What a setup beyond the reference adds to the table, in words.
pub(crate) fn extras(setup: &SetupReport) -> Option<String> {
    let mut parts = Vec::new();
    if setup.ejections > 0 {
        parts.push(format!("{} ejections", setup.ejections));
    }
    if setup.evicted_alive > 0 {
        parts.push(format!("{} live instances evicted", setup.evicted_alive));
    }
    if setup.protection_s > 0.0 {
        parts.push(format!(
            "self-preservation held expiries for {:.1} s",
            setup.protection_s
        ));
    }
    if setup.reregistrations > 0 {
        parts.push(format!("{} re-registrations", setup.reregistrations));
    }
    if setup.unroutable > 0 {
        parts.push(format!("{} requests found no endpoint", setup.unroutable));
    }
    if let Some(live) = &setup.live {
        parts.push(format!("callers via {}", live.via));
        match (live.drain_grace_s, live.drain_seen_s) {
            (Some(grace), Some(seen)) => parts.push(format!(
                "killed instances drained, seen by every view in {seen:.3} s, stopped after ≥ {grace:.2} s"
            )),
            _ => parts.push(format!("killed instances {}", live.stop)),
        }
        parts.push(format!("requests in flight at the stop: {}", live.in_flight_at_stop));
        if live.via == "muster-proxy" {
            parts.push(format!(
                "{} proxy retries ({} refused by the budget)",
                live.retries, live.budget_exhausted
            ));
        }
    }
    if setup.watch_deliveries_per_s > 0.0 {
        parts.push(format!("{:.2} watch deliveries/s", setup.watch_deliveries_per_s));
    }
    (!parts.is_empty()).then(|| {
        format!(
            "{}: {}; at least {} endpoints registered throughout",
            setup.name,
            parts.join(", "),
            setup.min_registered
        )
    })
}

/// The report's Markdown table syntax for `rows` (first row the header).
pub(crate) fn markdown_table(rows: &[Vec<String>]) -> String {
    let mut out = String::new();
    for (i, row) in rows.iter().enumerate() {
        out.push_str("| ");
        out.push_str(&row.join(" | "));
        out.push_str(" |\n");
        if i == 0 {
            out.push('|');
            out.push_str(&"---|".repeat(row.len()));
            out.push('\n');
        }
    }
    out
}
