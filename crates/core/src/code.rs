//! [`ErrorCode`]: the one vocabulary of error codes, shared by the registry, the server, the
//! node-to-node relay and the client (SPEC D1, S5).
//!
//! Every error reply is `{"error": {"code": ..., "message": ...}}`; the code is one of these,
//! spelled as [`ErrorCode::as_str`] gives, and never changes once published. Each code knows
//! its usual HTTP status and whether the same request may succeed if retried
//! ([`ErrorCode::is_transient`]), so a relay passes any code through unchanged and a client
//! decides to retry from the code alone — never from a list of strings kept in two places.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Declares the codes once: variant, wire spelling, usual HTTP status, transience.
macro_rules! codes {
    ($($(#[$doc:meta])* $variant:ident = $wire:literal, $status:literal, $transient:literal;)*) => {
        /// A stable, machine-readable error code. `#[non_exhaustive]`: codes may be added,
        /// never renamed.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        #[non_exhaustive]
        pub enum ErrorCode {
            $($(#[$doc])* $variant,)*
        }

        impl ErrorCode {
            /// Every code, in declaration order.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant,)*];

            /// The code as it appears on the wire.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $wire,)*
                }
            }

            /// The HTTP status a reply with this code usually has.
            pub const fn http_status(self) -> u16 {
                match self {
                    $(ErrorCode::$variant => $status,)*
                }
            }

            /// Whether the same request may succeed if retried later (no leader or quorum
            /// now, the node stopping, a storage hiccup); refusals of the request itself are
            /// not transient, and retrying them forever is a bug.
            pub const fn is_transient(self) -> bool {
                match self {
                    $(ErrorCode::$variant => $transient,)*
                }
            }
        }

        impl FromStr for ErrorCode {
            type Err = UnknownCode;

            fn from_str(code: &str) -> Result<ErrorCode, UnknownCode> {
                match code {
                    $($wire => Ok(ErrorCode::$variant),)*
                    _ => Err(UnknownCode(code.to_owned())),
                }
            }
        }
    };
}

codes! {
    // Registry refusals: the command was judged and refused; it changed nothing.
    /// A mutation from an older incarnation than the registry knows (SPEC L2).
    StaleIncarnation = "stale_incarnation", 409, false;
    /// A compare-and-swap precondition failed.
    RevisionMismatch = "revision_mismatch", 409, false;
    /// The thing addressed does not exist (also: no such route).
    NotFound = "not_found", 404, false;
    /// The lease does not exist.
    LeaseNotFound = "lease_not_found", 404, false;
    /// An endpoint named a lease bound to another service (SPEC L4): a lease granted for one
    /// service holds only that service's endpoints.
    LeaseScopeMismatch = "lease_scope_mismatch", 409, false;
    /// The request needs a registry format the cluster has not raised to yet: some member
    /// still runs an older version (architecture.md "Formats and versions"); retry once every member
    /// is upgraded.
    UpgradePending = "upgrade_pending", 409, false;
    /// A name breaks the DNS-label rules (422 in a body, 400 in a path).
    InvalidName = "invalid_name", 422, false;
    /// An address does not parse or is unusable.
    InvalidAddress = "invalid_address", 422, false;
    /// An address outside the permitted networks (SPEC M5).
    AddressOutOfScope = "address_out_of_scope", 422, false;
    /// Labels break a bound (SPEC M4).
    LabelLimit = "label_limit", 422, false;
    /// A record or list is too large.
    RecordTooLarge = "record_too_large", 422, false;
    /// A field's value is refused.
    InvalidField = "invalid_field", 422, false;
    /// A TTL report for an endpoint whose checks are all probed by the registry.
    NoTtlCheck = "no_ttl_check", 422, false;
    /// A quota is full; retrying will not help until something is released.
    QuotaExceeded = "quota_exceeded", 403, false;
    // Reads.
    /// The revision asked for left the retained history (SPEC W3).
    Compacted = "compacted", 410, false;
    /// The revision asked for is not committed yet.
    FutureRevision = "future_revision", 400, false;
    // Convergence telemetry (SPEC O3): a report with a bad client id or cohort, or one past
    // the bounds on tracked subscribers and cohorts.
    /// A convergence report carried more services than one report may (a bad client id or
    /// cohort is refused earlier, by the body's parser, as `bad_request`).
    InvalidReport = "invalid_report", 422, false;
    /// A convergence report past the bounds on tracked subscribers or cohorts.
    TooManySubscribers = "too_many_subscribers", 429, false;
    // The request itself.
    /// Malformed JSON, unknown fields, a bad query or header.
    BadRequest = "bad_request", 400, false;
    /// A body over the configured limit.
    PayloadTooLarge = "payload_too_large", 413, false;
    /// The route exists, the method does not.
    MethodNotAllowed = "method_not_allowed", 405, false;
    /// A body that is not JSON.
    UnsupportedMediaType = "unsupported_media_type", 415, false;
    /// The caller is not authenticated: no credentials, an unknown or revoked token, a wrong
    /// cluster secret or certificate (SPEC S1).
    Unauthenticated = "unauthenticated", 401, false;
    /// The caller is authenticated but its rules do not allow this verb on this key (SPEC S2),
    /// including any request naming another tenant (SPEC S3).
    PermissionDenied = "permission_denied", 403, false;
    /// `muster acl bootstrap` on a cluster that already has its first operator token.
    AlreadyBootstrapped = "already_bootstrapped", 409, false;
    /// A browser request whose `Origin` is not in the allow-list (SPEC S6).
    ForbiddenOrigin = "forbidden_origin", 403, false;
    /// With authentication off, a `Host` header that does not name a loopback address: a DNS
    /// rebinding attempt (SPEC S6).
    ForbiddenHost = "forbidden_host", 403, false;
    /// A write addressed to an endpoint mirrored from another region (SPEC G2): only that
    /// region's own history changes it.
    MirroredReadOnly = "mirrored_read_only", 409, false;
    /// A mirror's update does not continue the set it holds (a gap, a replay from an older
    /// cursor, or a digest that differs): the mirror takes a fresh snapshot (SPEC G2).
    MirrorGap = "mirror_gap", 409, false;
    /// A mirror carried a service outside the import it is for.
    MirrorOutOfScope = "mirror_out_of_scope", 422, false;
    /// A health check aimed at a target its endpoint does not own, or at a refused address
    /// (loopback, link-local, metadata, Muster's own listeners; SPEC S6).
    CheckTargetRefused = "check_target_refused", 422, false;
    /// The request head or body did not arrive within the listener's read timeout.
    RequestTimeout = "request_timeout", 408, true;
    /// Too many open watches for this token or tenant (SPEC W4); retry once some close.
    TooManyWatches = "too_many_watches", 429, true;
    /// Writes from this principal past its write rate (SPEC W4, S6); retry after the reply's
    /// `Retry-After`.
    RateLimited = "rate_limited", 429, true;
    /// A dashboard lab run's parameters are out of range or name no known setup (SPEC U2).
    InvalidLabRequest = "invalid_lab_request", 400, false;
    /// A lab run is already running on this node (one at a time, SPEC U2); retry after it.
    LabBusy = "lab_busy", 429, true;
    // The cluster and the node.
    /// No leader or no majority to commit with now (SPEC R2); the write may still commit.
    NoQuorum = "no_quorum", 503, true;
    /// This node does not lead; ask the leader.
    /// Not transient: the same request to the same node fails again (ask the leader).
    NotLeader = "not_leader", 503, false;
    /// This node knows the leader but cannot reach it, so it cannot confirm a consistent
    /// read (SPEC R3) with it now; retry, or ask another node.
    LeaderUnreachable = "leader_unreachable", 503, true;
    /// This node has not applied up to a consistent read's read index in time (SPEC R3): the
    /// quorum confirmed the leader, but this node lags it; retry, or ask another node.
    NotCaughtUp = "not_caught_up", 503, true;
    /// A membership change was refused.
    MembershipRefused = "membership_refused", 409, false;
    /// A `default`-consistency read on a node that has not heard from a leader for too long.
    Stale = "stale", 503, true;
    /// The node cannot serve now (starting, stopping).
    Unavailable = "unavailable", 503, true;
    /// The node's storage failed: it stopped taking writes and is shutting down.
    StorageFailed = "storage_failed", 503, true;
    /// A connection over the server's file-descriptor budget (SPEC S6): answered with this,
    /// then closed; retry once connections have closed.
    TooManyConnections = "too_many_connections", 503, true;
    /// Anything else that went wrong on the server.
    Internal = "internal", 500, true;
    /// This server was started without a lab runner (`muster_server::start`, not
    /// `muster serve`), so the dashboard cannot run a lab scenario.
    LabUnavailable = "lab_unavailable", 503, false;
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A code this build does not know (sent by a newer peer, or garbage).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown error code '{0}'")]
pub struct UnknownCode(pub String);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips_through_its_wire_spelling_and_serde() {
        for code in ErrorCode::ALL {
            assert_eq!(code.as_str().parse::<ErrorCode>(), Ok(*code));
            let json = serde_json::to_string(code).unwrap();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
        }
        assert_eq!("nope".parse::<ErrorCode>(), Err(UnknownCode("nope".into())));
    }

    #[test]
    fn only_conditions_of_the_moment_are_transient() {
        let transient: Vec<_> = ErrorCode::ALL.iter().filter(|c| c.is_transient()).collect();
        assert_eq!(
            transient,
            [
                &ErrorCode::RequestTimeout,
                &ErrorCode::TooManyWatches,
                &ErrorCode::RateLimited,
                &ErrorCode::LabBusy,
                &ErrorCode::NoQuorum,
                &ErrorCode::LeaderUnreachable,
                &ErrorCode::NotCaughtUp,
                &ErrorCode::Stale,
                &ErrorCode::Unavailable,
                &ErrorCode::StorageFailed,
                &ErrorCode::TooManyConnections,
                &ErrorCode::Internal
            ]
        );
        assert_eq!(ErrorCode::LeaseNotFound.http_status(), 404);
    }
}
