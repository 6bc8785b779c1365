//! [`ClientError`]: every way a call can fail, with a stable machine-readable
//! [`ClientErrorCode`]: the server's own [`ErrorCode`] for a refusal, one of ours for a failure
//! of the call itself. Transport failures keep what caused them as their
//! [`source`](std::error::Error::source), so a caller can walk down to the `io::Error`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use hyper::StatusCode;
use muster_core::ErrorCode;
use muster_core::api::ErrorBody;

use crate::http::duration::{format_millis, millis};

/// How much of a non-API error reply to quote: enough to recognise a proxy's error page.
const QUOTE_BYTES: usize = 200;

/// The underlying error of a transport failure, shared so that [`ClientError`] stays `Clone`
/// (a registrar's status carries the last one).
pub type ErrorSource = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// Why a call failed. `Clone` and `Eq` so that a registrar's status can carry the last one;
/// two errors are equal when their codes and messages are (a source has no `Eq` of its own).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum ClientError {
    /// The server refused, with one of the API's stable codes.
    Api {
        /// The HTTP status.
        status: u16,
        /// The error.
        body: ErrorBody,
    },
    /// The server URL is not a usable `http://host:port` URL.
    InvalidUrl {
        /// The URL given.
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// The bearer token cannot be sent (a control character or non-visible byte).
    InvalidToken {
        /// What is wrong (never the secret itself).
        reason: String,
    },
    /// The TLS settings are unusable (a CA, certificate or key that does not parse or match,
    /// or TLS asked of a custom transport, which brings its own).
    InvalidTls {
        /// What is wrong, naming the file or input.
        reason: String,
        /// The underlying error, if there is one.
        source: Option<ErrorSource>,
    },
    /// No connection could be made, or it broke before a reply.
    Connect {
        /// The server.
        server: String,
        /// The cause and its sources, joined (hyper's top message alone says little).
        reason: String,
        /// The underlying error.
        source: ErrorSource,
    },
    /// The server did not answer in time.
    Timeout {
        /// The server.
        server: String,
        /// How long we waited.
        after: Duration,
    },
    /// The reply is not the API's (wrong JSON, wrong status, not JSON at all).
    BadReply {
        /// The HTTP status.
        status: u16,
        /// What was wrong, with a quote of the body.
        reason: String,
    },
    /// A watch stream broke, stalled or ended without a final frame.
    StreamLost {
        /// The server.
        server: String,
        /// How.
        reason: String,
        /// The underlying error; `None` when the stream stalled or overflowed.
        source: Option<ErrorSource>,
    },
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Api { body, .. } => write!(f, "{}: {}", body.error.code, body.error.message),
            ClientError::InvalidUrl { url, reason } => write!(f, "invalid server URL '{url}': {reason}"),
            ClientError::InvalidToken { reason } => write!(f, "invalid token: {reason}"),
            ClientError::InvalidTls { reason, .. } => write!(f, "TLS: {reason}"),
            ClientError::Connect { server, reason, .. } => write!(f, "cannot connect to {server}: {reason}"),
            ClientError::Timeout { server, after } => {
                write!(f, "{server} did not answer within {}", format_millis(millis(*after)))
            }
            ClientError::BadReply { status, reason } => {
                write!(f, "unexpected reply from the server (HTTP {status}): {reason}")
            }
            ClientError::StreamLost { server, reason, .. } => {
                write!(f, "the watch stream from {server} was cut off: {reason}")
            }
        }
    }
}

/// Written by hand rather than derived: a derived `source` would hand out the `Arc` itself,
/// and a caller's `downcast_ref::<io::Error>()` would miss the error inside it.
impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        let source = match self {
            ClientError::Connect { source, .. } => Some(source),
            ClientError::InvalidTls { source, .. } | ClientError::StreamLost { source, .. } => source.as_ref(),
            _ => None,
        };
        source.map(|source| &**source as &(dyn std::error::Error + 'static))
    }
}

impl PartialEq for ClientError {
    fn eq(&self, other: &ClientError) -> bool {
        match (self, other) {
            (ClientError::Api { status, body }, ClientError::Api { status: s, body: b }) => status == s && body == b,
            _ => self.code() == other.code() && self.to_string() == other.to_string(),
        }
    }
}

