//! Request extraction that answers in the API's error shape: axum's own rejections are plain
//! text, these turn every failure into an [`ApiError`] with a code, naming what was wrong.

use std::time::Duration;

use axum::extract::{FromRequest, FromRequestParts, Query, Request};
use axum::http::HeaderMap;
use axum::http::request::Parts;
use bytes::Bytes;
use muster_core::{Actor, InstanceId, Label, LeaseId, NamespaceKey, ServiceKey};
use serde::de::DeserializeOwned;

use crate::error::ApiError;
use crate::guard::{BodyReadTimeout, is_json, unsupported_media_type};

/// The header a caller uses to say whose authority it speaks with (SPEC L5): `owner` (the
/// orchestrator: may lift a drain), `app` or `checker`. Without it, drain speaks as the
/// owner and everything else as the app. Until authentication exists (SPEC S1) it is taken
/// on trust.
pub const ACTOR_HEADER: &str = "x-muster-actor";

/// The header carrying the revision a read was made at, for blocking queries
/// (`?index=<this>`), as Consul's `X-Consul-Index`.
pub const INDEX_HEADER: &str = "x-muster-index";

/// A JSON body (SPEC S6): sent as anything but `Content-Type: application/json` (with at
/// most `; charset=utf-8`), or with none, it is 415 `unsupported_media_type`, unread;
/// malformed JSON and unknown fields are 400 `bad_request` naming the field and position; a
/// body over the configured limit is 413 `payload_too_large`; one that has not arrived within
/// the guard's [`BodyReadTimeout`] is 408 `request_timeout`.
///
/// Every body of the API is a JSON object: serde would also read a struct from an array of
/// its fields in order (so `PUT /v1/policy` with `[]` reset the policy to its defaults), and
/// that is refused.
pub struct JsonBody<T>(pub T);

/// The body read deadline of a request that came without the guard's (a router built
/// without it, in tests): the same as the config's default.
const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        if !is_json(request.headers()) {
            return Err(unsupported_media_type(request.headers()));
        }
        let deadline = request
            .extensions()
            .get::<BodyReadTimeout>()
            .map_or(DEFAULT_BODY_READ_TIMEOUT, |timeout| timeout.0);
        let read = tokio::time::timeout(deadline, Bytes::from_request(request, state))
            .await
            .map_err(|_| {
                ApiError::new(
                    muster_core::ErrorCode::RequestTimeout,
                    format!(
                        "body: did not arrive within the server's body_read_timeout_ms ({} ms)",
                        deadline.as_millis()
                    ),
                )
            })?;
        let bytes = read.map_err(|rejection| {
            if rejection.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::with_status(
                    rejection.status(),
                    muster_core::ErrorCode::PayloadTooLarge,
                    "body: larger than the server's max_body_bytes",
                )
            } else {
                ApiError::bad_request(format!("body: {}", rejection.body_text()))
            }
        })?;
        if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err(ApiError::bad_request("body: expected a JSON object"));
        }
        serde_json::from_slice(&bytes)
            .map(JsonBody)
            .map_err(|e| ApiError::bad_request(format!("body: {e}")))
    }
}

/// A query string: unknown or malformed parameters are 400 `bad_request`.
pub struct QueryParams<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for QueryParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(value)| QueryParams(value))
            .map_err(|rejection| ApiError::bad_request(format!("query: {}", rejection.body_text())))
    }
}

/// The path segments of a route, as text; each handler validates them into typed keys.
pub struct Segments(pub Vec<String>);

impl<S: Send + Sync> FromRequestParts<S> for Segments {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Path::<Vec<(String, String)>>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Path(pairs)| Segments(pairs.into_iter().map(|(_, value)| value).collect()))
            .map_err(|rejection| ApiError::bad_request(format!("path: {}", rejection.body_text())))
    }
}

impl Segments {
    fn get(&self, index: usize) -> &str {
        self.0.get(index).map_or("", String::as_str)
    }

    /// Segments 0 and 1 as a namespace key.
    pub fn namespace(&self) -> Result<NamespaceKey, ApiError> {
        NamespaceKey::new(self.get(0), self.get(1)).map_err(|r| ApiError::path(&r))
    }

    /// Segments 0 to 2 as a service key.
    pub fn service(&self) -> Result<ServiceKey, ApiError> {
        ServiceKey::new(self.get(0), self.get(1), self.get(2)).map_err(|r| ApiError::path(&r))
    }

    /// Segments 0 to 3 as a service key and an instance.
    pub fn instance(&self) -> Result<(ServiceKey, InstanceId), ApiError> {
        let key = self.service()?;
        let instance = InstanceId::new(self.get(3)).map_err(|r| ApiError::path(&r))?;
        Ok((key, instance))
    }

    /// Segment 0 as a tenant.
    pub fn tenant(&self) -> Result<Label, ApiError> {
        Label::new("tenant", self.get(0)).map_err(|r| ApiError::path(&r))
    }

    /// Segment 1 as a lease id.
    pub fn lease(&self) -> Result<LeaseId, ApiError> {
        let text = self.get(1);
        text.parse().map(LeaseId).map_err(|_| {
            ApiError::bad_request(format!(
                "lease id: '{}' is not a lease id (a number)",
                text.escape_debug()
            ))
        })
    }
}

/// The authority [`ACTOR_HEADER`] asks for, if it is there. What the caller may speak as
/// is the gate's to judge (`Gate::speaking_as`): the header narrows a role, never widens it.
pub fn actor(headers: &HeaderMap) -> Result<Option<Actor>, ApiError> {
    let Some(value) = headers.get(ACTOR_HEADER) else {
        return Ok(None);
    };
    match value.to_str().unwrap_or("") {
        "owner" => Ok(Some(Actor::Owner)),
        "app" => Ok(Some(Actor::App)),
        "checker" => Ok(Some(Actor::Checker)),
        other => Err(ApiError::bad_request(format!(
            "X-Muster-Actor: expected owner, app or checker, got '{}'",
            other.escape_debug()
        ))),
    }
}
