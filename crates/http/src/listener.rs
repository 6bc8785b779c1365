//! Per-listener settings (SPEC S1, S6): TLS for the HTTP API and mutual TLS for the cluster
//! listener, and each listener's limits — connections, the time to send a request head, the
//! time to finish a TLS handshake.
//!
//! ```text
//!  [tls]          cert, key, client_ca, client_cert = "required" | "optional"
//!        ──▶ HTTP API: TLS; with client_ca, client certificates verified (WebPkiClientVerifier)
//!  [cluster_tls]  cert, key, ca
//!        ──▶ cluster listener: mutual TLS, every peer's certificate signed by `ca`
//!        ──▶ peer client: verifies the listener against `ca`, presents `cert`
//!  [limits.http], [limits.cluster]  max_connections, header_read_timeout_ms,
//!                                   tls_handshake_timeout_ms
//! ```
//!
//! Nothing here is on when nothing is configured: without `[tls]` the API speaks plain
//! HTTP, without `[cluster_tls]` peers speak plain HTTP with the cluster secret. With
//! `[cluster_tls]` the secret stays, as a second factor.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use muster_tls::{ClientAuth, Identity, Roots, TlsAcceptor};
use serde::{Deserialize, Serialize};

/// The HTTP API's TLS (`[tls]`). Off unless `cert` and `key` are set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// The server's certificate chain (PEM, leaf first).
    pub cert: Option<PathBuf>,
    /// The server certificate's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: Option<PathBuf>,
    /// CA certificates (PEM) that sign client certificates: mutual TLS. A verified client
    /// certificate's SANs reach every request (`crate::peer::Peer`).
    pub client_ca: Option<PathBuf>,
    /// With `client_ca`: whether a client must present a certificate (`required`, the
    /// default) or may connect without one and authenticate with a token (`optional`).
    pub client_cert: ClientCertPolicy,
}

/// Whether clients of a mutual-TLS listener must present a certificate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClientCertPolicy {
    /// A client without a certificate fails the handshake.
    #[default]
    Required,
    /// A client may connect without a certificate; one it presents must still verify.
    Optional,
}

/// The node-to-node transport's mutual TLS (`[cluster_tls]`). Off unless all three are set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterTlsConfig {
    /// This node's certificate chain (PEM), presented as server and as client. Its SANs
    /// must name the host part of this node's `peers` address (an IP address SAN for an IP).
    pub cert: Option<PathBuf>,
    /// Its private key (PEM).
    pub key: Option<PathBuf>,
    /// The cluster's CA (PEM): every member's certificate must chain to it.
    pub ca: Option<PathBuf>,
}

/// The limits of one listener (`[limits.http]`, `[limits.cluster]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ListenerLimits {
    /// Connections open at once; more are answered `503 too_many_connections`. Unset: what
    /// the descriptor budget allows (`crate::descriptors`); a larger setting is lowered to it.
    pub max_connections: Option<usize>,
    /// How long a client may take to send a request head (also how long an idle keep-alive
    /// connection waits for its next request head, and an HTTP/2 connection with no stream
    /// open stays): 30 s, hyper's default. A client that trickles its head (slowloris) is cut
    /// off then.
    pub header_read_timeout_ms: u64,
    /// How long a client may take to finish its TLS handshake: 10 s is many round trips on
    /// any network, and a client that connects and never handshakes gives its slot back then.
    pub tls_handshake_timeout_ms: u64,
}

impl Default for ListenerLimits {
    fn default() -> Self {
        ListenerLimits {
            max_connections: None,
            header_read_timeout_ms: 30_000,
            tls_handshake_timeout_ms: 10_000,
        }
    }
}

/// The limits of both listeners.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// The HTTP API's.
    pub http: ListenerLimits,
    /// The cluster listener's.
    pub cluster: ListenerLimits,
}

impl ListenerLimits {
    fn check(&self, name: &str) -> Result<(), String> {
        if self.max_connections == Some(0) {
            return Err(format!("limits.{name}.max_connections: must be at least 1"));
        }
        if self.header_read_timeout_ms == 0 || self.tls_handshake_timeout_ms == 0 {
            return Err(format!(
                "limits.{name}.header_read_timeout_ms and tls_handshake_timeout_ms: must be at least 1"
            ));
        }
        Ok(())
    }
}

