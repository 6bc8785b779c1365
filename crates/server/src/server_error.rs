//! Why the server could not start, or stopped abnormally.

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
    /// The HTTP server failed while serving.
    #[error("serving HTTP: {0}")]
    Serve(std::io::Error),
}
