//! The control plane under the virtual clock: Muster's real [`Registry`] state machine, the
//! real [`LeaseDeadlines`] table the server's lease keeper drives, and (when a setup turns it
//! on) the real self-preservation brake — fed exactly what the server feeds them.
//!
//! ```text
//!  register (t = 0) ──▶ Registry::apply(Register + Grant)  ──▶ LeaseDeadlines::ensure
//!  heartbeat        ──▶ Registry::lease (exists?) ──▶ LeaseDeadlines::renew   (no log write)
//!  every tick       ──▶ LeaseDeadlines::expired ──▶ [Preservation::decide] ──▶ ExpireLeases
//!  drain / stop     ──▶ Drain, Deregister, RevokeLease (the registrar's shutdown order)
//! ```
//!
//! The server's keeper checks deadlines every 100 ms; here the keeper runs every tick (10 ms),
//! so "an instance silent for longer than the TTL is removed" holds to the tick. Every commit
//! is logged with its virtual time, which is what watch delivery reads.

use std::collections::BTreeMap;
use std::sync::Arc;

use muster_core::{
    Actor, AddressSpec, EndpointSpec, Incarnation, InstanceId, LeaseId, PortSpec, Principal, Protocol, Revision,
    ServiceKey, ServiceSnapshot, ServiceUpdate,
};
use muster_health::preservation::{Counts, Preservation, PreservationConfig, Verdict, in_routing};
use muster_registry::{
    Applied, Command, CommandMeta, Deregister, Drain, ExpireLeases, LeaseDeadlines, LeaseSpec, Register, Registry,
    RegistryConfig, RevokeLease, Scope, Target,
};

/// Leases expired per command: the server keeper's batch bound (`MAX_EXPIRE_BATCH`).
const MAX_EXPIRE_BATCH: usize = 4096;

/// The instance id of instance `index`: zero-padded, so the client's sort by instance keeps
/// the fleet in index order.
pub(crate) fn instance_id(index: u32) -> InstanceId {
    InstanceId::new(&format!("i-{index:08}")).expect("a valid instance id")
}

/// Instance `index` listens on `10.0.0.0 + index + 1`: a pick maps back to its instance by
/// arithmetic ([`index_of`]), with no lookup on the request path.
fn address_of(index: u32) -> String {
    let n = index + 1;
    format!("10.{}.{}.{}", (n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff)
}

/// The instance an endpoint record belongs to (see [`address_of`]).
pub(crate) fn index_of(endpoint: &muster_core::Endpoint) -> usize {
    match endpoint.addresses.first().map(|address| address.ip) {
        Some(std::net::IpAddr::V4(ip)) => (u32::from(ip) & 0x00ff_ffff) as usize - 1,
        // Every record the lab registers has one IPv4 address.
        _ => unreachable!("the lab registers one IPv4 address per instance"),
    }
}

/// The record instance `index` registers.
pub(crate) fn spec_of(index: u32) -> EndpointSpec {
    EndpointSpec {
        addresses: vec![AddressSpec {
            ip: address_of(index),
            scope: None,
        }],
        ports: vec![PortSpec {
            name: "http".into(),
            port: 8080,
            protocol: Protocol::Http,
        }],
        ..EndpointSpec::default()
    }
}

/// A refused renewal: the lease is gone (expired or revoked), as the server's renew route
/// answers `lease_not_found`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LeaseLost;

/// The registry and its lease deadlines, on the virtual clock.
#[derive(Debug)]
pub(crate) struct ControlPlane {
    registry: Registry,
    deadlines: LeaseDeadlines,
    /// The service's brake: `Brakes` holds one per service (and logs), the lab has one service.
    brake: Option<Preservation>,
    key: ServiceKey,
    ttl_ms: u64,
    /// Which instance holds each lease (for counting live instances that were evicted).
    lease_holder: BTreeMap<LeaseId, u32>,
    /// Every commit: (revision, virtual ms).
    commits: Vec<(Revision, u64)>,
    app: CommandMeta,
    owner: CommandMeta,
    keeper: CommandMeta,
}

/// What one keeper tick did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Expiry {
    /// Instances whose lease expired, by index.
    pub(crate) removed: Vec<u32>,
    /// Expiries the self-preservation brake held this tick.
    pub(crate) held: usize,
}