impl LimitsConfig {
    /// An error names the setting.
    pub fn check(&self) -> Result<(), String> {
        self.http.check("http")?;
        self.cluster.check("cluster")
    }
}

/// What the accept loop needs to serve one listener.
#[derive(Clone)]
pub struct Listening {
    /// TLS, when configured.
    pub tls: Option<TlsAcceptor>,
    /// hyper's header read timeout.
    pub header_read_timeout: Duration,
    /// The TLS handshake's bound.
    pub handshake_timeout: Duration,
}

impl Listening {
    /// A listener with `limits`, speaking TLS when `tls` is set.
    pub fn new(limits: &ListenerLimits, tls: Option<Arc<muster_tls::ServerConfig>>) -> Listening {
        Listening {
            tls: tls.map(TlsAcceptor::from),
            header_read_timeout: Duration::from_millis(limits.header_read_timeout_ms),
            handshake_timeout: Duration::from_millis(limits.tls_handshake_timeout_ms),
        }
    }
}

impl TlsConfig {
    /// The HTTP API's server config, offering HTTP/2 and HTTP/1.1; `None` when TLS is not
    /// configured. An error names the setting.
    pub fn server_config(&self) -> Result<Option<Arc<muster_tls::ServerConfig>>, String> {
        let (cert, key) = match (&self.cert, &self.key) {
            (None, None) if self.client_ca.is_none() => return Ok(None),
            (Some(cert), Some(key)) => (cert, key),
            _ => return Err("tls: cert and key are both needed (--tls-cert, --tls-key)".into()),
        };
        let identity = Identity::from_pem_files(cert, key).map_err(|e| format!("tls: {e}"))?;
        let clients = match &self.client_ca {
            None => ClientAuth::None,
            Some(ca) => {
                let roots = Roots::from_pem_file(ca).map_err(|e| format!("tls.client_ca: {e}"))?;
                match self.client_cert {
                    ClientCertPolicy::Required => ClientAuth::Required(roots),
                    ClientCertPolicy::Optional => ClientAuth::Optional(roots),
                }
            }
        };
        let config = muster_tls::server_config(&identity, &clients).map_err(|e| format!("tls: {e}"))?;
        // HTTP/2 first, for the clients that speak it (SPEC W3's multiplexed watches); rustls
        // picks the first of these the client offers.
        let mut config = Arc::unwrap_or_clone(config);
        config.alpn_protocols.insert(0, b"h2".to_vec());
        Ok(Some(Arc::new(config)))
    }
}

/// The cluster's mutual TLS, both ends.
pub struct ClusterTls {
    /// The cluster listener's: client certificates required, signed by the cluster CA.
    pub server: Arc<muster_tls::ServerConfig>,
    /// The peer client's: verifies against the cluster CA, presents this node's certificate.
    pub client: Arc<muster_tls::ClientConfig>,
}

impl ClusterTlsConfig {
    /// Both ends of the cluster's mutual TLS; `None` when not configured. An error names the
    /// setting.
    pub fn load(&self) -> Result<Option<ClusterTls>, String> {
        let (cert, key, ca) = match (&self.cert, &self.key, &self.ca) {
            (None, None, None) => return Ok(None),
            (Some(cert), Some(key), Some(ca)) => (cert, key, ca),
            _ => {
                return Err(
                    "cluster_tls: cert, key and ca are all needed (--cluster-tls-cert, --cluster-tls-key, --cluster-tls-ca)"
                        .into(),
                );
            }
        };
        let identity = Identity::from_pem_files(cert, key).map_err(|e| format!("cluster_tls: {e}"))?;
        let roots = Roots::from_pem_file(ca).map_err(|e| format!("cluster_tls.ca: {e}"))?;
        let server = muster_tls::server_config(&identity, &ClientAuth::Required(roots.clone()))
            .map_err(|e| format!("cluster_tls: {e}"))?;
        let client = muster_tls::client_config(&roots, Some(&identity)).map_err(|e| format!("cluster_tls: {e}"))?;
        Ok(Some(ClusterTls { server, client }))
    }
}
