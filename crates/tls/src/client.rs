//! The clients' side: a rustls [`ClientConfig`] trusting given roots (never the system's:
//! a Muster deployment names its CA), presenting an identity for mutual TLS when given one.

use std::sync::Arc;

use rustls::ClientConfig;

use crate::{ALPN_HTTP1, Identity, Roots, TlsError, provider};

/// A client config that verifies servers against `roots` and, with `identity`, presents it
/// to servers that ask for a client certificate.
pub fn client_config(roots: &Roots, identity: Option<&Identity>) -> Result<Arc<ClientConfig>, TlsError> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(Arc::clone(&roots.store));
    let mut config = match identity {
        Some(identity) => {
            let identity = identity.clone();
            builder.with_client_auth_cert(identity.chain, identity.key)?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
    Ok(Arc::new(config))
}
