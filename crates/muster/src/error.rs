//! [`CliError`]: every way a command can fail, with its stable code and exit code (the table
//! is in the crate docs).

use muster_core::Rejection;
use muster_core::Revision;
use muster_core::api::{ErrorBody, ErrorDetail};

use muster_client::ClientError;

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    /// Bad input caught before anything was sent (exit 2).
    #[error("{message}")]
    Usage {
        /// The stable code (`invalid_name`, `config`, ...).
        code: String,
        /// For people.
        message: String,
    },
    /// The server, or a watch's `error` frame, refused (exit 1).
    #[error("{}", .0.message)]
    Refused(ErrorDetail),
    /// The server could not be reached or did not speak the API (exit 3).
    #[error(transparent)]
    Client(ClientError),
    /// A watch was told to resync (exit 4).
    #[error(
        "the watch fell behind at revision {revision}; take a fresh snapshot (muster resolve) and watch again from its revision"
    )]
    Resync {
        /// The current revision.
        revision: Revision,
    },
    /// A watch was closed by a stopping server (exit 3).
    #[error(
        "the server is stopping; everything up to revision {revision} was sent: resume with --from-revision {revision}"
    )]
    Closing {
        /// The last revision sent.
        revision: Revision,
    },
    /// `wait-converged` timed out (exit 1; the stragglers are listed on stdout).
    #[error("{message}")]
    NotConverged {
        /// How far from converged, and how many stragglers.
        message: String,
    },
    /// `serve` failed at run time (exit 1; exit 2 for a configuration the server refused).
    /// A refused configuration prints its message alone: the code `config` is its prefix
    /// already (one prefix per error, U1).
    #[error("{}", server_message(.0))]
    Server(#[from] muster_server::ServerError),
    /// `serve` found its data directory held by another process (exit 1, like a port in use).
    #[error(
        "the data directory {} is in use by another process: another `muster serve` is likely running on it (stop it, or give this one its own --data-dir)",
        .dir.display()
    )]
    DataDirInUse {
        /// The directory, as configured.
        dir: std::path::PathBuf,
    },
    /// `bench` could not run (exit 2 for flags that make no run; exit 1 when a system would
    /// not start or prepare, or the report could not be written).
    #[error(transparent)]
    Bench(#[from] muster_bench::BenchError),
    /// `lab` could not run (exit 2 for input refused before anything ran; exit 1 when the live
    /// lab failed or the report could not be written).
    #[error(transparent)]
    Lab(#[from] muster_lab::LabError),
}

impl CliError {
    /// A usage error with this code.
    pub fn usage(code: impl Into<String>, message: impl Into<String>) -> CliError {
        CliError::Usage {
            code: code.into(),
            message: message.into(),
        }
    }

    /// The stable, machine-readable code printed after `error:`.
    pub fn code(&self) -> &str {
        match self {
            CliError::Usage { code, .. } => code,
            CliError::Refused(detail) => &detail.code,
            CliError::Client(err) => err.code().as_str(),
            CliError::Resync { .. } => "resync",
            CliError::Closing { .. } => "closing",
            CliError::NotConverged { .. } => "not_converged",
            CliError::Server(muster_server::ServerError::Config(_)) => "config",
            CliError::Server(muster_server::ServerError::Bind { .. }) => "cannot_listen",
            CliError::Server(_) => "server_failed",
            CliError::DataDirInUse { .. } => "data_dir_in_use",
            CliError::Bench(err) => err.code(),
            CliError::Lab(err) => err.code(),
        }
    }

    /// The process exit code (see the crate docs).
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Refused(_) | CliError::NotConverged { .. } => 1,
            CliError::Usage { .. } => 2,
            CliError::Client(_) | CliError::Closing { .. } => 3,
            CliError::Resync { .. } => 4,
            CliError::Server(muster_server::ServerError::Config(_)) => 2,
            CliError::Server(_) | CliError::DataDirInUse { .. } => 1,
            CliError::Bench(muster_bench::BenchError::Usage(_) | muster_bench::BenchError::NoSystem) => 2,
            CliError::Bench(_) => 1,
            CliError::Lab(err) if err.is_usage() => 2,
            CliError::Lab(_) => 1,
        }
    }

    /// The error as the API's error body, for `--json`.
    pub fn to_body(&self) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                code: self.code().to_owned(),
                message: self.to_string(),
            },
        }
    }
}

/// What the storage layer (redb) says when another process holds the log's file lock. redb
/// offers no other way to tell: by the time it reaches the server it is the message of a
/// `storage` error. `tests/cli` holds a directory with a real server and checks this still
/// matches, so a reworded redb fails a test rather than the user's error message.
const LOG_LOCK_HELD: &str = "Database already open";

impl CliError {
    /// `serve`'s start failure, with a held data directory named as such.
    pub fn from_start(err: muster_server::ServerError, data_dir: &std::path::Path) -> CliError {
        match &err {
            muster_server::ServerError::Consensus(storage) if storage.to_string().contains(LOG_LOCK_HELD) => {
                CliError::DataDirInUse {
                    dir: data_dir.to_owned(),
                }
            }
            _ => CliError::Server(err),
        }
    }
}

/// A server error's message without the prefix its code already gives.
fn server_message(err: &muster_server::ServerError) -> String {
    match err {
        muster_server::ServerError::Config(message) => message.clone(),
        other => other.to_string(),
    }
}

impl From<Rejection> for CliError {
    /// A name or field refused locally, before sending: a usage error with the server's code.
    fn from(rejection: Rejection) -> CliError {
        CliError::usage(rejection.code(), rejection.to_string())
    }
}

impl From<ClientError> for CliError {
    /// The server's own refusals keep their code; transport failures stay client errors.
    fn from(err: ClientError) -> CliError {
        match err {
            ClientError::Api { body, .. } => CliError::Refused(body.error),
            other => CliError::Client(other),
        }
    }
}
