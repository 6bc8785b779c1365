//! The browser guard (SPEC S6): no web page can read or change the registry through a
//! browser that happens to run next to it.
//!
//! ```text
//!  request ──▶ Origin present and not allowed? ──yes──▶ 403 forbidden_origin
//!                 │ no
//!                 ▼
//!             require_loopback_host and Host not loopback? ──yes──▶ 403 forbidden_host
//!                 │ no
//!                 ▼
//!             a body announced that is not JSON? ──yes──▶ 415 unsupported_media_type
//!                 │ no
//!                 ▼
//!             body read deadline attached (`BodyReadTimeout`) ──▶ the next layer
//! ```
//!
//! Each refusal happens before any handler runs, so it changes nothing, and is recorded as a
//! denial in the audit trail (SPEC S4) with its code and the caller's address: a page probing
//! the API from a browser is on record.
//!
//! # Why these three
//! - **JSON only.** A page can make a browser send a cross-origin `POST` without asking the
//!   server first only with a "simple" content type (`text/plain`, form encodings). Any other
//!   content type, `application/json` included, needs a CORS preflight, which this server
//!   never grants (it answers no `OPTIONS`). So accepting JSON alone leaves a page no way to
//!   deliver a body. [`JsonBody`](crate::extract::JsonBody) checks the body routes; this layer
//!   also refuses a non-JSON body announced on any other route.
//! - **Origin.** Browsers name the page's origin on every cross-origin request and every
//!   non-`GET` one. Native clients (the CLI, the client library, curl) send none. A request
//!   with an `Origin` is therefore a page's, and only the configured `allowed_origins` may
//!   speak. *Same-origin is not allowed implicitly*: under DNS rebinding the attacker's name
//!   resolves to this server, so the page's origin (`http://evil.example:7070`) and the
//!   request's `Host` (`evil.example:7070`) agree — "Origin matches Host" proves nothing. Nor
//!   does this server's own page need it: the dashboard (`ui`, SPEC U2) sends only
//!   same-origin `GET`s without bodies, which browsers send without `Origin`.
//! - **Host.** DNS rebinding defeats the same-origin policy itself: the page's own origin
//!   now points at this server, and the browser sends no `Origin` on a same-origin `GET`.
//!   What it cannot change is the `Host` header, which names the attacker's domain. Without
//!   authentication (when the API binds loopback only, SPEC S1) a genuine caller names a
//!   loopback address or `localhost`, so anything else is refused. With authentication on,
//!   a page has no token, so the check is not needed (and a real deployment is reached by
//!   other names).
//!
//! # Body read deadline
//! A client that announces a body and sends it slowly holds a connection and a task; the
//! deadline ([`BodyReadTimeout`]) bounds that. It travels as a request extension, so the
//! body extractor reads it without reaching into shared state.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use muster_core::ErrorCode;

use crate::error::ApiError;

/// What the guard enforces; built from the server config.
#[derive(Debug, Clone)]
pub struct RequestGuard {
    /// Origins allowed to call (`scheme://host[:port]`, lower case): empty refuses every
    /// browser.
    allowed_origins: Vec<String>,
    /// Whether `Host` must name a loopback address: true while authentication is off.
    require_loopback_host: bool,
    /// How long a request body may take to arrive.
    body_read_timeout: Duration,
    /// Where refusals are recorded: `None` only for a guard built without the server (tests).
    audit: Option<Arc<dyn Refusals>>,
}

/// Where the guard records what it refused (SPEC S4): the server's audit trail, as a denial
/// with no principal (nobody was authenticated yet) whose resource is the method and path.
pub trait Refusals: Send + Sync {
    /// `refused` is the guard's answer to `request`.
    fn refused(&self, refused: &ApiError, request: &Request);
}

impl fmt::Debug for dyn Refusals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Refusals")
    }
}

/// How long a request body may take to arrive, attached to every request by the guard.
#[derive(Debug, Clone, Copy)]
pub struct BodyReadTimeout(pub Duration);

