//! Convergence telemetry's wire types (SPEC O3): what a subscriber reports it applied, and
//! what the server tells about a service's subscribers.
//!
//! | method and path | body → reply |
//! |---|---|
//! | `POST /v1/convergence/report` | [`ConvergenceReport`] → [`ReportReply`] |
//! | `GET /v1/convergence/{tenant}/{namespace}/{service}[?revision=R][&cohort=K=V][&fraction=F][&stream=true]` | → [`ConvergenceReply`] (NDJSON of them with `stream=true`) |
//!
//! A subscriber is one client id on one service. Its *applied revision* is the global
//! revision up to which its view of the service is current (a view confirmed by a `progress`
//! frame at R is current at R even if the service last changed long before): it has applied
//! revision `R` when it reports a revision `>= R`.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::{Revision, ServiceKey};

/// A client's stable name, chosen by the client (a host and process, a pod name): 1 to 128
/// bytes of letters, digits and `. _ - : @ /`. Stable across reconnects, so a client that
/// comes back is the same subscriber, not a new one.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ClientId(String);

/// A cohort label, `key=value` (`zone=a`, `version=1.4`): a key of 1 to 32 lower-case
/// letters, digits and `. _ -`, a value of 1 to 64 letters, digits and `. _ - :`. Cohorts
/// are few by design; the server bounds how many it counts per service.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Cohort(String);

/// Why a client id or cohort was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidLabel(pub String);

impl ClientId {
    /// The longest client id.
    pub const MAX_LEN: usize = 128;

    /// Validates a client id.
    pub fn new(id: impl Into<String>) -> Result<ClientId, InvalidLabel> {
        let id = id.into();
        let allowed = |c: char| c.is_ascii_alphanumeric() || ".-_:@/".contains(c);
        if id.is_empty() || id.len() > Self::MAX_LEN || !id.chars().all(allowed) {
            return Err(InvalidLabel(format!(
                "client id '{}' must be 1 to {} bytes of letters, digits and . _ - : @ /",
                id.escape_default(),
                Self::MAX_LEN
            )));
        }
        Ok(ClientId(id))
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Cohort {
    /// Validates a `key=value` cohort label.
    pub fn new(label: impl Into<String>) -> Result<Cohort, InvalidLabel> {
        let label = label.into();
        let key_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c);
        let value_char = |c: char| c.is_ascii_alphanumeric() || "._-:".contains(c);
        let valid = label.split_once('=').is_some_and(|(key, value)| {
            (1..=32).contains(&key.len())
                && key.chars().all(key_char)
                && (1..=64).contains(&value.len())
                && value.chars().all(value_char)
        });
        if !valid {
            return Err(InvalidLabel(format!(
                "cohort '{}' must be key=value: a key of 1 to 32 of a-z 0-9 . _ -, a value of 1 to 64 of letters, digits . _ - :",
                label.escape_default()
            )));
        }
        Ok(Cohort(label))
    }

    /// The label.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

macro_rules! string_newtype {
    ($name:ident) => {
        impl TryFrom<String> for $name {
            type Error = InvalidLabel;
            fn try_from(value: String) -> Result<Self, InvalidLabel> {
                $name::new(value)
            }
        }
        impl From<$name> for String {
            fn from(value: $name) -> String {
                value.0
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
        impl std::str::FromStr for $name {
            type Err = InvalidLabel;
            fn from_str(s: &str) -> Result<Self, InvalidLabel> {
                $name::new(s)
            }
        }
    };
}
string_newtype!(ClientId);
string_newtype!(Cohort);

/// How a subscriber receives the registry.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryPath {
    /// The HTTP watch API (muster-client's resolver, `muster proxy`, `muster watch`).
    Watch,
    /// An xDS client's acknowledged version.
    Xds,
    /// A DNS listener's zone.
    Dns,
}

impl DeliveryPath {
    /// The wire spelling, also the metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryPath::Watch => "watch",
            DeliveryPath::Xds => "xds",
            DeliveryPath::Dns => "dns",
        }
    }
}

/// `POST /v1/convergence/report`: what one client applied, for one or more services.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConvergenceReport {
    /// The client's stable id.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub client_id: ClientId,
    /// Its cohort label, if any.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cohort: Option<Cohort>,
    /// One entry per service the client follows (at most
    /// [`ConvergenceReport::MAX_SERVICES`]).
    pub applied: Vec<AppliedRevision>,
}

impl ConvergenceReport {
    /// The most services one report may carry: at about 110 bytes an entry, 256 fit well
    /// inside the server's 64 KiB body limit; a namespace watch of a large namespace reports
    /// in several requests.
    pub const MAX_SERVICES: usize = 256;
}

/// One service's applied revision in a [`ConvergenceReport`].
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppliedRevision {
    /// The service.
    pub service: ServiceKey,
    /// The revision the client's view is current at.
    pub revision: Revision,
    /// When the client received the frame that brought it there (Unix ms, the client's
    /// clock): the commit→applied latency is measured from the server's commit to this.
    pub received_unix_ms: u64,
}

/// The reply to a [`ConvergenceReport`]: how often to report while nothing changes.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportReply {
    /// Entries recorded.
    pub accepted: usize,
    /// Report again after this long even if nothing changed, or the server takes the client
    /// for gone.
    pub report_every_ms: u64,
    /// A subscriber silent this long stops counting.
    pub silent_after_ms: u64,
}

