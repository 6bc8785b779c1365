//! What a call's outcome says about the endpoint (SPEC C5): evidence for local ejection or a
//! success. Pure.
//!
//! | outcome                                   | counts against the endpoint |
//! |-------------------------------------------|-----------------------------|
//! | transport error (connect, reset, timeout) | yes                         |
//! | HTTP 5xx                                  | yes                         |
//! | `grpc-status: 14` (UNAVAILABLE) header    | yes                         |
//! | anything else (2xx-4xx, other gRPC codes) | no: a success               |
//!
//! A 4xx is the caller's fault and other gRPC codes are the application's answer: the
//! endpoint worked. gRPC puts the status in the response headers only for a trailers-only
//! response (an error before any message, which is how UNAVAILABLE is sent by servers and
//! proxies that shed load); a status in the trailers is not seen here.

use hyper::http::{HeaderMap, Response};

/// gRPC's `UNAVAILABLE`: the service was not reached, so the endpoint failed the call.
pub const GRPC_UNAVAILABLE: u32 = 14;

/// How one call ended, as far as the endpoint's health goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The inner service failed (no connection, a reset, a timeout): no response.
    TransportError,
    /// A response arrived.
    Response {
        /// The HTTP status.
        status: u16,
        /// The `grpc-status` header, when present.
        grpc_status: Option<u32>,
    },
}

impl Outcome {
    /// The outcome of a response, from its head.
    pub fn of_response<B>(response: &Response<B>) -> Outcome {
        Outcome::Response {
            status: response.status().as_u16(),
            grpc_status: grpc_status(response.headers()),
        }
    }

    /// Whether the endpoint failed the call (evidence for local ejection, SPEC H6).
    pub fn is_failure(self) -> bool {
        match self {
            Outcome::TransportError => true,
            Outcome::Response { status, grpc_status } => status >= 500 || grpc_status == Some(GRPC_UNAVAILABLE),
        }
    }
}

fn grpc_status(headers: &HeaderMap) -> Option<u32> {
    headers.get("grpc-status")?.to_str().ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(status: u16, grpc: Option<&str>) -> Outcome {
        let mut builder = Response::builder().status(status);
        if let Some(grpc) = grpc {
            builder = builder.header("grpc-status", grpc);
        }
        Outcome::of_response(&builder.body(()).unwrap())
    }

    #[test]
    fn server_errors_and_transport_errors_count_against_the_endpoint() {
        assert!(Outcome::TransportError.is_failure());
        for status in [500, 502, 503, 504, 599] {
            assert!(response(status, None).is_failure(), "{status}");
        }
    }

    #[test]
    fn client_errors_and_successes_are_the_endpoint_working() {
        for status in [200, 204, 301, 400, 404, 429] {
            assert!(!response(status, None).is_failure(), "{status}");
        }
    }

    #[test]
    fn grpc_unavailable_in_the_headers_is_a_failure_and_other_grpc_codes_are_answers() {
        assert_eq!(
            response(200, Some("14")),
            Outcome::Response {
                status: 200,
                grpc_status: Some(14)
            }
        );
        assert!(response(200, Some("14")).is_failure());
        assert!(!response(200, Some("5")).is_failure(), "NOT_FOUND is an answer");
        assert!(!response(200, Some("0")).is_failure());
        assert!(
            !response(200, Some("junk")).is_failure(),
            "an unreadable status is not evidence"
        );
    }
}
