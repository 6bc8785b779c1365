//! The catalogue simulated once per test binary (a few seconds in a debug build).

use std::sync::OnceLock;

use muster_lab::{Report, Scenario, Setup, SetupReport, simulate_all};

/// Every catalogue setup on the reference scenario and seed.
pub(crate) fn catalogue() -> &'static Report {
    static REPORT: OnceLock<Report> = OnceLock::new();
    REPORT.get_or_init(|| {
        let scenario = Scenario::reference();
        simulate_all(&scenario, &Setup::all(&scenario), &mut |_, _, _| {})
    })
}

/// One setup of [`catalogue`].
pub(crate) fn setup(name: &str) -> &'static SetupReport {
    catalogue()
        .setups
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no setup {name}"))
}

/// `|measured − expected| / expected`.
pub(crate) fn relative_error(measured: f64, expected: f64) -> f64 {
    (measured - expected).abs() / expected
}
