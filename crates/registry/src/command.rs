//! The commands the registry applies: what goes into the Raft log.
//!
//! Commands carry typed keys (validated where they were parsed, at the API edge) and the
//! registrar's [`EndpointSpec`] as submitted; the registry validates the spec inside
//! `apply`, deterministically, so every replica reaches the same verdict.

use muster_auth::{Accessor, TokenSpec};
use muster_core::{
    Actor, EndpointSpec, Incarnation, InstanceId, Label, LeaseId, Principal, Revision, ServiceKey, ServingState,
};
use serde::{Deserialize, Serialize};

use crate::config::RegistryConfig;

/// Who issued a command and when: assigned by the leader when it proposes, and logged with
/// the command, so replay sees the same values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandMeta {
    /// Milliseconds on the proposing node's clock, fixed in the log; the registry judges a
    /// command at the later of this and the latest time it committed
    /// ([`crate::Registry::clock_ms`]), so time in the log never steps back.
    pub at_ms: u64,
    /// The authenticated caller.
    pub principal: Principal,
    /// The caller's authority (SPEC L5).
    pub actor: Actor,
}

/// One registry command, as the log stores it (`{"register": {...}}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
// Register is the largest (its spec, with checks) and the most common: boxing it would add an
// allocation to nearly every command to shrink the rare small ones.
#[allow(clippy::large_enum_variant)]
pub enum Command {
    /// Create or update an endpoint, or replace an older incarnation.
    Register(Register),
    /// Register a new incarnation the registry picks: one above the highest it knows for the
    /// instance (live, or fenced within `fence_retention_ms`), read at apply time. For callers
    /// that have no incarnation of their own (the Consul-compatible agent API); the
    /// `target.incarnation` given is ignored.
    RegisterNext(Register),
    /// Report an endpoint's serving state.
    SetServing(SetServing),
    /// Put an endpoint in `draining` (SPEC L6).
    Drain(Drain),
    /// Remove an endpoint, fenced by incarnation (SPEC L7).
    Deregister(Deregister),
    /// Remove an endpoint without its incarnation: an operator's action.
    Evict(Evict),
    /// Grant a lease.
    GrantLease(GrantLease),
    /// Revoke a lease and remove every endpoint attached to it.
    RevokeLease(RevokeLease),
    /// Expire a batch of leases in one revision (proposed by the leader engine's lease keeping).
    ExpireLeases(ExpireLeases),
    /// Replace the policy the commands after it are judged by.
    SetPolicy(SetPolicy),
    /// Make the first operator token: only once in a cluster's life (SPEC S1).
    AclBootstrap(AclBootstrap),
    /// Add a token.
    CreateToken(CreateToken),
    /// Revoke a token: refused everywhere from the revision it commits at.
    RevokeToken(RevokeToken),
    /// Bring a mirror of a peer region's import up to a source revision (SPEC G2).
    Mirror(crate::mirror::Mirror),
    /// Raise the registry's format (architecture.md "Formats and versions"): proposed by the leader
    /// only once every member reports a version that knows it.
    RaiseFormat(RaiseFormat),
}

impl Command {
    /// The endpoint a command addresses, and the incarnation it speaks for (an eviction
    /// speaks for none: 0; a `RegisterNext`'s is the registry's pick, made at apply: 0).
    pub fn target(&self) -> Option<(&ServiceKey, &InstanceId, Incarnation)> {
        let target = match self {
            Command::Register(register) | Command::RegisterNext(register) => &register.target,
            Command::SetServing(set) => &set.target,
            Command::Drain(drain) => &drain.target,
            Command::Deregister(deregister) => &deregister.target,
            Command::Evict(evict) => return Some((&evict.key, &evict.instance, Incarnation(0))),
            Command::GrantLease(_)
            | Command::RevokeLease(_)
            | Command::ExpireLeases(_)
            | Command::SetPolicy(_)
            | Command::AclBootstrap(_)
            | Command::CreateToken(_)
            | Command::RevokeToken(_)
            | Command::Mirror(_)
            | Command::RaiseFormat(_) => return None,
        };
        Some((&target.key, &target.instance, target.incarnation))
    }
}

/// Which endpoint incarnation a command addresses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Target {
    /// The service.
    pub key: ServiceKey,
    /// The instance.
    pub instance: InstanceId,
    /// The incarnation the caller speaks for.
    pub incarnation: Incarnation,
}

/// How a registration's lease is chosen: record and lease commit together (SPEC L3).
///
/// Moving a record to another lease (or to none) detaches it from the old one but does not
/// revoke that lease: leases may be shared, and an orphaned one simply expires at its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LeaseSpec {
    /// No lease: the record stays until deregistered.
    #[default]
    None,
    /// Attach to an existing lease of the same tenant.
    Attach(LeaseId),
    /// Grant a new lease with this TTL in the same revision.
    Grant {
        /// The TTL asked for.
        ttl_ms: u64,
    },
}

