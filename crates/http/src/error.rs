//! API errors: every error reply is `{"error": {"code": ..., "message": ...}}` with a fitting
//! status (DESIGN "Interfaces"). The codes, their usual statuses and whether a retry may
//! help are [`muster_core::ErrorCode`]'s, the one vocabulary the registry, this server, the
//! node-to-node relay and the client share; a route overrides the status only where it says
//! why (an invalid name in a path is a 400, in a body a 422).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use muster_consensus::{ConsensusError, ReadIndexError};
use muster_core::api::{ErrorBody, ErrorDetail};
use muster_core::{ErrorCode, Rejection};
use muster_registry::ReadError;

/// An error reply: a code of the shared vocabulary ([`ErrorCode`]), the status (the code's
/// usual one unless a route says otherwise) and a message for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The reply's status.
    pub status: StatusCode,
    /// The stable code callers branch on.
    pub code: ErrorCode,
    /// What went wrong, for people.
    pub message: String,
}

/// The status a code usually has.
fn usual_status(code: ErrorCode) -> StatusCode {
    StatusCode::from_u16(code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

impl ApiError {
    /// An error with its code's usual status.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ApiError {
        ApiError::with_status(usual_status(code), code, message)
    }

    /// An error with a status other than its code's usual one.
    pub fn with_status(status: StatusCode, code: ErrorCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    /// 400 `bad_request`: the request itself is malformed.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorCode::BadRequest, message)
    }

    /// A path segment refused by name validation: 400 with the rejection's code.
    pub fn path(rejection: &Rejection) -> ApiError {
        ApiError::with_status(StatusCode::BAD_REQUEST, rejection.error_code(), rejection.to_string())
    }

    /// 503 `no_quorum`: no leader or no majority to commit with now (SPEC R2); retry.
    pub fn no_quorum(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorCode::NoQuorum, message)
    }

    /// Another node's error reply, passed on with its code and status whatever the code
    /// (one vocabulary: no list of codes allowed through). A code this build does not know
    /// (a newer peer's) is named by its status class, never turned into a transient one
    /// unless the status says so.
    pub fn relayed(status: StatusCode, body: ErrorBody) -> ApiError {
        let code = body
            .error
            .code
            .parse::<ErrorCode>()
            .unwrap_or_else(|_| code_for_status(status));
        ApiError::with_status(status, code, body.error.message)
    }

    /// 503 `unavailable`: the server cannot do it now (e.g. it is stopping).
    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorCode::Unavailable, message)
    }

    /// 404 `not_found` for something that is not there.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorCode::NotFound, message)
    }

    /// The JSON body.
    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                code: self.code.as_str().to_owned(),
                message: self.message.clone(),
            },
        }
    }
}

impl From<Rejection> for ApiError {
    fn from(rejection: Rejection) -> ApiError {
        ApiError::new(rejection.error_code(), rejection.to_string())
    }
}

impl From<ReadError> for ApiError {
    fn from(error: ReadError) -> ApiError {
        ApiError::new(error.error_code(), error.to_string())
    }
}

impl From<ConsensusError> for ApiError {
    fn from(error: ConsensusError) -> ApiError {
        let code = match error {
            ConsensusError::ShuttingDown => ErrorCode::Unavailable,
            ConsensusError::NoQuorum | ConsensusError::NoLeader => {
                return ApiError::no_quorum(format!(
                    "{error}; the write may still commit: retry it (registrations, state changes and \
                     deregistrations are idempotent; a bare lease grant is not)"
                ));
            }
            ConsensusError::NotLeader(_) => ErrorCode::NotLeader,
            ConsensusError::Membership(_) => ErrorCode::MembershipRefused,
            ConsensusError::Failed(_) => ErrorCode::StorageFailed,
            ConsensusError::TooLarge { .. } => ErrorCode::PayloadTooLarge,
            _ => ErrorCode::Internal,
        };
        ApiError::new(code, error.to_string())
    }
}

