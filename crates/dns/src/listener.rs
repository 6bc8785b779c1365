//! The I/O shell: UDP and TCP on one port, answering from a [`LiveZone`].
//!
//! ```text
//!  UDP socket per core (SO_REUSEPORT) ──recv──▶ LiveZone::answer(Udp) ──send──▶ client
//!     one blocking thread each
//!  TcpListener (tokio) ──accept──▶ connection task: [len][query] ──▶ answer(Tcp) ──▶ [len][reply]
//!                                  (idle timeout, bounded count; owned by the accept task)
//! ```
//!
//! UDP is served by plain threads blocked in `recv_from`, one socket each: a query costs two
//! system calls and a copy. Measured with dnsperf on 2 shared cores, the same loop as tokio
//! tasks on one shared socket did about 137,000 q/s with a p99 of several milliseconds (the
//! readiness round trip and worker wake-ups); the blocking threads do 190,000-220,000 q/s,
//! at or above nsd in the same run (`.ci/dns-bench.sh`). SO_REUSEPORT lets the kernel spread
//! clients over the sockets instead of the threads contending for one; its cost is that
//! another process of the same user could bind the port too, which is why the server keeps
//! DNS on loopback without authentication.
//!
//! Rotation (which window of a large RRset a query gets, `Zone::answer`) is a counter, not
//! randomness: UDP thread `k` of `n` counts `k, k + n, k + 2n, …`, so the threads never hand
//! out the same rotation and share no cache line; TCP connections share one atomic counter,
//! because a connection usually carries a single query (a resolver's fallback) and
//! per-connection counters would all start alike.
//!
//! The loops hold no state beyond their buffers and counters: a malformed packet is
//! answered FORMERR or dropped by the zone, a failed send is forgotten, and no packet can
//! stop a loop. Stopping sets a flag and wakes each UDP thread with an empty datagram, and
//! aborts the TCP accept task, whose connections go with it.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use tokio::net::{TcpListener, TcpStream};
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

/// Receive threads at most: with more, they mostly contend for the one socket.
const MAX_UDP_THREADS: usize = 4;

/// How often a blocked receive thread looks at the stop flag if its wake-up datagram is lost.
const UDP_STOP_POLL: Duration = Duration::from_secs(1);

/// Wake-up datagrams sent at most when stopping, a pause apart: with 4 sockets, 64 tries
/// miss one with a chance of (3/4)^64, about 1e-8, and the read timeout covers that.
const WAKE_ATTEMPTS: usize = 64;
const WAKE_PAUSE: Duration = Duration::from_millis(1);

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
    tcp: JoinHandle<()>,
    udp: Vec<std::thread::JoinHandle<()>>,
    stop: Arc<AtomicBool>,
}

impl DnsListener {
    /// Binds UDP and TCP on `addr` (port 0: one free port for both) and starts answering
    /// from `zone`.
    pub async fn bind(addr: SocketAddr, zone: Arc<LiveZone>) -> Result<DnsListener, ListenError> {
        let fail = |source| ListenError { addr, source };
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, MAX_UDP_THREADS);
        let (sockets, tcp) = bind_all(addr, threads).await.map_err(fail)?;
        let local_addr = sockets[0].local_addr().map_err(fail)?;
        let stop = Arc::new(AtomicBool::new(false));
        let mut workers = Vec::with_capacity(threads);
        for (n, socket) in sockets.into_iter().enumerate() {
            socket.set_read_timeout(Some(UDP_STOP_POLL)).map_err(fail)?;
            let (zone, stop) = (Arc::clone(&zone), Arc::clone(&stop));
            let worker = std::thread::Builder::new()
                .name(format!("muster-dns-udp-{n}"))
                .spawn(move || serve_udp(socket, zone, stop, n as u32, threads as u32))
                .map_err(fail)?;
            workers.push(worker);
        }
        let tcp = tokio::spawn(serve_tcp(tcp, zone));
        tracing::debug!(%local_addr, udp_threads = threads, "dns serving");
        Ok(DnsListener {
            local_addr,
            tcp,
            udp: workers,
            stop,
        })
    }

    /// The address (UDP and TCP) the listener answers on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops answering and closes every connection.
    pub async fn stop(self) {
        self.tcp.abort();
        let _ = self.tcp.await;
        self.stop.store(true, Ordering::Release);
        // An empty datagram wakes a receive thread at once (the zone drops it). The kernel
        // picks the socket by the sender's address, so each wake-up comes from a new port
        // until every thread has left; the read timeout ends any thread still missed.
        let wake_to = match self.local_addr.ip() {
            ip if ip.is_unspecified() && ip.is_ipv4() => {
                SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, self.local_addr.port()))
            }
            ip if ip.is_unspecified() => SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, self.local_addr.port())),
            _ => self.local_addr,
        };
        let from = if wake_to.is_ipv4() { "127.0.0.1:0" } else { "[::1]:0" };
        let workers = self.udp;
        let _ = tokio::task::spawn_blocking(move || {
            for _ in 0..WAKE_ATTEMPTS {
                if workers.iter().all(std::thread::JoinHandle::is_finished) {
                    break;
                }
                if let Ok(waker) = std::net::UdpSocket::bind(from) {
                    let _ = waker.send_to(&[], wake_to);
                }
                std::thread::sleep(WAKE_PAUSE);
            }
            for worker in workers {
                let _ = worker.join();
            }
        })
        .await;
    }
}