impl ControlPlane {
    /// An empty registry for one service, leases of `ttl_ms`, an optional brake.
    pub(crate) fn new(ttl_ms: u64, preservation: Option<PreservationConfig>) -> ControlPlane {
        let meta = |who: &str, actor| CommandMeta {
            at_ms: 0,
            principal: Principal::new(who).expect("a valid principal"),
            actor,
        };
        ControlPlane {
            registry: Registry::new(RegistryConfig::default()),
            deadlines: LeaseDeadlines::new(),
            brake: preservation.map(Preservation::new),
            key: ServiceKey::new("lab", "prod", "api").expect("a valid key"),
            ttl_ms,
            lease_holder: BTreeMap::new(),
            commits: Vec::new(),
            app: meta("lab-instance", Actor::App),
            owner: meta("lab-deployer", Actor::Owner),
            keeper: meta("muster-lease-keeper", Actor::Owner),
        }
    }

    /// The service every instance registers in.
    pub(crate) fn key(&self) -> &ServiceKey {
        &self.key
    }

    /// The current revision.
    pub(crate) fn revision(&self) -> Revision {
        self.registry.revision()
    }

    /// The service's current set (a shared, O(1) read).
    pub(crate) fn snapshot(&self) -> Arc<ServiceSnapshot> {
        self.registry
            .snapshot(&self.key)
            .unwrap_or_else(|| Arc::new(ServiceSnapshot::empty(self.key.clone())))
    }

    /// The endpoints in the registry now.
    pub(crate) fn registered(&self) -> usize {
        self.registry.snapshot(&self.key).map_or(0, |s| s.len())
    }

    /// Every commit with its virtual time, oldest first.
    pub(crate) fn commits(&self) -> &[(Revision, u64)] {
        &self.commits
    }

    /// The updates after `since` up to and including `through`.
    pub(crate) fn updates(&self, since: Revision, through: Revision) -> Vec<Arc<ServiceUpdate>> {
        let mut updates = self
            .registry
            .changes_since(&Scope::Service(self.key.clone()), since)
            .expect("the lab keeps its whole history (100,000 revisions)");
        updates.retain(|update| update.revision <= through);
        updates
    }

    fn apply(&mut self, command: Command, meta: fn(&ControlPlane) -> &CommandMeta, now_ms: u64) -> Applied {
        let mut meta = meta(self).clone();
        meta.at_ms = now_ms;
        let before = self.registry.revision();
        let applied = self
            .registry
            .apply(&command, &meta)
            .unwrap_or_else(|rejection| panic!("the lab's commands are valid: {rejection}"));
        if applied.revision > before {
            self.commits.push((applied.revision, now_ms));
        }
        applied
    }

    /// Registers instance `index` at `incarnation` with a new lease; returns the lease.
    pub(crate) fn register(&mut self, index: u32, incarnation: u64, now_ms: u64) -> LeaseId {
        let command = Register {
            target: self.target(index, incarnation),
            spec: spec_of(index),
            lease: LeaseSpec::Grant { ttl_ms: self.ttl_ms },
            expected_revision: None,
        };
        let applied = self.apply(command.into(), |c| &c.app, now_ms);
        let grant = applied.lease.expect("a registration with a grant returns its lease");
        self.deadlines.ensure(grant.id, grant.ttl_ms, now_ms);
        self.lease_holder.insert(grant.id, index);
        grant.id
    }

    /// A heartbeat: the server's renew route (the lease must exist; a passed deadline is
    /// refused).
    pub(crate) fn renew(&mut self, lease: LeaseId, now_ms: u64) -> Result<(), LeaseLost> {
        let ttl_ms = self.registry.lease(lease).map(|l| l.ttl_ms).ok_or(LeaseLost)?;
        self.deadlines
            .renew(lease, ttl_ms, now_ms)
            .map(drop)
            .map_err(|_| LeaseLost)
    }

    /// The owner drains instance `index` (planned shutdown, first step).
    pub(crate) fn drain(&mut self, index: u32, incarnation: u64, now_ms: u64) {
        let command = Drain {
            target: self.target(index, incarnation),
            reason: "planned shutdown".into(),
            expected_revision: None,
        };
        self.apply(command.into(), |c| &c.owner, now_ms);
    }

