//! The client's own request types, one per write: a constructor taking what the call cannot
//! do without, and chained setters for the rest (SPEC C7, D4). They wrap the wire bodies of
//! [`muster_core::api`] and serialize exactly as those do, so the server sees the same JSON;
//! the fields are private so a field added to the wire later is a new setter, not a break.
//!
//! ```text
//!  Registration::new(Incarnation(7)).address("10.0.0.1").port("http", 8080).lease_ttl(ttl)
//!      └──▶ RegisterRequest { incarnation, endpoint: EndpointSpec { .. }, lease, .. } ──▶ JSON
//! ```

use std::time::Duration;

use muster_core::api::{
    CheckReportRequest, DeregisterQuery, DrainRequest, GrantLeaseRequest, InFlightRequest, LeaseRequest,
    RegisterRequest, SetServingRequest, TokenCreateRequest,
};
use muster_core::check::CheckStatus;
use muster_core::{
    AddressSpec, CheckSpec, EndpointSpec, Incarnation, Label, LeaseId, LocalitySpec, PortSpec, Protocol, Revision,
    ServingState,
};

use crate::http::duration::millis;

/// A registration (`PUT .../{instance}`): the incarnation registering and its record.
///
/// The record needs at least one address ([`address`](Registration::address)); the server
/// refuses one without (`invalid_field`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration(RegisterRequest);

impl Registration {
    /// A registration of `incarnation` with an empty record, no lease and no precondition.
    pub fn new(incarnation: Incarnation) -> Registration {
        Registration(RegisterRequest {
            incarnation,
            endpoint: EndpointSpec::default(),
            lease: None,
            expected_revision: None,
        })
    }

    /// Replaces the whole record (what the registrar and the CLI build from their flags).
    #[must_use]
    pub fn endpoint(mut self, endpoint: EndpointSpec) -> Registration {
        self.0.endpoint = endpoint;
        self
    }

    /// Adds an address (IPv4 or IPv6 text), reachable from everywhere.
    #[must_use]
    pub fn address(mut self, ip: impl Into<String>) -> Registration {
        self.0.endpoint.addresses.push(AddressSpec {
            ip: ip.into(),
            scope: None,
        });
        self
    }

    /// Adds an address reachable only from callers in `scope` (SPEC C3).
    #[must_use]
    pub fn scoped_address(mut self, ip: impl Into<String>, scope: impl Into<String>) -> Registration {
        self.0.endpoint.addresses.push(AddressSpec {
            ip: ip.into(),
            scope: Some(scope.into()),
        });
        self
    }

    /// Adds a named TCP port.
    #[must_use]
    pub fn port(self, name: impl Into<String>, port: u16) -> Registration {
        self.port_speaking(name, port, Protocol::default())
    }

    /// Adds a named port speaking `protocol`.
    #[must_use]
    pub fn port_speaking(mut self, name: impl Into<String>, port: u16, protocol: Protocol) -> Registration {
        self.0.endpoint.ports.push(PortSpec {
            name: name.into(),
            port,
            protocol,
        });
        self
    }

    /// Where the instance runs.
    #[must_use]
    pub fn locality(mut self, locality: LocalitySpec) -> Registration {
        self.0.endpoint.locality = locality;
        self
    }

    /// The serving state of a new incarnation (by default `ready`, or `starting` with
    /// readiness checks).
    #[must_use]
    pub fn serving(mut self, state: ServingState) -> Registration {
        self.0.endpoint.serving = Some(state);
        self
    }

    /// The relative weight, 1 to 65535 (100 by default).
    #[must_use]
    pub fn weight(mut self, weight: u32) -> Registration {
        self.0.endpoint.weight = Some(weight);
        self
    }

    /// The bound on concurrent work.
    #[must_use]
    pub fn capacity(mut self, capacity: u32) -> Registration {
        self.0.endpoint.capacity = Some(capacity);
        self
    }

    /// Adds (or replaces) a descriptive label.
    #[must_use]
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Registration {
        self.0.endpoint.labels.insert(key.into(), value.into());
        self
    }

    /// The registrar's own source revision.
    #[must_use]
    pub fn source_revision(mut self, revision: impl Into<String>) -> Registration {
        self.0.endpoint.source_revision = Some(revision.into());
        self
    }

    /// Adds a health check for the registry's checker to run.
    #[must_use]
    pub fn check(mut self, check: CheckSpec) -> Registration {
        self.0.endpoint.checks.push(check);
        self
    }

    /// Attaches the record to an existing lease of the tenant.
    #[must_use]
    pub fn lease(mut self, lease: LeaseId) -> Registration {
        self.0.lease = Some(LeaseRequest::Attach { id: lease });
        self
    }

