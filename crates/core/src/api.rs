//! The HTTP/JSON API's bodies and watch frames: the contract between the server, the CLI and
//! the client library. Requests refuse unknown fields; replies may grow fields, so readers
//! should ignore what they do not know.
//!
//! # Routes (all under `/v1`)
//! | method and path | body → reply |
//! |---|---|
//! | `PUT /registry/{tenant}/{namespace}/{service}/{instance}` | [`RegisterRequest`] → [`WriteReply`] |
//! | `PUT /registry/{tenant}/{namespace}/{service}/{instance}/serving` | [`SetServingRequest`] → [`WriteReply`] |
//! | `POST /registry/{tenant}/{namespace}/{service}/{instance}/drain` | [`DrainRequest`] → [`WriteReply`] |
//! | `DELETE /registry/{tenant}/{namespace}/{service}/{instance}?incarnation=N[&expected_revision=R]` | → [`WriteReply`] |
//! | `PUT /registry/{tenant}/{namespace}/{service}/{instance}/check` | [`CheckReportRequest`] → [`CheckReportReply`] |
//! | `PUT /registry/{tenant}/{namespace}/{service}/{instance}/in-flight` | [`InFlightRequest`] → [`WriteReply`] |
//! | `GET /registry/{tenant}/{namespace}/{service}[?revision=R][&limit=N][&page_token=T][&index=N&wait=30s][&consistency=stale\|default\|consistent]` | → [`SnapshotReply`] |
//! | `GET /registry/{tenant}/{namespace}[?consistency=...]` | → [`ServicesReply`] |
//! | `GET /watch/{tenant}/{namespace}/{service}[?from_revision=R]` | → NDJSON [`Frame`]s |
//! | `GET /watch/{tenant}/{namespace}[?from_revision=R]` | → NDJSON [`Frame`]s |
//! | `POST /leases/{tenant}` | [`GrantLeaseRequest`] → [`WriteReply`] (with `lease`) |
//! | `PUT /leases/{tenant}/{id}/renew` | → [`LeaseReply`] (no log write) |
//! | `DELETE /leases/{tenant}/{id}` | → [`WriteReply`] |
//! | `GET /status` | → [`StatusReply`] |
//! | `GET /policy` | → [`PolicyReply`] (the replicated registry policy) |
//! | `PUT /policy` | the policy (the `[registry]` section's shape, as JSON) → [`PolicySetReply`] |
//! | `GET /cluster` | → [`ClusterReply`] |
//! | `POST /cluster/members` | [`AddMemberRequest`] → [`ClusterReply`] (leader only: `not_leader` elsewhere) |
//! | `DELETE /cluster/members/{id}` | → [`ClusterReply`] (leader only) |
//! | `GET /metrics` | → Prometheus text 0.0.4 (also at `/metrics` without `/v1`): consensus, writes by tenant, watches, blocking queries, health, DNS (SPEC O1) |
//! | `GET /prometheus/sd[?tenant=T][&namespace=NS][&service=S][&port=P][&state=ready,…\|any]` | → Prometheus `http_sd` target groups `[{"targets":["host:port"],"labels":{"__meta_muster_…":…}}]` (default `ready` only, a group per port) |
//! | `GET /audit[?tenant=T][&principal=P][&key=T/NS[/SVC]][&outcome=O][&since_ms=MS][&until_ms=MS][&limit=N][&cursor=C]` | → [`AuditReply`] (admin; newest first) |
//! | `POST /convergence/report` | [`ConvergenceReport`](crate::convergence::ConvergenceReport) → [`ReportReply`](crate::convergence::ReportReply) (SPEC O3) |
//! | `GET /convergence/{tenant}/{namespace}/{service}[?revision=R][&cohort=K=V][&fraction=F][&stream=true]` | → [`ConvergenceReply`](crate::convergence::ConvergenceReply) |
//! | `GET /openapi.json` | → this contract as an OpenAPI 3.1 document (SPEC S5) |
//!
//! Errors are [`ErrorBody`] with the stable code of a [`Rejection`](crate::Rejection) or of
//! the API itself (`bad_request`, `payload_too_large`, `method_not_allowed`, `compacted`, ...).
//!
//! # Watches
//! Without `from_revision`, a watch starts with the current set: one `snapshot` frame per
//! service (none for an unknown service), then a `progress` frame with the revision they
//! were read at. With `from_revision=R` it replays every update after R, or sends `error`
//! with code `compacted` and the current revision (take a snapshot and watch from there).
//! Then it streams `update`s live, `progress` every few seconds while idle, `resync` (and
//! closes) if the consumer falls too far behind, and `closing` when the server stops.

