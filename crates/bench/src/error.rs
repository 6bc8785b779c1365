//! Why a run could not be done. Workload errors (a refused request, a missed delivery) are
//! not errors of the run: they are counted in the report.

/// Why `muster bench` stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// The flags do not make a run.
    #[error("{0}")]
    Usage(String),
    /// `--endpoints` names no run of fleet sizes.
    #[error(transparent)]
    Sizes(#[from] crate::scale::SizesError),
    /// Neither Muster nor etcd was named.
    #[error("nothing to benchmark: give --spawn or --server URL, and/or --spawn-etcd or --etcd URL")]
    NoSystem,
    /// A system could not be started or did not become ready.
    #[error("cannot start {what}: {detail}")]
    Spawn {
        /// `muster` or `etcd`.
        what: &'static str,
        /// Why, with the tail of its log where there is one.
        detail: String,
    },
    /// A workload's preparation (granting leases, registering the read set) failed.
    #[error("{system}: preparing {workload} failed: {detail}")]
    Setup {
        /// `muster` or `etcd`.
        system: &'static str,
        /// The workload.
        workload: &'static str,
        /// Why.
        detail: String,
    },
    /// The JSON report could not be written.
    #[error("cannot write the report to {path}: {source}")]
    ReportFile {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

impl BenchError {
    /// A stable, machine-readable code for the CLI's `error: <code>: ...` line.
    pub fn code(&self) -> &'static str {
        match self {
            BenchError::Usage(_) | BenchError::NoSystem | BenchError::Sizes(_) => "usage",
            BenchError::Spawn { .. } => "spawn_failed",
            BenchError::Setup { .. } => "setup_failed",
            BenchError::ReportFile { .. } => "report_file",
        }
    }
}
