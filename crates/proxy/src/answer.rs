//! The proxy's own answers (SPEC D3): a refusal or a failure the proxy reports itself, as
//! the API's `{"error": {"code", "message"}}` for HTTP callers and as a trailers-only
//! `grpc-status` for gRPC callers (who read that, not the HTTP status).

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Response, StatusCode};

use crate::classify::GRPC_UNAVAILABLE;
use crate::http::ProxyBody;
use crate::target::Refusal;

/// gRPC's `INTERNAL`: what the proxy answers a request it could not forward at all.
pub const GRPC_INTERNAL: u32 = 13;

/// Nothing to forward to: no view, or no eligible endpoint.
pub fn refused(refusal: &Refusal, grpc: bool) -> Response<ProxyBody> {
    let message = match refusal {
        Refusal::NoView => {
            "no view of the service yet: the registry is unreachable and there is no last-known-good set"
        }
        Refusal::NoEndpoint => "the service has no eligible endpoint",
    };
    error_response(
        StatusCode::SERVICE_UNAVAILABLE,
        refusal.code(),
        message,
        grpc.then_some(GRPC_UNAVAILABLE),
    )
}

/// An answer of the proxy's own: the API's `{"error": {"code", "message"}}` for HTTP, a
/// trailers-only response with `grpc_status` for gRPC (whose clients read `grpc-status`,
/// not the HTTP status; the message percent-encoded as gRPC requires).
pub fn error_response(status: StatusCode, code: &str, message: &str, grpc_status: Option<u32>) -> Response<ProxyBody> {
    let mut response = if let Some(grpc_status) = grpc_status {
        let mut response = Response::new(Full::new(Bytes::new()));
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
        headers.insert("grpc-status", HeaderValue::from(grpc_status));
        if let Ok(value) = HeaderValue::from_str(&grpc_message(&format!("{code}: {message}"))) {
            headers.insert("grpc-message", value);
        }
        response
    } else {
        let body = serde_json::json!({ "error": { "code": code, "message": message } }).to_string();
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = status;
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        response
    };
    if let Ok(value) = HeaderValue::from_str(code) {
        response.headers_mut().insert("x-muster-proxy-error", value);
    }
    response.map(|body| body.map_err(|never| match never {}).boxed())
}

/// gRPC's `grpc-message` encoding: printable ASCII but `%` as is, everything else `%XX`.
pub fn grpc_message(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if (0x20..=0x7e).contains(&byte) && byte != b'%' {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::Outcome;

    #[test]
    fn a_grpc_caller_gets_unavailable_in_grpc_status() {
        let response = refused(&Refusal::NoEndpoint, true);
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(
            Outcome::of_response(&response),
            Outcome::Response {
                status: 200,
                grpc_status: Some(GRPC_UNAVAILABLE)
            }
        );
        let plain = refused(&Refusal::NoView, false);
        assert_eq!(plain.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            plain.headers().get("x-muster-proxy-error").map(|v| v.as_bytes()),
            Some(&b"no_view"[..])
        );
    }
}
