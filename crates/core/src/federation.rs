//! The federation vocabulary (SPEC G1, G2): what a region imports from a peer region, how a
//! mirrored set appears in reads, failover policies and the decisions made from them.
//!
//! A region is its own cluster. It mirrors the services it imports from each peer read-only,
//! exactly as the peer's history has them: records, revisions, incarnations and digests
//! unchanged, so a mirrored set is verified the way a local one is.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The label a failover tier's endpoint carries in the set DNS and xDS serve (SPEC G1): the
/// region it spilled from. xDS serves such endpoints at the local set's own priority, so
/// that the tier takes its weighted share instead of waiting for the local set to fail.
pub const SPILLED_FROM: &str = "muster/spilled-from";

use crate::{Digest, Endpoint, Label, NamespaceKey, Rejection, Revision, ServiceKey};

/// What one import of a peer covers: one namespace (`prod/*`) or one service (`prod/api`),
/// of one tenant.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ImportScope {
    /// The tenant and namespace.
    pub namespace: NamespaceKey,
    /// One service of it; absent: every service of the namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<Label>,
}

impl ImportScope {
    /// Parses `namespace/*` or `namespace/service` within `tenant`.
    pub fn parse(tenant: &str, text: &str) -> Result<ImportScope, Rejection> {
        let invalid = || Rejection::InvalidField {
            field: "import".into(),
            reason: format!("'{text}' is neither 'namespace/*' nor 'namespace/service'"),
        };
        let (namespace, service) = text.split_once('/').ok_or_else(invalid)?;
        let namespace = NamespaceKey::new(tenant, namespace)?;
        let service = match service {
            "*" => None,
            name if name.contains('/') => return Err(invalid()),
            name => Some(Label::new("service", name)?),
        };
        Ok(ImportScope { namespace, service })
    }

    /// Whether `key` falls inside this import.
    pub fn covers(&self, key: &ServiceKey) -> bool {
        key.tenant == self.namespace.tenant
            && key.namespace == self.namespace.namespace
            && self.service.as_ref().is_none_or(|s| *s == key.service)
    }

    /// Whether some service falls inside both.
    pub fn overlaps(&self, other: &ImportScope) -> bool {
        self.namespace == other.namespace
            && match (&self.service, &other.service) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            }
    }
}

impl fmt::Display for ImportScope {
    /// `namespace/*` or `namespace/service`, as configured; the tenant is said apart.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.service {
            Some(service) => write!(f, "{}/{service}", self.namespace.namespace),
            None => write!(f, "{}/*", self.namespace.namespace),
        }
    }
}

/// Whether a mirrored set may be used, as the importing region sees it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MirrorState {
    /// Heard from the source region within the stale budget: the last known good set.
    Available,
    /// Not heard from the source region for longer than the stale budget. The set is kept
    /// (never emptied, never expired here) but no caller fails over to it.
    Unavailable,
}

/// One service's set as mirrored from a peer region, in a read of the importing region.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MirroredSet {
    /// The region whose history this set is.
    pub source_region: Label,
    /// The import that brought it (`prod/*`).
    pub import: String,
    /// The service's last change in the source region (its own revision numbering).
    pub source_revision: Revision,
    /// The digest of the set, equal to the source region's digest at `source_revision`.
    pub digest: Digest,
    /// The source region's global revision the mirror has applied everything up to.
    pub cursor: Revision,
    /// Milliseconds since the mirror last heard from the source region.
    pub age_ms: u64,
    /// Whether callers may fail over to it.
    pub state: MirrorState,
    /// How many endpoints the set holds.
    pub total: usize,
    /// How many of them may get new work.
    pub eligible: usize,
    /// Their eligible capacity: the sum of capacity hint (1 when absent) × weight.
    pub capacity: u64,
    /// The records, exactly as the source region committed them.
    pub endpoints: Vec<Endpoint>,
}

/// A per-service failover policy (SPEC G1): where callers go when the local set cannot
/// serve, and how much of their traffic may go.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailoverPolicy {
    /// The services it applies to: `namespace/service` or `namespace/*`.
    pub service: String,
    /// The regions to fail over to, in order of preference.
    pub failover: Vec<Label>,
    /// Spill once fewer local endpoints than this are eligible (default 1).
    #[serde(default = "one")]
    pub min_eligible: u32,
    /// ... or fewer than this percentage of the local set (default 0).
    #[serde(default)]
    pub min_eligible_percent: u8,
    /// The largest share of traffic (percent) allowed to leave the region (default 100).
    #[serde(default = "hundred")]
    pub max_spill_percent: u8,
    /// Once spilling, come back only when this many endpoints above the minimum are eligible
    /// again, or all of the set if it has fewer (hysteresis, so a set hovering at the minimum
    /// does not flap; default 1).
    #[serde(default = "one")]
    pub recover_margin: u32,
}

