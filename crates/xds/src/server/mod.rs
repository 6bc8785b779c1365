//! The xDS control plane's server (SPEC D5, feature `server`): proxyless gRPC clients
//! (`xds:///<service>.<namespace>`) and Envoy discover services over ADS, state of the world
//! or Delta, on their own listener.
//!
//! ```text
//!  accept (budget, TLS with ALPN h2) ──▶ tonic: AggregatedDiscoveryService ──▶ stream::Session
//!      ▲ XdsHub (an ApplyObserver): wakes the sessions of changed services ─┘    │ muster_xds machines
//!      └ Node apply path                                                         ▼
//!                                          XdsClients (per stream ledger) ──▶ XdsState::page, the metrics
//! ```
//!
//! What is served, and the resource names: `muster_xds` (crate docs) and docs/xds.md's tour
//! section. Supported: ADS only (no separate LDS/RDS/CDS/EDS services), state of the world for
//! all four types, Delta for all four; wildcard CDS lists every service of the tenant,
//! wildcard LDS lists none (an API listener is for gRPC clients, which always name theirs).
//! Not served: SDS, VHDS, ECDS, xdstp:// names, per-resource TTLs, on-demand CDS, load
//! reporting (LRS).
//!
//! An adapter over the gate (`muster_gate::Gate`): a stream is identified, authorised and
//! admitted there, and reads the registry through it. What a federated region serves
//! instead, and where acknowledgements go, the wiring gives as a [`Serving`].

mod caller;
mod clients;
mod hub;
mod io;
mod service;
mod state;
mod stream;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use muster_http::descriptors::ConnectionBudget;
use muster_http::listener::Listening;
use muster_http::peer::{Peer, PeerCertificate};
use muster_tls::{CertificateNames, TlsAcceptor};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

pub use hub::XdsHub;
use io::{Transport, XdsIo};
use service::AdsService;
pub use state::{Serving, XdsState};
use stream::Ads;

/// A running xDS listener.
pub struct XdsServe {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Fire to stop accepting and end the streams.
    pub stop: oneshot::Sender<()>,
    /// The listener's task: ends once stopped.
    pub serve: JoinHandle<()>,
}

/// How many accepted (and handshaken) connections may wait for tonic to take them: tonic
/// takes each at once, so this only smooths a burst of reconnects; the accept loop waits
/// (and the kernel's backlog holds the rest) when it is full.
const ACCEPT_QUEUE: usize = 64;

/// HTTP/2 pings on idle connections: a client that vanished without a FIN (a partition,
/// a killed VM) is noticed and its streams closed within about a minute, while an idle
/// but live gRPC client (which pings no more often than every few minutes by default)
/// is never cut off.
const KEEPALIVE: Duration = Duration::from_secs(30);

/// The most streams one HTTP/2 connection may open at once. tonic leaves it unset, and
/// then a client may open hundreds on one connection, past every per-connection bound.
/// Each open stream may buffer a request of up to 2 MiB (`service::MAX_REQUEST`) before
/// it is decoded and judged, so this bounds what one connection can make the node hold
/// before any budget sees it. Envoy and gRPC's xDS client open one ADS stream per
/// connection; 16 leaves room for any real client, and a client that opens more waits
/// for a slot (HTTP/2's own flow) rather than failing (SPEC W4, S6). RFC 9113 section
/// 6.5.2 recommends 100 for general-purpose servers; this one serves one long-lived
/// stream per client.
const MAX_STREAMS_PER_CONNECTION: u32 = 16;