async fn bind_all(addr: SocketAddr, count: usize) -> io::Result<(Vec<std::net::UdpSocket>, TcpListener)> {
    let mut last = None;
    for _ in 0..PORT_ATTEMPTS {
        let first = udp_socket(addr)?;
        let bound = first.local_addr()?;
        let tcp = match TcpListener::bind(bound).await {
            Ok(tcp) => tcp,
            Err(err) if addr.port() == 0 => {
                last = Some(err);
                continue;
            }
            Err(err) => return Err(err),
        };
        let mut sockets = vec![first];
        for _ in 1..count {
            sockets.push(udp_socket(bound)?);
        }
        return Ok((sockets, tcp));
    }
    Err(last.unwrap_or_else(|| io::Error::other("no port free for both UDP and TCP")))
}

fn udp_socket(addr: SocketAddr) -> io::Result<std::net::UdpSocket> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )?;
    socket.set_reuse_port(true)?;
    socket.bind(&addr.into())?;
    Ok(socket.into())
}

/// One blocking receive loop: a thread per core on the shared socket, no async runtime in
/// the way (see the module docs for why). Exits when `stop` is set; a wake-up datagram or
/// the read timeout gets it out of `recv_from`.
///
/// Its rotations are `first`, `first + step`, … (see the module docs).
fn serve_udp(socket: std::net::UdpSocket, zone: Arc<LiveZone>, stop: Arc<AtomicBool>, first: u32, step: u32) {
    let mut packet = vec![0u8; 65_535];
    let mut out = Vec::with_capacity(4096);
    let mut rotation = first;
    while !stop.load(Ordering::Acquire) {
        let (len, peer) = match socket.recv_from(&mut packet) {
            Ok(received) => received,
            Err(err) if matches!(err.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => continue,
            Err(err) => {
                tracing::debug!(%err, "dns udp receive failed");
                continue;
            }
        };
        let this = rotation;
        rotation = rotation.wrapping_add(step);
        if let Outcome::Answered { .. } = zone.answer(&packet[..len], Transport::Udp, this, &mut out)
            && let Err(err) = socket.send_to(&out, peer)
        {
            tracing::debug!(%err, %peer, "dns udp send failed");
        }
    }
}

async fn serve_tcp(listener: TcpListener, zone: Arc<LiveZone>) {
    let mut connections = JoinSet::new();
    let rotations = Arc::new(AtomicU32::new(0));
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    if connections.len() >= MAX_TCP_CONNECTIONS {
                        tracing::debug!(%peer, "dns tcp connection refused: too many open");
                        continue;
                    }
                    connections.spawn(serve_connection(stream, Arc::clone(&zone), Arc::clone(&rotations)));
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
async fn serve_connection(mut stream: TcpStream, zone: Arc<LiveZone>, rotations: Arc<AtomicU32>) {
    let mut query = Vec::new();
    let mut out = Vec::with_capacity(4096);
    let mut framed = Vec::with_capacity(4096);
    loop {
        let mut prefix = [0u8; 2];
        if !matches!(
            tokio::time::timeout(TCP_IDLE, stream.read_exact(&mut prefix)).await,
            Ok(Ok(_))
        ) {
            return;
        }
        let len = usize::from(u16::from_be_bytes(prefix));
        if len == 0 {
            return;
        }
        query.resize(len, 0);
        if !matches!(
            tokio::time::timeout(TCP_IDLE, stream.read_exact(&mut query)).await,
            Ok(Ok(_))
        ) {
            return;
        }
        let rotation = rotations.fetch_add(1, Ordering::Relaxed);
        if let Outcome::Answered { .. } = zone.answer(&query, Transport::Tcp, rotation, &mut out) {
            framed.clear();
            framed.extend_from_slice(&(out.len() as u16).to_be_bytes());
            framed.extend_from_slice(&out);
            if !matches!(
                tokio::time::timeout(TCP_IDLE, stream.write_all(&framed)).await,
                Ok(Ok(()))
            ) {
                return;
            }
        }
    }
}
