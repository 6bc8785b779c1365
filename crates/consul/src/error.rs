//! Errors as Consul answers them: a status and a line of plain text (`Permission denied`,
//! `ACL not found`, `Invalid wait time`). Consul clients read the status and quote the text:
//! the Go `api` package returns `StatusError{Code, Body}`, py-consul raises
//! `ACLPermissionDenied` on any 403, `NotFound` on 404 and `BadRequest` on 400. None of them
//! parse a JSON error body, so the native API's `{"error":{...}}` shape would only be quoted.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use muster_http::error::ApiError;

/// The body of a 403 for a known caller without the right, word for word Consul's
/// (`acl.ErrPermissionDenied`).
pub(crate) const PERMISSION_DENIED: &str = "Permission denied";
/// The body of a 403 for a token this server does not know (`acl.ErrNotFound`).
pub(crate) const ACL_NOT_FOUND: &str = "ACL not found";

/// An error reply of the Consul-compatible API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConsulError {
    pub(crate) status: StatusCode,
    pub(crate) message: String,
}

impl ConsulError {
    /// An error with `status` and `message`.
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> ConsulError {
        ConsulError {
            status,
            message: message.into(),
        }
    }

    /// 400: the request is malformed.
    pub(crate) fn bad_request(message: impl Into<String>) -> ConsulError {
        ConsulError::new(StatusCode::BAD_REQUEST, message)
    }

    /// 403 `Permission denied`.
    pub(crate) fn permission_denied() -> ConsulError {
        ConsulError::new(StatusCode::FORBIDDEN, PERMISSION_DENIED)
    }

    /// 403 `ACL not found`.
    pub(crate) fn acl_not_found() -> ConsulError {
        ConsulError::new(StatusCode::FORBIDDEN, ACL_NOT_FOUND)
    }

    /// 404 with `message`.
    pub(crate) fn not_found(message: impl Into<String>) -> ConsulError {
        ConsulError::new(StatusCode::NOT_FOUND, message)
    }
}

/// A native error (a stale read refused, a node failure) keeps its status; its code leads
/// the text, so a log line still names it.
impl From<ApiError> for ConsulError {
    fn from(error: ApiError) -> ConsulError {
        ConsulError::new(error.status, format!("{}: {}", error.code.as_str(), error.message))
    }
}

impl IntoResponse for ConsulError {
    fn into_response(self) -> Response {
        let mut response = (self.status, self.message).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        response
    }
}