impl From<ReadIndexError> for ApiError {
    fn from(error: ReadIndexError) -> ApiError {
        let code = match error {
            ReadIndexError::Node(ConsensusError::Failed(reason)) => {
                return ApiError::new(
                    ErrorCode::StorageFailed,
                    format!("this node stopped after a storage failure ({reason}); ask another node"),
                );
            }
            ReadIndexError::Node(error) => return error.into(),
            ReadIndexError::LeaderUnreachable { .. } => ErrorCode::LeaderUnreachable,
            ReadIndexError::NoLeader | ReadIndexError::NoQuorum { .. } => ErrorCode::NoQuorum,
            ReadIndexError::Behind { .. } => ErrorCode::NotCaughtUp,
            _ => ErrorCode::Internal,
        };
        ApiError::new(
            code,
            format!(
                "{error}; retry (here or on another node), or read with consistency=stale to take this node's state as it is"
            ),
        )
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
/// the server's route table, and a relayed code this build does not know).
pub fn code_for_status(status: StatusCode) -> ErrorCode {
    match status {
        StatusCode::NOT_FOUND => ErrorCode::NotFound,
        StatusCode::METHOD_NOT_ALLOWED => ErrorCode::MethodNotAllowed,
        StatusCode::PAYLOAD_TOO_LARGE => ErrorCode::PayloadTooLarge,
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ErrorCode::UnsupportedMediaType,
        StatusCode::SERVICE_UNAVAILABLE => ErrorCode::Unavailable,
        s if s.is_server_error() => ErrorCode::Internal,
        _ => ErrorCode::BadRequest,
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
        assert_eq!(ApiError::from(lease).code, ErrorCode::LeaseNotFound);
        let compacted = ReadError::Compacted {
            compacted: Revision(5),
            current: Revision(9),
        };
        let error = ApiError::from(compacted);
        assert_eq!((error.status, error.code), (StatusCode::GONE, ErrorCode::Compacted));
    }

    #[test]
    fn a_consistent_read_that_cannot_be_confirmed_says_why_as_a_read() {
        // Trace: a follower's consistent read found no leader and was answered with the
        // write path's `no_quorum` text ("the write may still commit: retry it").
        let cases = [
            (ReadIndexError::NoLeader, ErrorCode::NoQuorum),
            (ReadIndexError::NoQuorum { leader: 2 }, ErrorCode::NoQuorum),
            (
                ReadIndexError::Behind {
                    index: 9,
                    timeout: std::time::Duration::from_secs(5),
                },
                ErrorCode::NotCaughtUp,
            ),
            (
                ReadIndexError::LeaderUnreachable {
                    leader: 2,
                    reason: "connection refused".into(),
                },
                ErrorCode::LeaderUnreachable,
            ),
            (
                ReadIndexError::Node(ConsensusError::ShuttingDown),
                ErrorCode::Unavailable,
            ),
            (
                ReadIndexError::Node(ConsensusError::Failed("disk full".into())),
                ErrorCode::StorageFailed,
            ),
        ];
        for (error, code) in cases {
            let reply = ApiError::from(error);
            assert_eq!((reply.code, reply.status), (code, StatusCode::SERVICE_UNAVAILABLE));
            assert!(code.is_transient(), "{code}");
            assert!(!reply.message.contains("write"), "{}", reply.message);
        }
    }

    #[test]
    fn a_write_too_large_for_one_log_entry_is_payload_too_large_not_internal() {
        let reply = ApiError::from(ConsensusError::TooLarge {
            bytes: 3_000_000,
            limit: 2_097_152,
        });
        assert_eq!(
            (reply.code, reply.status),
            (ErrorCode::PayloadTooLarge, StatusCode::PAYLOAD_TOO_LARGE)
        );
        assert!(reply.message.contains("3000000"), "{}", reply.message);
    }

    #[test]
    fn a_relayed_refusal_keeps_its_code_whatever_the_code() {
        // Trace: a follower forwards a renewal; the leader refuses it with a code that was
        // not on the relay's list (quota_exceeded, invalid_field, ...); the follower used to
        // answer `unavailable`, which clients retry forever.
        for code in ErrorCode::ALL {
            let body = ErrorBody {
                error: ErrorDetail {
                    code: code.as_str().into(),
                    message: "m".into(),
                },
            };
            let status = StatusCode::from_u16(code.http_status()).unwrap();
            let relayed = ApiError::relayed(status, body);
            assert_eq!((relayed.code, relayed.status), (*code, status));
        }
        let unknown = ErrorBody {
            error: ErrorDetail {
                code: "from_a_newer_node".into(),
                message: "m".into(),
            },
        };
        let relayed = ApiError::relayed(StatusCode::UNPROCESSABLE_ENTITY, unknown);
        assert_eq!(relayed.code, ErrorCode::BadRequest);
        assert!(!relayed.code.is_transient());
    }
}
