//! Serving HTTP with our own accept loop on hyper's connection builders, instead of
//! `axum::serve`: that one serves through hyper-util's HTTP/1+2 auto builder and gives no
//! access to its settings, and every connection it serves carries the HTTP/2 variant's size
//! and two shutdown-signal futures. A registry with 10,000 open watch streams pays each
//! byte 10,000 times: here a connection's task holds only what its protocol needs (HTTP/2
//! and TLS are boxed, entered only by the connections that use them).
//!
//! ```text
//!  accept ──▶ within budget? ─yes─▶ TCP_NODELAY ──▶ spawn: [TLS handshake, bounded] ──▶
//!    │            │        first bytes: a watch? ─▶ `direct` (beneath hyper), then hyper HTTP/1.1
//!    │            │                     HTTP/2 preface or ALPN h2? ─▶ hyper HTTP/2
//!    │            │                     else ─▶ hyper HTTP/1.1
//!    │            │                  each with (router, Peer{addr, SANs}) ──┬─▶ done
//!    │            │ no                                                     └─ stop: graceful_shutdown
//!    │            ├─▶ a connection still silent (no request head yet)? ─▶ evict the oldest, take its slot
//!    │            └─▶ refusal slot? ─yes─▶ [TLS handshake] answer one request 503
//!    │                      │                 too_many_connections, close (all bounded)
//!    │                      └─ no ──▶ close at once
//!  stop ──▶ stop accepting, tell every connection ──▶ wait for the last one to finish
//! ```
//!
//! On a TLS listener ([`Listening::tls`]) every connection handshakes first, within the
//! listener's handshake timeout, so a client that connects and never handshakes gives its
//! place in the budget back; plain HTTP sent to it fails the handshake. Over mutual TLS the
//! verified client certificate's SANs go into the connection's [`Peer`].
//!
//! The budget ([`crate::descriptors`]) keeps connections from taking the descriptors the log,
//! snapshots and peers need: a flood of connections is refused, never a snapshot.
//!
//! Graceful shutdown: in-flight responses finish (watch streams end after the hub's `closing`
//! frame), idle keep-alive connections close, and [`serve`] returns once all are gone.
//! The connection tasks belong to [`serve`]'s future (a `JoinSet`): when the caller gives up
//! waiting and drops or aborts it, every connection still open is aborted with it, so no
//! connection outlives the server.

use std::convert::Infallible;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::response::IntoResponse;
use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::graceful::GracefulConnection;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, oneshot, watch};
use tokio::task::JoinSet;

use bytes::Bytes;
use muster_tls::{CertificateNames, TlsAcceptor};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::descriptors::ConnectionBudget;
use crate::direct::{self, After, Opening, Rewind};
use crate::error::ApiError;
use crate::listener::Listening;
use crate::peer::{Peer, PeerCertificate};
use crate::silent::SilentSlot;

/// hyper's smallest allowed read/write buffer bound (its default is ~400 KiB): requests are
/// small JSON bodies (capped by `max_body_bytes`, read in chunks anyway) and responses are
/// written as they are produced, so a larger buffer would only let one connection hold more.
const MAX_BUF_SIZE: usize = 8 * 1024;

/// HTTP/2 streams open at once on one connection: a relay multiplexing the watches of many
/// services, each stream still within the caller's watch budget (SPEC W4).
const HTTP2_MAX_STREAMS: u32 = 1024;

/// The largest request header list over HTTP/2, as over HTTP/1.1 (`MAX_BUF_SIZE`).
const HTTP2_MAX_HEADER_LIST: u32 = 8 * 1024;

/// A stream's receive window (a request body the server has not read yet) — requests are
/// small JSON bodies; the connection's is four of them.
const HTTP2_WINDOW: u32 = 64 * 1024;

/// How often an HTTP/2 connection's peer is pinged, and how long its answer may take.
const HTTP2_PING_INTERVAL: Duration = Duration::from_secs(30);
const HTTP2_PING_TIMEOUT: Duration = Duration::from_secs(20);

/// Bytes a stream may have queued unsent: a reader that falls behind is cut off by the hub
/// (`resync`), not buffered for (hyper's default is 400 KiB a stream).
const HTTP2_MAX_SEND_BUF: usize = 64 * 1024;

/// After an accept error (typically EMFILE: out of file descriptors), wait before trying
/// again rather than spinning; as `axum::serve` does.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_secs(1);

/// How long a connection refused for the budget may take to send its request and read the
/// answer: a well-behaved client sends at once; a slow one is cut off so refusals cannot
/// hold descriptors for long.
pub const REFUSAL_TIME: Duration = Duration::from_secs(2);

/// The accept queue asked of the kernel for client-facing listeners (capped there by
/// `net.core.somaxconn`, 4096 by default). Tokio's `TcpListener::bind` asks for 128: when
/// every watcher reconnects at once after a restart (SPEC W4), connections past the 128th
/// overflow the queue and wait for the client's SYN retry, a second or more, while the
/// server has idle capacity.
const LISTEN_BACKLOG: u32 = 4096;

