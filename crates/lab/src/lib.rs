//! `muster lab` (SPEC X1, X2; SPEC X): how long does a dead instance keep getting traffic,
//! and what does the registry pay for a shorter time? A fleet simulation that answers with
//! numbers and pictures for the user's own TTLs, heartbeats, caches and watches — running
//! Muster's **real** code on a virtual clock, not a model of it — and a live lab that
//! measures the same on real sockets against a real server.
//!
//! # Layout
//! ```text
//!  args (flags, TOML) ──▶ Plan ──▶ run (shell: progress bar, timing, files)
//!                                   │
//!        ┌──────────────────────────┴───────────────────────────┐
//!        ▼ simulation (pure, virtual clock, seeded)             ▼ live (wall clock)
//!  sim::simulate(Scenario, Setup) ──▶ Run                live::run: muster_server::start,
//!     ├─ control: Registry::apply, LeaseDeadlines,              Registrar, Resolver, Picker,
//!     │           Preservation (the server's keeper logic)      TCP listeners on loopback
//!     └─ caller:  View, EligibleSet, RoundRobin, OutlierDetector      │
//!        ▼                                                            ▼
//!  expect (analytic) ──▶ report::Report ──▶ table / JSON / markdown + plot (SVG)
//! ```
//! - [`scenario`]: [`Scenario`] (fleet, crash, callers, clock, seed) and [`Setup`]s.
//! - `control`, `caller`: the registry side and the caller side of the simulation.
//! - [`sim`]: the tick loop; [`expect`]: the analytic expectations.
//! - [`report`], [`plot`], [`markdown`]: the outputs.
//! - [`args`]: flags and scenario files; [`live`]: the live lab; [`run`](mod@run): the shell.
//!
//! # Determinism
//! The simulation reads no clock and draws every random number from streams derived from the
//! seed: the same seed prints the same bytes. Its hot loop (a pick per request: 360,000 for
//! the three reference setups) allocates nothing; the three reference setups simulate in
//! well under a second in a release build (`benches/lab.rs`).
//!
//! # Example
//! ```
//! use muster_lab::{Scenario, Setup, simulate_all};
//!
//! let scenario = Scenario::reference();
//! let report = simulate_all(&scenario, &[Setup::hard_coded()], &mut |_, _, _| {});
//! // 2,000 requests/s × 10% dead × 40 s, exactly.
//! assert_eq!(report.setups[0].failed, 8_000);
//! ```

#![forbid(unsafe_code)]

pub mod args;
mod caller;
mod clock;
mod control;
pub mod error;
pub mod expect;
pub mod live;
pub mod markdown;
pub mod plot;
pub mod report;
pub mod run;
pub mod scenario;
pub mod sim;
pub mod units;

pub use args::{LabArgs, Plan, ScenarioFile, plan};
pub use error::{LabError, ScenarioError};
pub use report::{Report, SetupReport};
pub use run::{report, run, simulate_all};
pub use scenario::{Discovery, Refresh, RegistrySetup, Scenario, Setup, Silence, Stop};