use std::collections::BTreeMap;

/// The header `POST /v1/acl/bootstrap` carries the bootstrap secret in (`[auth]
/// bootstrap_secret_file`, SPEC S1).
pub const BOOTSTRAP_SECRET_HEADER: &str = "x-muster-bootstrap-secret";

use serde::{Deserialize, Serialize};

use crate::check::CheckStatus;
use crate::{
    Actor, Endpoint, EndpointSpec, Incarnation, InstanceId, Label, LeaseId, Principal, Revision, ServiceSnapshot,
    ServiceUpdate, ServingState,
};

/// How a registration gets its lease: a new one with this TTL, or an existing one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged, deny_unknown_fields)]
pub enum LeaseRequest {
    /// Grant a new lease in the same revision as the record.
    Grant {
        /// The TTL asked for.
        ttl_ms: u64,
    },
    /// Attach to an existing lease of the tenant.
    Attach {
        /// The lease.
        id: LeaseId,
    },
}

/// `PUT /v1/registry/{tenant}/{namespace}/{service}/{instance}`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegisterRequest {
    /// The incarnation registering.
    pub incarnation: Incarnation,
    /// The record.
    pub endpoint: EndpointSpec,
    /// The lease, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<LeaseRequest>,
    /// Compare-and-swap on the record's revision (0: must not exist).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_revision: Option<Revision>,
}

/// `PUT .../{instance}/serving`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetServingRequest {
    /// The incarnation speaking.
    pub incarnation: Incarnation,
    /// The new state.
    pub state: ServingState,
    /// Why.
    #[serde(default)]
    pub reason: String,
    /// Compare-and-swap on the record's revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_revision: Option<Revision>,
}

/// `POST .../{instance}/drain`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrainRequest {
    /// The incarnation speaking.
    pub incarnation: Incarnation,
    /// Why.
    #[serde(default)]
    pub reason: String,
    /// Compare-and-swap on the record's revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_revision: Option<Revision>,
    /// Deregister the instance (fenced by its incarnation) this long after the drain commits,
    /// or earlier when it reports zero requests in flight (SPEC L6). At most one hour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_ms: Option<u64>,
}

/// `PUT .../{instance}/check`: a TTL check's report from the instance or its agent.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckReportRequest {
    /// The incarnation reporting.
    pub incarnation: Incarnation,
    /// Pass, warn or fail.
    pub status: CheckStatus,
    /// What the check saw, in the app's words (Consul's `?note=` and `Output`): the reason
    /// recorded with the state this report sets, cut to the registry's text limit. A note
    /// that changes while the state holds is recorded at most once a minute per instance
    /// (SPEC H4). Applied from the cluster's format 3 on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The reply to a TTL report, after any change it caused has committed.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckReportReply {
    /// The routing state the endpoint's checks now combine to.
    pub serving: ServingState,
    /// The revision of the change the report caused, if it caused one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<Revision>,
}

/// `PUT .../{instance}/in-flight`: how many requests a draining instance still serves.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InFlightRequest {
    /// The incarnation reporting.
    pub incarnation: Incarnation,
    /// Requests in flight; zero ends a pending drain grace at once.
    pub in_flight: u64,
}

/// The query of `DELETE .../{instance}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams), into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct DeregisterQuery {
    /// The incarnation speaking.
    pub incarnation: Incarnation,
    /// Compare-and-swap on the record's revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_revision: Option<Revision>,
}

/// `POST /v1/leases/{tenant}`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrantLeaseRequest {
    /// The TTL asked for.
    pub ttl_ms: u64,
    /// The service the lease is for, `namespace/service` (SPEC L4): renewals and revocation
    /// are judged on that service's rules, and only its endpoints attach. Absent: a lease of
    /// the whole tenant, which only a token with rights on every service of it can keep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
}

/// A lease in a reply.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseReply {
    /// The lease.
    pub id: LeaseId,
    /// Its TTL.
    pub ttl_ms: u64,
    /// When it expires unless renewed, in Unix milliseconds on the server's clock.
    pub deadline_unix_ms: u64,
}

/// The reply of every write.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteReply {
    /// The committed revision holding the write's effect.
    pub revision: Revision,
    /// The lease granted or attached, with its deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<LeaseReply>,
    /// When nothing changed, why: `already_committed`, `drain_held`, `nothing_to_expire`, or
    /// `no_drain_ended` (an in-flight report that ended no drain).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unchanged: Option<String>,
}