/// `GET /v1/convergence/{tenant}/{namespace}/{service}`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConvergenceReply {
    /// The service.
    pub service: ServiceKey,
    /// The service's last change, as far as this node knows.
    pub revision: Revision,
    /// The revision asked about (default: `revision`).
    pub target: Revision,
    /// The cohort asked about (none: every subscriber).
    #[serde(default)]
    pub cohort: Option<String>,
    /// The fraction asked for (default 1).
    pub fraction: f64,
    /// Live subscribers (in the cohort asked about).
    pub live: usize,
    /// Of them, those that applied `target` or later.
    pub applied: usize,
    /// How many must have: the smallest count whose share of `live` is at least `fraction`.
    pub needed: usize,
    /// Whether `applied >= needed`.
    pub converged: bool,
    /// Live and applied subscribers per cohort (`cohort` null: those without one).
    pub cohorts: Vec<GroupCount>,
    /// Live and applied subscribers per delivery path. The DNS listener (path `dns`) is
    /// counted here only: it applies at commit, and routes nobody itself.
    pub paths: Vec<PathCount>,
    /// Live subscribers per applied revision, newest first.
    pub by_revision: Vec<RevisionCount>,
    /// Commit→applied latency over the last changes.
    pub latency: LatencySummary,
    /// The last changes, newest first.
    pub changes: Vec<ChangeSummary>,
    /// Live subscribers behind `target`, longest behind first (at most 100).
    pub stragglers: Vec<Straggler>,
    /// How many subscribers are behind `target`.
    pub stragglers_total: usize,
    /// Subscribers that stopped reporting, most recent first (at most 100).
    pub silent: Vec<SilentClient>,
    /// How many subscribers went silent.
    pub silent_total: usize,
    /// A subscriber silent this long stops counting.
    pub silent_after_ms: u64,
    /// The server's clock when this was read (Unix ms).
    pub unix_ms: u64,
}

/// Live and applied subscribers of one cohort.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupCount {
    /// The cohort (null: none given).
    pub cohort: Option<String>,
    /// Live subscribers.
    pub live: usize,
    /// Of them, at or past the target.
    pub applied: usize,
}

/// Live and applied subscribers of one delivery path.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathCount {
    /// The path.
    pub path: DeliveryPath,
    /// Live subscribers.
    pub live: usize,
    /// Of them, at or past the target.
    pub applied: usize,
}

/// How many live subscribers are at one applied revision.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevisionCount {
    /// The applied revision.
    pub revision: Revision,
    /// Subscribers at it.
    pub subscribers: usize,
}

/// A commit→applied latency distribution.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct LatencySummary {
    /// How many applications were measured.
    pub samples: usize,
    /// Percentiles in milliseconds (0 without samples).
    pub p50_ms: u64,
    /// 90th percentile.
    pub p90_ms: u64,
    /// 99th percentile.
    pub p99_ms: u64,
    /// 99.9th percentile.
    pub p999_ms: u64,
    /// The slowest.
    pub max_ms: u64,
    /// The histogram: samples at or under each bound, not cumulative; the last bound is
    /// null (everything slower).
    pub buckets: Vec<LatencyBucket>,
}

/// One histogram bucket.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatencyBucket {
    /// Upper bound in milliseconds (null: no bound).
    pub le_ms: Option<u64>,
    /// Samples in this bucket (above the previous bound, at or under this one).
    pub count: usize,
}

/// One change of the service and how it spread.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeSummary {
    /// Its revision.
    pub revision: Revision,
    /// When this node applied it (Unix ms).
    pub committed_unix_ms: u64,
    /// Subscribers that reported applying it.
    pub applied: usize,
    /// Median commit→applied latency (ms).
    pub p50_ms: u64,
    /// 99th percentile (ms).
    pub p99_ms: u64,
}

/// A live subscriber behind the target.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Straggler {
    /// Its id.
    pub client_id: String,
    /// Its cohort.
    pub cohort: Option<String>,
    /// How it subscribes.
    pub path: DeliveryPath,
    /// The revision it applied.
    pub revision: Revision,
    /// How long the first change it lacks has been committed (ms).
    pub behind_ms: u64,
    /// How long ago it last reported (ms).
    pub last_report_ms: u64,
}

/// A subscriber that stopped reporting.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SilentClient {
    /// Its id.
    pub client_id: String,
    /// Its cohort.
    pub cohort: Option<String>,
    /// How it subscribed.
    pub path: DeliveryPath,
    /// The last revision it reported.
    pub revision: Revision,
    /// How long it has been silent (ms).
    pub silent_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_ids_and_cohorts_are_validated_on_the_way_in() {
        assert!(ClientId::new("host-a:1234").is_ok());
        assert!(ClientId::new("pod/api-7f9c@zone-a").is_ok());
        assert!(ClientId::new("").is_err());
        assert!(ClientId::new("a b").is_err());
        assert!(ClientId::new("x".repeat(129)).is_err());
        assert!(Cohort::new("zone=a").is_ok());
        assert!(Cohort::new("version=1.4").is_ok());
        for bad in ["zone", "=a", "zone=", "Zone=a", "zone=a b", "zone=a=b"] {
            assert!(Cohort::new(bad).is_err(), "{bad}");
        }
        let refused: Result<ConvergenceReport, _> = serde_json::from_str(r#"{"client_id":"a b","applied":[]}"#);
        assert!(refused.is_err());
    }
}
