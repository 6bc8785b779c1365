//! Checks as registrations carry them: the kind is picked by the URL's scheme
//! (`http://host:port/path`, `tcp://host:port`, `grpc://host:port[/service]`, or a TTL check
//! the instance updates itself), with interval, timeout, rise and fall. A validated [`Check`]
//! travels and is stored in its canonical [`CheckSpec`] form (every default filled in), so
//! what a registration asked for and what the registry holds compare equal.

use std::time::Duration;

use crate::Rejection;
use crate::address::host_port;
use serde::{Deserialize, Serialize};

/// Which signal a check feeds (SPEC H1): they route differently.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    /// Can it take new work now? Failing removes it from routing.
    #[default]
    Readiness,
    /// Is it making progress? Failing is reported (a restart hint), never a routing vote.
    Liveness,
    /// Has it finished starting? Holds the endpoint in `starting` until its first pass.
    Startup,
}

/// A TTL check's report.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckStatus {
    /// Healthy.
    Pass,
    /// Serving, degraded.
    Warn,
    /// Unhealthy.
    Fail,
}

/// A check as submitted.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckSpec {
    /// `http://host:port/path`, `tcp://host:port`, `grpc://host:port[/service]`; absent for a
    /// TTL check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// For a TTL check: how long a pass or warn report stays valid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// The signal it feeds; readiness when omitted.
    #[serde(default)]
    pub signal: Signal,
    /// Time between probes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_ms: Option<u64>,
    /// Time a probe may take.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Consecutive passes to pass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rise: Option<u32>,
    /// Consecutive failures to fail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fall: Option<u32>,
    /// HTTP: the accepted status range, `[low, high]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Vec<u16>>, min_items = 2, max_items = 2))]
    pub status: Option<(u16, u16)>,
    /// HTTP: a string the body must contain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_contains: Option<String>,
}

/// What is probed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CheckKind {
    /// An HTTP GET whose status must lie in `status` and whose body must hold `body_contains`.
    Http {
        /// `host:port`.
        authority: String,
        /// The path, starting with `/`.
        path: String,
        /// Accepted statuses, inclusive.
        status: (u16, u16),
        /// Required body text.
        body_contains: Option<String>,
    },
    /// A TCP connect.
    Tcp {
        /// `host:port`.
        authority: String,
    },
    /// `grpc.health.v1.Health/Check` for `service` (empty: the server as a whole).
    Grpc {
        /// `host:port`.
        authority: String,
        /// The service name asked about.
        service: String,
    },
    /// The instance (or its agent) reports pass / warn / fail within each TTL.
    Ttl {
        /// How long a report stays valid.
        ttl: Duration,
    },
}

/// A validated check. On the wire and in the registry it is its canonical [`CheckSpec`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "CheckSpec", into = "CheckSpec")]
pub struct Check {
    /// What is probed.
    pub kind: CheckKind,
    /// The signal it feeds.
    pub signal: Signal,
    /// Time between probes (for a TTL check: how often the deadline is looked at).
    pub interval: Duration,
    /// Time a probe may take; never more than the interval, so probes do not pile up.
    pub timeout: Duration,
    /// Consecutive passes to pass.
    pub rise: u32,
    /// Consecutive failures to fail.
    pub fall: u32,
}

/// 10 s between probes: the common default (Consul, Kubernetes), 1,000 probes/s for 10,000
/// endpoints.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);
/// 2 s per probe: a healthy loopback or LAN answer takes milliseconds; a wedged one is cut off
/// well inside one interval.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);
/// Two passes to pass, three failures to fail (HAProxy's defaults): one lost packet never
/// removes an endpoint, a dead one is gone within three intervals.
pub const DEFAULT_RISE: u32 = 2;
/// See [`DEFAULT_RISE`].
pub const DEFAULT_FALL: u32 = 3;
/// The shortest interval: 100 ms keeps one check from becoming a load test of its target.
pub const MIN_INTERVAL: Duration = Duration::from_millis(100);
/// The longest interval or TTL: a day. Longer is a check nobody is waiting for, and keeps
/// every deadline sum far from overflowing.
pub const MAX_INTERVAL: Duration = Duration::from_secs(86_400);
/// Longest `body_contains` text: a marker, not a document.
pub const MAX_BODY_TEXT_BYTES: usize = 256;
/// Thresholds above 10 make detection slower than any operator expects from "a few probes".
pub const MAX_THRESHOLD: u32 = 10;
/// Checks per endpoint: a readiness, a liveness and a startup check, with room for a second
/// readiness dependency. More is a sign the checks should be one aggregated health page.
pub const MAX_CHECKS: usize = 4;
/// Longest check URL: a health path is short; this bounds the record.
pub const MAX_URL_BYTES: usize = 256;

