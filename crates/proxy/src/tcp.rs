//! Opaque TCP forwarding (SPEC D3): each accepted connection goes to one endpoint, chosen by
//! the listener's balancer; a connect failure is retried on another endpoint (nothing was
//! sent) within the retry budget; the bytes then flow both ways until either side ends.
//!
//! ```text
//!  accept ──▶ choose ──▶ connect (bounded) ──fail──▶ report, retry within budget
//!                            │ ok
//!                            ▼
//!           pipe both ways ─────┬─ ends: done
//!                               ├─ endpoint drained or removed ──▶ grace, then cut
//!                               └─ proxy stopping ──────────────▶ grace, then cut
//! ```

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::sync::watch;

use crate::target::{Chosen, Refusal, Stats, Target, key_of};

/// Connects to an endpoint for one connection, retrying connect failures on other endpoints
/// within the budget. `Err` when every allowed attempt failed or nothing could be chosen.
pub async fn connect(target: &Target, connect_timeout: Duration) -> Result<(Chosen, TcpStream), Option<Refusal>> {
    let mut attempt = 1;
    let mut tried = Vec::new();
    loop {
        let chosen = target.choose(None, &tried).map_err(Some)?;
        tried.push(key_of(&chosen.endpoint));
        match tokio::time::timeout(connect_timeout, TcpStream::connect(chosen.addr)).await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                target.report(&chosen.endpoint, false);
                return Ok((chosen, stream));
            }
            Ok(Err(error)) => {
                tracing::debug!(listener = %target.config.listen, addr = %chosen.addr, %error, "connect failed");
                target.report(&chosen.endpoint, true);
            }
            Err(_) => {
                tracing::debug!(listener = %target.config.listen, addr = %chosen.addr, "connect timed out");
                target.report(&chosen.endpoint, true);
            }
        }
        if attempt >= target.config.max_attempts || !target.try_retry() {
            return Err(None);
        }
        attempt += 1;
    }
}

/// Bytes read at a time by [`pipe`].
const PIPE_CHUNK: usize = 16 * 1024;

/// Copies `from` to `to` until `from` ends (then ends `to`'s writing, as
/// `copy_bidirectional` does), holding a buffer only while bytes are in hand: an idle or
/// half-closed stream through the proxy costs its sockets and its task, no buffer (SPEC D3;
/// HAProxy holds about 3.4 KB per idle connection).
async fn pipe(from: &ReadHalf<'_>, to: &mut WriteHalf<'_>) -> std::io::Result<u64> {
    let mut copied = 0;
    // Kept while the socket has more to read; let go once it has none.
    let mut chunk: Option<BytesMut> = None;
    loop {
        from.readable().await?;
        let buffer = chunk.get_or_insert_with(|| BytesMut::with_capacity(PIPE_CHUNK));
        buffer.clear();
        match from.try_read_buf(buffer) {
            Ok(0) => {
                to.shutdown().await?;
                return Ok(copied);
            }
            Ok(n) => {
                to.write_all(buffer).await?;
                copied += n as u64;
            }
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => chunk = None,
            Err(error) => return Err(error),
        }
    }
}

/// Forwards one accepted connection.
pub async fn forward(
    target: Arc<Target>,
    mut inbound: TcpStream,
    connect_timeout: Duration,
    grace: Duration,
    mut stopping: watch::Receiver<bool>,
) {
    target.deposit();
    let (chosen, mut outbound) = match connect(&target, connect_timeout).await {
        Ok(connected) => connected,
        Err(refusal) => {
            Stats::bump(if refusal.is_some() {
                &target.stats.refused
            } else {
                &target.stats.failed
            });
            let _ = inbound.shutdown().await;
            return;
        }
    };
    let _in_flight = target.start(&chosen.endpoint);
    let key = key_of(&chosen.endpoint);
    let drained = async {
        tokio::select! {
            () = target.departed(&key) => {}
            _ = stopping.wait_for(|stop| *stop) => {}
        }
        tokio::time::sleep(grace).await;
    };
    let copy = async {
        let (inbound_read, mut inbound_write) = inbound.split();
        let (outbound_read, mut outbound_write) = outbound.split();
        tokio::try_join!(
            pipe(&inbound_read, &mut outbound_write),
            pipe(&outbound_read, &mut inbound_write),
        )
    };
    tokio::select! {
        copied = copy => match copied {
            Ok(_) => Stats::bump(&target.stats.ok),
            // Not ejection evidence: either side may have broken the stream, and a client
            // resetting its connections must not eject a healthy endpoint.
            Err(error) => {
                tracing::debug!(listener = %target.config.listen, addr = %chosen.addr, %error, "stream broke");
                Stats::bump(&target.stats.failed);
            }
        },
        () = drained => {
            tracing::info!(listener = %target.config.listen, addr = %chosen.addr, grace_ms = grace.as_millis() as u64, "stream cut after the drain grace");
            Stats::bump(&target.stats.ok);
        }
    }
}