impl RequestGuard {
    /// A guard; `allowed_origins` must have passed [`check_origin`].
    pub fn new(allowed_origins: &[String], require_loopback_host: bool, body_read_timeout: Duration) -> Self {
        RequestGuard {
            allowed_origins: allowed_origins.iter().map(|o| o.to_ascii_lowercase()).collect(),
            require_loopback_host,
            body_read_timeout,
            audit: None,
        }
    }

    /// The same guard, recording each refusal in `log` (SPEC S4).
    pub fn audited(self, log: Arc<dyn Refusals>) -> Self {
        RequestGuard {
            audit: Some(log),
            ..self
        }
    }

    /// Records `refused`, the guard's answer to `request`.
    pub fn record(&self, refused: &ApiError, request: &Request) {
        if let Some(audit) = &self.audit {
            audit.refused(refused, request);
        }
    }

    /// The guard's verdict on a request's headers: `Err` is the refusal to send.
    pub fn admit(&self, headers: &HeaderMap, authority: Option<&str>) -> Result<(), ApiError> {
        self.admit_caller(headers, authority)?;
        if announces_body(headers) && !is_json(headers) {
            return Err(unsupported_media_type(headers));
        }
        Ok(())
    }

    /// The Origin and Host checks alone, for a listener whose clients send bodies without a
    /// JSON content type (the Consul-compatible API, `muster-consul`). A page cannot use
    /// that to deliver a body: a cross-origin `PUT` or `POST` always carries `Origin`.
    pub fn admit_caller(&self, headers: &HeaderMap, authority: Option<&str>) -> Result<(), ApiError> {
        if let Some(origin) = headers.get(header::ORIGIN) {
            let text = origin.to_str().unwrap_or("").to_ascii_lowercase();
            if !self.allowed_origins.contains(&text) {
                return Err(ApiError::new(
                    ErrorCode::ForbiddenOrigin,
                    format!(
                        "Origin '{}' is not in the server's allowed_origins: browsers may not call this API",
                        text.escape_debug()
                    ),
                ));
            }
        }
        if self.require_loopback_host {
            // HTTP/1.1 puts the authority in Host; an absolute-form request line carries it
            // too, and then it is the one that counts (RFC 9112 3.2.2).
            let host = authority.or_else(|| headers.get(header::HOST).and_then(|v| v.to_str().ok()));
            if !host.is_some_and(is_loopback_host) {
                return Err(ApiError::new(
                    ErrorCode::ForbiddenHost,
                    format!(
                        "Host '{}' is not a loopback address: without authentication the API answers only \
                         requests naming 127.0.0.1, [::1] or localhost (this blocks DNS rebinding)",
                        host.unwrap_or("").escape_debug()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// How long a request body may take to arrive.
    pub fn body_read_timeout(&self) -> Duration {
        self.body_read_timeout
    }
}

/// The guard as a middleware layer (`routes`).
pub async fn guard(State(guard): State<Arc<RequestGuard>>, mut request: Request, next: Next) -> Response {
    let authority = request.uri().authority().map(|a| a.as_str().to_owned());
    if let Err(refused) = guard.admit(request.headers(), authority.as_deref()) {
        guard.record(&refused, &request);
        return refused.into_response();
    }
    request
        .extensions_mut()
        .insert(BodyReadTimeout(guard.body_read_timeout));
    next.run(request).await
}

/// Checks a configured origin: `http://` or `https://`, a host, an optional port, nothing
/// else (browsers send exactly that form).
pub fn check_origin(origin: &str) -> Result<(), String> {
    let rest = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .ok_or_else(|| format!("allowed_origins: '{origin}' must start with http:// or https://"))?;
    if rest.is_empty() || rest.contains(['/', '?', '#', '@', ' ']) {
        return Err(format!(
            "allowed_origins: '{origin}' must be scheme://host[:port], with no path (as browsers send it)"
        ));
    }
    Ok(())
}

/// Whether a request says it carries a body: a non-zero length or a chunked one.
fn announces_body(headers: &HeaderMap) -> bool {
    headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get(header::CONTENT_LENGTH)
            .is_some_and(|length| length != HeaderValue::from_static("0"))
}

/// Whether the content type is `application/json`, optionally `; charset=utf-8` (any case,
/// quoted or not). Other parameters are refused: none changes what JSON means.
pub fn is_json(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let mut parts = value.split(';');
    let essence = parts.next().unwrap_or("").trim();
    if !essence.eq_ignore_ascii_case("application/json") {
        return false;
    }
    parts.all(|parameter| {
        let Some((name, value)) = parameter.split_once('=') else {
            return false;
        };
        let value = value.trim();
        let value = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or(value);
        name.trim().eq_ignore_ascii_case("charset") && value.eq_ignore_ascii_case("utf-8")
    })
}

/// 415 `unsupported_media_type`, naming what was sent.
pub fn unsupported_media_type(headers: &HeaderMap) -> ApiError {
    let sent = headers.get(header::CONTENT_TYPE).map_or_else(
        || "none".to_owned(),
        |v| format!("'{}'", String::from_utf8_lossy(v.as_bytes())),
    );
    ApiError::new(
        ErrorCode::UnsupportedMediaType,
        format!("body: must be sent as Content-Type: application/json, got {sent}"),
    )
}

/// Whether a `Host` value names loopback: `127.0.0.0/8`, `[::1]` (or an IPv4-mapped
/// loopback) or `localhost`, with any port or none.
pub fn is_loopback_host(host: &str) -> bool {
    if let Some(rest) = host.strip_prefix('[') {
        let Some((inside, after)) = rest.split_once(']') else {
            return false;
        };
        if !(after.is_empty() || after.strip_prefix(':').is_some_and(is_port)) {
            return false;
        }
        return inside
            .parse::<Ipv6Addr>()
            .is_ok_and(|ip| IpAddr::V6(ip).to_canonical().is_loopback());
    }
    let name = match host.split_once(':') {
        Some((name, port)) if is_port(port) => name,
        Some(_) => return false,
        None => host,
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<Ipv4Addr>().is_ok_and(|ip| ip.is_loopback())
}

fn is_port(text: &str) -> bool {
    !text.is_empty() && text.len() <= 5 && text.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_are_the_loopback_addresses_and_localhost_with_any_port() {
        for host in [
            "127.0.0.1",
            "127.0.0.1:7070",
            "127.1.2.3:80",
            "[::1]",
            "[::1]:7070",
            "[::ffff:127.0.0.1]:7070",
            "localhost",
            "LocalHost:7070",
        ] {
            assert!(is_loopback_host(host), "{host}");
        }
        // Trace: DNS rebinding; the attacker's name resolves to 127.0.0.1, the Host names it.
        for host in [
            "evil.example:7070",
            "localhost.evil.example",
            "127.0.0.1.evil.example",
            "10.0.0.1:7070",
            "[::2]:7070",
            "[::1",
            "127.0.0.1:",
            "127.0.0.1:70a",
            "[::1]x",
            "",
        ] {
            assert!(!is_loopback_host(host), "{host}");
        }
    }

    #[test]
    fn json_is_application_json_with_at_most_a_utf8_charset() {
        let with = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_str(value).unwrap());
            is_json(&headers)
        };
        assert!(with("application/json"));
        assert!(with("Application/JSON; charset=UTF-8"));
        assert!(with("application/json;charset=\"utf-8\""));
        assert!(!with("text/plain"));
        assert!(!with("application/x-www-form-urlencoded"));
        assert!(!with("application/json; charset=latin1"));
        assert!(!with("application/json; boundary=x"));
        assert!(!with("application/jsonp"));
        assert!(!is_json(&HeaderMap::new()));
    }

    #[test]
    fn configured_origins_are_scheme_host_and_port_only() {
        assert!(check_origin("https://console.example:8443").is_ok());
        assert!(check_origin("http://localhost").is_ok());
        for bad in ["console.example", "https://", "https://a/b", "ftp://a", "https://a?x"] {
            assert!(check_origin(bad).is_err(), "{bad}");
        }
    }
}
