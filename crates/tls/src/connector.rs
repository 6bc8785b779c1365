//! A connector for hyper-util's legacy client that speaks `http://` in plain and `https://`
//! over rustls: one client type for both, so a caller's choice of scheme is the only
//! difference.
//!
//! ```text
//!  Uri ──▶ HttpConnector (TCP, TCP_NODELAY, connect timeout) ──┬─ http  ─▶ MaybeTls::Plain
//!                                                             └─ https ─▶ TLS handshake
//!                                                  (server name = the URI's host, DNS or IP)
//!                                                                         ─▶ MaybeTls::Tls
//! ```
//!
//! An `https://` URI without a TLS config, or an `http://` one with a config that demands
//! TLS, is refused before any byte is sent — never silently downgraded.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::Uri;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Connects `http://` URIs in plain and `https://` URIs over TLS with its config.
#[derive(Clone)]
pub struct Connector {
    http: HttpConnector,
    tls: Option<TlsConnector>,
    /// Refuse `http://` URIs: every connection must be TLS.
    tls_only: bool,
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connector")
            .field("tls", &self.tls.is_some())
            .field("tls_only", &self.tls_only)
            .finish()
    }
}

impl Connector {
    /// A connector with TCP_NODELAY and `connect_timeout` for the TCP connection, and `tls`
    /// for `https://` URIs (without it, they are refused).
    pub fn new(tls: Option<Arc<ClientConfig>>, connect_timeout: Duration) -> Connector {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(connect_timeout));
        Connector {
            http,
            tls: tls.map(TlsConnector::from),
            tls_only: false,
        }
    }

    /// The same connector, refusing `http://` URIs (a cluster configured for mutual TLS
    /// never falls back to plain HTTP).
    #[must_use]
    pub fn tls_only(mut self) -> Connector {
        self.tls_only = true;
        self
    }
}

impl tower_service::Service<Uri> for Connector {
    type Response = MaybeTls;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<MaybeTls, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.http.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let secure = uri.scheme_str() == Some("https");
        let refusal = match (secure, &self.tls) {
            (true, None) => Some(format!("{uri}: https needs a CA certificate to verify the server with")),
            (false, _) if self.tls_only => Some(format!("{uri}: this client speaks TLS only (https://)")),
            _ => None,
        };
        let tls = self.tls.clone().filter(|_| secure);
        let host = uri
            .host()
            .unwrap_or_default()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let connecting = self.http.call(uri);
        Box::pin(async move {
            if let Some(refusal) = refusal {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, refusal).into());
            }
            let tcp = connecting.await?;
            let Some(tls) = tls else {
                return Ok(MaybeTls::Plain(tcp));
            };
            let name = ServerName::try_from(host.clone())
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, format!("'{host}' is not a server name")))?;
            let stream = tls.connect(name, tcp.into_inner()).await?;
            Ok(MaybeTls::Tls(Box::new(TokioIo::new(stream))))
        })
    }
}

/// A connection made by [`Connector`]: plain TCP or TLS over TCP.
#[derive(Debug)]
pub enum MaybeTls {
    /// Plain TCP (`http://`).
    Plain(TokioIo<TcpStream>),
    /// TLS over TCP (`https://`).
    Tls(Box<TokioIo<TlsStream<TcpStream>>>),
}

impl Connection for MaybeTls {
    fn connected(&self) -> Connected {
        match self {
            MaybeTls::Plain(tcp) => tcp.connected(),
            // hyper's pooled client speaks HTTP/2 on a connection that negotiated it; only a
            // config that offers `h2` can (the client library's watch config, SPEC W3).
            MaybeTls::Tls(tls) => {
                let (tcp, session) = tls.inner().get_ref();
                let connected = tcp.connected();
                if session.alpn_protocol() == Some(b"h2") {
                    connected.negotiated_h2()
                } else {
                    connected
                }
            }
        }
    }
}

impl Read for MaybeTls {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: ReadBufCursor<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(tcp) => Pin::new(tcp).poll_read(cx, buf),
            MaybeTls::Tls(tls) => Pin::new(tls.as_mut()).poll_read(cx, buf),
        }
    }
}

impl Write for MaybeTls {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeTls::Plain(tcp) => Pin::new(tcp).poll_write(cx, buf),
            MaybeTls::Tls(tls) => Pin::new(tls.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(tcp) => Pin::new(tcp).poll_flush(cx),
            MaybeTls::Tls(tls) => Pin::new(tls.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(tcp) => Pin::new(tcp).poll_shutdown(cx),
            MaybeTls::Tls(tls) => Pin::new(tls.as_mut()).poll_shutdown(cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            MaybeTls::Plain(tcp) => tcp.is_write_vectored(),
            MaybeTls::Tls(tls) => tls.is_write_vectored(),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeTls::Plain(tcp) => Pin::new(tcp).poll_write_vectored(cx, bufs),
            MaybeTls::Tls(tls) => Pin::new(tls.as_mut()).poll_write_vectored(cx, bufs),
        }
    }
}