/// `GET /v1/registry/{tenant}/{namespace}/{service}`: one page of the set at one revision.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotReply {
    /// The global revision the set was read at (resume a watch from here).
    pub revision: Revision,
    /// The service's last change at or before `revision`.
    pub service_revision: Revision,
    /// The digest of the whole set.
    pub digest: crate::Digest,
    /// How many endpoints the whole set holds.
    pub total: usize,
    /// This page's endpoints, sorted by instance.
    pub endpoints: Vec<Endpoint>,
    /// Pass as `page_token` for the next page; absent on the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_page_token: Option<String>,
    /// Self-preservation holds removals from this service now (SPEC H5): endpoints that look
    /// dead may still be listed, on purpose.
    #[serde(default)]
    pub protection_active: bool,
    /// The same service as mirrored from peer regions (SPEC G2), on the first page of a read
    /// that asks for them (`federation=true`) in a federated region.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mirrors: Vec<crate::federation::MirroredSet>,
    /// The failover decision for the service, when a policy covers it (SPEC G1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover: Option<crate::federation::FailoverDecision>,
}

/// One service in a namespace listing.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceSummary {
    /// The service's name.
    pub service: Label,
    /// Its last change.
    pub revision: Revision,
    /// The digest of its set.
    pub digest: crate::Digest,
    /// How many endpoints it has.
    pub endpoints: usize,
    /// Self-preservation holds removals from this service now (SPEC H5).
    #[serde(default)]
    pub protection_active: bool,
}

/// `GET /v1/registry/{tenant}/{namespace}`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServicesReply {
    /// The global revision the listing was read at.
    pub revision: Revision,
    /// The services, sorted by name; one left empty more than 5 minutes ago is not listed
    /// (it is still readable as an empty set while its removals are fenced).
    pub services: Vec<ServiceSummary>,
}

/// `GET /v1/status`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusReply {
    /// This node's id.
    pub node_id: u64,
    /// The leader's id, if known.
    pub leader: Option<u64>,
    /// The registry's revision.
    pub revision: Revision,
    /// The last applied log index.
    pub applied_index: u64,
    /// Milliseconds since the server started.
    pub uptime_ms: u64,
    /// Whether the server accepts writes and reads (false while starting or stopping).
    pub ready: bool,
    /// Services whose removals self-preservation holds now (`tenant/namespace/service`).
    #[serde(default)]
    pub protected_services: Vec<String>,
    /// Milliseconds since this node last heard from a leader (for the leader: since a
    /// quorum acknowledged it); absent when it never has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_leader_contact_ms: Option<u64>,
    /// Why this node stopped serving, when its storage failed (then `ready` is false and the
    /// server is exiting); absent on a healthy node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fatal: Option<String>,
    /// The replicated registry policy against this node's config file; absent from servers
    /// that predate it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<PolicyStatus>,
    /// What callers hold open against the admission budgets (SPEC W4, S6); only for a
    /// caller that sees every tenant, and absent from servers that predate it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<AdmissionStatus>,
    /// The registry format the cluster applies, and the newest this node's build knows
    /// (architecture.md "Formats and versions"): below it while some member runs an older build;
    /// absent from servers that predate it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<FormatStatus>,
}

/// The registry format in `GET /v1/status`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FormatStatus {
    /// The format the registry applies commands at: raised by the leader once every member
    /// knows a newer one.
    pub cluster: u32,
    /// The newest format this node's build applies.
    pub node: u32,
}

/// The node's admission table: every stream and parked query, whichever listener it came
/// in by, holds a slot against its principal's and its tenant's budgets.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdmissionStatus {
    /// Open holds by kind: `watch`, `live`, `xds`, `parked`.
    pub held: BTreeMap<String, u64>,
    /// xDS resource names subscribed, every stream together.
    pub xds_names: u64,
    /// Principals holding anything.
    pub principals: u64,
    /// Tenants holding anything (the cluster-wide holder counts as one).
    pub tenants: u64,
    /// The budgets, by setting name (`max_watches_per_principal`, ...).
    pub budgets: BTreeMap<String, u64>,
    /// Refusals since the server started, by the budget that refused.
    pub refused: BTreeMap<String, u64>,
}

/// How the registry policy in force (replicated: it judges every command) compares with the
/// `[registry]` section of the answering node's config file, which only decided the initial
/// policy.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyStatus {
    /// The revision the policy in force was committed at (0: the initial policy).
    pub revision: Revision,
    /// Whether this node's config file says the same.
    pub matches_config: bool,
    /// The settings that differ, as dotted paths (`quotas.services_per_tenant`).
    pub differences: Vec<String>,
}