/// Serves ADS on `listener` until `stop` fires. Connections share `budget` with the HTTP
/// API; TLS (with ALPN `h2`, which gRPC clients require) when `listening.tls` is set.
pub fn serve(
    listener: TcpListener,
    addr: SocketAddr,
    state: Arc<XdsState>,
    budget: ConnectionBudget,
    listening: Listening,
) -> XdsServe {
    let (stop, stop_rx) = oneshot::channel::<()>();
    let (accepted, incoming) = mpsc::channel::<XdsIo>(ACCEPT_QUEUE);
    let (stop_accept, stop_accept_rx) = oneshot::channel::<()>();
    let accept = tokio::spawn(accept(listener, budget, listening, accepted, stop_accept_rx));
    let service = Ads { state };
    let incoming = futures_util::stream::unfold(incoming, |mut incoming| async move {
        let io = incoming.recv().await?;
        Some((Ok::<_, std::io::Error>(io), incoming))
    });
    let serve = tokio::spawn(async move {
        let server = tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(KEEPALIVE))
            .max_concurrent_streams(Some(MAX_STREAMS_PER_CONNECTION))
            .add_service(AdsService(Arc::new(service)))
            .serve_with_incoming_shutdown(incoming, async move {
                let _ = stop_rx.await;
                let _ = stop_accept.send(());
            });
        if let Err(error) = server.await {
            tracing::warn!(%error, "the xDS listener ended with an error");
        }
        accept.abort();
    });
    XdsServe { addr, stop, serve }
}

/// The accept loop: within the budget, TLS handshakes on their own tasks (bounded by the
/// handshake timeout), then the connection goes to tonic.
async fn accept(
    listener: TcpListener,
    budget: ConnectionBudget,
    listening: Listening,
    accepted: mpsc::Sender<XdsIo>,
    mut stop: oneshot::Receiver<()>,
) {
    let tls = listening.tls.clone().map(|acceptor| h2_only(&acceptor));
    loop {
        let (tcp, addr) = tokio::select! {
            _ = &mut stop => return,
            next = listener.accept() => match next {
                Ok(next) => next,
                Err(error) => {
                    tracing::warn!(%error, "xDS accept failed");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            },
        };
        // A full budget: the oldest connection that has not spoken yet, on any listener
        // of the budget, makes room (`muster_http::silent`).
        let Some(permit) = budget.take().await else {
            tracing::debug!(%addr, "xDS connection refused: the connection budget is spent");
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let accepted = accepted.clone();
        let tls = tls.clone();
        let timeout = listening.handshake_timeout;
        let first_bytes = listening.header_read_timeout;
        // Silent until its HTTP/2 preface and SETTINGS arrive: a newcomer on any listener
        // of the budget may take its place until then.
        let slot = budget.silent.enter();
        tokio::spawn(async move {
            let spoken = async {
                let (transport, certificate) = match tls {
                    None => (Transport::Plain(tcp), None),
                    Some(acceptor) => match tokio::time::timeout(timeout, acceptor.accept(tcp)).await {
                        Ok(Ok(tls)) => {
                            let certificate = tls
                                .get_ref()
                                .1
                                .peer_certificates()
                                .and_then(|chain| chain.first())
                                .and_then(CertificateNames::of)
                                .map(|names| Arc::new(PeerCertificate::from(names)));
                            (Transport::Tls(Box::new(tls)), certificate)
                        }
                        Ok(Err(error)) => {
                            tracing::debug!(%addr, %error, "xDS TLS handshake failed");
                            return None;
                        }
                        Err(_) => {
                            tracing::debug!(%addr, "xDS: no TLS handshake within the timeout");
                            return None;
                        }
                    },
                };
                let mut io = XdsIo::new(transport, Peer { addr, certificate }, permit);
                // A client that sends no HTTP/2 preface and SETTINGS in time gives its
                // place in the budget back, as an HTTP client that sends no request head
                // does.
                match tokio::time::timeout(first_bytes, io.preface()).await {
                    Ok(Ok(())) => Some(io),
                    Ok(Err(error)) => {
                        tracing::debug!(%addr, %error, "xDS: not an HTTP/2 client");
                        None
                    }
                    Err(_) => {
                        tracing::debug!(%addr, "xDS: no HTTP/2 preface within the header read timeout");
                        None
                    }
                }
            };
            tokio::select! {
                io = spoken => if let Some(io) = io {
                    slot.spoke();
                    let _ = accepted.send(io).await;
                },
                () = slot.evicted().notified() => {
                    tracing::debug!(%addr, "xDS: evicted before its HTTP/2 preface");
                }
            }
        });
    }
}

/// The HTTP API's TLS settings with ALPN `h2` only: gRPC is HTTP/2.
fn h2_only(acceptor: &TlsAcceptor) -> TlsAcceptor {
    let mut config = (*acceptor.config().clone()).clone();
    config.alpn_protocols = vec![b"h2".to_vec()];
    TlsAcceptor::from(Arc::new(config))
}
