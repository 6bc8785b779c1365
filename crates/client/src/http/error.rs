//! [`ClientError`]: every way a call can fail, with a stable machine-readable code: the
//! server's own code for a refusal, one of ours for a transport failure.

use std::time::Duration;

use hyper::StatusCode;
use muster_core::ErrorCode;
use muster_core::api::ErrorBody;

use crate::http::duration::{format_millis, millis};

/// How much of a non-API error reply to quote: enough to recognise a proxy's error page.
const QUOTE_BYTES: usize = 200;

/// Why a call failed. `Clone` and `Eq` so that a registrar's status can carry the last one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The server refused, with one of the API's stable codes.
    #[error("{}: {}", .body.error.code, .body.error.message)]
    Api {
        /// The HTTP status.
        status: u16,
        /// The error.
        body: ErrorBody,
    },
    /// The server URL is not a usable `http://host:port` URL.
    #[error("invalid server URL '{url}': {reason}")]
    InvalidUrl {
        /// The URL given.
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// The TLS settings are unusable (a CA, certificate or key that does not parse or match).
    #[error("TLS: {reason}")]
    InvalidTls {
        /// What is wrong, naming the file or input.
        reason: String,
    },
    /// No connection could be made, or it broke before a reply.
    #[error("cannot connect to {server}: {reason}")]
    Connect {
        /// The server.
        server: String,
        /// The cause, innermost last.
        reason: String,
    },
    /// The server did not answer in time.
    #[error("{server} did not answer within {}", format_millis(millis(*.after)))]
    Timeout {
        /// The server.
        server: String,
        /// How long we waited.
        after: Duration,
    },
    /// The reply is not the API's (wrong JSON, wrong status, not JSON at all).
    #[error("unexpected reply from the server (HTTP {status}): {reason}")]
    BadReply {
        /// The HTTP status.
        status: u16,
        /// What was wrong, with a quote of the body.
        reason: String,
    },
    /// A watch stream broke, stalled or ended without a final frame.
    #[error("the watch stream from {server} was cut off: {reason}")]
    StreamLost {
        /// The server.
        server: String,
        /// How.
        reason: String,
    },
}

impl ClientError {
    /// The stable, machine-readable code: the API's for a refusal (`stale_incarnation`,
    /// `lease_not_found`, ...), ours otherwise (`cannot_connect`, `timeout`, ...).
    pub fn code(&self) -> &str {
        match self {
            ClientError::Api { body, .. } => &body.error.code,
            ClientError::InvalidUrl { .. } => "invalid_url",
            ClientError::InvalidTls { .. } => "invalid_tls",
            ClientError::Connect { .. } => "cannot_connect",
            ClientError::Timeout { .. } => "timeout",
            ClientError::BadReply { .. } => "bad_reply",
            ClientError::StreamLost { .. } => "stream_lost",
        }
    }

    /// The API's code for a refusal, in the shared vocabulary; `None` for failures of the
    /// call itself and for a code this build does not know.
    pub fn error_code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Api { body, .. } => body.error.code.parse().ok(),
            _ => None,
        }
    }

    /// Whether the same call may succeed if simply tried again later: the server was
    /// unreachable, slow, or answered with a transient code ([`ErrorCode::is_transient`]: no
    /// quorum, not the leader, unavailable, internal). A refusal of the request itself (a
    /// fence, a CAS, an invalid record, a full quota) is not, whatever its status; only a
    /// code this build does not know falls back on the status (5xx: transient).
    pub fn is_transient(&self) -> bool {
        match self {
            ClientError::Api { status, body } => match body.error.code.parse::<ErrorCode>() {
                Ok(code) => code.is_transient(),
                Err(_) => *status >= 500,
            },
            ClientError::Connect { .. }
            | ClientError::Timeout { .. }
            | ClientError::BadReply { .. }
            | ClientError::StreamLost { .. } => true,
            ClientError::InvalidUrl { .. } | ClientError::InvalidTls { .. } => false,
        }
    }
}

/// The error of a non-success reply: the API's error body, or a [`ClientError::BadReply`].
pub(crate) fn error_reply(status: StatusCode, bytes: &[u8]) -> ClientError {
    match serde_json::from_slice::<ErrorBody>(bytes) {
        Ok(body) => ClientError::Api {
            status: status.as_u16(),
            body,
        },
        Err(_) => bad_reply(status, &format!("not an API error: {}", quote(bytes))),
    }
}

pub(crate) fn bad_reply(status: StatusCode, reason: &str) -> ClientError {
    ClientError::BadReply {
        status: status.as_u16(),
        reason: reason.to_owned(),
    }
}

/// The start of a body, for error messages.
pub(crate) fn quote(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(QUOTE_BYTES)]);
    let ellipsis = if bytes.len() > QUOTE_BYTES { "..." } else { "" };
    format!("'{}{ellipsis}'", text.trim().escape_debug())
}

/// An error and its sources, joined: hyper's top-level messages alone ("client error
/// (Connect)") do not say what happened.
pub(crate) fn causes(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use muster_core::api::ErrorDetail;

    use super::*;

    fn api(status: u16, code: &str) -> ClientError {
        ClientError::Api {
            status,
            body: ErrorBody {
                error: ErrorDetail {
                    code: code.into(),
                    message: "m".into(),
                },
            },
        }
    }

    #[test]
    fn a_refusal_keeps_the_servers_code_and_a_transport_failure_gets_ours() {
        assert_eq!(api(409, "stale_incarnation").code(), "stale_incarnation");
        let timeout = ClientError::Timeout {
            server: "http://s".into(),
            after: Duration::from_secs(30),
        };
        assert_eq!(timeout.code(), "timeout");
        assert_eq!(timeout.to_string(), "http://s did not answer within 30s");
    }

    #[test]
    fn only_failures_of_the_server_or_the_network_are_transient() {
        assert!(api(503, "unavailable").is_transient());
        assert!(api(500, "internal").is_transient());
        assert!(!api(409, "stale_incarnation").is_transient());
        assert!(!api(404, "lease_not_found").is_transient());
        assert!(!api(422, "invalid_field").is_transient());
        // A refusal relayed with a 5xx status is still a refusal: its code decides.
        assert!(!api(503, "quota_exceeded").is_transient());
        assert!(api(503, "no_quorum").is_transient());
        assert!(api(502, "from_a_newer_server").is_transient());
        assert!(!api(409, "from_a_newer_server").is_transient());
        let connect = ClientError::Connect {
            server: "s".into(),
            reason: "refused".into(),
        };
        assert!(connect.is_transient());
    }

    #[test]
    fn a_non_api_error_page_is_quoted_not_trusted() {
        let err = error_reply(StatusCode::BAD_GATEWAY, b"<html>bad gateway</html>");
        assert_eq!(err.code(), "bad_reply");
        assert!(err.to_string().contains("'<html>bad gateway</html>'"), "{err}");
        let long = vec![b'x'; QUOTE_BYTES + 10];
        assert!(quote(&long).ends_with("...'"));
    }
}
