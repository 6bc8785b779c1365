//! One probe of one check (SPEC H2): the I/O edge of the health decisions. Each probe is
//! bounded by the check's timeout and answers a [`ProbeResult`]; everything else
//! (thresholds, damping, the service-wide brake) is decided by the pure modules.
//!
//! - TCP: a connect. Refused: `Refused` (nothing listens: direct evidence of a death, SPEC
//!   H5); timed out: `Fail`; no route from here: `Unreachable`. HTTP and gRPC connect the same
//!   way first.
//! - HTTP: `GET path` over HTTP/1.1; the status must lie in the range and the body (first
//!   [`MAX_BODY_BYTES`]) hold the text. A target that accepts TCP but never answers (wedged)
//!   fails by timeout.
//! - gRPC: `grpc.health.v1.Health/Check` over HTTP/2 cleartext, the request and reply
//!   encoded by hand (two one-field protobuf messages, not worth a code generator):
//!   `SERVING` passes, anything else fails.
//! - TTL checks are not probed: their reports arrive from the instance.

use std::io;
use std::time::Duration;

use bytes::{Buf, Bytes};
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Method, Request};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;

use crate::hysteresis::ProbeResult;
use muster_core::CheckKind;

/// How much of an HTTP check's body is read: health pages are small; a large one must not
/// cost the checker more than this.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// `grpc.health.v1.HealthCheckResponse.ServingStatus.SERVING`.
const GRPC_SERVING: u64 = 1;

/// Probes once, within `timeout`.
pub async fn probe(kind: &CheckKind, timeout: Duration) -> ProbeResult {
    let outcome = match kind {
        CheckKind::Tcp { authority } => tokio::time::timeout(timeout, connect(authority))
            .await
            .map(|r| r.map(|_| true)),
        CheckKind::Http {
            authority,
            path,
            status,
            body_contains,
        } => tokio::time::timeout(timeout, http(authority, path, *status, body_contains.as_deref())).await,
        CheckKind::Grpc { authority, service } => tokio::time::timeout(timeout, grpc(authority, service)).await,
        // Reports, not probes: the checker never probes a TTL check.
        CheckKind::Ttl { .. } => return ProbeResult::Unreachable,
    };
    match outcome {
        Ok(Ok(true)) => ProbeResult::Pass,
        Ok(Ok(false)) => ProbeResult::Fail,
        Ok(Err(error)) if checker_cannot_reach(&error) => ProbeResult::Unreachable,
        Ok(Err(error)) if error.kind() == io::ErrorKind::ConnectionRefused => ProbeResult::Refused,
        Ok(Err(_)) | Err(_) => ProbeResult::Fail,
    }
}

/// Errors that say the checker has no way there, rather than that the target is down.
fn checker_cannot_reach(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::NetworkUnreachable | io::ErrorKind::HostUnreachable | io::ErrorKind::AddrNotAvailable
    )
}

async fn connect(authority: &str) -> io::Result<TcpStream> {
    let stream = TcpStream::connect(authority).await?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

fn other(error: impl std::error::Error + Send + Sync + 'static) -> io::Error {
    io::Error::other(error)
}

async fn http(authority: &str, path: &str, status: (u16, u16), body_contains: Option<&str>) -> io::Result<bool> {
    let stream = connect(authority).await?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(other)?;
    tokio::spawn(connection);
    let request = Request::get(path)
        .header(hyper::header::HOST, authority)
        .header(hyper::header::USER_AGENT, "muster-health")
        .body(Full::new(Bytes::new()))
        .map_err(other)?;
    let reply = sender.send_request(request).await.map_err(other)?;
    let code = reply.status().as_u16();
    if !(status.0..=status.1).contains(&code) {
        return Ok(false);
    }
    let Some(text) = body_contains else { return Ok(true) };
    let body = Limited::new(reply.into_body(), MAX_BODY_BYTES)
        .collect()
        .await
        .map_err(|e| io::Error::other(e.to_string()))?;
    let body = body.to_bytes();
    Ok(body.windows(text.len().max(1)).any(|window| window == text.as_bytes()))
}

async fn grpc(authority: &str, service: &str) -> io::Result<bool> {
    let stream = connect(authority).await?;
    let (mut sender, connection) = hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
        .await
        .map_err(other)?;
    tokio::spawn(connection);
    let request = Request::builder()
        .method(Method::POST)
        .uri(format!("http://{authority}/grpc.health.v1.Health/Check"))
        .header(hyper::header::CONTENT_TYPE, "application/grpc")
        .header("te", "trailers")
        .body(Full::new(grpc_frame(&health_request(service))))
        .map_err(other)?;
    let reply = sender.send_request(request).await.map_err(other)?;
    if !reply.status().is_success() {
        return Ok(false);
    }
    let body = Limited::new(reply.into_body(), MAX_BODY_BYTES)
        .collect()
        .await
        .map_err(|e| io::Error::other(e.to_string()))?;
    let ok = body
        .trailers()
        .and_then(|t| t.get("grpc-status"))
        .is_none_or(|status| status == "0");
    Ok(ok && serving_status(body.to_bytes()) == Some(GRPC_SERVING))
}

/// `HealthCheckRequest { service = 1 }`: field 1, wire type 2 (length-delimited).
fn health_request(service: &str) -> Vec<u8> {
    if service.is_empty() {
        return Vec::new();
    }
    let mut message = vec![0x0a];
    put_varint(&mut message, service.len() as u64);
    message.extend_from_slice(service.as_bytes());
    message
}

/// A gRPC length-prefixed message: not compressed, 4-byte big-endian length.
fn grpc_frame(message: &[u8]) -> Bytes {
    let mut frame = Vec::with_capacity(5 + message.len());
    frame.push(0);
    frame.extend_from_slice(&(message.len() as u32).to_be_bytes());
    frame.extend_from_slice(message);
    Bytes::from(frame)
}

/// `HealthCheckResponse.status` (field 1, varint) out of a gRPC reply body; 0 (UNKNOWN)
/// when the field is absent, as proto3 defaults it.
fn serving_status(mut body: Bytes) -> Option<u64> {
    if body.remaining() < 5 {
        return None;
    }
    body.advance(1);
    let len = body.get_u32() as usize;
    let mut message = body.get(..len)?;
    let mut status = 0;
    while !message.is_empty() {
        let key = take_varint(&mut message)?;
        match key {
            0x08 => status = take_varint(&mut message)?,
            key if key & 7 == 2 => {
                let skip = take_varint(&mut message)? as usize;
                message = message.get(skip..)?;
            }
            key if key & 7 == 0 => {
                take_varint(&mut message)?;
            }
            _ => return None,
        }
    }
    Some(status)
}

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn take_varint(input: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = input.split_first()?;
        *input = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

#[cfg(test)]
#[path = "probe_tests.rs"]
mod tests;
