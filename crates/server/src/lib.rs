//! The daemon (DESIGN "Crates": `muster-server`): HTTP API, watch hub, lease keeper.
//! Wiring only; logic lives in the pure crates.

#![forbid(unsafe_code)]

mod config;

pub use config::ServerConfig;

/// Why the server could not start or stopped abnormally.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The configuration is unusable (the message says which setting and why).
    #[error("config: {0}")]
    Config(String),
    /// Binding a listener failed.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The consensus layer failed.
    #[error(transparent)]
    Consensus(#[from] muster_consensus::ConsensusError),
}

/// Runs the server until `shutdown` resolves, then stops gracefully: stop accepting, finish
/// in-flight writes, send watchers a final `closing` frame, return.
pub async fn run(
    config: ServerConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let _ = (config, shutdown);
    Err(ServerError::Config("the HTTP server is being built (issue 3)".into()))
}