    /// Deregisters instance `index` and revokes its lease (planned shutdown, last steps).
    pub(crate) fn deregister(&mut self, index: u32, incarnation: u64, lease: LeaseId, now_ms: u64) {
        let command = Deregister {
            target: self.target(index, incarnation),
            expected_revision: None,
        };
        self.apply(command.into(), |c| &c.app, now_ms);
        let revoke = RevokeLease {
            tenant: self.key.tenant.clone(),
            lease,
            expected_revision: None,
        };
        self.apply(revoke.into(), |c| &c.app, now_ms);
        self.deadlines.forget(lease);
        self.lease_holder.remove(&lease);
    }

    /// The lease keeper's tick, as the server's (`lease_keeper::unprotected`): every lease
    /// whose deadline passed is expired in one command, unless the brake holds the removal of
    /// a serving endpoint attached to it (then it is asked again next tick, as the window
    /// slides).
    pub(crate) fn keeper_tick(&mut self, now_ms: u64) -> Expiry {
        let due = self.deadlines.expired(now_ms, MAX_EXPIRE_BATCH);
        if due.is_empty() {
            return Expiry::default();
        }
        let mut expiry = Expiry::default();
        let mut leases = Vec::with_capacity(due.len());
        let snapshot = self.snapshot();
        let mut counts = Counts::of(snapshot.iter().map(|e| e.serving));
        if let Some(brake) = self.brake.as_mut() {
            brake.expire(now_ms);
        }
        for lease in due {
            // A lease whose record moved on (re-registered under a new lease) removes nothing.
            let attached = self.registry.lease_endpoints(lease);
            let serving = attached
                .iter()
                .any(|(_, instance)| snapshot.get(instance).is_some_and(|e| in_routing(e.serving)));
            if let (Some(brake), true) = (self.brake.as_mut(), serving) {
                if let Verdict::Hold(_) = brake.decide(counts.serving, counts.total, now_ms) {
                    expiry.held += 1;
                    continue;
                }
                // The registry does not show it gone yet: count it as leaving.
                counts.serving = counts.serving.saturating_sub(1);
            }
            let holder = self.lease_holder.remove(&lease);
            if let (Some(index), false) = (holder, attached.is_empty()) {
                expiry.removed.push(index);
            }
            self.deadlines.forget(lease);
            leases.push(lease);
        }
        if leases.is_empty() {
            return expiry;
        }
        self.apply(ExpireLeases { leases }.into(), |c| &c.keeper, now_ms);
        expiry
    }

    /// Whether self-preservation is holding expiries now.
    pub(crate) fn protection_active(&self) -> bool {
        self.brake.as_ref().is_some_and(Preservation::protection_active)
    }

    fn target(&self, index: u32, incarnation: u64) -> Target {
        Target {
            key: self.key.clone(),
            instance: instance_id(index),
            incarnation: Incarnation(incarnation),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_silent_instance_is_removed_at_its_deadline_and_a_renewed_one_is_not() {
        let mut control = ControlPlane::new(2_000, None);
        let quiet = control.register(0, 1, 0);
        let chatty = control.register(1, 1, 0);
        control.renew(chatty, 1_500).unwrap();
        assert_eq!(control.keeper_tick(1_990), Expiry::default());
        assert_eq!(control.keeper_tick(2_000).removed, vec![0]);
        assert_eq!(control.registered(), 1);
        assert_eq!(
            control.renew(quiet, 2_010),
            Err(LeaseLost),
            "the server answers lease_not_found"
        );
        assert_eq!(control.keeper_tick(3_500).removed, vec![1]);
    }

    #[test]
    fn the_brake_holds_expiries_beyond_its_fraction_and_lets_orphans_go() {
        let config = PreservationConfig {
            max_fraction: 0.5,
            ..PreservationConfig::default()
        };
        let mut control = ControlPlane::new(1_000, Some(config));
        for index in 0..4 {
            control.register(index, 1, 0);
        }
        let expiry = control.keeper_tick(1_000);
        assert_eq!(expiry.removed.len(), 2, "half of four may leave within the window");
        assert_eq!(expiry.held, 2);
        assert!(control.protection_active());
        assert_eq!(control.registered(), 2);
    }

    #[test]
    fn a_pick_maps_back_to_its_instance_by_address() {
        let mut control = ControlPlane::new(1_000, None);
        for index in [0, 255, 256, 299] {
            control.register(index, 1, 0);
        }
        let indices: Vec<usize> = control.snapshot().iter().map(|e| index_of(e)).collect();
        assert_eq!(indices, [0, 255, 256, 299]);
    }
}