/// `GET /v1/policy`: the registry policy in force. `P` is the policy's type
/// (`muster_registry::RegistryConfig`; this crate does not depend on the registry).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyReply<P> {
    /// The revision it was committed at (0: the initial policy).
    pub revision: Revision,
    /// The policy, in the shape of the config file's `[registry]` section.
    pub policy: P,
}

/// `PUT /v1/policy`'s reply.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicySetReply {
    /// The revision the new policy is in force from: every later command is judged by it.
    pub revision: Revision,
}

/// One member of the Raft group in `GET /v1/cluster`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterMember {
    /// Its node id.
    pub id: u64,
    /// Its node-to-node address.
    pub addr: String,
    /// A voter, or a learner still catching up.
    pub voter: bool,
}

/// `GET /v1/cluster`: the group as the answering node knows it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterReply {
    /// The answering node.
    pub node_id: u64,
    /// The leader, if known.
    pub leader: Option<u64>,
    /// The members, by id.
    pub members: Vec<ClusterMember>,
}

/// `POST /v1/cluster/members`: add a node (as a learner until it caught up, then a voter).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddMemberRequest {
    /// The new node's id.
    pub id: u64,
    /// Its node-to-node address (`host:port`, its `--cluster-addr`).
    pub addr: String,
}

/// The query of `GET /v1/audit` (SPEC S4): every filter optional, all of them must match.
/// Records come newest first; `cursor` (a previous reply's `next_cursor`) continues with the
/// older ones.
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// Only records of this tenant (of the key written, the lease, or the request denied).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// Only records of this principal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// Only records of this service (`tenant/namespace/service`) or of any service of this
    /// namespace (`tenant/namespace`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Only these outcomes: a kind (`applied`, `unchanged`, `refused`, `denied`) or one
    /// outcome exactly (`refused:stale_incarnation`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// Only records at or after this time (Unix milliseconds; a denial with a `count`, when
    /// its last request was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_ms: Option<u64>,
    /// Only records before this time (Unix milliseconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_ms: Option<u64>,
    /// At most this many records (default 100, at most 1,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    /// Continue after the previous page (opaque; valid on the node that issued it, until it
    /// restarts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

/// What an audit record is about.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditKind {
    /// A committed command, applied or refused: recorded by every node from the replicated
    /// log, the same on each.
    Mutation,
    /// A request refused before it reached the log (authentication, authorisation, the
    /// browser guard), or a stream ended by its token's revocation: recorded by the node that
    /// refused it only, a flood as one record with a `count`.
    Denial,
}

/// One audit record (SPEC S4).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// Its number on this node, increasing; numbering starts again when the node restarts.
    pub seq: u64,
    /// When (Unix milliseconds): a mutation's is the time fixed in the log with the command,
    /// a denial's the refusing node's clock.
    pub at_ms: u64,
    /// A mutation or a denial.
    pub kind: AuditKind,
    /// Who: the authenticated caller; absent for a denial of a caller not authenticated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// A mutation's authority (SPEC L5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<Actor>,
    /// What: the command (`register`, `set_serving`, `drain`, `deregister`, `evict`,
    /// `grant_lease`, `revoke_lease`, `expire_leases`, `set_policy`, `acl_bootstrap`,
    /// `create_token`, `revoke_token`) or the verb denied.
    pub verb: String,
    /// The tenant concerned, when one is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<Label>,
    /// The service concerned: `tenant/namespace/service`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The instance concerned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<InstanceId>,
    /// The incarnation the command spoke for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incarnation: Option<Incarnation>,
    /// The lease concerned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<LeaseId>,
    /// The token concerned (its accessor): token bootstrap, creation, revocation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accessor: Option<String>,
    /// The committed revision holding the command's effect (absent when refused or denied).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<Revision>,
    /// `applied`, `unchanged:<why>`, `refused:<error code>` or `denied:<error code>`.
    pub outcome: String,
    /// Why it was refused or denied, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A denial: what was asked for (method and path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    /// A denial: the address the request came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// A mutation: the log entry that carried it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_index: Option<u64>,
    /// A mutation: the node that proposed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<u64>,
    /// A denial: how many requests it stands for. Denials from one source address (its IP,
    /// any port) by one principal, of one verb and tenant, with one code and reason, within
    /// an interval of 10 s from the first are one record (SPEC S4: a flood is counted, not
    /// kept request by request); `at_ms`, `key`, `resource` and `source` are the first
    /// request's, `last_at_ms` the last's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    /// A denial: when the last request it counts was refused (Unix milliseconds, this node's
    /// clock). Once 10 s have passed since `at_ms` the record no longer changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_at_ms: Option<u64>,
}