/// Binds a client-facing TCP listener on `addr` with [`LISTEN_BACKLOG`] (and `SO_REUSEADDR`,
/// as `TcpListener::bind` sets it, so a restarted server can bind at once).
pub fn bind(addr: std::net::SocketAddr) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Serves `router` on `listener` until `stop` fires, then shuts down gracefully and returns
/// once every connection has finished. Dropping the future aborts the connections left.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    stop: oneshot::Receiver<()>,
    budget: ConnectionBudget,
    listening: Listening,
) -> io::Result<()> {
    let builder = connection_builder(&listening);
    let (stopping, stopping_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut stop = std::pin::pin!(stop);
    loop {
        let (tcp, addr) = tokio::select! {
            _ = &mut stop => break,
            // Reap finished connections, so the set holds only open ones.
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(ACCEPT_ERROR_BACKOFF).await;
                    continue;
                }
            },
        };
        // A full budget: the oldest connection that has sent no request yet, on any listener
        // of the budget, makes room (`silent`), so slow heads cannot keep real callers out
        // (SPEC S6).
        match budget.take().await {
            Some(permit) => {
                connections.spawn(connection(
                    builder.clone(),
                    tcp,
                    router.clone(),
                    addr,
                    listening.clone(),
                    stopping_rx.clone(),
                    (permit, budget.silent.enter()),
                ));
            }
            None => match Arc::clone(&budget.refusing).try_acquire_owned() {
                Ok(permit) => {
                    connections.spawn(refuse(tcp, listening.tls.clone(), permit));
                }
                Err(_) => drop(tcp),
            },
        }
    }
    drop(listener);
    let _ = stopping.send(true);
    while connections.join_next().await.is_some() {}
    Ok(())
}

/// hyper's HTTP/1.1 settings for every connection of a listener.
fn connection_builder(listening: &Listening) -> http1::Builder {
    let mut builder = http1::Builder::new();
    // The timer makes hyper's header read timeout real: without one, a client could hold a
    // connection forever with half a request head.
    builder
        .max_buf_size(MAX_BUF_SIZE)
        .writev(true)
        .keep_alive(true)
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(listening.header_read_timeout);
    builder
}

/// Serves `router` on one in-memory connection (`io`, e.g. an end of `tokio::io::duplex`)
/// as a plain TCP connection from `addr` would be served — the same connection settings and
/// the same per-request service — until the other end closes or `stopping` turns. It holds
/// no descriptor, so it is outside every budget. This is the request path driven
/// in-process, bytes in and bytes out, by the instruction-count gate
/// (`docs/performance.md` "Instruction counts").
pub async fn serve_io<I>(
    io: I,
    router: Router,
    listening: &Listening,
    addr: std::net::SocketAddr,
    stopping: watch::Receiver<bool>,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let peer = Peer {
        addr,
        certificate: None,
    };
    let slot = Arc::new(crate::silent::Silent::default().enter());
    let builder = connection_builder(listening);
    serve_http(
        builder,
        io,
        router,
        peer,
        stopping,
        slot,
        listening.header_read_timeout,
        false,
    )
    .await;
}

/// Serves one connection, after its TLS handshake on a TLS listener; `held` is its place in
/// the budget (given back when it ends) and among the silent connections until it speaks.
async fn connection(
    builder: http1::Builder,
    tcp: TcpStream,
    router: Router,
    addr: std::net::SocketAddr,
    listening: Listening,
    stopping: watch::Receiver<bool>,
    held: (OwnedSemaphorePermit, SilentSlot),
) {
    let (_permit, slot) = held;
    let slot = Arc::new(slot);
    // Watch frames are small writes that must leave at once: no Nagle delay.
    if let Err(error) = tcp.set_nodelay(true) {
        tracing::debug!(%error, "cannot set TCP_NODELAY");
    }
    let timeout = listening.header_read_timeout;
    match listening.tls.clone() {
        None => {
            let peer = Peer {
                addr,
                certificate: None,
            };
            serve_http(builder, tcp, router, peer, stopping, slot, timeout, false).await;
        }
        // Boxed: a plain connection's task never carries a TLS session's size.
        Some(acceptor) => {
            let served = tls_connection(acceptor, builder, tcp, router, addr, &listening, stopping, slot);
            Box::pin(served).await;
        }
    }
}

/// A TLS connection: its handshake within the listener's bound, then HTTP as on plain TCP,
/// the verified client certificate's names in its [`Peer`].
#[expect(clippy::too_many_arguments, reason = "one connection's parts, passed on once")]
async fn tls_connection(
    acceptor: TlsAcceptor,
    builder: http1::Builder,
    tcp: TcpStream,
    router: Router,
    addr: std::net::SocketAddr,
    listening: &Listening,
    mut stopping: watch::Receiver<bool>,
    slot: Arc<SilentSlot>,
) {
    let handshake = tokio::time::timeout(listening.handshake_timeout, acceptor.accept(tcp));
    let tls = tokio::select! {
        done = handshake => match done {
            Ok(Ok(tls)) => tls,
            Ok(Err(error)) => return tracing::debug!(%addr, %error, "TLS handshake failed"),
            Err(_) => return tracing::debug!(%addr, "no TLS handshake within the timeout"),
        },
        _ = stopping.wait_for(|stopping| *stopping) => return,
        () = slot.evicted().notified() => return tracing::debug!(%addr, "evicted before its handshake"),
    };
    let certificate = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first())
        .and_then(CertificateNames::of)
        .map(|names| Arc::new(PeerCertificate::from(names)));
    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
    let peer = Peer { addr, certificate };
    let timeout = listening.header_read_timeout;
    serve_http(builder, tls, router, peer, stopping, slot, timeout, h2).await;
}