impl Eq for ClientError {}

impl ClientError {
    /// The stable, machine-readable code: the API's for a refusal (`stale_incarnation`,
    /// `lease_not_found`, ...), ours otherwise (`cannot_connect`, `timeout`, ...).
    pub fn code(&self) -> ClientErrorCode<'_> {
        match self {
            // Only the shared vocabulary: a server's code never reads as one of ours.
            ClientError::Api { body, .. } => match body.error.code.parse::<ErrorCode>() {
                Ok(code) => ClientErrorCode::Api(code),
                Err(_) => ClientErrorCode::Unknown(&body.error.code),
            },
            ClientError::InvalidUrl { .. } => ClientErrorCode::InvalidUrl,
            ClientError::InvalidToken { .. } => ClientErrorCode::InvalidToken,
            ClientError::InvalidTls { .. } => ClientErrorCode::InvalidTls,
            ClientError::Connect { .. } => ClientErrorCode::CannotConnect,
            ClientError::Timeout { .. } => ClientErrorCode::Timeout,
            ClientError::BadReply { .. } => ClientErrorCode::BadReply,
            ClientError::StreamLost { .. } => ClientErrorCode::StreamLost,
        }
    }

    /// Whether the same call may succeed if simply tried again later: the server was
    /// unreachable, slow, or answered with a transient code ([`ErrorCode::is_transient`]: no
    /// quorum, not the leader, unavailable, internal). A refusal of the request itself (a
    /// fence, a CAS, an invalid record, a full quota) is not, whatever its status; only a
    /// code this build does not know falls back on the status (5xx: transient).
    pub fn is_transient(&self) -> bool {
        match (self, self.code()) {
            (_, ClientErrorCode::Api(code)) => code.is_transient(),
            (ClientError::Api { status, .. }, _) => *status >= 500,
            (
                ClientError::Connect { .. }
                | ClientError::Timeout { .. }
                | ClientError::BadReply { .. }
                | ClientError::StreamLost { .. },
                _,
            ) => true,
            (ClientError::InvalidUrl { .. } | ClientError::InvalidToken { .. } | ClientError::InvalidTls { .. }, _) => {
                false
            }
        }
    }
}

/// The code of a [`ClientError`]: a failure of the call itself, the server's [`ErrorCode`],
/// or a code this build does not know (from a newer server). It borrows the error it came
/// from, so reading it allocates nothing; [`as_str`](ClientErrorCode::as_str) and `Display`
/// give the wire spelling, and [`parse`](ClientErrorCode::parse) reads it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ClientErrorCode<'a> {
    /// The server refused with a code of the shared vocabulary.
    Api(ErrorCode),
    /// The server refused with a code this build does not know.
    Unknown(&'a str),
    /// `invalid_url`: the server URL is unusable.
    InvalidUrl,
    /// `invalid_token`: the bearer token cannot be sent.
    InvalidToken,
    /// `invalid_tls`: the TLS settings are unusable.
    InvalidTls,
    /// `cannot_connect`: no connection, or it broke before a reply.
    CannotConnect,
    /// `timeout`: no answer in time.
    Timeout,
    /// `bad_reply`: a reply that is not the API's.
    BadReply,
    /// `stream_lost`: a watch broke, stalled or ended early.
    StreamLost,
}

impl<'a> ClientErrorCode<'a> {
    /// Our own codes, for failures of the call itself; none is also a server code.
    const TRANSPORT: [ClientErrorCode<'static>; 7] = [
        ClientErrorCode::InvalidUrl,
        ClientErrorCode::InvalidToken,
        ClientErrorCode::InvalidTls,
        ClientErrorCode::CannotConnect,
        ClientErrorCode::Timeout,
        ClientErrorCode::BadReply,
        ClientErrorCode::StreamLost,
    ];

