//! [`ClientTls`]: what a [`Client`](crate::Client) needs for an `https://` server —
//! the CA certificate(s) to verify it with (never the system's store: a Muster deployment
//! names its CA) and, for a server that requires mutual TLS, a client certificate and key.

use std::sync::Arc;

use muster_tls::{Identity, Roots};

use crate::http::error::ClientError;

/// The CA to verify servers with, and optionally a client certificate to present.
#[derive(Debug, Clone)]
pub struct ClientTls {
    config: Arc<muster_tls::ClientConfig>,
}

/// A builder of [`ClientTls`].
#[derive(Debug, Clone)]
pub struct ClientTlsBuilder {
    roots: Roots,
    identity: Option<Identity>,
}

impl ClientTls {
    /// Verifies servers against the CA certificate(s) in `ca_pem`.
    pub fn builder(ca_pem: &[u8]) -> Result<ClientTlsBuilder, ClientError> {
        Ok(ClientTlsBuilder {
            roots: Roots::from_pem(ca_pem).map_err(invalid)?,
            identity: None,
        })
    }

    /// The CA, client certificate and key from PEM files: `cert` and `key` both or neither.
    pub fn from_files(
        ca: &std::path::Path,
        cert: Option<&std::path::Path>,
        key: Option<&std::path::Path>,
    ) -> Result<ClientTls, ClientError> {
        let read = |path: &std::path::Path| {
            std::fs::read(path).map_err(|e| ClientError::InvalidTls {
                reason: format!("{}: {e}", path.display()),
                source: Some(Arc::new(e)),
            })
        };
        let builder = ClientTls::builder(&read(ca)?)?;
        match (cert, key) {
            (None, None) => builder.build(),
            (Some(cert), Some(key)) => builder.identity(&read(cert)?, &read(key)?)?.build(),
            _ => Err(ClientError::InvalidTls {
                reason: "a client certificate needs its key, and a key its certificate".into(),
                source: None,
            }),
        }
    }

    pub(crate) fn config(&self) -> Arc<muster_tls::ClientConfig> {
        Arc::clone(&self.config)
    }

    /// The config for watches: HTTP/2 offered first (SPEC W3), so a server that speaks it
    /// carries every watch of the client on one connection.
    pub(crate) fn watch_config(&self) -> Arc<muster_tls::ClientConfig> {
        let mut config = muster_tls::ClientConfig::clone(&self.config);
        config.alpn_protocols.insert(0, b"h2".to_vec());
        Arc::new(config)
    }
}

impl ClientTlsBuilder {
    /// Presents the certificate chain `cert_pem` (leaf first), with its private key
    /// `key_pem`, to a server that asks for a client certificate.
    pub fn identity(mut self, cert_pem: &[u8], key_pem: &[u8]) -> Result<ClientTlsBuilder, ClientError> {
        self.identity = Some(Identity::from_pem(cert_pem, key_pem).map_err(invalid)?);
        Ok(self)
    }

    /// The settings; fails when the key does not fit the certificate.
    pub fn build(self) -> Result<ClientTls, ClientError> {
        let config = muster_tls::client_config(&self.roots, self.identity.as_ref()).map_err(invalid)?;
        Ok(ClientTls { config })
    }
}

fn invalid(error: muster_tls::TlsError) -> ClientError {
    ClientError::InvalidTls {
        reason: error.to_string(),
        source: Some(Arc::new(error)),
    }
}