/// Create or update an endpoint. Idempotent for (key, instance, incarnation, content): a
/// retry returns the committed result. A higher incarnation replaces the old record atomically.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Register {
    /// The endpoint addressed.
    pub target: Target,
    /// The record as submitted.
    pub spec: EndpointSpec,
    /// The lease.
    #[serde(default)]
    pub lease: LeaseSpec,
    /// Compare-and-swap: the record's current revision (0: must not exist).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_revision: Option<Revision>,
}

/// Report a serving state. An app's report never lifts an owner's drain (SPEC L5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetServing {
    /// The endpoint addressed.
    pub target: Target,
    /// The new state.
    pub state: ServingState,
    /// Why, in words.
    pub reason: String,
    /// Compare-and-swap: the record's current revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_revision: Option<Revision>,
}

/// Stop new work for an endpoint before it is removed. With a grace, the registry records
/// when the grace ends (`at_ms + grace_ms`) and whichever node leads then deregisters the
/// instance (SPEC L6; `drains.rs`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Drain {
    /// The endpoint addressed.
    pub target: Target,
    /// Why, in words.
    pub reason: String,
    /// Deregister this long after the drain commits (at most [`MAX_DRAIN_GRACE_MS`]); none:
    /// the instance stays draining until its owner removes it.
    ///
    /// [`MAX_DRAIN_GRACE_MS`]: crate::MAX_DRAIN_GRACE_MS
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_ms: Option<u64>,
    /// Compare-and-swap: the record's current revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_revision: Option<Revision>,
}

/// Remove an endpoint. A lower incarnation than the registered one is refused; a higher one
/// removes the record and fences every lower incarnation from coming back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deregister {
    /// The endpoint addressed.
    pub target: Target,
    /// Compare-and-swap: the record's current revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_revision: Option<Revision>,
}

/// Remove an endpoint whatever its incarnation (an operator's action, reason `evicted`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evict {
    /// The service.
    pub key: ServiceKey,
    /// The instance.
    pub instance: InstanceId,
    /// Compare-and-swap: the record's current revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_revision: Option<Revision>,
}

/// Grant a lease to a tenant, or to one service of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantLease {
    /// The tenant that owns the lease; only its records can attach.
    pub tenant: Label,
    /// The TTL asked for.
    pub ttl_ms: u64,
    /// The service it is for (of `tenant`): only that service's endpoints attach (SPEC L4).
    /// Needs registry format 2; absent, a lease of the whole tenant, as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceKey>,
}

/// Raise the registry's format to `format` (architecture.md "Formats and versions").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RaiseFormat {
    /// The format from which on commands are applied: at most this build's
    /// [`muster_core::FORMAT`].
    pub format: u32,
}

/// Revoke a lease: its endpoints leave with reason `deregistered`, in one revision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevokeLease {
    /// The tenant that owns the lease.
    pub tenant: Label,
    /// The lease.
    pub lease: LeaseId,
    /// Compare-and-swap: the revision the lease was granted at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_revision: Option<Revision>,
}

/// Expire leases: every endpoint attached to any of them leaves with reason `lease_expired`,
/// all in one revision. Leases already gone are skipped (the keeper may lag a revoke).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExpireLeases {
    /// The leases whose deadlines passed.
    pub leases: Vec<LeaseId>,
}

/// Replace the registry's policy (limits, network policy, quotas, history, fence retention,
/// lease TTL bounds) at a new revision. Commands committed before it keep their effect; only
/// later ones are judged by the new policy. The same policy again changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetPolicy {
    /// The whole new policy.
    pub policy: RegistryConfig,
    /// Adopt it only if no policy was ever committed: a node's config file proposed at
    /// bootstrap. The registry judges this against the committed state, so a node whose own
    /// view lags (a joiner still catching up) cannot revert a policy an operator set.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub initial: bool,
}

/// Make the first operator token. Refused with `already_bootstrapped` once any bootstrap
/// committed, so racing bootstraps leave exactly one winner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AclBootstrap {
    /// The token (an operator token: no tenant); only its secret's hash is in the log.
    pub token: TokenSpec,
}

/// Add a token. Its creation time and creator come from the command's metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateToken {
    /// The token; only its secret's hash is in the log.
    pub token: TokenSpec,
}

/// Revoke a token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevokeToken {
    /// The token's accessor.
    pub accessor: Accessor,
}

/// `impl From<Variant> for Command` for every command struct.
macro_rules! into_command {
    ($($variant:ident),*) => {$(
        impl From<$variant> for Command {
            fn from(command: $variant) -> Command {
                Command::$variant(command)
            }
        }
    )*};
}

into_command!(
    Register,
    SetServing,
    Drain,
    Deregister,
    Evict,
    GrantLease,
    RevokeLease,
    ExpireLeases,
    SetPolicy,
    AclBootstrap,
    CreateToken,
    RevokeToken,
    RaiseFormat
);
