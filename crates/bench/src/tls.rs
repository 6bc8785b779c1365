//! `--tls`: the throwaway PKI of the TLS server the bench spawns, and the handshake-rate
//! workload.
//!
//! ```text
//!  Pki::new ──▶ CA (in memory) ──▶ server certificate for 127.0.0.1 / localhost ──▶ files
//!           └─▶ client config trusting the CA (keep-alive load: muster+tls+auth)
//!  handshake: per operation: TCP connect ──▶ full TLS handshake (resumption disabled)
//!             ──▶ GET /v1/status, Connection: close ──▶ 200? ──▶ drop
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair, KeyUsagePurpose, SanType};
use rustls_pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::Plan;
use crate::driver::closed_loop;
use crate::meter::CpuMeter;
use crate::report::SystemResult;
use crate::workloads::Subject;

/// A CA and the server certificate it signed, PEM.
pub(crate) struct Pki {
    ca: String,
    cert: String,
    key: String,
}

impl Pki {
    /// A new CA and a server certificate for `127.0.0.1` and `localhost`.
    pub(crate) fn new() -> Result<Pki, String> {
        let failed = |e: rcgen::Error| format!("making the bench's certificates: {e}");
        let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(failed)?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        let issuer = CertifiedIssuer::self_signed(ca, KeyPair::generate().map_err(failed)?).map_err(failed)?;
        let mut leaf = CertificateParams::new(vec!["localhost".to_owned()]).map_err(failed)?;
        leaf.subject_alt_names.push(SanType::IpAddress([127, 0, 0, 1].into()));
        let key = KeyPair::generate().map_err(failed)?;
        let cert = leaf.signed_by(&key, &issuer).map_err(failed)?;
        Ok(Pki {
            ca: issuer.pem(),
            cert: cert.pem(),
            key: key.serialize_pem(),
        })
    }

    /// Writes the server certificate and key into `dir`; their paths.
    pub(crate) fn write(&self, dir: &Path) -> Result<(PathBuf, PathBuf), String> {
        let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
        std::fs::write(&cert, &self.cert).map_err(|e| format!("{}: {e}", cert.display()))?;
        std::fs::write(&key, &self.key).map_err(|e| format!("{}: {e}", key.display()))?;
        Ok((cert, key))
    }

    /// A client config trusting the CA.
    pub(crate) fn client_config(&self) -> Result<Arc<muster_tls::ClientConfig>, String> {
        let roots = muster_tls::Roots::from_pem(self.ca.as_bytes()).map_err(|e| e.to_string())?;
        muster_tls::client_config(&roots, None).map_err(|e| e.to_string())
    }
}

/// The request each new connection sends: the cheapest route, then the server closes.
const STATUS_REQUEST: &[u8] = b"GET /v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";

/// New connections per second to `subject` (a TLS server at `addr`), each with a full
/// handshake and one request, on `plan.connections` workers.
pub(crate) async fn handshakes(
    subject: &Subject,
    addr: SocketAddr,
    tls: &Arc<muster_tls::ClientConfig>,
    plan: &Plan,
) -> SystemResult {
    // A resumed session would skip the key exchange this figure is about.
    let mut config = (**tls).clone();
    config.resumption = rustls::client::Resumption::disabled();
    let connector = muster_tls::TlsConnector::from(Arc::new(config));
    let meter = CpuMeter::start(subject.pid);
    let outcome = closed_loop(plan.connections, plan.duration, plan.max_requests, move |_| {
        let connector = connector.clone();
        async move {
            let tcp = TcpStream::connect(addr).await.map_err(|e| format!("connect: {e}"))?;
            tcp.set_nodelay(true).map_err(|e| e.to_string())?;
            let name = ServerName::IpAddress(addr.ip().into());
            let mut tls = connector
                .connect(name, tcp)
                .await
                .map_err(|e| format!("handshake: {e}"))?;
            tls.write_all(STATUS_REQUEST).await.map_err(|e| e.to_string())?;
            let mut head = [0; 16];
            tls.read_exact(&mut head)
                .await
                .map_err(|e| format!("reading the reply: {e}"))?;
            if !head.starts_with(b"HTTP/1.1 200") {
                return Err(format!("answered {}", String::from_utf8_lossy(&head)));
            }
            Ok(())
        }
    })
    .await;
    crate::workloads::result(subject.system, &outcome, &meter)
}
