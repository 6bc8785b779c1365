//! Every refusal the registry can give, each with a stable machine-readable code.
//!
//! The code ([`Rejection::code`]) is the contract: the HTTP API returns it as
//! `{"error": {"code": ..., "message": ...}}`, clients branch on it, and it never changes
//! once published. The message is for people: it names the field and the limit it broke.
//! A rejected command changes nothing, its revision included.

use std::fmt;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::{ErrorCode, Incarnation, InstanceId, Label, LeaseId, Revision, ServiceKey};

/// Why a command was refused. `#[non_exhaustive]`: new refusals may appear; match on
/// [`Rejection::code`] across crate boundaries.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "code", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Rejection {
    /// A mutation from an older incarnation than the one the registry holds (SPEC L2).
    #[error(
        "incarnation: instance '{instance}' presented incarnation {presented}, but incarnation {current} is registered or was removed"
    )]
    StaleIncarnation {
        /// The instance addressed.
        instance: InstanceId,
        /// The incarnation the command carried.
        presented: Incarnation,
        /// The highest incarnation the registry knows for the instance.
        current: Incarnation,
    },
    /// The compare-and-swap precondition failed.
    #[error("expected_revision: expected {expected}, but {subject} is at revision {actual}")]
    RevisionMismatch {
        /// What the revision belongs to (an endpoint or a lease).
        subject: String,
        /// The revision the command expected.
        expected: Revision,
        /// The revision the registry holds.
        actual: Revision,
    },
    /// The addressed endpoint (or incarnation of it) is not registered.
    #[error("{subject} is not registered")]
    NotFound {
        /// What was looked for.
        subject: String,
    },
    /// The lease does not exist (never granted, revoked, expired, or another tenant's).
    #[error("lease: lease {lease} does not exist")]
    LeaseNotFound {
        /// The lease asked for.
        lease: LeaseId,
    },
    /// An endpoint named a lease granted for another service (SPEC L4). Which service the
    /// lease is for is not said: lease ids are sequential, and a caller may not read it.
    #[error("lease: lease {lease} is bound to another service than {key}")]
    LeaseScopeMismatch {
        /// The lease asked for.
        lease: LeaseId,
        /// The service of the endpoint that named it.
        key: Box<ServiceKey>,
    },
    /// The command needs a newer registry format than the cluster runs (DESIGN "Formats and
    /// versions"): some member has not been upgraded yet.
    #[error(
        "{what} needs registry format {needed}; the cluster is at format {format} until every member runs a version that knows it"
    )]
    UpgradePending {
        /// What was asked for, e.g. `a lease bound to a service`.
        what: String,
        /// The format the cluster runs.
        format: u32,
        /// The format the command needs.
        needed: u32,
    },
    /// A name breaks the DNS-label rules or a length limit.
    #[error("{field}: {reason}")]
    InvalidName {
        /// The offending field, e.g. `namespace` or `ports[1].name`.
        field: String,
        /// What is wrong, with the limit.
        reason: String,
    },
    /// An address does not parse or is not usable as an endpoint address.
    #[error("{field}: {reason}")]
    InvalidAddress {
        /// The offending field, e.g. `addresses[0].ip`.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// An address lies outside every permitted network (SPEC M5).
    #[error("{field}: {address} is outside the permitted networks ({permitted})")]
    AddressOutOfScope {
        /// The offending field.
        field: String,
        /// The canonical address.
        address: IpAddr,
        /// The permitted networks, comma-separated.
        permitted: String,
    },
    /// Labels break a bound (SPEC M4): count, key or value length, characters, total bytes.
    #[error("{field}: {reason}")]
    LabelLimit {
        /// The offending field, e.g. `labels.team`.
        field: String,
        /// What is wrong, with the limit.
        reason: String,
    },
    /// The record, or one of its lists, is larger than allowed.
    #[error("{field}: {size} exceeds the limit of {limit}")]
    RecordTooLarge {
        /// What is too large, e.g. `record bytes` or `addresses`.
        field: String,
        /// Its size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// A tenant or service quota would be exceeded.
    #[error("{quota}: {scope} is at its limit of {limit}")]
    QuotaExceeded {
        /// Which quota.
        quota: Quota,
        /// Whose quota, e.g. `tenant 'acme'`.
        scope: String,
        /// The limit.
        limit: u64,
    },
    /// A field other than a name, address or label is out of range (weight, port, TTL ...).
    #[error("{field}: {reason}")]
    InvalidField {
        /// The offending field.
        field: String,
        /// What is wrong, with the accepted range.
        reason: String,
    },
    /// A health check aimed somewhere other than its own endpoint (SPEC S6): the checker
    /// would probe it from the leader, so it could be pointed at any host.
    #[error("{field}: {reason}")]
    CheckTargetRefused {
        /// The offending field.
        field: String,
        /// Which target, and what the check may probe instead.
        reason: String,
    },
    /// The command speaks for a token that is no longer in force when it applies: revoked
    /// between the check on the node that took the request and the commit (SPEC S1).
    #[error("token {accessor} was revoked before this command committed")]
    TokenRevoked {
        /// The token's accessor.
        accessor: String,
    },
    /// `acl bootstrap` after the first operator token was made: it works once (SPEC S1).
    #[error("acl: the cluster is already bootstrapped; create tokens with an admin token")]
    AlreadyBootstrapped,
    /// A write to an endpoint this region mirrors from another (SPEC G2).
    #[error("instance '{instance}' of {key} is mirrored from region '{region}': change it there")]
    MirroredReadOnly {
        /// The service.
        key: Box<ServiceKey>,
        /// The instance addressed.
        instance: InstanceId,
        /// The region that owns it.
        region: Label,
    },
    /// A mirror's change does not continue what the importing region holds (SPEC G2).
    #[error("mirror of region '{region}' ({import}): {detail}")]
    MirrorGap {
        /// The source region.
        region: Label,
        /// The import, as configured (`prod/*`).
        import: String,
        /// What did not line up.
        detail: String,
    },
    /// A mirror carried a service its import does not cover.
    #[error("mirror of region '{region}': {key} is outside the import {import}")]
    MirrorOutOfScope {
        /// The source region.
        region: Label,
        /// The import.
        import: String,
        /// The service.
        key: Box<ServiceKey>,
    },
}

/// The quotas a registry enforces (SPEC S5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Quota {
    /// Services per tenant.
    ServicesPerTenant,
    /// Endpoints per service.
    EndpointsPerService,
    /// Endpoints per tenant.
    EndpointsPerTenant,
    /// Leases per tenant.
    LeasesPerTenant,
    /// Tenants holding anything, registry-wide.
    MaxTenants,
}

