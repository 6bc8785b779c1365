//! Serving HTTP/1.1 with our own accept loop on hyper's connection builder, instead of
//! `axum::serve`: that one serves through hyper-util's HTTP/1+2 auto builder and gives no
//! access to its settings, and every connection it serves carries the HTTP/2 variant's size
//! and two shutdown-signal futures. A registry with 10,000 open watch streams pays each
//! byte 10,000 times.
//!
//! ```text
//!  accept ──▶ TCP_NODELAY ──▶ spawn: http1 connection(router) ──┬─▶ done
//!    │                                                          └─ stop: graceful_shutdown
//!  stop ──▶ stop accepting, tell every connection ──▶ wait for the last one to finish
//! ```
//!
//! Graceful shutdown: in-flight responses finish (watch streams end after the hub's `closing`
//! frame), idle keep-alive connections close, and [`serve`] returns once all are gone.
//! The connection tasks belong to [`serve`]'s future (a `JoinSet`): when the caller gives up
//! waiting and drops or aborts it, every connection still open is aborted with it, so no
//! connection outlives the server.

use std::io;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinSet;

/// hyper's smallest allowed read/write buffer bound (its default is ~400 KiB): requests are
/// small JSON bodies (capped by `max_body_bytes`, read in chunks anyway) and responses are
/// written as they are produced, so a larger buffer would only let one connection hold more.
const MAX_BUF_SIZE: usize = 8 * 1024;

/// After an accept error (typically EMFILE: out of file descriptors), wait before trying
/// again rather than spinning; as `axum::serve` does.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_secs(1);

/// Serves `router` on `listener` until `stop` fires, then shuts down gracefully and returns
/// once every connection has finished. Dropping the future aborts the connections left.
pub(crate) async fn serve(listener: TcpListener, router: Router, stop: oneshot::Receiver<()>) -> io::Result<()> {
    let mut builder = http1::Builder::new();
    // The timer makes hyper's header read timeout (30 s by default) real: without one, a
    // client could hold a connection forever with half a request head.
    builder
        .max_buf_size(MAX_BUF_SIZE)
        .writev(true)
        .keep_alive(true)
        .timer(hyper_util::rt::TokioTimer::new());
    let (stopping, stopping_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut stop = std::pin::pin!(stop);
    loop {
        let tcp = tokio::select! {
            _ = &mut stop => break,
            // Reap finished connections, so the set holds only open ones.
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(ACCEPT_ERROR_BACKOFF).await;
                    continue;
                }
            },
        };
        connections.spawn(connection(builder.clone(), tcp, router.clone(), stopping_rx.clone()));
    }
    drop(listener);
    let _ = stopping.send(true);
    while connections.join_next().await.is_some() {}
    Ok(())
}

async fn connection(builder: http1::Builder, tcp: TcpStream, router: Router, mut stopping: watch::Receiver<bool>) {
    // Watch frames are small writes that must leave at once: no Nagle delay.
    if let Err(error) = tcp.set_nodelay(true) {
        tracing::debug!(%error, "cannot set TCP_NODELAY");
    }
    let connection = builder.serve_connection(TokioIo::new(tcp), TowerToHyperService::new(router));
    let mut connection = std::pin::pin!(connection);
    let finished = tokio::select! {
        result = connection.as_mut() => Some(result),
        _ = stopping.wait_for(|stopping| *stopping) => None,
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
