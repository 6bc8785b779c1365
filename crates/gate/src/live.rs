//! Change streams of live views (SPEC U2, O3): a JSON value, re-read on a timer and sent as
//! newline-delimited JSON whenever it changed. The dashboard's views, the cluster's and
//! convergence summaries use them; each stream is admitted here and ends on revocation.
//!
//! ```text
//!  first line at once ─▶ every `interval`: value = f() ─┬─ same as last sent ─▶ nothing
//!                                                       │    (a bare "\n" after KEEP_ALIVE)
//!                                                       ├─ changed ─▶ one line
//!                                                       └─ Err(e)  ─▶ {"error":{code,message}}, end
//!  server stopping ─▶ the stream ends
//! ```
//!
//! `GET /v1/watch` is the stream for endpoint sets (it sends every event, at once); this one
//! is for the summaries around it (the overview, the cluster, convergence), where a value
//! a few hundred milliseconds old is fine and the caller wants the whole value each time,
//! not a delta. Polling on the server, not in every browser, keeps one read per `interval`
//! per stream and sends nothing while nothing changes.
//!
//! # Use
//! `changes_stream(&gate, &caller, DEFAULT_INTERVAL, move || Ok(serde_json::to_value(..)?), None)`
//! from a handler, after its own checks: `f` runs first on the handler's task (an error
//! then is the handler's error reply, not a stream), then on the stream's task.
//!
//! # Correctness
//! - The first line is the value at the request, so a client never waits `interval` for it.
//! - A line is sent only when the value differs from the last one sent (compared as encoded
//!   bytes; `serde_json` maps keep a stable order), so an idle view costs no bandwidth. A
//!   value with ages in it (convergence's `behind_ms`) names its essence: a change of ages
//!   alone is sent at most every [`AGES_EVERY`].
//! - Each stream holds a live-view slot of the node's admission table (`Gate::admit`): a
//!   principal streams at most the configured number of live views (the server's 64), and they count against its
//!   and its tenant's watch budgets. A token revoked meanwhile ends its stream with an
//!   `unauthenticated` error line, as a watch ends, and the end is on the audit trail.
//! - A bare newline at least every [`KEEP_ALIVE`] keeps proxies and browsers from timing the
//!   idle stream out; NDJSON readers skip empty lines.
//! - The stream ends when the server starts stopping, so a graceful stop is not held up by
//!   open dashboards.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use muster_core::api::{ErrorBody, ErrorDetail};

use muster_core::ErrorCode;

use crate::{Caller, Gate};
use muster_http::error::ApiError;

/// The longest an idle stream stays silent: 15 s, under the 30–60 s idle timeouts of common
/// proxies and load balancers, and rare enough to cost nothing.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// How often the dashboard's streams re-read their value: 500 ms, well inside the 2 s a
/// dashboard change must take to show (SPEC U2), and one cheap read per open view.
pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(500);

/// How often a value whose only changes are ages (`*_ms` counting up) is sent anyway: the
/// dashboard's "behind 3 s" moves without a line every 500 ms.
pub const AGES_EVERY: Duration = Duration::from_secs(5);

/// A stream of `f()`'s value as NDJSON: at once, then on change (see the module docs).
/// An error from the first call is the reply itself. `essence` gives the part of a value
/// that counts as a change (`None`: all of it); a value that differs only outside it is sent
/// at most every [`AGES_EVERY`].
pub fn changes_stream<F>(
    gate: &Arc<Gate>,
    caller: &Caller,
    interval: Duration,
    mut f: F,
    essence: Option<fn(&serde_json::Value) -> serde_json::Value>,
) -> Response
where
    F: FnMut() -> Result<serde_json::Value, ApiError> + Send + 'static,
{
    // A token confined to a tenant holds in its tenant; an operator's in the cluster's.
    let permit = match gate.admit(caller, caller.confined_to(), crate::Hold::Live, None, || {
        "live view (stream=true)".to_owned()
    }) {
        Ok(permit) => permit,
        Err(error) => return error.into_response(),
    };
    let first = match f() {
        Ok(value) => value,
        Err(error) => return error.into_response(),
    };
    let (sender, receiver) = tokio::sync::mpsc::channel::<Bytes>(1);
    let mut stopping = gate.stopping();
    // A token revoked while the stream is open ends it, as it ends a watch (SPEC S1).
    let revoked: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> = match caller.token_ref() {
        Some(token) => Box::pin(crate::revoked_recorded(
            Arc::clone(gate),
            Arc::clone(token),
            muster_auth::Verb::Watch,
            None,
            "live view (stream=true)".to_owned(),
        )),
        None => Box::pin(std::future::pending()),
    };
    tokio::spawn(async move {
        let _permit = permit;
        let mut revoked = revoked;
        let key = |value: &serde_json::Value| essence.map_or_else(|| line(value), |essence| line(&essence(value)));
        let (mut last, mut last_key) = (line(&first), key(&first));
        if sender.send(last.clone()).await.is_err() || *stopping.borrow_and_update() {
            return;
        }
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.tick().await;
        let (mut quiet, mut since_sent) = (Duration::ZERO, Duration::ZERO);
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                () = sender.closed() => return,
                // Stopping (or the server gone with its sender): the stream ends.
                _ = stopping.changed() => return,
                () = &mut revoked => {
                    let error = ApiError::new(ErrorCode::Unauthenticated, "the token was revoked");
                    let _ = sender.send(error_line(&error)).await;
                    return;
                }
            }
            quiet += interval;
            since_sent += interval;
            let value = match f() {
                Ok(value) => value,
                Err(error) => {
                    let _ = sender.send(error_line(&error)).await;
                    return;
                }
            };
            let (next, next_key) = (line(&value), key(&value));
            let out = if next_key != last_key || (next != last && since_sent >= AGES_EVERY) {
                (last, last_key) = (next.clone(), next_key);
                since_sent = Duration::ZERO;
                next
            } else if quiet >= KEEP_ALIVE {
                Bytes::from_static(b"\n")
            } else {
                continue;
            };
            quiet = Duration::ZERO;
            if sender.send(out).await.is_err() {
                return;
            }
        }
    });
    let frames = futures_util::stream::unfold(receiver, |mut receiver| async move {
        receiver
            .recv()
            .await
            .map(|bytes| (Ok::<Bytes, Infallible>(bytes), receiver))
    });
    let mut response = Response::new(Body::from_stream(frames));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/x-ndjson"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// A reply that is either the value once (JSON) or its change stream (`stream`), with
/// [`changes_stream`]'s `essence`.
pub fn once_or_stream<F>(
    gate: &Arc<Gate>,
    caller: &Caller,
    stream: bool,
    mut f: F,
    essence: Option<fn(&serde_json::Value) -> serde_json::Value>,
) -> Response
where
    F: FnMut() -> Result<serde_json::Value, ApiError> + Send + 'static,
{
    if stream {
        return changes_stream(gate, caller, DEFAULT_INTERVAL, f, essence);
    }
    match f() {
        Ok(value) => axum::Json(value).into_response(),
        Err(error) => error.into_response(),
    }
}

fn line(value: &serde_json::Value) -> Bytes {
    let mut bytes = serde_json::to_vec(value).expect("a JSON value always serialises");
    bytes.push(b'\n');
    Bytes::from(bytes)
}

/// The error a stream ends with, in the shape of every error reply.
fn error_line(error: &ApiError) -> Bytes {
    let body = ErrorBody {
        error: ErrorDetail {
            code: error.code.as_str().to_owned(),
            message: error.message.clone(),
        },
    };
    line(&serde_json::to_value(body).expect("an error body always serialises"))
}
