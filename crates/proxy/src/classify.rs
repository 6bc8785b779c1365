//! What an attempt's outcome means (SPEC D3, C5): whether it counts against the endpoint for
//! local ejection, and whether the request may be sent again to another endpoint. Pure.
//!
//! | outcome                       | ejection evidence | retried when                          |
//! |-------------------------------|-------------------|---------------------------------------|
//! | connect failed                | yes               | always (nothing was sent)             |
//! | reset before a response       | yes               | idempotent method, body replayable    |
//! | HTTP 502, 503, 504            | yes               | idempotent method, body replayable    |
//! | other HTTP 5xx                | yes               | never (the backend answered)          |
//! | gRPC `UNAVAILABLE` (14)       | yes               | body replayable (not processed)       |
//! | anything else                 | no (a success)    | never                                 |
//!
//! "Body replayable" means the request body either was never read or was kept whole (see
//! [`crate::replay`]); a request whose body was streamed past what is kept is never sent
//! twice, idempotent or not.

use hyper::Method;
use muster_client::tower::Outcome as Evidence;

/// gRPC's `UNAVAILABLE`: the service was not reached, so the call was not processed.
pub use muster_client::tower::GRPC_UNAVAILABLE;

/// How one attempt ended. Which outcomes count against the endpoint is the client library's
/// rule ([`muster_client::tower::Outcome`]), shared with its tower `Balance`; what the proxy
/// adds is the split of a transport failure into "nothing was sent" and "sent, then broken",
/// which decides whether a retry is safe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// No connection to the endpoint could be made.
    ConnectFailed,
    /// The connection broke (or timed out) before a response arrived.
    Reset,
    /// A response arrived: its status and, for a gRPC trailers-only response, its
    /// `grpc-status`.
    Response {
        /// The HTTP status.
        status: u16,
        /// The `grpc-status` header, when present.
        grpc_status: Option<u32>,
    },
}

impl Outcome {
    /// The outcome of a response, from its head.
    pub fn of_response<B>(response: &hyper::Response<B>) -> Outcome {
        match Evidence::of_response(response) {
            Evidence::Response { status, grpc_status } => Outcome::Response { status, grpc_status },
            Evidence::TransportError => Outcome::Reset,
        }
    }

    /// Whether the endpoint failed (evidence for local ejection, SPEC H6).
    pub fn is_failure(self) -> bool {
        match self {
            Outcome::ConnectFailed | Outcome::Reset => Evidence::TransportError,
            Outcome::Response { status, grpc_status } => Evidence::Response { status, grpc_status },
        }
        .is_failure()
    }

    /// Whether the request may be sent again: safe for this method and body, and worth it
    /// for this outcome.
    pub fn is_retryable(self, method: &Method, replayable: bool) -> bool {
        if !replayable {
            return false;
        }
        match self {
            Outcome::ConnectFailed => true,
            Outcome::Reset => is_idempotent(method),
            Outcome::Response { grpc_status, .. } if grpc_status == Some(GRPC_UNAVAILABLE) => true,
            Outcome::Response { status, .. } => matches!(status, 502..=504) && is_idempotent(method),
        }
    }
}

/// RFC 9110 section 9.2.2: methods whose repetition has the effect of one request.
pub fn is_idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(status: u16) -> Outcome {
        Outcome::Response {
            status,
            grpc_status: None,
        }
    }

    #[test]
    fn a_connect_failure_is_retried_whatever_the_method() {
        assert!(Outcome::ConnectFailed.is_retryable(&Method::POST, true));
        assert!(Outcome::ConnectFailed.is_failure());
    }

    #[test]
    fn a_reset_or_gateway_error_is_retried_only_for_idempotent_methods() {
        for outcome in [Outcome::Reset, response(502), response(503), response(504)] {
            assert!(outcome.is_retryable(&Method::GET, true), "{outcome:?}");
            assert!(outcome.is_retryable(&Method::PUT, true), "{outcome:?}");
            assert!(!outcome.is_retryable(&Method::POST, true), "{outcome:?}");
            assert!(!outcome.is_retryable(&Method::PATCH, true), "{outcome:?}");
        }
    }

    #[test]
    fn a_body_that_cannot_be_replayed_is_never_sent_twice() {
        for outcome in [Outcome::ConnectFailed, Outcome::Reset, response(503)] {
            assert!(!outcome.is_retryable(&Method::GET, false), "{outcome:?}");
        }
    }

    #[test]
    fn an_answer_from_the_backend_is_not_retried() {
        assert!(!response(500).is_retryable(&Method::GET, true));
        assert!(response(500).is_failure());
        assert!(!response(404).is_retryable(&Method::GET, true));
        assert!(!response(404).is_failure());
        assert!(!response(200).is_failure());
    }

    #[test]
    fn grpc_unavailable_is_a_retryable_failure_and_other_grpc_errors_are_answers() {
        let unavailable = Outcome::Response {
            status: 200,
            grpc_status: Some(GRPC_UNAVAILABLE),
        };
        assert!(unavailable.is_failure());
        assert!(unavailable.is_retryable(&Method::POST, true));
        let not_found = Outcome::Response {
            status: 200,
            grpc_status: Some(5),
        };
        assert!(!not_found.is_failure());
        assert!(!not_found.is_retryable(&Method::POST, true));
    }
}
