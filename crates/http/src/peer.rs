//! Who is on the other end of a connection: its address and, over mutual TLS, the identities
//! its certificate names. The accept loop inserts one [`Peer`] into every request of a
//! connection, so authentication (SPEC S1), audit (S4) and limits (S6) read it from there.

use std::net::SocketAddr;
use std::sync::Arc;

/// The connection a request arrived on.
#[derive(Debug, Clone)]
pub struct Peer {
    /// The remote address.
    pub addr: SocketAddr,
    /// The client certificate's identities, when the listener runs mutual TLS and the client
    /// presented a certificate the configured CA signed.
    pub certificate: Option<Arc<PeerCertificate>>,
}

/// The subject alternative names of a verified client certificate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerCertificate {
    /// URI names (e.g. `spiffe://acme.internal/ns/prod/sa/api`).
    pub uris: Vec<String>,
    /// DNS names.
    pub dns_names: Vec<String>,
}

impl From<muster_tls::CertificateNames> for PeerCertificate {
    fn from(names: muster_tls::CertificateNames) -> PeerCertificate {
        PeerCertificate {
            uris: names.uris,
            dns_names: names.dns_names,
        }
    }
}