fn one() -> u32 {
    1
}

fn hundred() -> u8 {
    100
}

/// Why a failover decision is what it is: a stable code.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailoverReason {
    /// The local set has enough eligible endpoints: nothing spills.
    LocalSufficient,
    /// The local set fell below its minimum; traffic spills to `region`.
    LocalBelowMinimum,
    /// The local set is back at its minimum but not above it by the recover margin: the
    /// spill holds (hysteresis).
    Recovering,
    /// The local set is below its minimum and no failover region can take the spill.
    NoRegionAdmitted,
}

/// What a failover region was judged.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CandidateVerdict {
    /// Its eligible capacity can take the spill.
    Admitted,
    /// Its eligible capacity is below what would spill to it.
    InsufficientCapacity,
    /// Its mirror is past the stale budget.
    Unavailable,
    /// This region mirrors nothing of the service from it.
    NotMirrored,
    /// Not judged: an earlier region was admitted.
    NotConsidered,
}

/// One failover region as judged for a decision.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Candidate {
    /// The region.
    pub region: Label,
    /// What it was judged.
    pub verdict: CandidateVerdict,
    /// Its eligible capacity (capacity hint × weight).
    pub capacity: u64,
}

/// A failover decision for one service, with its reason (SPEC G1, C8).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailoverDecision {
    /// Whether some traffic goes to another region.
    pub spill: bool,
    /// The region it goes to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<Label>,
    /// The share of traffic (percent) that goes there.
    pub share_percent: u8,
    /// Why.
    pub reason: FailoverReason,
    /// Eligible local endpoints.
    pub local_eligible: u32,
    /// Local endpoints in any state.
    pub local_total: u32,
    /// The minimum the policy asks for now.
    pub required: u32,
    /// The capacity that would leave: the spilled share of the local set's nominal capacity.
    pub spill_capacity: u64,
    /// Every failover region in the policy's order, as judged.
    pub candidates: Vec<Candidate>,
}

/// `GET /v1/federation/status`: this region's mirrors of its peers (SPEC G2).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FederationStatusReply {
    /// This region.
    pub region: Label,
    /// How long a mirrored set stays usable after its mirror last heard from its region.
    pub stale_budget_ms: u64,
    /// Whether this node leads its region (and so runs the mirrors: `connected`,
    /// `peer_revision` and `lag_revisions` are known only there).
    pub leader: bool,
    /// Each peer region, as configured.
    pub peers: Vec<PeerStatus>,
    /// The failover decision of every service a policy covers.
    pub decisions: Vec<ServiceDecision>,
}

/// One peer region.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerStatus {
    /// The peer's region name.
    pub name: Label,
    /// Its API.
    pub url: String,
    /// Each import from it.
    pub imports: Vec<ImportStatus>,
}

/// One import's mirror.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImportStatus {
    /// The import (`prod/*`).
    pub import: String,
    /// Its tenant.
    pub tenant: Label,
    /// Whether callers may fail over to its sets.
    pub state: MirrorState,
    /// The peer's revision everything of the import up to which is applied here.
    pub cursor: Revision,
    /// Milliseconds since the mirror last heard from the peer; absent: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub age_ms: Option<u64>,
    /// On the leader: whether the mirror's watch is open now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connected: Option<bool>,
    /// On the leader: the newest peer revision the watch has seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_revision: Option<Revision>,
    /// On the leader: how many revisions the mirror is behind what it has seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_revisions: Option<u64>,
    /// On the leader: for how long (ms) the mirror has been behind what it has seen; 0 when
    /// caught up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_ms: Option<u64>,
    /// On the leader: how often it took a fresh snapshot (a gap, compaction or resync).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resnapshots: Option<u64>,
    /// On the leader: the last failure to reach or follow the peer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// The mirrored services.
    pub services: Vec<MirroredService>,
}

/// One mirrored service in a status.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MirroredService {
    /// The service.
    pub service: ServiceKey,
    /// Its last change in the source region.
    pub source_revision: Revision,
    /// The digest of its set (the source region's).
    pub digest: Digest,
    /// How many endpoints it holds.
    pub endpoints: usize,
}

/// One service's failover decision in a status.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceDecision {
    /// The service.
    pub service: ServiceKey,
    /// The decision.
    pub decision: FailoverDecision,
}