/// Serves HTTP on `io` until the client is done, the server stops, or (before its first
/// request) a newcomer evicts it: HTTP/2 when TLS negotiated it (`h2`) or the client opens
/// with its preface (prior knowledge), otherwise HTTP/1.1. A first HTTP/1.1 request that is a
/// watch is answered beneath hyper (`direct`); hyper serves the rest of the connection, or
/// all of it.
#[expect(clippy::too_many_arguments, reason = "one connection's parts, passed on once")]
async fn serve_http<I>(
    builder: http1::Builder,
    mut io: I,
    router: Router,
    peer: Peer,
    mut stopping: watch::Receiver<bool>,
    slot: Arc<SilentSlot>,
    header_read_timeout: Duration,
    negotiated_h2: bool,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let opening = if negotiated_h2 {
        Opening::Http2(Bytes::new())
    } else {
        tokio::select! {
            read = tokio::time::timeout(header_read_timeout, direct::read_opening(&mut io, MAX_BUF_SIZE)) => match read {
                Ok(opening) => opening,
                Err(_) => return tracing::debug!("no request head within the header read timeout"),
            },
            _ = stopping.wait_for(|stopping| *stopping) => return,
            () = slot.evicted().notified() => return tracing::debug!("evicted before its first request"),
        }
    };
    let prefix = match opening {
        Opening::Gone => return,
        Opening::Other(prefix) => {
            // A whole head has spoken, even before hyper dispatches it (`silent`).
            if direct::has_whole_head(&prefix) {
                slot.spoke();
            }
            prefix
        }
        Opening::Http2(prefix) => {
            let io = TokioIo::new(Rewind::new(prefix, io));
            let activity = Arc::new(Activity::default());
            let service = http2_service(router, peer, Arc::clone(&slot), Arc::clone(&activity));
            let connection = http2_builder().serve_connection(io, service);
            let idle = Some((activity, header_read_timeout));
            return Box::pin(drive(connection, stopping, slot, idle)).await;
        }
        Opening::Watch(request) => {
            slot.spoke();
            let Ok(response) = route(&router, &peer, *request).await;
            match direct::answer(&mut io, response, now()).await {
                Ok(After::KeepAlive) => Bytes::new(),
                Ok(After::Close) => return,
                Err(error) => return tracing::debug!(%error, "a watch stream ended with an error"),
            }
        }
    };
    // Boxed: a connection streaming a watch above never holds hyper's connection state.
    let io = TokioIo::new(Rewind::new(prefix, io));
    let connection = builder.serve_connection(io, service(router, peer, Arc::clone(&slot)));
    Box::pin(drive(connection, stopping, slot, None)).await;
}

/// hyper's HTTP/2 settings for every connection (SPEC W3's multiplexed watches): many
/// streams, each a small request; a stream's unsent frames are bounded, as are its headers.
fn http2_builder() -> http2::Builder<TokioExecutor> {
    let mut builder = http2::Builder::new(TokioExecutor::new());
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .max_concurrent_streams(HTTP2_MAX_STREAMS)
        .max_header_list_size(HTTP2_MAX_HEADER_LIST)
        .max_send_buf_size(HTTP2_MAX_SEND_BUF)
        .initial_stream_window_size(HTTP2_WINDOW)
        .initial_connection_window_size(4 * HTTP2_WINDOW)
        // A peer that vanished without closing is found by its missing PING answer.
        .keep_alive_interval(HTTP2_PING_INTERVAL)
        .keep_alive_timeout(HTTP2_PING_TIMEOUT);
    builder
}

/// An HTTP/2 connection's streams: how many are open, and whether one began since the idle
/// check last looked. A connection with none open and none begun between two checks, a
/// `header_read_timeout` apart, is closed (one to two periods after its last stream), as an
/// idle HTTP/1.1 connection is.
#[derive(Default)]
struct Activity {
    open: std::sync::atomic::AtomicUsize,
    began: std::sync::atomic::AtomicBool,
}

impl Activity {
    /// Whether the connection has been idle since the last call.
    fn idle(&self) -> bool {
        let began = self.began.swap(false, std::sync::atomic::Ordering::Relaxed);
        !began && self.open.load(std::sync::atomic::Ordering::Relaxed) == 0
    }
}

/// One open HTTP/2 stream of an [`Activity`]: counted from its request until its response
/// body is done or dropped.
struct Open(Arc<Activity>);

