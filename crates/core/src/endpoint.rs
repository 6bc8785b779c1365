//! The endpoint record (SPEC M2) and its serving state (SPEC M3).

use std::net::IpAddr;

use serde::{Deserialize, Serialize};
use smol_str::SmolStr;
use xxhash_rust::xxh3::Xxh3;

use crate::check::CheckKind;
use crate::{Address, Check, Incarnation, InstanceId, Label, Labels, LeaseId, Principal, Revision};

/// Whether an endpoint may get new work. An enum, never a Boolean: "alive but not ready",
/// "draining" and "nobody knows" route differently.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServingState {
    /// Initialising; no normal traffic yet.
    Starting,
    /// Accepting new work.
    Ready,
    /// Accepting work in a reduced mode; eligible only for callers that ask for it.
    Degraded,
    /// Planned shutdown: no new work, in-flight work finishes. Held by the owner (SPEC L5).
    Draining,
    /// Refusing new work.
    NotServing,
    /// Nobody can tell (e.g. the checker cannot reach it). Not the same as `NotServing`.
    Unknown,
}

impl ServingState {
    /// Every serving state, in the API's order.
    pub const ALL: [ServingState; 6] = [
        ServingState::Starting,
        ServingState::Ready,
        ServingState::Degraded,
        ServingState::Draining,
        ServingState::NotServing,
        ServingState::Unknown,
    ];

    /// The state as the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            ServingState::Starting => "starting",
            ServingState::Ready => "ready",
            ServingState::Degraded => "degraded",
            ServingState::Draining => "draining",
            ServingState::NotServing => "not_serving",
            ServingState::Unknown => "unknown",
        }
    }

    /// Whether new work may be assigned: `Ready` always, `Degraded` when the caller accepts it.
    pub fn is_eligible(self, accept_degraded: bool) -> bool {
        match self {
            ServingState::Ready => true,
            ServingState::Degraded => accept_degraded,
            _ => false,
        }
    }
}

/// Who is changing an endpoint: the split of authority in SPEC L5.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Actor {
    /// The orchestrator or controller: owns the lifecycle (and so may lift a drain).
    Owner,
    /// The application itself: owns readiness within the lifecycle.
    App,
    /// A health checker acting on the application's behalf: same authority as the app.
    Checker,
}

impl Actor {
    /// Its wire spelling: `owner`, `app` or `checker`.
    pub fn as_str(self) -> &'static str {
        match self {
            Actor::Owner => "owner",
            Actor::App => "app",
            Actor::Checker => "checker",
        }
    }
}

impl std::fmt::Display for Actor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Transport and application protocol of a named port.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// Plain TCP.
    #[default]
    Tcp,
    /// Plain UDP.
    Udp,
    /// HTTP/1.1 over TCP.
    Http,
    /// HTTP/2 over TCP.
    Http2,
    /// gRPC over HTTP/2.
    Grpc,
}

impl Protocol {
    /// The transport for DNS SRV names (`_<port>._tcp` / `_<port>._udp`).
    pub fn transport(self) -> &'static str {
        match self {
            Protocol::Udp => "udp",
            _ => "tcp",
        }
    }
}

/// A named port: `http` on 8080 speaking HTTP, say.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NamedPort {
    /// The port's name, a DNS label of at most 15 characters (IANA service-name length).
    pub name: Label,
    /// The port number, 1 to 65535.
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 65535))]
    pub port: u16,
    /// What the port speaks.
    pub protocol: Protocol,
}

/// Where an endpoint runs (SPEC G1).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Locality {
    /// The region, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<Label>,
    /// The zone within the region, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<Label>,
    /// A finer failure domain (rack, host), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_zone: Option<Label>,
    /// The failover tier: 0 is preferred, higher tiers are used when lower ones cannot serve.
    #[serde(default)]
    pub priority: u8,
}

/// Who wrote a record, from what source, under which policy.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Provenance {
    /// The authenticated principal that registered this incarnation.
    pub registrar: Principal,
    /// The revision of the registrar's own source object (a pod's resourceVersion, say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub source_revision: Option<SmolStr>,
    /// The revision of the network policy that admitted the addresses.
    pub policy_revision: Revision,
}

/// Who set the serving state, when and why (SPEC H4).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Observation {
    /// The kind of actor.
    pub actor: Actor,
    /// The authenticated principal.
    pub principal: Principal,
    /// When, in milliseconds on the committing leader's clock.
    pub at_ms: u64,
    /// Why, in words.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub reason: SmolStr,
}

/// One endpoint record: an instance incarnation of a service, where it listens, whether it
/// may get new work, and the evidence for all of it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Endpoint {
    /// The stable workload identity.
    pub instance: InstanceId,
    /// The fencing token of this run of the instance.
    pub incarnation: Incarnation,
    /// Canonical addresses, at least one.
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<Address>, min_items = 1))]
    pub addresses: Box<[Address]>,
    /// Named ports, names unique.
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<NamedPort>))]
    pub ports: Box<[NamedPort]>,
    /// Where it runs.
    pub locality: Locality,
    /// Whether it may get new work.
    pub serving: ServingState,
    /// Relative share of new work, 1 to 65535 (an SRV weight).
    pub weight: u16,
    /// Optional bound on concurrent work, a hint for balancers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<u32>,
    /// Descriptive labels.
    pub labels: Labels,
    /// The lease that keeps it registered, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<LeaseId>,
    /// The revision at which this record last changed.
    pub revision: Revision,
    /// Who wrote it.
    pub provenance: Provenance,
    /// Who set its serving state.
    pub observation: Observation,
    /// The health checks the registry runs for it.
    #[serde(default, skip_serializing_if = "<[Check]>::is_empty")]
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<Check>))]
    pub checks: Box<[Check]>,
}

