//! The I/O shell of `muster lab`: read the scenario file, plan, run (simulation or live) with
//! a progress bar on stderr, write the report. Everything it calls is pure but the live lab.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use crate::args::{LabArgs, Plan, ScenarioFile, plan};
use crate::clock::Stopwatch;
use crate::error::{LabError, ScenarioError};
use crate::report::{Report, ScenarioSummary, SetupReport};
use crate::scenario::{Scenario, Setup};
use crate::{live, markdown, sim};

/// Simulates every setup on the scenario; `progress` gets `(setup index, tick, ticks)`.
pub fn simulate_all(scenario: &Scenario, setups: &[Setup], progress: &mut dyn FnMut(usize, u64, u64)) -> Report {
    let reports = setups
        .iter()
        .enumerate()
        .map(|(index, setup)| {
            let run = sim::simulate(scenario, setup, &mut |tick, ticks| progress(index, tick, ticks));
            SetupReport::from_run(scenario, setup, &run)
        })
        .collect();
    Report {
        mode: "simulation",
        scenario: ScenarioSummary::of(scenario),
        setups: reports,
    }
}

/// A one-line progress bar on stderr, drawn only when stderr is a terminal.
struct ProgressBar {
    enabled: bool,
    drawn: bool,
}

/// The bar's width in characters.
const BAR_WIDTH: usize = 30;

impl ProgressBar {
    fn stderr() -> ProgressBar {
        ProgressBar {
            enabled: std::io::stderr().is_terminal(),
            drawn: false,
        }
    }

    fn draw(&mut self, label: &str, done: u64, total: u64) {
        if !self.enabled {
            return;
        }
        let filled = (done as usize * BAR_WIDTH)
            .checked_div(total as usize)
            .unwrap_or(BAR_WIDTH);
        let bar = format!(
            "{}{}",
            "#".repeat(filled),
            " ".repeat(BAR_WIDTH - filled.min(BAR_WIDTH))
        );
        let percent = (done * 100).checked_div(total).unwrap_or(100);
        eprint!("\r{label:<24} [{bar}] {percent:>3}%");
        self.drawn = true;
    }

    fn finish(&mut self) {
        if self.drawn {
            eprint!("\r{}\r", " ".repeat(24 + BAR_WIDTH + 8));
            self.drawn = false;
        }
    }
}

fn load(path: Option<&PathBuf>) -> Result<Option<ScenarioFile>, ScenarioError> {
    let Some(path) = path else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(path).map_err(|error| ScenarioError::File {
        path: path.clone(),
        why: error.to_string(),
    })?;
    ScenarioFile::parse(&text, path).map(Some)
}

/// `muster lab`: plans (refusing bad input before anything runs), runs, prints the table (or
/// the JSON with `json`) on `out`, writes `--out DIR`.
pub async fn run(args: LabArgs, json: bool, out: &mut dyn Write) -> Result<(), LabError> {
    let file = load(args.scenario.as_ref())?;
    let plan = plan(&args, file)?;
    let mut bar = ProgressBar::stderr();
    let report = match plan {
        Plan::Simulate { scenario, setups } => {
            let watch = Stopwatch::start();
            let report = simulate_all(&scenario, &setups, &mut |index, tick, ticks| {
                bar.draw(&setups[index].name, tick, ticks);
            });
            bar.finish();
            let requests: u64 = report.setups.iter().map(|s| s.requests).sum();
            eprintln!(
                "simulated {} setup{} ({} virtual seconds, {requests} requests) in {:.3} s",
                setups.len(),
                if setups.len() == 1 { "" } else { "s" },
                scenario.duration_ms as f64 / 1_000.0 * setups.len() as f64,
                watch.elapsed().as_secs_f64()
            );
            report
        }
        Plan::Live(scenario) => {
            let report = live::run(&scenario, &mut |done, total| bar.draw("live", done, total)).await;
            bar.finish();
            report?
        }
    };
    if let Some(dir) = &args.out {
        markdown::write(&report, dir)?;
    }
    let text = if json {
        format!("{}\n", report.render_json())
    } else {
        report.render_table()
    };
    out.write_all(text.as_bytes()).map_err(|source| LabError::Write {
        path: PathBuf::from("<stdout>"),
        source,
    })
}

/// The report of a plan, without printing: what tests and benches call.
pub async fn report(plan: Plan) -> Result<Report, LabError> {
    match plan {
        Plan::Simulate { scenario, setups } => Ok(simulate_all(&scenario, &setups, &mut |_, _, _| {})),
        Plan::Live(scenario) => live::run(&scenario, &mut |_, _| {}).await,
    }
}