impl Open {
    fn new(activity: Arc<Activity>) -> Open {
        activity.began.store(true, std::sync::atomic::Ordering::Relaxed);
        activity.open.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Open(activity)
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A response body that keeps its stream counted open while it lasts.
struct Counted {
    body: axum::body::Body,
    _open: Open,
}

impl http_body::Body for Counted {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// [`service`] for HTTP/2: each stream counted in `activity` while it is open.
fn http2_service(
    router: Router,
    peer: Peer,
    slot: Arc<SilentSlot>,
    activity: Arc<Activity>,
) -> impl hyper::service::Service<
    hyper::Request<hyper::body::Incoming>,
    Response = hyper::Response<Counted>,
    Error = Infallible,
    Future = impl Future<Output = Result<hyper::Response<Counted>, Infallible>> + Send + 'static,
> + Clone {
    let service = move |request: hyper::Request<hyper::body::Incoming>| {
        slot.spoke();
        let open = Open::new(Arc::clone(&activity));
        let call = route(&router, &peer, request);
        async move {
            let Ok(response) = call.await;
            Ok(response.map(|body| Counted { body, _open: open }))
        }
    };
    hyper::service::service_fn(service)
}

/// The service hyper calls for each request of a connection: the router, with the peer.
fn service(
    router: Router,
    peer: Peer,
    slot: Arc<SilentSlot>,
) -> impl hyper::service::Service<
    hyper::Request<hyper::body::Incoming>,
    Response = axum::response::Response,
    Error = Infallible,
    Future = impl Future<Output = Result<axum::response::Response, Infallible>> + Send + 'static,
> + Clone {
    let service = move |request: hyper::Request<hyper::body::Incoming>| {
        slot.spoke();
        route(&router, &peer, request)
    };
    hyper::service::service_fn(service)
}

/// Drives hyper's `connection` until it is done, the server stops or (with `idle`: HTTP/2)
/// it has had no stream for a whole period — then gracefully: in-flight responses finish —
/// or, before its first request, a newcomer evicts it.
async fn drive<C>(
    connection: C,
    mut stopping: watch::Receiver<bool>,
    slot: Arc<SilentSlot>,
    idle: Option<(Arc<Activity>, Duration)>,
) where
    C: GracefulConnection,
    C::Error: std::fmt::Display,
{
    let mut connection = std::pin::pin!(connection);
    let mut checks = idle.as_ref().map(|(_, period)| {
        let mut checks = tokio::time::interval_at(tokio::time::Instant::now() + *period, *period);
        // Two checks back to back after a stall would see one period as two.
        checks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        checks
    });
    let finished = loop {
        tokio::select! {
            result = connection.as_mut() => break Some(result),
            _ = stopping.wait_for(|stopping| *stopping) => break None,
            _ = async { checks.as_mut().expect("guarded").tick().await }, if checks.is_some() => if idle.as_ref().is_some_and(|(activity, _)| activity.idle()) {
                tracing::debug!("an HTTP/2 connection idle for a whole period closes");
                break None;
            },
            // An eviction that raced with the first request is ignored: a caller keeps its
            // place (`silent`).
            () = slot.evicted().notified() => if !slot.has_spoken() {
                return tracing::debug!("evicted before its first request");
            },
        }
    };
    let result = match finished {
        Some(result) => result,
        None => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(error) = result {
        tracing::debug!(%error, "connection ended with an error");
    }
}

/// The `date` of a response written beneath hyper, as hyper dates its own.
#[expect(
    clippy::disallowed_methods,
    reason = "an HTTP response's Date header is the wall clock's"
)]
fn now() -> std::time::SystemTime {
    std::time::SystemTime::now()
}

/// One request through `router`, as every connection's requests go: with who sent it
/// ([`Peer`]) and, at debug under `muster::http`, a span (SPEC O2: off, and free, at the
/// default level; the OTLP export turns it on).
fn route<B>(
    router: &Router,
    peer: &Peer,
    mut request: hyper::Request<B>,
) -> impl Future<Output = Result<axum::response::Response, Infallible>> + use<B>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    request.extensions_mut().insert(peer.clone());
    let span = tracing::debug_span!(
        target: "muster::http",
        "http request",
        method = %request.method(),
        path = request.uri().path(),
        status = tracing::field::Empty,
    );
    // A Router is always ready: `call` without `poll_ready` is what axum::serve does.
    let call = tower::Service::call(&mut router.clone(), request);
    tracing::Instrument::instrument(
        async move {
            let response = call.await;
            if let Ok(response) = &response {
                tracing::Span::current().record("status", response.status().as_u16());
            }
            response
        },
        span,
    )
}

/// Answers one request on a connection over the budget with `503 too_many_connections`, then
/// closes it (reading the request first, so the client sees the answer, not a reset). On a
/// TLS listener the handshake comes first, inside the same bound.
async fn refuse(tcp: TcpStream, tls: Option<TlsAcceptor>, _permit: OwnedSemaphorePermit) {
    let refused = async move {
        match tls {
            None => answer_refusal(tcp, false).await,
            Some(acceptor) => match acceptor.accept(tcp).await {
                Ok(tls) => {
                    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
                    answer_refusal(tls, h2).await;
                }
                Err(error) => tracing::debug!(%error, "TLS handshake of a refused connection failed"),
            },
        }
    };
    if tokio::time::timeout(REFUSAL_TIME, refused).await.is_err() {
        tracing::debug!("a refused connection sent no request in time");
    }
}

/// Answers `too_many_connections` in the protocol the client speaks: HTTP/2 when TLS
/// negotiated it or the client opens with its preface, HTTP/1.1 otherwise.
async fn answer_refusal<I: AsyncRead + AsyncWrite + Unpin + Send + 'static>(mut io: I, negotiated_h2: bool) {
    // Told once a refusal was answered: an HTTP/2 connection is then closed (GOAWAY) rather
    // than left open for the client's next request until `REFUSAL_TIME`.
    let answered = Arc::new(tokio::sync::Notify::new());
    let told = Arc::clone(&answered);
    let service = hyper::service::service_fn(move |_request| {
        told.notify_one();
        async {
            let refusal = ApiError::new(
                muster_core::ErrorCode::TooManyConnections,
                "this server holds as many connections as its file-descriptor budget allows; \
                 retry later or close idle connections",
            );
            Ok::<_, Infallible>(refusal.into_response())
        }
    });
    let (h2, prefix) = match negotiated_h2 {
        true => (true, Bytes::new()),
        false => match direct::read_opening(&mut io, MAX_BUF_SIZE).await {
            Opening::Gone => return,
            Opening::Http2(prefix) => (true, prefix),
            Opening::Other(prefix) => (false, prefix),
            // The head as it came, for hyper to read and refuse like any other.
            Opening::Watch(request) => (false, head_bytes(&request)),
        },
    };
    let io = TokioIo::new(Rewind::new(prefix, io));
    let served = if h2 {
        let connection = http2_builder().serve_connection(io, service);
        let mut connection = std::pin::pin!(connection);
        tokio::select! {
            served = connection.as_mut() => served,
            () = answered.notified() => {
                connection.as_mut().graceful_shutdown();
                connection.await
            }
        }
    } else {
        let mut builder = http1::Builder::new();
        builder.keep_alive(false).max_buf_size(MAX_BUF_SIZE);
        builder.serve_connection(io, service).await
    };
    if let Err(error) = served {
        tracing::debug!(%error, "a refused connection ended with an error");
    }
}