impl fmt::Display for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Quota::ServicesPerTenant => "services_per_tenant",
            Quota::EndpointsPerService => "endpoints_per_service",
            Quota::EndpointsPerTenant => "endpoints_per_tenant",
            Quota::LeasesPerTenant => "leases_per_tenant",
            Quota::MaxTenants => "max_tenants",
        })
    }
}

impl Rejection {
    /// The stable, machine-readable code of this refusal.
    pub fn code(&self) -> &'static str {
        self.error_code().as_str()
    }

    /// The code as the shared vocabulary ([`ErrorCode`]): status and transience with it.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            Rejection::StaleIncarnation { .. } => ErrorCode::StaleIncarnation,
            Rejection::RevisionMismatch { .. } => ErrorCode::RevisionMismatch,
            Rejection::NotFound { .. } => ErrorCode::NotFound,
            Rejection::LeaseNotFound { .. } => ErrorCode::LeaseNotFound,
            Rejection::LeaseScopeMismatch { .. } => ErrorCode::LeaseScopeMismatch,
            Rejection::UpgradePending { .. } => ErrorCode::UpgradePending,
            Rejection::InvalidName { .. } => ErrorCode::InvalidName,
            Rejection::InvalidAddress { .. } => ErrorCode::InvalidAddress,
            Rejection::AddressOutOfScope { .. } => ErrorCode::AddressOutOfScope,
            Rejection::LabelLimit { .. } => ErrorCode::LabelLimit,
            Rejection::RecordTooLarge { .. } => ErrorCode::RecordTooLarge,
            Rejection::QuotaExceeded { .. } => ErrorCode::QuotaExceeded,
            Rejection::InvalidField { .. } => ErrorCode::InvalidField,
            Rejection::CheckTargetRefused { .. } => ErrorCode::CheckTargetRefused,
            Rejection::AlreadyBootstrapped => ErrorCode::AlreadyBootstrapped,
            Rejection::TokenRevoked { .. } => ErrorCode::Unauthenticated,
            Rejection::MirroredReadOnly { .. } => ErrorCode::MirroredReadOnly,
            Rejection::MirrorGap { .. } => ErrorCode::MirrorGap,
            Rejection::MirrorOutOfScope { .. } => ErrorCode::MirrorOutOfScope,
        }
    }

    /// The same refusal, naming `field` instead: lets a hot path validate under a short
    /// static name and build an indexed one (`ports[3].name`) only when it refuses.
    #[must_use]
    pub fn for_field(mut self, field: impl Into<String>) -> Rejection {
        match &mut self {
            Rejection::InvalidName { field: f, .. }
            | Rejection::InvalidAddress { field: f, .. }
            | Rejection::AddressOutOfScope { field: f, .. }
            | Rejection::LabelLimit { field: f, .. }
            | Rejection::RecordTooLarge { field: f, .. }
            | Rejection::InvalidField { field: f, .. }
            | Rejection::CheckTargetRefused { field: f, .. } => *f = field.into(),
            Rejection::StaleIncarnation { .. }
            | Rejection::RevisionMismatch { .. }
            | Rejection::NotFound { .. }
            | Rejection::LeaseNotFound { .. }
            | Rejection::LeaseScopeMismatch { .. }
            | Rejection::UpgradePending { .. }
            | Rejection::QuotaExceeded { .. }
            | Rejection::AlreadyBootstrapped
            | Rejection::TokenRevoked { .. }
            | Rejection::MirroredReadOnly { .. }
            | Rejection::MirrorGap { .. }
            | Rejection::MirrorOutOfScope { .. } => {}
        }
        self
    }

    pub(crate) fn invalid_name(field: impl Into<String>, reason: impl Into<String>) -> Rejection {
        Rejection::InvalidName {
            field: field.into(),
            reason: reason.into(),
        }
    }

    pub(crate) fn invalid_field(field: impl Into<String>, reason: impl Into<String>) -> Rejection {
        Rejection::InvalidField {
            field: field.into(),
            reason: reason.into(),
        }
    }

    pub(crate) fn label_limit(field: impl Into<String>, reason: impl Into<String>) -> Rejection {
        Rejection::LabelLimit {
            field: field.into(),
            reason: reason.into(),
        }
    }
}
