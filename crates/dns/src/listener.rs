//! The I/O shell: UDP and TCP on one port, answering from a [`LiveZone`].
//!
//! ```text
//!  UdpSocket ──recv──▶ LiveZone::answer(Udp) ──send──▶ client   (one loop per core, sharing
//!                                                                the socket)
//!  TcpListener ──accept──▶ connection task: [len][query] ──▶ answer(Tcp) ──▶ [len][reply]
//!                          (idle timeout, bounded count; all owned by the accept task)
//! ```
//!
//! The loops hold no state beyond their buffers: a malformed packet is answered FORMERR or
//! dropped by the zone, a failed send is forgotten, and no packet can stop a loop. Stopping
//! aborts the tasks; the TCP connections go with the accept task that owns them.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::task::{JoinHandle, JoinSet};

use crate::{LiveZone, Outcome, Transport};

/// How long a TCP connection may sit idle, or take to send one query: RFC 7766 section
/// 6.2.3 asks for seconds, not minutes, so idle connections cannot pile up.
const TCP_IDLE: Duration = Duration::from_secs(10);

/// TCP connections served at once. DNS over TCP is the fallback for truncated answers, so a
/// few hundred is plenty; each holds at most a 64 KiB query buffer, so the bound is 16 MiB.
const MAX_TCP_CONNECTIONS: usize = 256;

/// After a failed accept (out of file descriptors, say), wait before the next one rather
/// than spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Attempts to find a port free for both UDP and TCP when asked for port 0.
const PORT_ATTEMPTS: usize = 16;

/// Why the listener could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen for DNS on {addr}: {source}")]
pub struct ListenError {
    /// The address asked for.
    pub addr: SocketAddr,
    /// Why.
    #[source]
    pub source: io::Error,
}

/// A running DNS listener; [`DnsListener::stop`] stops it.
pub struct DnsListener {
    local_addr: SocketAddr,
    tasks: Vec<JoinHandle<()>>,
}

impl DnsListener {
    /// Binds UDP and TCP on `addr` (port 0: one free port for both) and starts answering
    /// from `zone`.
    pub async fn bind(addr: SocketAddr, zone: Arc<LiveZone>) -> Result<DnsListener, ListenError> {
        let (udp, tcp) = bind_pair(addr).await.map_err(|source| ListenError { addr, source })?;
        let local_addr = udp.local_addr().map_err(|source| ListenError { addr, source })?;
        let udp = Arc::new(udp);
        let workers = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 4);
        let mut tasks: Vec<JoinHandle<()>> = (0..workers)
            .map(|_| tokio::spawn(serve_udp(Arc::clone(&udp), Arc::clone(&zone))))
            .collect();
        tasks.push(tokio::spawn(serve_tcp(tcp, zone)));
        tracing::info!(%local_addr, "dns serving");
        Ok(DnsListener { local_addr, tasks })
    }

    /// The address (UDP and TCP) the listener answers on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops answering and closes every connection.
    pub async fn stop(self) {
        for task in &self.tasks {
            task.abort();
        }
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

async fn bind_pair(addr: SocketAddr) -> io::Result<(UdpSocket, TcpListener)> {
    if addr.port() != 0 {
        let udp = UdpSocket::bind(addr).await?;
        let tcp = TcpListener::bind(addr).await?;
        return Ok((udp, tcp));
    }
    let mut last = None;
    for _ in 0..PORT_ATTEMPTS {
        let udp = UdpSocket::bind(addr).await?;
        let port = udp.local_addr()?.port();
        match TcpListener::bind(SocketAddr::new(addr.ip(), port)).await {
            Ok(tcp) => return Ok((udp, tcp)),
            Err(err) => last = Some(err),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no port free for both UDP and TCP")))
}

async fn serve_udp(socket: Arc<UdpSocket>, zone: Arc<LiveZone>) {
    let mut packet = vec![0u8; 65_535];
    let mut out = Vec::with_capacity(4096);
    loop {
        let (len, peer) = match socket.recv_from(&mut packet).await {
            Ok(received) => received,
            Err(err) => {
                tracing::debug!(%err, "dns udp receive failed");
                tokio::task::yield_now().await;
                continue;
            }
        };
        if let Outcome::Answered { .. } = zone.answer(&packet[..len], Transport::Udp, &mut out)
            && let Err(err) = socket.send_to(&out, peer).await
        {
            tracing::debug!(%err, %peer, "dns udp send failed");
        }
    }
}

async fn serve_tcp(listener: TcpListener, zone: Arc<LiveZone>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    if connections.len() >= MAX_TCP_CONNECTIONS {
                        tracing::debug!(%peer, "dns tcp connection refused: too many open");
                        continue;
                    }
                    connections.spawn(serve_connection(stream, Arc::clone(&zone)));
                }
                Err(err) => {
                    tracing::warn!(%err, "dns tcp accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Serves length-prefixed queries on one connection until the client closes it, idles, or
/// sends something that is not a length-prefixed message.
async fn serve_connection(mut stream: TcpStream, zone: Arc<LiveZone>) {
    let mut query = Vec::new();
    let mut out = Vec::with_capacity(4096);
    let mut framed = Vec::with_capacity(4096);
    loop {
        let mut prefix = [0u8; 2];
        if !matches!(tokio::time::timeout(TCP_IDLE, stream.read_exact(&mut prefix)).await, Ok(Ok(_))) {
            return;
        }
        let len = usize::from(u16::from_be_bytes(prefix));
        if len == 0 {
            return;
        }
        query.resize(len, 0);
        if !matches!(tokio::time::timeout(TCP_IDLE, stream.read_exact(&mut query)).await, Ok(Ok(_))) {
            return;
        }
        if let Outcome::Answered { .. } = zone.answer(&query, Transport::Tcp, &mut out) {
            framed.clear();
            framed.extend_from_slice(&(out.len() as u16).to_be_bytes());
            framed.extend_from_slice(&out);
            if !matches!(tokio::time::timeout(TCP_IDLE, stream.write_all(&framed)).await, Ok(Ok(()))) {
                return;
            }
        }
    }
}