    /// The code as printed and as sent (`cannot_connect`, `stale_incarnation`, ...).
    pub fn as_str(&self) -> &'a str {
        match *self {
            ClientErrorCode::Api(code) => code.as_str(),
            ClientErrorCode::Unknown(code) => code,
            ClientErrorCode::InvalidUrl => "invalid_url",
            ClientErrorCode::InvalidToken => "invalid_token",
            ClientErrorCode::InvalidTls => "invalid_tls",
            ClientErrorCode::CannotConnect => "cannot_connect",
            ClientErrorCode::Timeout => "timeout",
            ClientErrorCode::BadReply => "bad_reply",
            ClientErrorCode::StreamLost => "stream_lost",
        }
    }

    /// Reads a code back from its spelling: ours, the shared vocabulary's, or unknown.
    pub fn parse(code: &'a str) -> ClientErrorCode<'a> {
        if let Some(ours) = ClientErrorCode::TRANSPORT.iter().find(|ours| ours.as_str() == code) {
            return *ours;
        }
        match code.parse::<ErrorCode>() {
            Ok(code) => ClientErrorCode::Api(code),
            Err(_) => ClientErrorCode::Unknown(code),
        }
    }

    /// The server's code, when it is one of the shared vocabulary.
    pub fn api(&self) -> Option<ErrorCode> {
        match *self {
            ClientErrorCode::Api(code) => Some(code),
            _ => None,
        }
    }
}

impl fmt::Display for ClientErrorCode<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for ClientErrorCode<'_> {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for ClientErrorCode<'_> {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<ErrorCode> for ClientErrorCode<'_> {
    fn eq(&self, other: &ErrorCode) -> bool {
        *self == ClientErrorCode::Api(*other)
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
    use std::error::Error as _;

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

    fn connect(reason: &str) -> ClientError {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, reason.to_owned());
        ClientError::Connect {
            server: "http://s".into(),
            reason: reason.into(),
            source: Arc::new(io),
        }
    }

    #[test]
    fn a_refusal_keeps_the_servers_code_and_a_transport_failure_gets_ours() {
        let stale = api(409, "stale_incarnation");
        assert_eq!(stale.code(), ClientErrorCode::Api(ErrorCode::StaleIncarnation));
        assert_eq!(stale.code(), "stale_incarnation");
        assert_eq!(
            api(409, "from_a_newer_server").code(),
            ClientErrorCode::Unknown("from_a_newer_server")
        );
        let timeout = ClientError::Timeout {
            server: "http://s".into(),
            after: Duration::from_secs(30),
        };
        assert_eq!(timeout.code(), ClientErrorCode::Timeout);
        assert_eq!(timeout.code().to_string(), "timeout");
        assert_eq!(timeout.to_string(), "http://s did not answer within 30s");
    }

    #[test]
    fn every_code_reads_back_as_itself() {
        let server_codes = ErrorCode::ALL.iter().map(|code| ClientErrorCode::Api(*code));
        let unknown = ClientErrorCode::Unknown("from_a_newer_server");
        for code in ClientErrorCode::TRANSPORT
            .into_iter()
            .chain(server_codes)
            .chain([unknown])
        {
            assert_eq!(ClientErrorCode::parse(code.as_str()), code, "{code}");
        }
        // The strings the CLI prints are exactly these; they never change once published.
        let ours: Vec<&str> = ClientErrorCode::TRANSPORT.iter().map(|code| code.as_str()).collect();
        assert_eq!(
            ours,
            [
                "invalid_url",
                "invalid_token",
                "invalid_tls",
                "cannot_connect",
                "timeout",
                "bad_reply",
                "stream_lost"
            ]
        );
    }

    #[test]
    fn a_transport_failure_keeps_its_cause_as_its_source() {
        let err = connect("connection refused");
        let source = err.source().expect("a connect error has a source");
        let io = source
            .downcast_ref::<std::io::Error>()
            .expect("the io::Error underneath");
        assert_eq!(io.kind(), std::io::ErrorKind::ConnectionRefused);
        // Still Clone and comparable, by code and message.
        assert_eq!(err.clone(), connect("connection refused"));
        assert_ne!(err, connect("reset"));
        assert!(api(409, "stale_incarnation").source().is_none());
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
        assert!(connect("refused").is_transient());
        let token = ClientError::InvalidToken { reason: "r".into() };
        assert!(!token.is_transient());
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
