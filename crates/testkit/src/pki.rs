//! Certificates for TLS tests, made with rcgen: a CA ([`TestCa`]) and leaf certificates it
//! signs ([`Leaf`]), each usable as server and as client certificate, written to files when
//! a configuration takes paths.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose, SanType,
};

/// A certificate authority.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A leaf certificate and its key, PEM.
#[derive(Debug, Clone)]
pub struct Leaf {
    /// The certificate.
    pub cert: String,
    /// Its private key (PKCS#8).
    pub key: String,
}

/// Where [`Leaf::write`] put a certificate and its key.
#[derive(Debug, Clone)]
pub struct LeafFiles {
    /// The certificate's file.
    pub cert: PathBuf,
    /// The key's file.
    pub key: PathBuf,
}

impl TestCa {
    /// A new CA named `name`.
    pub fn new(name: &str) -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("no names");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().expect("a key");
        TestCa {
            issuer: CertifiedIssuer::self_signed(params, key).expect("a CA certificate"),
        }
    }

    /// The CA certificate, PEM.
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// Writes the CA certificate to `dir/name` and returns the path.
    pub fn write(&self, dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, self.pem()).expect("writing the CA certificate");
        path
    }

    /// A certificate for server and client use naming `dns` and `ips` (and `uris`) in its
    /// subject alternative names.
    pub fn leaf(&self, dns: &[&str], ips: &[IpAddr], uris: &[&str]) -> Leaf {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("no names");
        params.distinguished_name.push(DnType::CommonName, "muster test");
        let dns = dns
            .iter()
            .map(|name| SanType::DnsName((*name).try_into().expect("a DNS name")));
        let ips = ips.iter().map(|ip| SanType::IpAddress(*ip));
        let uris = uris.iter().map(|uri| SanType::URI((*uri).try_into().expect("a URI")));
        params.subject_alt_names = dns.chain(ips).chain(uris).collect();
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().expect("a key");
        let cert = params.signed_by(&key, &self.issuer).expect("a signed certificate");
        Leaf {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }

    /// A certificate for `localhost` and `127.0.0.1`.
    pub fn localhost(&self) -> Leaf {
        self.leaf(&["localhost"], &[IpAddr::from([127, 0, 0, 1])], &[])
    }
}

impl Leaf {
    /// Writes the certificate and key to `dir/name.crt` and `dir/name.key`.
    pub fn write(&self, dir: &Path, name: &str) -> LeafFiles {
        let files = LeafFiles {
            cert: dir.join(format!("{name}.crt")),
            key: dir.join(format!("{name}.key")),
        };
        std::fs::write(&files.cert, &self.cert).expect("writing the certificate");
        std::fs::write(&files.key, &self.key).expect("writing the key");
        files
    }
}