impl Endpoint {
    /// A stable 64-bit hash of every field, for the set [`Digest`](crate::Digest).
    ///
    /// xxh3-64 (seed 0) over the fields in declaration order, strings length-prefixed, so a
    /// client in any language can reproduce it. Changing this changes every digest: treat it
    /// like a wire format.
    pub fn fingerprint(&self) -> u64 {
        let mut h = Fingerprint(Xxh3::new());
        h.text(self.instance.as_str());
        h.u64(self.incarnation.0);
        h.u64(self.addresses.len() as u64);
        for address in &self.addresses {
            h.ip(address.ip);
            h.opt_text(address.scope.as_ref().map(Label::as_str));
        }
        h.u64(self.ports.len() as u64);
        for port in &self.ports {
            h.text(port.name.as_str());
            h.u64(u64::from(port.port));
            h.u64(port.protocol as u64);
        }
        let locality = &self.locality;
        for part in [&locality.region, &locality.zone, &locality.sub_zone] {
            h.opt_text(part.as_ref().map(Label::as_str));
        }
        h.u64(u64::from(locality.priority));
        h.u64(self.serving as u64);
        h.u64(u64::from(self.weight));
        h.u64(self.capacity.map_or(u64::MAX, u64::from));
        h.text(self.labels.packed());
        h.u64(self.lease.map_or(u64::MAX, |lease| lease.0));
        h.u64(self.revision.0);
        h.text(self.provenance.registrar.as_str());
        h.opt_text(self.provenance.source_revision.as_deref());
        h.u64(self.provenance.policy_revision.0);
        h.u64(self.observation.actor as u64);
        h.text(self.observation.principal.as_str());
        h.u64(self.observation.at_ms);
        h.text(&self.observation.reason);
        // Absent checks add nothing, so records without checks keep their fingerprints.
        for check in &self.checks {
            h.check(check);
        }
        h.0.digest()
    }

    /// The record's size in bytes for [`Limits::max_record_bytes`](crate::Limits): fixed
    /// fields at their wire width plus the length of every string.
    pub fn size(&self) -> usize {
        const FIXED: usize = 64;
        let addresses: usize = self
            .addresses
            .iter()
            .map(|a| 16 + a.scope.as_ref().map_or(0, |s| s.as_str().len()))
            .sum();
        let ports: usize = self.ports.iter().map(|p| 4 + p.name.as_str().len()).sum();
        let locality: usize = [&self.locality.region, &self.locality.zone, &self.locality.sub_zone]
            .iter()
            .map(|part| part.as_ref().map_or(0, |l| l.as_str().len()))
            .sum();
        FIXED
            + self.instance.as_str().len()
            + addresses
            + ports
            + locality
            + self.labels.packed().len()
            + self.provenance.registrar.as_str().len()
            + self.provenance.source_revision.as_ref().map_or(0, SmolStr::len)
            + self.observation.principal.as_str().len()
            + self.observation.reason.len()
            + self.checks.iter().map(Check::size).sum::<usize>()
    }
}

/// Length-prefixed field feeding, so that ("ab","c") and ("a","bc") hash differently.
struct Fingerprint(Xxh3);

impl Fingerprint {
    fn u64(&mut self, value: u64) {
        self.0.update(&value.to_le_bytes());
    }

    fn text(&mut self, value: &str) {
        self.u64(value.len() as u64);
        self.0.update(value.as_bytes());
    }

    fn opt_text(&mut self, value: Option<&str>) {
        match value {
            Some(text) => {
                self.0.update(&[1]);
                self.text(text);
            }
            None => self.0.update(&[0]),
        }
    }

    /// A check as its canonical parts: kind, target, HTTP expectations, signal, timing.
    fn check(&mut self, check: &Check) {
        let (kind, status, body) = match &check.kind {
            CheckKind::Http {
                status, body_contains, ..
            } => (
                1,
                u64::from(status.0) << 16 | u64::from(status.1),
                body_contains.as_deref(),
            ),
            CheckKind::Tcp { .. } => (2, 0, None),
            CheckKind::Grpc { .. } => (3, 0, None),
            CheckKind::Ttl { .. } => (4, 0, None),
        };
        self.u64(kind);
        self.text(&check.target());
        self.u64(status);
        self.opt_text(body);
        self.u64(check.signal as u64);
        self.u64(check.interval.as_millis() as u64);
        self.u64(check.timeout.as_millis() as u64);
        self.u64(u64::from(check.rise));
        self.u64(u64::from(check.fall));
    }

    fn ip(&mut self, ip: IpAddr) {
        match ip {
            IpAddr::V4(v4) => {
                self.0.update(&[4]);
                self.0.update(&v4.octets());
            }
            IpAddr::V6(v6) => {
                self.0.update(&[6]);
                self.0.update(&v6.octets());
            }
        }
    }
}
