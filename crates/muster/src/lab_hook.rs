//! The dashboard's lab runs (SPEC U2, X1): `muster serve` hands the server this
//! [`LabRunner`], which plans and simulates a `muster lab` scenario exactly as the command
//! does (`muster_lab::plan`, `simulate_all`) and draws its two plots.
//!
//! The server cannot call the lab itself (the lab depends on the server for its live mode),
//! so the binary, which depends on both, plugs it in through
//! [`muster_server::start_with`]. Only the simulation runs here: the live lab starts
//! processes and sockets, which a web request must not.

use muster_lab::{LabArgs, Plan, plot};
use muster_server::{LabPlot, LabRequest, LabRun, LabRunner};

/// Runs dashboard requests as `muster lab` simulations.
#[derive(Debug, Clone, Copy, Default)]
pub struct SimulationRunner;

impl SimulationRunner {
    /// The `muster lab` flags a request stands for.
    pub fn args(request: &LabRequest) -> LabArgs {
        let ms = |value: Option<u64>| value.map(|ms| format!("{ms}ms"));
        LabArgs {
            setups: request.setups.clone(),
            instances: request.instances,
            kill: request.kill.clone(),
            crash_at: ms(request.crash_at_ms),
            duration: ms(request.duration_ms),
            callers: request.callers,
            rate: request.rate,
            seed: request.seed,
            ..LabArgs::default()
        }
    }
}

impl LabRunner for SimulationRunner {
    fn run(&self, request: &LabRequest) -> Result<LabRun, String> {
        let plan = muster_lab::plan(&Self::args(request), None).map_err(|error| error.to_string())?;
        let Plan::Simulate { scenario, setups } = plan else {
            return Err("live: the dashboard runs simulations only (muster lab --live runs the live lab)".into());
        };
        let report = muster_lab::simulate_all(&scenario, &setups, &mut |_, _, _| {});
        let plots = vec![
            LabPlot {
                name: "failed_per_second".into(),
                svg: plot::failed_per_second(&report),
            },
            LabPlot {
                name: "stale_windows".into(),
                svg: plot::stale_windows(&report),
            },
        ];
        let report = serde_json::from_str(&report.render_json()).map_err(|error| error.to_string())?;
        Ok(LabRun { report, plots })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(setups: &[&str]) -> LabRequest {
        let mut request = LabRequest::default();
        request.setups = setups.iter().map(|s| (*s).to_owned()).collect();
        request.instances = Some(50);
        request.duration_ms = Some(10_000);
        request.crash_at_ms = Some(3_000);
        request.callers = Some(2);
        request.rate = Some(20);
        request
    }

    #[test]
    fn a_request_runs_the_simulation_and_draws_both_plots() {
        let run = SimulationRunner.run(&request(&["hard-coded", "ttl-2s"])).unwrap();
        assert_eq!(run.report["setups"].as_array().map(Vec::len), Some(2));
        let names: Vec<&str> = run.plots.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["failed_per_second", "stale_windows"]);
        assert!(run.plots.iter().all(|p| p.svg.starts_with("<svg")), "SVG documents");
    }

    #[test]
    fn an_unknown_setup_is_refused_before_anything_runs() {
        let refused = SimulationRunner.run(&request(&["no-such-setup"])).unwrap_err();
        assert!(refused.contains("no-such-setup"), "{refused}");
    }
}