    /// Grants a new lease of `ttl` in the same revision as the record.
    #[must_use]
    pub fn lease_ttl(mut self, ttl: Duration) -> Registration {
        self.0.lease = Some(LeaseRequest::Grant { ttl_ms: millis(ttl) });
        self
    }

    /// Compare-and-swap on the record's revision ([`Revision`] 0: must not exist yet).
    #[must_use]
    pub fn expected_revision(mut self, revision: Revision) -> Registration {
        self.0.expected_revision = Some(revision);
        self
    }

    pub(crate) fn wire(&self) -> &RegisterRequest {
        &self.0
    }

    pub(crate) fn into_request(self) -> RegisterRequest {
        self.0
    }
}

/// A serving-state change (`PUT .../{instance}/serving`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServingChange(SetServingRequest);

impl ServingChange {
    /// `incarnation` asks for `state`.
    pub fn new(incarnation: Incarnation, state: ServingState) -> ServingChange {
        ServingChange(SetServingRequest {
            incarnation,
            state,
            reason: String::new(),
            expected_revision: None,
        })
    }

    /// Why (shown in the record's provenance).
    #[must_use]
    pub fn reason(mut self, reason: impl Into<String>) -> ServingChange {
        self.0.reason = reason.into();
        self
    }

    /// Compare-and-swap on the record's revision.
    #[must_use]
    pub fn expected_revision(mut self, revision: Revision) -> ServingChange {
        self.0.expected_revision = Some(revision);
        self
    }

    pub(crate) fn wire(&self) -> &SetServingRequest {
        &self.0
    }
}

/// A drain (`POST .../{instance}/drain`, SPEC L6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drain(DrainRequest);

impl Drain {
    /// `incarnation` is drained; without [`grace`](Drain::grace) it stays registered.
    pub fn new(incarnation: Incarnation) -> Drain {
        Drain(DrainRequest {
            incarnation,
            reason: String::new(),
            expected_revision: None,
            grace_ms: None,
        })
    }

    /// Why.
    #[must_use]
    pub fn reason(mut self, reason: impl Into<String>) -> Drain {
        self.0.reason = reason.into();
        self
    }

    /// Compare-and-swap on the record's revision.
    #[must_use]
    pub fn expected_revision(mut self, revision: Revision) -> Drain {
        self.0.expected_revision = Some(revision);
        self
    }

    /// Deregister this long after the drain commits, or earlier when the instance reports
    /// zero requests in flight (at most one hour; the server refuses more).
    #[must_use]
    pub fn grace(mut self, grace: Duration) -> Drain {
        self.0.grace_ms = Some(millis(grace));
        self
    }

    pub(crate) fn wire(&self) -> &DrainRequest {
        &self.0
    }
}

/// A TTL check's report (`PUT .../{instance}/check`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckReport(CheckReportRequest);

impl CheckReport {
    /// `incarnation` reports `status` (pass, warn or fail).
    pub fn new(incarnation: Incarnation, status: CheckStatus) -> CheckReport {
        CheckReport(CheckReportRequest {
            incarnation,
            status,
            note: None,
        })
    }

    /// What the check saw, recorded as the reason of the state the report sets.
    #[must_use]
    pub fn note(mut self, note: impl Into<String>) -> CheckReport {
        self.0.note = Some(note.into());
        self
    }

    pub(crate) fn wire(&self) -> &CheckReportRequest {
        &self.0
    }
}

/// How many requests a draining instance still serves (`PUT .../{instance}/in-flight`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InFlightReport(InFlightRequest);

impl InFlightReport {
    /// `incarnation` has `in_flight` requests in flight; zero ends a pending drain grace.
    pub fn new(incarnation: Incarnation, in_flight: u64) -> InFlightReport {
        InFlightReport(InFlightRequest { incarnation, in_flight })
    }

    pub(crate) fn wire(&self) -> &InFlightRequest {
        &self.0
    }
}

/// A deregistration (`DELETE .../{instance}`), fenced by the incarnation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deregistration(DeregisterQuery);

impl Deregistration {
    /// `incarnation` leaves.
    pub fn new(incarnation: Incarnation) -> Deregistration {
        Deregistration(DeregisterQuery {
            incarnation,
            expected_revision: None,
        })
    }

    /// Compare-and-swap on the record's revision.
    #[must_use]
    pub fn expected_revision(mut self, revision: Revision) -> Deregistration {
        self.0.expected_revision = Some(revision);
        self
    }

    pub(crate) fn wire(&self) -> &DeregisterQuery {
        &self.0
    }
}

/// A lease (`POST /v1/leases/{tenant}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseGrant(GrantLeaseRequest);

impl LeaseGrant {
    /// A lease of `ttl` (whole milliseconds; the server clamps it to its bounds) of the
    /// whole tenant: only a token with rights on every service of it can keep it.
    pub fn new(ttl: Duration) -> LeaseGrant {
        LeaseGrant(GrantLeaseRequest {
            ttl_ms: millis(ttl),
            service: None,
        })
    }

