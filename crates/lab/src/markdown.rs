//! `--out DIR`: `report.md` with the tables, the setups in words and the formulas, beside
//! `failed-per-second.svg` and `stale-window.svg`.

use std::path::Path;

use crate::error::LabError;
use crate::plot;
use crate::report::{Report, extras, markdown_table};

/// The files `--out` writes.
pub const REPORT_FILE: &str = "report.md";
/// The failed-requests plot.
pub const FAILED_PLOT: &str = "failed-per-second.svg";
/// The stale-window plot.
pub const STALE_PLOT: &str = "stale-window.svg";

/// The Markdown report.
pub fn render(report: &Report) -> String {
    let mut out = format!("# {}\n\n", report.headline());
    out.push_str(&markdown_table(&report.summary_rows()));
    out.push_str(&format!(
        "\n![Failed requests per second]({FAILED_PLOT})\n\n![Stale window per setup]({STALE_PLOT})\n\n"
    ));
    out.push_str("## Failed requests per window\n\n");
    out.push_str(&markdown_table(&report.window_rows()));
    out.push_str("\n## Setups\n\n");
    for setup in &report.setups {
        out.push_str(&format!("- **{}**: {}.", setup.name, setup.description));
        if let (Some(age), Some(wait)) = (setup.expected.mean_heartbeat_age_s, setup.expected.mean_cache_wait_s) {
            out.push_str(&format!(
                " Mean heartbeat age at the crash {age:.3} s, mean wait from removal to a caller's next refresh {wait:.3} s."
            ));
        }
        if let Some(nominal) = setup.expected.failed_nominal {
            out.push_str(&format!(" Nominal expectation {nominal:.0} failed requests."));
        }
        if let Some(note) = extras(setup) {
            out.push_str(&format!(" {note}."));
        }
        out.push('\n');
    }
    out.push_str(EXPECTATIONS);
    out
}

/// How the expectations are computed, for the report's readers.
const EXPECTATIONS: &str = "
## How the expectations are computed

- Hard-coded list: total rate × killed share × (run − crash): every caller keeps sending the
  dead their share until the end.
- Registry: dead × per-instance rate × (TTL − mean heartbeat age + mean cache wait). The
  means are this run's: the age of each dead instance's last heartbeat at the crash, and for
  each (dead instance, caller) pair the wait from its removal to that caller's next lookup
  (with a watch: the propagation). The nominal figure uses interval / 2 and cache / 2.
- Stale window (crash to the last failed request, plus one tick) ≤ TTL + cache (or
  propagation) + one tick.
- Heartbeats/s = mean heartbeating instances / interval. Each heartbeat due between two ticks
  goes at the next tick and the next one is scheduled from there, so the real mean period is
  the interval plus about half a tick: 0.2% fewer heartbeats at 2.5 s, 1% at 0.5 s.
- Lookups/s = callers / cache lifetime (each caller's first lookup, at the start, excluded).
- Ejection on the first failure: a bound, not a closed form — each (dead instance, caller)
  pair fails at most once per ejection while it is exposed (each ejection restarts the
  rotation at a random place, which the round-robin arithmetic does not capture).
- Self-preservation during a mass silence: no closed form (which dead instances the brake
  holds depends on the order of expiries); the figures show the trade: fewer live instances
  evicted, dead ones kept in routing until the brake's window slides.
- Drain: zero when every caller learns of the drain within the grace.
";

/// Writes the report and its plots into `dir` (created if missing).
pub fn write(report: &Report, dir: &Path) -> Result<(), LabError> {
    let fail = |path: &Path| {
        let path = path.to_path_buf();
        move |source| LabError::Write { path, source }
    };
    std::fs::create_dir_all(dir).map_err(fail(dir))?;
    for (name, text) in [
        (REPORT_FILE, render(report)),
        (FAILED_PLOT, plot::failed_per_second(report)),
        (STALE_PLOT, plot::stale_windows(report)),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(fail(&path))?;
    }
    Ok(())
}