/// `GET /v1/audit`: one page of records, newest first.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditReply {
    /// The records that matched, newest first.
    pub records: Vec<AuditRecord>,
    /// Pass as `cursor` for the next (older) page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
    /// How many mutation records this node keeps at most (the server's `audit.retention`).
    /// Denials are kept apart, so no number of them evicts a mutation (SPEC S8).
    pub retention: usize,
    /// How many mutation records this node has dropped since it started, oldest first, to
    /// stay within `retention`.
    pub evicted: u64,
    /// How many denial records this node keeps at most (the server's
    /// `audit.denial_retention`).
    #[serde(default)]
    pub denial_retention: usize,
    /// How many denial records this node has dropped since it started, oldest first, to stay
    /// within `denial_retention`.
    #[serde(default)]
    pub denials_evicted: u64,
}

/// An error's code and message.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// The stable, machine-readable code.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::ErrorCode))]
    pub code: String,
    /// For people: names the field and the limit.
    pub message: String,
}

/// Every error reply: `{"error": {"code": ..., "message": ...}}`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// One newline-delimited JSON frame of a watch.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Frame {
    /// A service's complete set.
    Snapshot {
        /// The global revision it was read at.
        revision: Revision,
        /// The set.
        snapshot: ServiceSnapshot,
    },
    /// One revision's events for one service.
    Update(ServiceUpdate),
    /// Nothing to report; everything up to `revision` has been sent.
    Progress {
        /// The current revision.
        revision: Revision,
    },
    /// The watch cannot continue (e.g. `compacted`); the stream closes after it.
    Error {
        /// The error.
        error: ErrorDetail,
        /// The current revision (take a snapshot there).
        revision: Revision,
    },
    /// The consumer fell too far behind; take a snapshot and watch again. The stream closes.
    Resync {
        /// The current revision.
        revision: Revision,
    },
    /// The server is stopping; reconnect (to another node) and resume from your revision.
    Closing {
        /// The last revision sent.
        revision: Revision,
    },
}

/// `POST /v1/acl/tokens`: a new token (SPEC S1, S2). Rules are in their text form,
/// `NAMESPACE/SERVICE=VERB,...` (names exact, `prefix*` or `*`; verbs `read`, `watch`,
/// `register`, `renew`, `set_state`, `deregister`, `admin`, or `*`).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenCreateRequest {
    /// The tenant the token belongs to; absent: an operator token (every tenant and the
    /// cluster-wide routes), which only an operator may create.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<Label>,
    /// Allow rules.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Deny rules.
    #[serde(default)]
    pub deny: Vec<String>,
    /// A client certificate SAN (URI such as `spiffe://...`, or a DNS name) that
    /// authenticates as this token over mutual TLS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub san: Option<String>,
    /// What the token is for.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// The authority the token speaks with (SPEC L5): `owner` (the orchestrator: its drain
    /// holds against the app), `app` (the default) or `checker`. An operator token speaks
    /// as any role and takes none but `owner`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Actor>,
}

/// The reply of `POST /v1/acl/bootstrap` and `POST /v1/acl/tokens`: the only time the secret
/// is shown.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenSecretReply {
    /// The token's public id (lists, audit, revocation).
    pub accessor: String,
    /// The bearer secret: `Authorization: Bearer <secret>`.
    pub secret: String,
}

/// A token as `GET /v1/acl/tokens` lists it: never its secret or hash.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenInfo {
    /// The public id.
    pub accessor: String,
    /// Its tenant; absent: an operator token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<Label>,
    /// Allow rules, text form.
    pub allow: Vec<String>,
    /// Deny rules, text form.
    pub deny: Vec<String>,
    /// The certificate SAN bound to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub san: Option<String>,
    /// What it is for.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// The authority it speaks with (SPEC L5); an operator token's is `owner`, and it may
    /// speak as any role. `X-Muster-Actor` may narrow it, never widen it. (A server that
    /// predates roles sends none: `app`.)
    #[serde(default = "app_role")]
    pub role: Actor,
    /// When it was created (ms since the Unix epoch, the creating command's time).
    pub created_at_ms: u64,
    /// Who created it.
    pub created_by: Principal,
    /// The principal it acts as (`token:<accessor>`).
    pub principal: Principal,
}

/// `GET /v1/acl/tokens`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenListReply {
    /// The tokens the caller may see, by accessor.
    pub tokens: Vec<TokenInfo>,
}

/// `DELETE /v1/acl/tokens/{accessor}`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRevokeReply {
    /// The revision the revocation committed at: from it on, every node refuses the token.
    pub revision: Revision,
}

fn app_role() -> Actor {
    Actor::App
}
