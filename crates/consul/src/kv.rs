//! `/v1/kv/<key>` (SPEC E1): an empty key/value store. Muster keeps services, not keys; but
//! Fabio, consul-template and Traefik read their own settings from Consul's KV, and a client
//! that gets an error it does not expect retries at once, in a loop. So every key is absent —
//! `404` with an empty body, as Consul answers a missing key — and a blocking read of one
//! blocks: it waits out its `wait` (nothing ever changes it) and answers 404 again with the
//! same `X-Consul-Index` (1). Writes are refused with 405: there is nothing to store into.

use std::sync::Arc;

use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::ConsulView;
use super::blocking::{self, Blocking, Indexed};
use super::error::ConsulError;
use super::token::ConsulCaller;
use super::waiters::WaitScope;
use crate::app::ConsulApp;
use crate::params::Params;

/// `GET /v1/kv/<key>`: absent, after blocking if asked.
pub(super) async fn get(
    State(app): State<Arc<ConsulApp>>,
    Extension(view): Extension<Arc<ConsulView>>,
    caller: ConsulCaller,
    params: Params,
) -> Result<Response, ConsulError> {
    let blocking = Blocking::parse(&params)?;
    let found = blocking::read(&app, &view, &caller, &blocking, WaitScope::Nothing, |_| Indexed {
        index: 0,
        result: (),
    })
    .await?;
    let mut response = StatusCode::NOT_FOUND.into_response();
    blocking::annotate(&app, &blocking, found.index, &mut response);
    Ok(response)
}

/// `PUT` / `DELETE /v1/kv/<key>`: there is no store to write.
pub(super) async fn write(_caller: ConsulCaller) -> ConsulError {
    ConsulError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "Muster's Consul API has no key/value store: every key reads as absent and cannot be written",
    )
}
