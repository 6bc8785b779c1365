//! The identities a client certificate names: its subject alternative names of the URI kind
//! (SPIFFE IDs, `spiffe://trust-domain/...`) and the DNS kind. They are read with
//! rustls-webpki — already in the tree as rustls's verifier, so no second X.509 parser is
//! built — and only from a certificate the handshake has verified.

use rustls_pki_types::CertificateDer;
use webpki::EndEntityCert;

/// The subject alternative names of a certificate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CertificateNames {
    /// URI names, as written (e.g. `spiffe://acme.internal/ns/prod/sa/api`).
    pub uris: Vec<String>,
    /// DNS names (wildcards as written, e.g. `*.acme.internal`).
    pub dns_names: Vec<String>,
}

impl CertificateNames {
    /// The names of the end-entity certificate `der`; `None` when it cannot be parsed (which
    /// a certificate the handshake verified always can).
    pub fn of(der: &CertificateDer<'_>) -> Option<CertificateNames> {
        let cert = EndEntityCert::try_from(der).ok()?;
        Some(CertificateNames {
            uris: cert.valid_uri_names().map(str::to_owned).collect(),
            dns_names: cert.valid_dns_names().map(str::to_owned).collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn certificate(names: &[rcgen::SanType]) -> CertificateDer<'static> {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.subject_alt_names = names.to_vec();
        params.self_signed(&key).unwrap().der().clone()
    }

    #[test]
    fn uri_and_dns_names_are_read_and_other_kinds_are_not() {
        let der = certificate(&[
            rcgen::SanType::URI("spiffe://acme.internal/ns/prod/sa/api".try_into().unwrap()),
            rcgen::SanType::DnsName("api.acme.internal".try_into().unwrap()),
            rcgen::SanType::DnsName("*.prod.acme.internal".try_into().unwrap()),
            rcgen::SanType::IpAddress("10.0.0.7".parse().unwrap()),
            rcgen::SanType::Rfc822Name("ops@acme.internal".try_into().unwrap()),
        ]);
        let names = CertificateNames::of(&der).unwrap();
        assert_eq!(names.uris, ["spiffe://acme.internal/ns/prod/sa/api"]);
        assert_eq!(names.dns_names, ["api.acme.internal", "*.prod.acme.internal"]);
    }

    #[test]
    fn a_certificate_without_alternative_names_names_nothing() {
        assert_eq!(
            CertificateNames::of(&certificate(&[])),
            Some(CertificateNames::default())
        );
    }

    #[test]
    fn bytes_that_are_not_a_certificate_name_nothing() {
        assert_eq!(
            CertificateNames::of(&CertificateDer::from(vec![0x30, 0x03, 1, 2, 3])),
            None
        );
    }
}
