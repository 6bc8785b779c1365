//! Who is on the other end of a connection: its address and, over mutual TLS, the identities
//! its certificate names. The accept loop inserts one [`Peer`] into every request of a
//! connection, so authentication (SPEC S1), audit (S4) and limits (S6) read it from there.

use std::net::SocketAddr;
use std::sync::Arc;

/// The connection a request arrived on.
#[derive(Debug, Clone)]
#[allow(dead_code)] // read by the auth layer and the audit trail as they land
pub(crate) struct Peer {
    /// The remote address.
    pub(crate) addr: SocketAddr,
    /// The client certificate's identities, when the listener runs mutual TLS and the client
    /// presented a certificate the configured CA signed.
    pub(crate) certificate: Option<Arc<PeerCertificate>>,
}

/// The subject alternative names of a verified client certificate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PeerCertificate {
    /// URI names (e.g. `spiffe://acme.internal/ns/prod/sa/api`).
    pub(crate) uris: Vec<String>,
    /// DNS names.
    pub(crate) dns_names: Vec<String>,
}

impl From<muster_tls::CertificateNames> for PeerCertificate {
    fn from(names: muster_tls::CertificateNames) -> PeerCertificate {
        PeerCertificate {
            uris: names.uris,
            dns_names: names.dns_names,
        }
    }
}
