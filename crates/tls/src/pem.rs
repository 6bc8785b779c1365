//! PEM input: a certificate chain with its private key ([`Identity`]), and trusted CA
//! certificates ([`Roots`]), from files or bytes, parsed with rustls-pki-types'
//! [`PemObject`].

use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::TlsError;

/// A certificate chain (leaf first) and the private key of its leaf.
#[derive(Debug)]
pub struct Identity {
    pub(crate) chain: Vec<CertificateDer<'static>>,
    pub(crate) key: PrivateKeyDer<'static>,
}

impl Clone for Identity {
    fn clone(&self) -> Identity {
        Identity {
            chain: self.chain.clone(),
            key: self.key.clone_key(),
        }
    }
}

impl Identity {
    /// From PEM bytes: `cert` holds the chain (leaf first), `key` a PKCS#8, PKCS#1 or SEC1
    /// private key.
    pub fn from_pem(cert: &[u8], key: &[u8]) -> Result<Identity, TlsError> {
        Identity::parse(cert, "certificate", key, "key")
    }

    /// From PEM files.
    pub fn from_pem_files(cert: &std::path::Path, key: &std::path::Path) -> Result<Identity, TlsError> {
        Identity::parse(
            &read(cert)?,
            &cert.display().to_string(),
            &read(key)?,
            &key.display().to_string(),
        )
    }

    fn parse(cert: &[u8], cert_name: &str, key: &[u8], key_name: &str) -> Result<Identity, TlsError> {
        let chain = certificates(cert, cert_name)?;
        let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| pem_error(key_name, "a private key", &e))?;
        Ok(Identity { chain, key })
    }
}

/// Trusted CA certificates.
#[derive(Debug, Clone)]
pub struct Roots {
    pub(crate) store: std::sync::Arc<RootCertStore>,
}

impl Roots {
    /// From PEM bytes holding one or more CA certificates.
    pub fn from_pem(pem: &[u8]) -> Result<Roots, TlsError> {
        Roots::parse(pem, "CA certificate")
    }

    /// From a PEM file holding one or more CA certificates.
    pub fn from_pem_file(path: &std::path::Path) -> Result<Roots, TlsError> {
        Roots::parse(&read(path)?, &path.display().to_string())
    }

    fn parse(pem: &[u8], what: &str) -> Result<Roots, TlsError> {
        let mut store = RootCertStore::empty();
        for cert in certificates(pem, what)? {
            store.add(cert).map_err(|e| TlsError::Pem {
                what: what.to_owned(),
                reason: format!("not a usable CA certificate: {e}"),
            })?;
        }
        Ok(Roots {
            store: std::sync::Arc::new(store),
        })
    }
}

fn read(path: &std::path::Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.display().to_string(),
        source,
    })
}

/// Every certificate in `pem`; at least one.
fn certificates(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let chain = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(what, "certificates", &e))?;
    if chain.is_empty() {
        return Err(TlsError::Pem {
            what: what.to_owned(),
            reason: "holds no CERTIFICATE section".into(),
        });
    }
    Ok(chain)
}

fn pem_error(what: &str, expected: &str, error: &rustls_pki_types::pem::Error) -> TlsError {
    let reason = match error {
        rustls_pki_types::pem::Error::NoItemsFound => format!("holds no {expected}"),
        other => format!("not PEM {expected}: {other}"),
    };
    TlsError::Pem {
        what: what.to_owned(),
        reason,
    }
}
