//! One accepted xDS connection, plain or TLS, carrying who is on the other end into every
//! gRPC request (tonic puts a connection's `ConnectInfo` into each request's extensions).
//!
//! A connection reaches tonic only once it has sent HTTP/2's client preface and its first
//! SETTINGS frame within the header read timeout (SPEC S6): hyper waits for them without a
//! limit, so a client trickling them a byte at a time would hold its place in the connection
//! budget for ever. The bytes read are replayed to tonic ahead of the rest.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;
use tonic::transport::server::Connected;

use muster_http::peer::Peer;

/// The transport under one connection.
pub(crate) enum Transport {
    Plain(TcpStream),
    Tls(Box<muster_tls::ServerTlsStream<TcpStream>>),
}

/// An accepted connection, holding its place in the listener's budget until it closes.
pub(crate) struct XdsIo {
    transport: Transport,
    peer: Peer,
    _permit: OwnedSemaphorePermit,
    /// What [`XdsIo::preface`] read, not yet handed to tonic.
    read_ahead: Vec<u8>,
    handed: usize,
}

/// HTTP/2's client connection preface (RFC 9113 section 3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The preface and the header of the frame after it.
const HEAD: usize = PREFACE.len() + 9;

/// SETTINGS' frame type.
const SETTINGS: u8 = 4;

/// The largest first SETTINGS frame taken: HTTP/2's smallest maximum frame size (RFC 9113
/// section 4.2), room for any client's settings, its own extensions included.
const MAX_SETTINGS: usize = 16_384;

/// Why a connection's first bytes are not an HTTP/2 client's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotHttp2 {
    Preface,
    /// The frame after the preface is not SETTINGS, or is too large for one.
    Settings,
}

/// The length of the SETTINGS payload that follows `head` (the preface and a frame header).
pub(crate) fn settings_len(head: &[u8; HEAD]) -> Result<usize, NotHttp2> {
    if head[..PREFACE.len()] != PREFACE[..] {
        return Err(NotHttp2::Preface);
    }
    let frame = &head[PREFACE.len()..];
    let len = usize::from(frame[0]) << 16 | usize::from(frame[1]) << 8 | usize::from(frame[2]);
    if frame[3] != SETTINGS || len > MAX_SETTINGS || len % 6 != 0 {
        return Err(NotHttp2::Settings);
    }
    Ok(len)
}

impl XdsIo {
    pub(crate) fn new(transport: Transport, peer: Peer, permit: OwnedSemaphorePermit) -> XdsIo {
        XdsIo {
            transport,
            peer,
            _permit: permit,
            read_ahead: Vec::new(),
            handed: 0,
        }
    }

    /// Reads the client preface and its SETTINGS frame (the caller bounds it in time).
    pub(crate) async fn preface(&mut self) -> io::Result<()> {
        let mut head = [0_u8; HEAD];
        self.read_exact(&mut head).await?;
        let len = settings_len(&head)
            .map_err(|error| io::Error::new(io::ErrorKind::InvalidData, format!("not an HTTP/2 client: {error:?}")))?;
        let mut settings = vec![0_u8; len];
        self.read_exact(&mut settings).await?;
        self.read_ahead = [&head[..], &settings].concat();
        Ok(())
    }
}

impl Connected for XdsIo {
    type ConnectInfo = Peer;

    fn connect_info(&self) -> Peer {
        self.peer.clone()
    }
}

impl AsyncRead for XdsIo {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if self.handed < self.read_ahead.len() {
            let ahead = &self.read_ahead[self.handed..];
            let n = ahead.len().min(buf.remaining());
            buf.put_slice(&ahead[..n]);
            self.handed += n;
            if self.handed == self.read_ahead.len() {
                self.read_ahead = Vec::new();
                self.handed = 0;
            }
            return Poll::Ready(Ok(()));
        }
        match &mut self.transport {
            Transport::Plain(tcp) => Pin::new(tcp).poll_read(cx, buf),
            Transport::Tls(tls) => Pin::new(tls.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for XdsIo {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match &mut self.transport {
            Transport::Plain(tcp) => Pin::new(tcp).poll_write(cx, buf),
            Transport::Tls(tls) => Pin::new(tls.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match &mut self.transport {
            Transport::Plain(tcp) => Pin::new(tcp).poll_write_vectored(cx, bufs),
            Transport::Tls(tls) => Pin::new(tls.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.transport {
            Transport::Plain(tcp) => tcp.is_write_vectored(),
            Transport::Tls(tls) => tls.is_write_vectored(),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.transport {
            Transport::Plain(tcp) => Pin::new(tcp).poll_flush(cx),
            Transport::Tls(tls) => Pin::new(tls.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.transport {
            Transport::Plain(tcp) => Pin::new(tcp).poll_shutdown(cx),
            Transport::Tls(tls) => Pin::new(tls.as_mut()).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(frame: [u8; 9]) -> [u8; HEAD] {
        let mut head = [0_u8; HEAD];
        head[..PREFACE.len()].copy_from_slice(PREFACE);
        head[PREFACE.len()..].copy_from_slice(&frame);
        head
    }

    #[test]
    fn a_client_preface_and_its_settings_are_taken() {
        assert_eq!(settings_len(&head([0, 0, 12, SETTINGS, 0, 0, 0, 0, 0])), Ok(12));
        assert_eq!(settings_len(&head([0, 0, 0, SETTINGS, 0, 0, 0, 0, 0])), Ok(0));
        assert_eq!(
            settings_len(&head([0, 0x3f, 0xfc, SETTINGS, 0, 0, 0, 0, 0])),
            Ok(16_380)
        );
    }

    #[test]
    fn anything_else_is_refused() {
        let mut http1 = head([0, 0, 0, SETTINGS, 0, 0, 0, 0, 0]);
        http1[..4].copy_from_slice(b"GET ");
        assert_eq!(settings_len(&http1), Err(NotHttp2::Preface));
        // A HEADERS frame (type 1) before SETTINGS, and a SETTINGS frame too large to be one.
        assert_eq!(
            settings_len(&head([0, 0, 6, 1, 4, 0, 0, 0, 1])),
            Err(NotHttp2::Settings)
        );
        assert_eq!(
            settings_len(&head([0, 0x40, 6, SETTINGS, 0, 0, 0, 0, 0])),
            Err(NotHttp2::Settings)
        );
        assert_eq!(
            settings_len(&head([0, 0, 7, SETTINGS, 0, 0, 0, 0, 0])),
            Err(NotHttp2::Settings)
        );
    }
}