/// A minimal request head for `request` (a watch read by `direct`), for hyper to refuse.
fn head_bytes(request: &hyper::Request<axum::body::Body>) -> Bytes {
    let mut head = format!("GET {} HTTP/1.1\r\n", request.uri()).into_bytes();
    head.extend_from_slice(b"\r\n");
    Bytes::from(head)
}

#[cfg(test)]
mod tests {
    use futures_util::StreamExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    const REQUEST: &[u8] = b"GET /v1/anything HTTP/1.1\r\nHost: test\r\n\r\n";

    async fn exchange(addr: std::net::SocketAddr) -> String {
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        tcp.write_all(REQUEST).await.unwrap();
        let mut reply = vec![0; 4096];
        let read = tokio::time::timeout(Duration::from_secs(10), tcp.read(&mut reply))
            .await
            .expect("an answer in time")
            .unwrap();
        String::from_utf8_lossy(&reply[..read]).into_owned()
    }

    /// Reads from `tcp` until `done` holds for what was read, within a bound.
    async fn read_until(tcp: &mut TcpStream, done: impl Fn(&str) -> bool) -> String {
        let mut read = Vec::new();
        while !done(&String::from_utf8_lossy(&read)) {
            let mut chunk = [0u8; 1024];
            let n = tokio::time::timeout(Duration::from_secs(10), tcp.read(&mut chunk))
                .await
                .unwrap_or_else(|_| panic!("bytes in time after {}", String::from_utf8_lossy(&read)))
                .unwrap();
            assert_ne!(n, 0, "closed after {}", String::from_utf8_lossy(&read));
            read.extend_from_slice(&chunk[..n]);
        }
        String::from_utf8_lossy(&read).into_owned()
    }

    #[tokio::test]
    async fn a_watch_opening_a_connection_streams_beneath_hyper_and_other_requests_reach_hyper() {
        // SPEC K1: a watch stream held hyper's whole connection state (25 KiB a stream).
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (frames, frames_rx) = tokio::sync::mpsc::unbounded_channel::<Bytes>();
        let frames_rx = Arc::new(std::sync::Mutex::new(Some(frames_rx)));
        let stream = axum::routing::get(move |axum::Extension(peer): axum::Extension<Peer>| {
            let rx = frames_rx.lock().unwrap().take().expect("one stream");
            let mut rx = rx;
            let body = async_stream_of(&mut rx, peer);
            async move { axum::body::Body::from_stream(body) }
        });
        let router = Router::new()
            .route("/v1/watch/acme/prod/api", stream)
            .route("/v1/anything", axum::routing::get(|| async { "served" }));
        let (stop, stop_rx) = oneshot::channel();
        let listening = Listening::new(&crate::listener::ListenerLimits::default(), None);
        let server = tokio::spawn(serve(listener, router, stop_rx, ConnectionBudget::of(8), listening));

        // Not found on the direct path: a sized answer, and the connection goes on in hyper.
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        tcp.write_all(b"GET /v1/watch/none HTTP/1.1\r\nHost: test\r\n\r\n")
            .await
            .unwrap();
        let missing = read_until(&mut tcp, |r| r.contains("\r\n\r\n")).await;
        assert!(missing.starts_with("HTTP/1.1 404 Not Found\r\n"), "{missing}");
        assert!(missing.contains("content-length: 0\r\n"), "{missing}");
        tcp.write_all(REQUEST).await.unwrap();
        let served = read_until(&mut tcp, |r| r.ends_with("served")).await;
        assert!(served.starts_with("HTTP/1.1 200 OK\r\n"), "{served}");

        // The watch: its head, then each frame as a chunk as it comes, the peer attached.
        let mut watch = TcpStream::connect(addr).await.unwrap();
        watch
            .write_all(b"GET /v1/watch/acme/prod/api HTTP/1.1\r\nHost: test\r\n\r\n")
            .await
            .unwrap();
        let head = read_until(&mut watch, |r| r.contains("127.0.0.1")).await;
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(head.contains("transfer-encoding: chunked\r\n"), "{head}");
        frames.send(Bytes::from_static(b"{\"n\":1}\n")).unwrap();
        read_until(&mut watch, |r| r.ends_with("8\r\n{\"n\":1}\n\r\n")).await;
        drop(frames);
        read_until(&mut watch, |r| r.ends_with("0\r\n\r\n")).await;
        let mut rest = Vec::new();
        watch.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty(), "closed after the stream's end");

        // A request that is not a watch never meets the direct path.
        assert!(exchange(addr).await.ends_with("served"));
        stop.send(()).unwrap();
        server.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn an_http2_client_with_prior_knowledge_gets_many_streams_on_one_connection() {
        // SPEC W3: a relay watching several services over one connection.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = Router::new().route(
            "/v1/anything",
            axum::routing::get(|axum::Extension(peer): axum::Extension<Peer>| async move {
                format!("served {}", peer.addr.ip())
            }),
        );
        let (stop, stop_rx) = oneshot::channel();
        let listening = Listening::new(&crate::listener::ListenerLimits::default(), None);
        let server = tokio::spawn(serve(listener, router, stop_rx, ConnectionBudget::of(1), listening));