fn invalid(field: &str, reason: impl Into<String>) -> Rejection {
    Rejection::InvalidField {
        field: field.to_owned(),
        reason: reason.into(),
    }
}

fn authority_and_rest<'a>(field: &str, rest: &'a str) -> Result<(&'a str, &'a str), Rejection> {
    let (authority, path) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
    if host_port(authority).is_none() {
        return Err(invalid(
            field,
            format!("'{authority}' must be host:port with a port of 1 to 65535"),
        ));
    }
    Ok((authority, path))
}

impl CheckSpec {
    /// Validates the spec; `field` names it in errors (e.g. `checks[0]`).
    pub fn validate(&self, field: &str) -> Result<Check, Rejection> {
        let at = |name: &str| format!("{field}.{name}");
        let kind = match (&self.url, self.ttl_ms) {
            (Some(_), Some(_)) => return Err(invalid(field, "a check has either a url or a ttl_ms, not both")),
            (None, None) => return Err(invalid(field, "a check needs a url (http, tcp, grpc) or a ttl_ms")),
            (None, Some(ttl)) => {
                if !(MIN_INTERVAL.as_millis()..=MAX_INTERVAL.as_millis()).contains(&u128::from(ttl)) {
                    return Err(invalid(
                        &at("ttl_ms"),
                        format!(
                            "must be {} ms to {} ms (a day), got {ttl}",
                            MIN_INTERVAL.as_millis(),
                            MAX_INTERVAL.as_millis()
                        ),
                    ));
                }
                CheckKind::Ttl {
                    ttl: Duration::from_millis(ttl),
                }
            }
            (Some(url), None) => {
                if url.len() > MAX_URL_BYTES || url.chars().any(|c| c.is_control() || c.is_whitespace()) {
                    return Err(invalid(
                        &at("url"),
                        format!("must be at most {MAX_URL_BYTES} bytes without spaces or control characters"),
                    ));
                }
                let (scheme, rest) = url
                    .split_once("://")
                    .ok_or_else(|| invalid(&at("url"), format!("'{url}' has no scheme (http://, tcp://, grpc://)")))?;
                match scheme {
                    "http" => {
                        let (authority, path) = authority_and_rest(&at("url"), rest)?;
                        let status = self.status.unwrap_or((200, 399));
                        if !(100..=599).contains(&status.0) || !(status.0..=599).contains(&status.1) {
                            return Err(invalid(
                                &at("status"),
                                format!("must be a range within 100..=599, got {status:?}"),
                            ));
                        }
                        CheckKind::Http {
                            authority: authority.to_owned(),
                            path: format!("/{path}"),
                            status,
                            body_contains: self.body_contains.clone(),
                        }
                    }
                    "tcp" => {
                        let (authority, path) = authority_and_rest(&at("url"), rest)?;
                        if !path.is_empty() {
                            return Err(invalid(&at("url"), "a tcp check has no path"));
                        }
                        CheckKind::Tcp {
                            authority: authority.to_owned(),
                        }
                    }
                    "grpc" => {
                        let (authority, service) = authority_and_rest(&at("url"), rest)?;
                        CheckKind::Grpc {
                            authority: authority.to_owned(),
                            service: service.to_owned(),
                        }
                    }
                    other => {
                        return Err(invalid(
                            &at("url"),
                            format!(
                                "scheme '{other}' is not a check kind (http, tcp, grpc; or ttl_ms for a TTL check)"
                            ),
                        ));
                    }
                }
            }
        };
        if !matches!(kind, CheckKind::Http { .. }) && (self.status.is_some() || self.body_contains.is_some()) {
            return Err(invalid(field, "status and body_contains apply to http checks only"));
        }
        if self
            .body_contains
            .as_ref()
            .is_some_and(|text| text.len() > MAX_BODY_TEXT_BYTES)
        {
            return Err(invalid(
                &at("body_contains"),
                format!("must be at most {MAX_BODY_TEXT_BYTES} bytes"),
            ));
        }
        let threshold = |name: &str, value: Option<u32>, default: u32| match value.unwrap_or(default) {
            n @ 1..=MAX_THRESHOLD => Ok(n),
            n => Err(invalid(&at(name), format!("must be 1 to {MAX_THRESHOLD}, got {n}"))),
        };
        if let CheckKind::Ttl { ttl } = kind {
            // A report is a statement, not a sample: one pass passes, one fail (or a TTL
            // without a report) fails, unless the registration asks for more.
            if self.interval_ms.is_some_and(|ms| ms != ttl.as_millis() as u64)
                || self.timeout_ms.is_some_and(|ms| ms != ttl.as_millis() as u64)
            {
                return Err(invalid(field, "interval_ms and timeout_ms do not apply to a ttl check"));
            }
            return Ok(Check {
                kind,
                signal: self.signal,
                interval: ttl,
                timeout: ttl,
                rise: threshold("rise", self.rise, 1)?,
                fall: threshold("fall", self.fall, 1)?,
            });
        }
        let interval = self.interval_ms.map_or(DEFAULT_INTERVAL, Duration::from_millis);
        if interval < MIN_INTERVAL || interval > MAX_INTERVAL {
            return Err(invalid(
                &at("interval_ms"),
                format!(
                    "must be {} ms to {} ms (a day), got {}",
                    MIN_INTERVAL.as_millis(),
                    MAX_INTERVAL.as_millis(),
                    interval.as_millis()
                ),
            ));
        }
        let timeout = self
            .timeout_ms
            .map_or(DEFAULT_TIMEOUT.min(interval), Duration::from_millis);
        if timeout.is_zero() || timeout > interval {
            return Err(invalid(
                &at("timeout_ms"),
                format!(
                    "must be 1 ms to the interval ({} ms), got {}",
                    interval.as_millis(),
                    timeout.as_millis()
                ),
            ));
        }
        Ok(Check {
            kind,
            signal: self.signal,
            interval,
            timeout,
            rise: threshold("rise", self.rise, DEFAULT_RISE)?,
            fall: threshold("fall", self.fall, DEFAULT_FALL)?,
        })
    }
}