    /// The lease is `namespace/service`'s (SPEC L4): renewed and revoked on that service's
    /// rights, held only by its endpoints.
    #[must_use]
    pub fn service(mut self, namespace: &Label, service: &Label) -> LeaseGrant {
        self.0.service = Some(format!("{namespace}/{service}"));
        self
    }

    pub(crate) fn wire(&self) -> &GrantLeaseRequest {
        &self.0
    }
}

/// A new token (`POST /v1/acl/tokens`, SPEC S1, S2). Rules are in their text form,
/// `NAMESPACE/SERVICE=VERB,...`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewToken(TokenCreateRequest);

impl NewToken {
    /// An operator token (every tenant and the cluster-wide routes) with no rules yet; only
    /// an operator may create one. [`tenant`](NewToken::tenant) makes it a tenant's.
    pub fn new() -> NewToken {
        NewToken::default()
    }

    /// The tenant the token belongs to.
    #[must_use]
    pub fn tenant(mut self, tenant: Label) -> NewToken {
        self.0.tenant = Some(tenant);
        self
    }

    /// Adds an allow rule.
    #[must_use]
    pub fn allow(mut self, rule: impl Into<String>) -> NewToken {
        self.0.allow.push(rule.into());
        self
    }

    /// Adds a deny rule.
    #[must_use]
    pub fn deny(mut self, rule: impl Into<String>) -> NewToken {
        self.0.deny.push(rule.into());
        self
    }

    /// A client certificate SAN (`spiffe://...` or a DNS name) that authenticates as this
    /// token over mutual TLS.
    #[must_use]
    pub fn san(mut self, san: impl Into<String>) -> NewToken {
        self.0.san = Some(san.into());
        self
    }

    /// What the token is for.
    #[must_use]
    pub fn description(mut self, description: impl Into<String>) -> NewToken {
        self.0.description = description.into();
        self
    }

    /// The authority it speaks with (SPEC L5): `Owner` (an orchestrator: its drain holds
    /// against the app), `App` (the default) or `Checker`.
    #[must_use]
    pub fn role(mut self, role: muster_core::Actor) -> NewToken {
        self.0.role = Some(role);
        self
    }

    pub(crate) fn wire(&self) -> &TokenCreateRequest {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_registration_serializes_as_the_wire_body_does() {
        let registration = Registration::new(Incarnation(7))
            .address("10.0.0.1")
            .scoped_address("192.168.1.1", "lan")
            .port("http", 8080)
            .weight(50)
            .label("team", "pay")
            .lease_ttl(Duration::from_secs(10))
            .expected_revision(Revision(0));
        assert_eq!(
            serde_json::to_value(registration.wire()).unwrap(),
            json!({
                "incarnation": 7,
                "endpoint": {
                    "addresses": [{"ip": "10.0.0.1"}, {"ip": "192.168.1.1", "scope": "lan"}],
                    "ports": [{"name": "http", "port": 8080, "protocol": "tcp"}],
                    "locality": {"priority": 0},
                    "weight": 50,
                    "labels": {"team": "pay"}
                },
                "lease": {"ttl_ms": 10000},
                "expected_revision": 0
            })
        );
        let attached = Registration::new(Incarnation(7)).lease(LeaseId(3));
        assert_eq!(
            serde_json::to_value(attached.wire()).unwrap()["lease"],
            json!({"id": 3})
        );
    }

    #[test]
    fn the_other_writes_serialize_as_their_wire_bodies_do() {
        let drain = Drain::new(Incarnation(2))
            .reason("deploy")
            .grace(Duration::from_secs(5));
        assert_eq!(
            serde_json::to_value(drain.wire()).unwrap(),
            json!({"incarnation": 2, "reason": "deploy", "grace_ms": 5000})
        );
        let serving = ServingChange::new(Incarnation(2), ServingState::Degraded).expected_revision(Revision(9));
        assert_eq!(
            serde_json::to_value(serving.wire()).unwrap(),
            json!({"incarnation": 2, "state": "degraded", "reason": "", "expected_revision": 9})
        );
        let token = NewToken::new()
            .tenant(Label::new("tenant", "acme").unwrap())
            .allow("prod/*=read")
            .description("ci");
        assert_eq!(
            serde_json::to_value(token.wire()).unwrap(),
            json!({"tenant": "acme", "allow": ["prod/*=read"], "deny": [], "description": "ci"})
        );
        assert_eq!(
            serde_json::to_value(LeaseGrant::new(Duration::from_millis(1500)).wire()).unwrap(),
            json!({"ttl_ms": 1500})
        );
    }
}
