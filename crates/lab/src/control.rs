//! The control plane under the virtual clock: Muster's real [`Registry`] state machine and
//! the real leader engine ([`LeaderEngine`], `muster-leader`) the server's leader task drives
//! — lease deadlines and, when a setup turns it on, the self-preservation brakes — fed
//! exactly what the server feeds them.
//!
//! ```text
//!  register (t = 0) ──▶ Registry::apply(Register + Grant)  ──▶ LeaderEngine::granted
//!  heartbeat        ──▶ LeaderEngine::renew (lease exists? deadline passed?)  (no log write)
//!  every tick       ──▶ LeaderEngine::tick ──▶ Propose ExpireLeases ──▶ Registry::apply
//!                                          ──▶ settled (Committed)    (brakes held: ExpiryHeld)
//!  drain / stop     ──▶ Drain, Deregister, RevokeLease (the registrar's shutdown order)
//! ```
//!
//! The server's leader task ticks every 100 ms; here the engine ticks every lab tick (10 ms),
//! so "an instance silent for longer than the TTL is removed" holds to the tick. Every commit
//! is logged with its virtual time, which is what watch delivery reads. The engine's
//! monotonic and wall clocks are both the virtual clock.

use std::collections::BTreeMap;
use std::sync::Arc;

use muster_core::{
    Actor, AddressSpec, EndpointSpec, Incarnation, InstanceId, LeaseId, PortSpec, Principal, Protocol, Revision,
    ServiceKey, ServiceSnapshot, ServiceUpdate,
};
use muster_health::checker::CheckerConfig;
use muster_health::preservation::{Brakes, PreservationConfig};
use muster_leader::{LeaderEngine, Note, Now, Outcome, Output};
use muster_registry::{
    Applied, Command, CommandMeta, Deregister, Drain, LeaseSpec, Register, Registry, RegistryConfig, RevokeLease,
    Scope, Target,
};
use rand_core::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;

/// The brake's settings when a setup has none: nothing is ever held.
const NO_BRAKE: PreservationConfig = PreservationConfig {
    max_fraction: 1.0,
    window_ms: 1,
    floor: 0,
    min_endpoints: usize::MAX,
};

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

/// The instance an endpoint record (the server's or a view's compact one) belongs to, from
/// its addresses (see [`address_of`]).
pub(crate) fn index_of(addresses: &[muster_core::Address]) -> usize {
    match addresses.first().map(|address| address.ip) {
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

/// The virtual time as the engine takes it: both clocks are the virtual one.
fn at(ms: u64) -> Now {
    Now {
        monotonic_ms: ms,
        unix_ms: ms,
    }
}

/// A refused renewal: the lease is gone (expired or revoked), as the server's renew route
/// answers `lease_not_found`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LeaseLost;

/// The registry and the leader engine, on the virtual clock.
pub(crate) struct ControlPlane {
    registry: Registry,
    /// The leader's duties; the lab's node leads from the start. Its checker has nothing to
    /// check (the lab's instances register no checks), so its generator is never drawn from.
    engine: LeaderEngine<Xoshiro256PlusPlus>,
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
        let registry = Registry::new(RegistryConfig::default());
        let brakes = Brakes::new(preservation.unwrap_or(NO_BRAKE), Default::default());
        let mut engine = LeaderEngine::new(CheckerConfig::default(), brakes, Xoshiro256PlusPlus::seed_from_u64(0));
        engine.became_leader(&registry, at(0));
        ControlPlane {
            registry,
            engine,
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
        let meta = meta(self).clone();
        self.apply_as(command, meta, now_ms)
    }

    fn apply_as(&mut self, command: Command, mut meta: CommandMeta, now_ms: u64) -> Applied {
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
        self.engine.granted(grant, at(now_ms));
        self.lease_holder.insert(grant.id, index);
        grant.id
    }

    /// A heartbeat: the server's renew route (the lease must exist; a passed deadline is
    /// refused).
    pub(crate) fn renew(&mut self, lease: LeaseId, now_ms: u64) -> Result<(), LeaseLost> {
        self.engine
            .renew(&self.registry, &self.key.tenant, lease, at(now_ms))
            .map(drop)
            .map_err(|_| LeaseLost)
    }

    /// The owner drains instance `index` (planned shutdown, first step).
    pub(crate) fn drain(&mut self, index: u32, incarnation: u64, now_ms: u64) {
        let command = Drain {
            target: self.target(index, incarnation),
            reason: "planned shutdown".into(),
            // The instance's own shutdown sequence deregisters it after the grace (`sim`).
            grace_ms: None,
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
        self.engine.revoked(lease);
        self.lease_holder.remove(&lease);
    }

    /// The leader engine's tick, as the server's leader task runs it: every lease whose
    /// deadline passed is expired in one command, unless the brake holds the removal of a
    /// serving endpoint attached to it (then it is asked again next tick, as the window
    /// slides). Proposals commit at once.
    pub(crate) fn keeper_tick(&mut self, now_ms: u64) -> Expiry {
        let mut expiry = Expiry::default();
        let outputs = self.engine.tick(&self.registry, at(now_ms));
        for output in outputs {
            match output {
                Output::Propose(proposal) => {
                    if let Command::ExpireLeases(expire) = &proposal.command {
                        for lease in &expire.leases {
                            // A lease whose record moved on (re-registered under a new lease)
                            // removes nothing.
                            let attached = !self.registry.lease_endpoints(*lease).is_empty();
                            if let (Some(index), true) = (self.lease_holder.remove(lease), attached) {
                                expiry.removed.push(index);
                            }
                        }
                    }
                    let duty = proposal.duty;
                    let mut meta = self.keeper.clone();
                    meta.actor = duty.actor();
                    let applied = self.apply_as(proposal.command, meta, now_ms);
                    let outcome = Outcome::Committed {
                        revision: applied.revision,
                        changed: applied.unchanged.is_none(),
                    };
                    self.engine.settled(&self.registry, proposal.tag, outcome);
                }
                Output::Note(Note::ExpiryHeld { .. }) => expiry.held += 1,
                // No checks, no drains with a grace, no callers waiting: nothing else comes.
                Output::Note(_) | Output::Probe(_) | Output::Reply { .. } => {}
            }
        }
        expiry
    }

    /// Whether self-preservation is holding expiries now.
    pub(crate) fn protection_active(&self) -> bool {
        self.engine.brakes().protection_active(&self.key)
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
            min_endpoints: 0,
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
        let indices: Vec<usize> = control.snapshot().iter().map(|e| index_of(&e.addresses)).collect();
        assert_eq!(indices, [0, 255, 256, 299]);
    }
}
