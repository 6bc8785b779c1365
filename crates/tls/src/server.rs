//! The servers' side: a rustls [`ServerConfig`] with this node's identity and, for mutual
//! TLS, a client verifier ([`ClientAuth`]).

use std::sync::Arc;

use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;

use crate::{ALPN_HTTP1, Identity, Roots, TlsError, provider};

/// Whether and how a listener asks clients for certificates.
#[derive(Debug, Clone)]
pub enum ClientAuth {
    /// No client certificates: server-authenticated TLS only.
    None,
    /// A client may present a certificate, which must then chain to these roots; a client
    /// without one is let through the handshake (and must authenticate otherwise, e.g. with
    /// a token).
    Optional(Roots),
    /// Every client must present a certificate chaining to these roots, or the handshake
    /// fails.
    Required(Roots),
}

/// A server config presenting `identity`, verifying clients as `clients` says, offering
/// HTTP/1.1.
pub fn server_config(identity: &Identity, clients: &ClientAuth) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = provider();
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider)).with_safe_default_protocol_versions()?;
    let builder = match clients {
        ClientAuth::None => builder.with_no_client_auth(),
        ClientAuth::Optional(roots) | ClientAuth::Required(roots) => {
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::clone(&roots.store), provider);
            let verifier = match clients {
                ClientAuth::Optional(_) => verifier.allow_unauthenticated(),
                _ => verifier,
            };
            builder.with_client_cert_verifier(verifier.build()?)
        }
    };
    let identity = identity.clone();
    let mut config = builder.with_single_cert(identity.chain, identity.key)?;
    config.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
    Ok(Arc::new(config))
}
