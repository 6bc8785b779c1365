//! Opaque TCP forwarding (SPEC D3): each accepted connection goes to one endpoint, chosen by
//! the listener's balancer; a connect failure is retried on another endpoint (nothing was
//! sent) within the retry budget; the bytes then flow both ways until either side ends.
//!
//! ```text
//!  accept ──▶ choose ──▶ connect (bounded) ──fail──▶ report, retry within budget
//!                            │ ok
//!                            ▼
//!           copy_bidirectional ─┬─ ends: done
//!                               ├─ endpoint drained or removed ──▶ grace, then cut
//!                               └─ proxy stopping ──────────────▶ grace, then cut
//! ```

use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
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
    // The copy's buffers (8 KiB each way) are allocated only once either side has something
    // to say: an idle connection through the proxy costs its sockets and this task, no more.
    let copy = async {
        tokio::select! {
            ready = inbound.readable() => ready?,
            ready = outbound.readable() => ready?,
        }
        tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await
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
