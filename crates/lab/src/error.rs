//! The lab's errors: [`ScenarioError`] for input refused before anything runs (usage), and
//! [`LabError`] for everything a run can end with. Each has a stable code.

use std::path::PathBuf;

/// A scenario, setup, flag or scenario file that cannot run. Nothing was simulated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScenarioError {
    /// A scenario field is out of range.
    #[error("{field}: {why}")]
    Invalid {
        /// The field (`instances`, `kill`, `tick` ...).
        field: &'static str,
        /// Why.
        why: String,
    },
    /// A setup cannot run on the scenario.
    #[error("setup {setup}: {field}: {why}")]
    Setup {
        /// The setup's name.
        setup: String,
        /// The field.
        field: &'static str,
        /// Why.
        why: String,
    },
    /// A value did not parse (a duration without a unit, a fraction over 100%, ...).
    #[error("{field}: {why}")]
    Parse {
        /// The flag or key.
        field: String,
        /// Why.
        why: String,
    },
    /// `--setup` named no setup the lab knows.
    #[error("unknown setup '{name}'; known: {known}, or 'reference' or 'all'")]
    UnknownSetup {
        /// What was asked for.
        name: String,
        /// The catalogue.
        known: String,
    },
    /// A scenario file could not be read or is not the lab's TOML.
    #[error("scenario file {path}: {why}")]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
}

impl ScenarioError {
    /// A stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            ScenarioError::Invalid { .. } | ScenarioError::Setup { .. } | ScenarioError::Parse { .. } => {
                "invalid_scenario"
            }
            ScenarioError::UnknownSetup { .. } => "unknown_setup",
            ScenarioError::File { .. } => "scenario_file",
        }
    }
}

/// Why `muster lab` failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LabError {
    /// The input was refused; nothing ran (exit 2).
    #[error(transparent)]
    Usage(#[from] ScenarioError),
    /// The report could not be written.
    #[error("writing {path}: {source}")]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The live lab could not set up or run its server, instances or callers.
    #[error("live lab: {0}")]
    Live(String),
}

impl LabError {
    /// A stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            LabError::Usage(error) => error.code(),
            LabError::Write { .. } => "write_failed",
            LabError::Live(_) => "live_failed",
        }
    }

    /// Whether the input was refused before anything ran (a usage error, exit 2).
    pub fn is_usage(&self) -> bool {
        matches!(self, LabError::Usage(_))
    }
}