        let tcp = TcpStream::connect(addr).await.unwrap();
        let (sender, connection) = hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
        tokio::spawn(connection);
        let mut replies = Vec::new();
        for _ in 0..3 {
            let mut sender = sender.clone();
            replies.push(tokio::spawn(async move {
                let request = hyper::Request::get(format!("http://{addr}/v1/anything"))
                    .body(http_body_util::Empty::<Bytes>::new())
                    .unwrap();
                let reply = sender.send_request(request).await.unwrap();
                assert_eq!(reply.version(), hyper::Version::HTTP_2);
                let body = http_body_util::BodyExt::collect(reply.into_body()).await.unwrap();
                String::from_utf8(body.to_bytes().to_vec()).unwrap()
            }));
        }
        for reply in replies {
            assert_eq!(reply.await.unwrap(), "served 127.0.0.1");
        }
        drop(sender);
        stop.send(()).unwrap();
        server.await.unwrap().unwrap();
    }

    /// An HTTP/2 connection with prior knowledge to `addr`, driven in the background; the
    /// handle ends when the connection does.
    async fn h2_connect(
        addr: std::net::SocketAddr,
    ) -> (
        hyper::client::conn::http2::SendRequest<http_body_util::Empty<Bytes>>,
        tokio::task::JoinHandle<Result<(), String>>,
    ) {
        let tcp = TcpStream::connect(addr).await.unwrap();
        let (sender, connection) = hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
        let driven = tokio::spawn(async move { connection.await.map_err(|error| error.to_string()) });
        (sender, driven)
    }

    async fn h2_get(
        sender: &mut hyper::client::conn::http2::SendRequest<http_body_util::Empty<Bytes>>,
        addr: std::net::SocketAddr,
        path: &str,
    ) -> hyper::Response<hyper::body::Incoming> {
        let request = hyper::Request::get(format!("http://{addr}{path}"))
            .body(http_body_util::Empty::<Bytes>::new())
            .unwrap();
        sender.send_request(request).await.unwrap()
    }

    #[tokio::test]
    async fn over_the_budget_an_http2_client_is_answered_too_many_connections_over_http2() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = Router::new().route("/v1/anything", axum::routing::get(|| async { "served" }));
        let (stop, stop_rx) = oneshot::channel();
        let listening = Listening::new(&crate::listener::ListenerLimits::default(), None);
        let server = tokio::spawn(serve(listener, router, stop_rx, ConnectionBudget::of(1), listening));
        let (mut held, _held) = h2_connect(addr).await;
        assert_eq!(h2_get(&mut held, addr, "/v1/anything").await.status(), 200);

        let (mut refused, refused_driven) = h2_connect(addr).await;
        let reply = h2_get(&mut refused, addr, "/v1/anything").await;
        assert_eq!(
            (reply.status().as_u16(), reply.version()),
            (503, hyper::Version::HTTP_2)
        );
        let body = http_body_util::BodyExt::collect(reply.into_body())
            .await
            .unwrap()
            .to_bytes();
        assert!(
            String::from_utf8_lossy(&body).contains("too_many_connections"),
            "{body:?}"
        );
        // Closed by the server once answered (GOAWAY), the refusal slot given back: the
        // client's connection ends cleanly while the client still holds its sender.
        let ended = tokio::time::timeout(Duration::from_secs(10), refused_driven).await;
        assert!(matches!(ended, Ok(Ok(Ok(())))), "{ended:?}");
        stop.send(()).unwrap();
        server.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn an_http2_connection_without_streams_for_a_whole_period_closes_and_one_with_a_stream_stays() {
        // SPEC S6: an HTTP/2 connection that made one request and then idles would otherwise
        // hold its place in the budget forever (an idle HTTP/1.1 one is closed by its header
        // read timeout).
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (frames, frames_rx) = tokio::sync::mpsc::unbounded_channel::<Bytes>();
        let frames_rx = Arc::new(std::sync::Mutex::new(Some(frames_rx)));
        let stream = axum::routing::get(move |axum::Extension(peer): axum::Extension<Peer>| {
            let mut rx = frames_rx.lock().unwrap().take().expect("one stream");
            let body = async_stream_of(&mut rx, peer);
            async move { axum::body::Body::from_stream(body) }
        });
        let router = Router::new()
            .route("/v1/watch/acme/prod/api", stream)
            .route("/v1/anything", axum::routing::get(|| async { "served" }));
        let limits = crate::listener::ListenerLimits {
            header_read_timeout_ms: 100,
            ..crate::listener::ListenerLimits::default()
        };
        let (stop, stop_rx) = oneshot::channel();
        let server = tokio::spawn(serve(
            listener,
            router,
            stop_rx,
            ConnectionBudget::of(8),
            Listening::new(&limits, None),
        ));

        let (mut idle, idle_driven) = h2_connect(addr).await;
        assert_eq!(h2_get(&mut idle, addr, "/v1/anything").await.status(), 200);
        let closed = tokio::time::timeout(Duration::from_secs(10), idle_driven)
            .await
            .expect("the idle connection is closed");
        assert!(matches!(closed, Ok(Ok(()))), "closed gracefully: {closed:?}");

        let (mut watching, watching_driven) = h2_connect(addr).await;
        let mut body = h2_get(&mut watching, addr, "/v1/watch/acme/prod/api").await.into_body();
        let first = http_body_util::BodyExt::frame(&mut body).await.unwrap().unwrap();
        assert_eq!(first.into_data().unwrap(), "127.0.0.1\n");
        // Many idle periods pass with the stream open; it still delivers.
        tokio::time::sleep(Duration::from_millis(500)).await;
        frames.send(Bytes::from_static(b"later\n")).unwrap();
        let later = http_body_util::BodyExt::frame(&mut body).await.unwrap().unwrap();
        assert_eq!(later.into_data().unwrap(), "later\n");
        assert!(!watching_driven.is_finished());
        drop((body, frames));
        stop.send(()).unwrap();
        server.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_watch_head_past_the_buffer_bound_is_answered_431_by_hyper() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = Router::new().route("/v1/watch/acme/prod/api", axum::routing::get(|| async { "streamed" }));
        let (stop, stop_rx) = oneshot::channel();
        let listening = Listening::new(&crate::listener::ListenerLimits::default(), None);
        let server = tokio::spawn(serve(listener, router, stop_rx, ConnectionBudget::of(2), listening));
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        let mut head = b"GET /v1/watch/acme/prod/api HTTP/1.1\r\nx-pad: ".to_vec();
        head.resize(MAX_BUF_SIZE + 512, b'a');
        head.extend_from_slice(b"\r\n\r\n");
        tcp.write_all(&head).await.unwrap();
        let reply = read_until(&mut tcp, |r| r.contains("\r\n")).await;
        assert!(reply.starts_with("HTTP/1.1 431"), "{reply}");
        stop.send(()).unwrap();
        server.await.unwrap().unwrap();
    }

    /// The peer's address as the first frame, then what `rx` gives until it closes.
    fn async_stream_of(
        rx: &mut tokio::sync::mpsc::UnboundedReceiver<Bytes>,
        peer: Peer,
    ) -> impl futures_util::Stream<Item = Result<Bytes, Infallible>> + use<> {
        let mut rx = std::mem::replace(rx, tokio::sync::mpsc::unbounded_channel().1);
        let first = Bytes::from(format!("{}\n", peer.addr.ip()));
        futures_util::stream::once(async move { first })
            .chain(futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)))
            .map(Ok)
    }

    #[tokio::test]
    async fn a_burst_of_connections_past_128_completes_while_nobody_accepts() {
        // Trace (SPEC W4): 10,000 watchers reconnecting after a restart; with tokio's default
        // backlog of 128, connections past the queue's end waited for a SYN retry.
        let listener = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let mut held = Vec::new();
        for n in 0..500 {
            let connect = tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(addr));
            let stream = connect
                .await
                .unwrap_or_else(|_| panic!("connection {n} not established"));
            held.push(stream.unwrap());
        }
        drop(listener);
    }

    #[tokio::test]
    async fn a_connection_over_the_budget_is_answered_too_many_connections_and_the_budget_comes_back() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = Router::new().route("/v1/anything", axum::routing::get(|| async { "served" }));
        let (stop, stop_rx) = oneshot::channel();
        let listening = Listening::new(&crate::listener::ListenerLimits::default(), None);
        let server = tokio::spawn(serve(listener, router, stop_rx, ConnectionBudget::of(1), listening));

        // The one connection the budget allows, held open (keep-alive).
        let mut held = TcpStream::connect(addr).await.unwrap();
        held.write_all(REQUEST).await.unwrap();
        let mut reply = vec![0; 4096];
        let read = held.read(&mut reply).await.unwrap();
        assert!(String::from_utf8_lossy(&reply[..read]).ends_with("served"));

        let refused = exchange(addr).await;
        assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
        assert!(refused.contains("\"code\":\"too_many_connections\""), "{refused}");

        drop(held);
        let mut served = String::new();
        for _ in 0..100 {
            served = exchange(addr).await;
            if served.ends_with("served") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(served.ends_with("served"), "the budget is given back: {served}");
        stop.send(()).unwrap();
        server.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_slow_head_on_one_listener_makes_room_for_a_caller_on_another_sharing_the_budget() {
        // Trace (SPEC S6): trickling heads on the Consul port filled the budget the HTTP API
        // shares with it, while each listener could evict only its own silent connections.
        let budget = ConnectionBudget::of(1);
        let router = Router::new().route("/v1/anything", axum::routing::get(|| async { "served" }));
        let mut servers = Vec::new();
        let mut addrs = Vec::new();
        for _ in 0..2 {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            addrs.push(listener.local_addr().unwrap());
            let (stop, stop_rx) = oneshot::channel();
            // A long header read timeout: only an eviction can end the silent connection.
            let limits = crate::listener::ListenerLimits {
                header_read_timeout_ms: 60_000,
                ..crate::listener::ListenerLimits::default()
            };
            let listening = Listening::new(&limits, None);
            let server = tokio::spawn(serve(listener, router.clone(), stop_rx, budget.clone(), listening));
            servers.push((stop, server));
        }
        // The budget's one place, taken on the first listener by a connection that sends half
        // a request head and nothing more.
        let mut slow = TcpStream::connect(addrs[0]).await.unwrap();
        slow.write_all(b"GET /v1/anything HTTP/1.1\r\nHost: te").await.unwrap();
        let mut taken = false;
        for _ in 0..100 {
            if budget.open.available_permits() == 0 {
                taken = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(taken, "the slow head holds the budget's only place");

        // A caller on the second listener is served in its place.
        let served = exchange(addrs[1]).await;
        assert!(served.ends_with("served"), "{served}");
        let mut rest = Vec::new();
        let closed = tokio::time::timeout(Duration::from_secs(10), slow.read_to_end(&mut rest)).await;
        assert!(matches!(closed, Ok(Ok(_))), "the slow head was closed: {closed:?}");
        for (stop, server) in servers {
            stop.send(()).unwrap();
            server.await.unwrap().unwrap();
        }
    }

    mod tls {
        use http_body_util::{BodyExt, Full};
        use hyper::body::Bytes;
        use hyper_util::client::legacy::Client;
        use hyper_util::rt::TokioExecutor;
        use muster_testkit::pki::{Leaf, TestCa};
        use muster_tls::{ClientAuth, Connector, Identity, Roots};

        use super::*;
        use crate::listener::ListenerLimits;

        /// A TLS listener with a `localhost` certificate of `ca`, taking client certificates
        /// of `ca` (optionally), whose one route answers with the caller's certificate names.
        async fn listen(
            ca: &TestCa,
            connections: usize,
            handshake_timeout_ms: u64,
        ) -> (
            std::net::SocketAddr,
            oneshot::Sender<()>,
            tokio::task::JoinHandle<io::Result<()>>,
        ) {
            let leaf = ca.localhost();
            let identity = Identity::from_pem(leaf.cert.as_bytes(), leaf.key.as_bytes()).unwrap();
            let roots = Roots::from_pem(ca.pem().as_bytes()).unwrap();
            let config = muster_tls::server_config(&identity, &ClientAuth::Optional(roots)).unwrap();
            let limits = ListenerLimits {
                tls_handshake_timeout_ms: handshake_timeout_ms,
                ..ListenerLimits::default()
            };
            let router = Router::new().route(
                "/v1/anything",
                axum::routing::get(|axum::Extension(peer): axum::Extension<Peer>| async move {
                    format!("{:?}", peer.certificate.as_deref().map(|c| (&c.uris, &c.dns_names)))
                }),
            );
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let (stop, stop_rx) = oneshot::channel();
            let listening = Listening::new(&limits, Some(config));
            let server = tokio::spawn(serve(
                listener,
                router,
                stop_rx,
                ConnectionBudget::of(connections),
                listening,
            ));
            (addr, stop, server)
        }

        fn client(ca: &TestCa, identity: Option<&Leaf>) -> Client<Connector, Full<Bytes>> {
            let roots = Roots::from_pem(ca.pem().as_bytes()).unwrap();
            let identity = identity.map(|l| Identity::from_pem(l.cert.as_bytes(), l.key.as_bytes()).unwrap());
            let config = muster_tls::client_config(&roots, identity.as_ref()).unwrap();
            Client::builder(TokioExecutor::new()).build(Connector::new(Some(config), Duration::from_secs(5)))
        }

        /// A request on `client` (whose pool keeps the connection open afterwards).
        async fn get(
            client: &Client<Connector, Full<Bytes>>,
            addr: std::net::SocketAddr,
        ) -> Result<(u16, String), String> {
            let uri = format!("https://localhost:{}/v1/anything", addr.port());
            let reply = tokio::time::timeout(Duration::from_secs(10), client.get(uri.parse().unwrap()))
                .await
                .expect("an answer in time")
                .map_err(|e| format!("{e:?}"))?;
            let status = reply.status().as_u16();
            let body = reply.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
            Ok((status, String::from_utf8_lossy(&body).into_owned()))
        }

        #[tokio::test]
        async fn a_verified_client_certificates_names_reach_every_request_and_no_certificate_names_none() {
            let ca = TestCa::new("muster test CA");
            let (addr, stop, server) = listen(&ca, 8, 10_000).await;
            let api = ca.leaf(&["api.acme.internal"], &[], &["spiffe://acme.internal/ns/prod/sa/api"]);
            let (status, body) = get(&client(&ca, Some(&api)), addr).await.unwrap();
            assert_eq!(status, 200);
            assert_eq!(
                body,
                r#"Some((["spiffe://acme.internal/ns/prod/sa/api"], ["api.acme.internal"]))"#
            );
            // Optional client certificates: one without is served, and names nobody.
            assert_eq!(get(&client(&ca, None), addr).await.unwrap(), (200, "None".to_owned()));
            stop.send(()).unwrap();
            server.await.unwrap().unwrap();
        }

        #[tokio::test]
        async fn over_the_budget_a_tls_client_is_answered_too_many_connections_over_tls() {
            let ca = TestCa::new("muster test CA");
            let (addr, stop, server) = listen(&ca, 1, 60_000).await;
            // Takes the only place with a request, and keeps its connection open (a silent
            // one would make room for the newcomer: `silent`).
            let holder = client(&ca, None);
            assert_eq!(get(&holder, addr).await.unwrap().0, 200);
            let mut refused = (0, String::new());
            for _ in 0..100 {
                refused = get(&client(&ca, None), addr).await.unwrap();
                if refused.0 == 503 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert_eq!(refused.0, 503, "{refused:?}");
            assert!(refused.1.contains("\"code\":\"too_many_connections\""), "{refused:?}");
            stop.send(()).unwrap();
            server.await.unwrap().unwrap();
        }

        #[tokio::test]
        async fn a_client_that_never_handshakes_gives_its_place_back_after_the_handshake_timeout() {
            let ca = TestCa::new("muster test CA");
            let (addr, stop, server) = listen(&ca, 1, 200).await;
            // Takes the only place and sends nothing: without the handshake timeout it would
            // hold it for as long as it stays connected. Nobody else comes (a newcomer would
            // evict it at once): the timeout alone closes it.
            let mut silent = TcpStream::connect(addr).await.unwrap();
            let mut rest = Vec::new();
            let closed = tokio::time::timeout(Duration::from_secs(10), silent.read_to_end(&mut rest)).await;
            assert!(
                matches!(closed, Ok(Ok(0))),
                "closed by the handshake timeout: {closed:?}"
            );
            assert_eq!(get(&client(&ca, None), addr).await.unwrap(), (200, "None".to_owned()));
            stop.send(()).unwrap();
            server.await.unwrap().unwrap();
        }
    }
}