impl TryFrom<CheckSpec> for Check {
    type Error = Rejection;

    fn try_from(spec: CheckSpec) -> Result<Check, Rejection> {
        spec.validate("check")
    }
}

impl From<Check> for CheckSpec {
    fn from(check: Check) -> CheckSpec {
        check.spec()
    }
}

impl Check {
    /// The canonical spec: every default filled in; validating it gives this check back.
    pub fn spec(&self) -> CheckSpec {
        let ms = |d: Duration| Some(d.as_millis() as u64);
        let (url, ttl_ms, status, body_contains) = match &self.kind {
            CheckKind::Ttl { ttl } => (None, ms(*ttl), None, None),
            CheckKind::Http {
                status, body_contains, ..
            } => (Some(self.target()), None, Some(*status), body_contains.clone()),
            CheckKind::Tcp { .. } | CheckKind::Grpc { .. } => (Some(self.target()), None, None, None),
        };
        let probed = ttl_ms.is_none();
        CheckSpec {
            url,
            ttl_ms,
            signal: self.signal,
            interval_ms: ms(self.interval).filter(|_| probed),
            timeout_ms: ms(self.timeout).filter(|_| probed),
            rise: Some(self.rise),
            fall: Some(self.fall),
            status,
            body_contains,
        }
    }

    /// What is checked, in words: the URL, or `ttl 30000ms`. Used in observation reasons.
    pub fn target(&self) -> String {
        match &self.kind {
            CheckKind::Http { authority, path, .. } => format!("http://{authority}{path}"),
            CheckKind::Tcp { authority } => format!("tcp://{authority}"),
            CheckKind::Grpc { authority, service } if service.is_empty() => format!("grpc://{authority}"),
            CheckKind::Grpc { authority, service } => format!("grpc://{authority}/{service}"),
            CheckKind::Ttl { ttl } => format!("ttl {}ms", ttl.as_millis()),
        }
    }

    /// The `host:port` a probed check connects to; `None` for a TTL check.
    pub fn authority(&self) -> Option<&str> {
        match &self.kind {
            CheckKind::Http { authority, .. } | CheckKind::Tcp { authority } | CheckKind::Grpc { authority, .. } => {
                Some(authority)
            }
            CheckKind::Ttl { .. } => None,
        }
    }

    /// Whether this check votes on routing: readiness and startup checks do, liveness does not.
    pub fn routes(&self) -> bool {
        self.signal != Signal::Liveness
    }

    /// Bytes this check adds to its record (for the record size limit).
    pub fn size(&self) -> usize {
        const FIXED: usize = 32;
        let text = match &self.kind {
            CheckKind::Http {
                authority,
                path,
                body_contains,
                ..
            } => authority.len() + path.len() + body_contains.as_ref().map_or(0, String::len),
            CheckKind::Tcp { authority } => authority.len(),
            CheckKind::Grpc { authority, service } => authority.len() + service.len(),
            CheckKind::Ttl { .. } => 0,
        };
        FIXED + text
    }

    /// The longest a dead target keeps passing: `fall` probes, the last one timing out, each
    /// started up to one interval (plus jitter) after the previous. The checker's bench
    /// measures detection against this.
    pub fn detection_bound(&self, jitter: Duration) -> Duration {
        (self.interval + jitter) * self.fall + self.timeout
    }
}

#[cfg(test)]
#[path = "check_tests.rs"]
mod tests;
