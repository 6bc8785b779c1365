//! Muster's TLS plumbing (SPEC S1): rustls on the ring provider — never aws-lc-rs — set up
//! from PEM, for the three places that speak TLS: the HTTP API and the cluster listener
//! (servers), and the peer client, the client library and the bench (clients).
//!
//! ```text
//!  PEM (files or bytes) ──▶ Identity (chain + key), Roots (CA certificates)
//!     ├─▶ server_config(identity, ClientAuth) ──▶ tokio_rustls::TlsAcceptor (accept loop)
//!     │        ClientAuth::None | Optional(roots) | Required(roots): WebPkiClientVerifier
//!     └─▶ client_config(roots, identity?) ──▶ Connector (hyper-util legacy client)
//!                                             http:// plain, https:// over TLS
//!  verified client certificate ──▶ CertificateNames { uris, dns_names } (its SANs)
//! ```
//!
//! Every config is built with [`provider`] explicitly rather than a process-wide default,
//! so nothing depends on which provider some other crate installed first, and both offer
//! HTTP/1.1 over ALPN; the HTTP API adds `h2` to its own config (`muster_http::listener`).

#![forbid(unsafe_code)]

mod client;
mod connector;
mod names;
mod pem;
mod server;

pub use client::client_config;
pub use connector::{Connector, MaybeTls};
pub use names::CertificateNames;
pub use pem::{Identity, Roots};
pub use server::{ClientAuth, server_config};

pub use rustls::{ClientConfig, ServerConfig};
/// A server-side TLS connection, as [`TlsAcceptor::accept`] returns it.
pub use tokio_rustls::server::TlsStream as ServerTlsStream;
pub use tokio_rustls::{TlsAcceptor, TlsConnector};

use std::sync::Arc;

/// The crypto provider of every config: ring (CRATES.md "TLS").
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The one application protocol offered: HTTP/1.1.
const ALPN_HTTP1: &[u8] = b"http/1.1";

/// Why a TLS setup could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A PEM file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// PEM text held no item of the kind asked for, or was malformed.
    #[error("{what}: {reason}")]
    Pem {
        /// Which input (a path, or what the bytes were for).
        what: String,
        /// Why.
        reason: String,
    },
    /// rustls refused the setup (e.g. a key that does not match the certificate).
    #[error("{0}")]
    Rustls(#[from] rustls::Error),
    /// The client verifier could not be built (e.g. no usable CA certificate).
    #[error("client CA: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
}
