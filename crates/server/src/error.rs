//! API errors: every error reply is `{"error": {"code": ..., "message": ...}}` with a fitting
//! status (DESIGN "Interfaces").
//!
//! | code | status | from |
//! |---|---|---|
//! | `stale_incarnation`, `revision_mismatch` | 409 Conflict | registry |
//! | `not_found`, `lease_not_found` | 404 Not Found | registry, reads |
//! | `invalid_name`, `invalid_address`, `invalid_field`, `label_limit`, `record_too_large`, `address_out_of_scope` | 422 Unprocessable Content | registry (the body parsed, its content is refused) |
//! | `quota_exceeded` | 403 Forbidden (retrying will not help) | registry |
//! | `compacted` | 410 Gone | reads at a compacted revision |
//! | `future_revision` | 400 Bad Request | reads past the current revision |
//! | `invalid_name` | 400 Bad Request | a path segment that is not a DNS label |
//! | `bad_request` | 400 Bad Request | malformed JSON, unknown fields, bad query, bad header |
//! | `payload_too_large` | 413 Content Too Large | a body over `max_body_bytes` |
//! | `not_found` | 404 Not Found | no such route |
//! | `method_not_allowed` | 405 Method Not Allowed | the route exists, the method does not |
//! | `unavailable` | 503 Service Unavailable | the node is stopping |
//! | `too_many_connections` | 503 Service Unavailable | a connection over the descriptor budget (answered, then closed) |
//! | `storage_failed` | 503 Service Unavailable | this node's storage failed: it acknowledges nothing more and exits (ask another node) |
//! | `internal` | 500 Internal Server Error | storage failed |

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use muster_consensus::ConsensusError;
use muster_core::Rejection;
use muster_core::api::{ErrorBody, ErrorDetail};
use muster_registry::ReadError;

/// An error reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) code: &'static str,
    pub(crate) message: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    /// 400 `bad_request`: the request itself is malformed.
    pub(crate) fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    /// A path segment refused by name validation: 400 with the rejection's code.
    pub(crate) fn path(rejection: &Rejection) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, rejection.code(), rejection.to_string())
    }

    /// 503 `no_quorum`: no leader or no majority to commit with now (SPEC R2); retry.
    pub(crate) fn no_quorum(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "no_quorum", message)
    }

    /// Another node's error reply, passed on (its code is one of ours, but not static here).
    pub(crate) fn relayed(status: StatusCode, body: ErrorBody) -> ApiError {
        let code = crate::error::known_code(&body.error.code).unwrap_or("unavailable");
        ApiError::new(status, code, body.error.message)
    }

    /// 503 `unavailable`: the server cannot do it now (e.g. it is stopping).
    pub(crate) fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
    }

    /// 404 `not_found` for something that is not there.
    pub(crate) fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// The JSON body.
    pub(crate) fn body(&self) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                code: self.code.to_owned(),
                message: self.message.clone(),
            },
        }
    }
}

/// The status for a registry refusal.
pub(crate) fn rejection_status(rejection: &Rejection) -> StatusCode {
    match rejection.code() {
        "stale_incarnation" | "revision_mismatch" => StatusCode::CONFLICT,
        "not_found" | "lease_not_found" => StatusCode::NOT_FOUND,
        "quota_exceeded" => StatusCode::FORBIDDEN,
        // invalid_name, invalid_address, invalid_field, label_limit, record_too_large,
        // address_out_of_scope, and any content refusal added later.
        _ => StatusCode::UNPROCESSABLE_ENTITY,
    }
}

impl From<Rejection> for ApiError {
    fn from(rejection: Rejection) -> ApiError {
        ApiError::new(rejection_status(&rejection), rejection.code(), rejection.to_string())
    }
}

impl From<ReadError> for ApiError {
    fn from(error: ReadError) -> ApiError {
        let status = match error {
            ReadError::Compacted { .. } => StatusCode::GONE,
            _ => StatusCode::BAD_REQUEST,
        };
        ApiError::new(status, error.code(), error.to_string())
    }
}

impl From<ConsensusError> for ApiError {
    fn from(error: ConsensusError) -> ApiError {
        match error {
            ConsensusError::ShuttingDown => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", error.to_string())
            }
            ConsensusError::NoQuorum | ConsensusError::NoLeader => ApiError::no_quorum(format!(
                "{error}; the write may still commit: retry it (writes are idempotent)"
            )),
            ConsensusError::NotLeader(_) => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "not_leader", error.to_string())
            }
            ConsensusError::Failed(_) => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "storage_failed", error.to_string())
            }
            ConsensusError::Membership(_) => {
                ApiError::new(StatusCode::CONFLICT, "membership_refused", error.to_string())
            }
            _ => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", error.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::to_vec(&self.body()).expect("an error body always serialises");
        let mut response = (self.status, body).into_response();
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        response
    }
}

/// The code for an error status the API did not produce itself (the safety net in
/// [`crate::routes`]).
/// The static form of a code another node may send back for a forwarded request.
pub(crate) fn known_code(code: &str) -> Option<&'static str> {
    [
        "lease_not_found",
        "invalid_name",
        "no_quorum",
        "storage_failed",
        "unavailable",
        "unauthorized",
        "bad_request",
        "not_found",
    ]
    .into_iter()
    .find(|known| *known == code)
}

pub(crate) fn code_for_status(status: StatusCode) -> &'static str {
    match status {
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        StatusCode::SERVICE_UNAVAILABLE => "unavailable",
        s if s.is_server_error() => "internal",
        _ => "bad_request",
    }
}

#[cfg(test)]
mod tests {
    use muster_core::{Incarnation, InstanceId, Revision};

    use super::*;

    #[test]
    fn registry_codes_map_to_statuses() {
        let stale = Rejection::StaleIncarnation {
            instance: InstanceId::new("a").unwrap(),
            presented: Incarnation(1),
            current: Incarnation(2),
        };
        assert_eq!(ApiError::from(stale).status, StatusCode::CONFLICT);
        let invalid = Rejection::InvalidField {
            field: "weight".into(),
            reason: "must be 1 to 65535, got 0".into(),
        };
        assert_eq!(ApiError::from(invalid).status, StatusCode::UNPROCESSABLE_ENTITY);
        let lease = Rejection::LeaseNotFound {
            lease: muster_core::LeaseId(7),
        };
        assert_eq!(ApiError::from(lease).code, "lease_not_found");
        let compacted = ReadError::Compacted {
            compacted: Revision(5),
            current: Revision(9),
        };
        let error = ApiError::from(compacted);
        assert_eq!((error.status, error.code), (StatusCode::GONE, "compacted"));
    }
}
