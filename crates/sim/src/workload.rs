//! The workload: what the clients of the simulated registry do, drawn from the schedule's
//! stream. Every command kind is here (register, re-register at a higher incarnation,
//! set-serving, drain with a grace, lifting a drain, in-flight reports, deregister, lease
//! grant / renew / revoke, TTL reports), plus two that exist to catch known failure shapes:
//! bursts of unrelated writes, and stale replays (a registration of an incarnation that was
//! since deregistered or replaced, arriving late).
//!
//! Every grant asks for a TTL no other grant asks for (see the leases invariant), so a
//! grant applied twice shows as two leases with one TTL.

use std::collections::BTreeMap;

use muster_core::{
    Actor, AddressSpec, EndpointSpec, Incarnation, InstanceId, Label, LeaseId, ServiceKey, ServingState,
};
use muster_registry::{Command, Deregister, Drain, GrantLease, LeaseSpec, Register, RevokeLease, SetServing, Target};

use crate::duties::{GRACE_PREFIX, Request};
use crate::rng::SimRng;

/// Instances per service: few enough that commands collide on them.
const INSTANCES: u64 = 6;
/// The smallest TTL a grant asks for: 2 s, so leases expire within a run.
const BASE_TTL_MS: u64 = 2_000;

/// What a client sends.
#[derive(Debug, Clone)]
// As the registry's `Command`: most operations are proposals, boxing them buys nothing.
#[allow(clippy::large_enum_variant)]
pub enum OpKind {
    /// A registry command, proposed through a node.
    Propose(Command, Actor),
    /// A request to the leader's duties.
    Duty(Request),
}

/// One client operation.
#[derive(Debug, Clone)]
pub struct Op {
    /// What it is, in words.
    pub what: String,
    /// What it sends.
    pub kind: OpKind,
    /// For a grant, the TTL asked for (unique).
    pub grant_ttl: Option<u64>,
}

#[derive(Default, Clone, Copy)]
struct InstanceModel {
    incarnation: u64,
}

/// The clients' model of the world: what they registered, which leases they hold.
pub struct Workload {
    services: Vec<ServiceKey>,
    filler: ServiceKey,
    tenant: Label,
    instances: BTreeMap<(usize, u64), InstanceModel>,
    /// Leases the clients learned of (granted to them), with TTLs.
    pub leases: BTreeMap<LeaseId, u64>,
    next_ttl: u64,
    /// Registrations sent, for stale replays: (service, instance) → (incarnation, command).
    sent_registers: Vec<((usize, u64), u64, Command)>,
    filler_flip: u64,
    /// How instance names begin (`i-`).
    prefix: &'static str,
}

impl Default for Workload {
    fn default() -> Self {
        Workload::new()
    }
}

impl Workload {
    /// Two services of one tenant, and a filler service for bursts.
    pub fn new() -> Workload {
        Workload::with_prefix("i-")
    }

    /// The same, with instance names that begin with `prefix`.
    pub fn with_prefix(prefix: &'static str) -> Workload {
        let key = |name: &str| ServiceKey::new("acme", "prod", name).expect("valid names");
        Workload {
            services: vec![key("api"), key("web")],
            filler: key("filler"),
            tenant: Label::new("tenant", "acme").expect("a valid label"),
            instances: BTreeMap::new(),
            leases: BTreeMap::new(),
            next_ttl: 0,
            sent_registers: Vec::new(),
            filler_flip: 0,
            prefix,
        }
    }

    fn target(&self, slot: (usize, u64), incarnation: u64) -> Target {
        Target {
            key: self.services[slot.0].clone(),
            instance: instance_id(self.prefix, slot.1),
            incarnation: Incarnation(incarnation),
        }
    }

    fn grant_ttl(&mut self) -> u64 {
        self.next_ttl += 1;
        BASE_TTL_MS + self.next_ttl
    }

    fn register(&mut self, slot: (usize, u64), incarnation: u64, rng: &mut SimRng) -> Op {
        let mut grant_ttl = None;
        let lease = match rng.below(3) {
            0 => LeaseSpec::None,
            1 if !self.leases.is_empty() => {
                let ids: Vec<LeaseId> = self.leases.keys().copied().collect();
                LeaseSpec::Attach(*rng.pick(&ids))
            }
            _ => {
                let ttl = self.grant_ttl();
                grant_ttl = Some(ttl);
                LeaseSpec::Grant { ttl_ms: ttl }
            }
        };
        let register = Register {
            target: self.target(slot, incarnation),
            spec: spec(slot),
            lease,
            expected_revision: None,
        };
        // A late copy carries no grant: every grant's TTL stays unique to one operation.
        let replay = Register {
            lease: LeaseSpec::None,
            ..register.clone()
        };
        self.sent_registers.push((slot, incarnation, replay.into()));
        let command: Command = register.into();
        Op {
            what: format!("register {}#{incarnation} lease {lease:?}", self.name(slot)),
            kind: OpKind::Propose(command, Actor::App),
            grant_ttl,
        }
    }

    fn name(&self, slot: (usize, u64)) -> String {
        format!("{}/{}{}", self.services[slot.0].service, self.prefix, slot.1)
    }

    /// The services clients write (not the filler).
    pub fn services(&self) -> &[ServiceKey] {
        &self.services
    }

    /// The next operation.
    pub fn next(&mut self, rng: &mut SimRng) -> Vec<Op> {
        let slot = (
            usize::try_from(rng.below(self.services.len() as u64)).unwrap_or(0),
            rng.below(INSTANCES),
        );
        let model = self.instances.get(&slot).copied().unwrap_or_default();
        let known = model.incarnation.max(1);
        let svc = self.name(slot);
        let propose = |what: String, command: Command, actor: Actor| Op {
            what,
            kind: OpKind::Propose(command, actor),
            grant_ttl: None,
        };
        let op = match rng.below(100) {
            0..16 => {
                self.instances.entry(slot).or_default().incarnation = known;
                self.register(slot, known, rng)
            }
            16..24 => {
                let incarnation = known + 1;
                self.instances.entry(slot).or_default().incarnation = incarnation;
                self.register(slot, incarnation, rng)
            }
            24..36 => {
                let state = *rng.pick(&[ServingState::Ready, ServingState::NotServing, ServingState::Degraded]);
                let command = SetServing {
                    target: self.target(slot, known),
                    state,
                    reason: "app report".into(),
                    expected_revision: None,
                };
                propose(
                    format!("set-serving {svc}#{known} {state:?}"),
                    command.into(),
                    Actor::App,
                )
            }
            36..43 => {
                let grace = rng.between(300, 3_000);
                let command = Drain {
                    target: self.target(slot, known),
                    reason: format!("{GRACE_PREFIX}{grace}ms"),
                    // The committed grace as the registry now records it; the simulation's
                    // duties read the same value back from the reason (duties module).
                    grace_ms: Some(grace),
                    expected_revision: None,
                };
                propose(
                    format!("drain {svc}#{known} grace {grace} ms"),
                    command.into(),
                    Actor::Owner,
                )
            }
            43..47 => {
                let command = SetServing {
                    target: self.target(slot, known),
                    state: ServingState::Ready,
                    reason: "owner lifts the drain".into(),
                    expected_revision: None,
                };
                propose(format!("lift drain {svc}#{known}"), command.into(), Actor::Owner)
            }
            47..53 => Op {
                what: format!("in-flight 0 {svc}#{known}"),
                kind: OpKind::Duty(Request::InFlightZero(self.target(slot, known))),
                grant_ttl: None,
            },
            53..60 => {
                let command = Deregister {
                    target: self.target(slot, known),
                    expected_revision: None,
                };
                propose(format!("deregister {svc}#{known}"), command.into(), Actor::Owner)
            }
            60..67 => {
                let ttl = self.grant_ttl();
                let command = GrantLease {
                    tenant: self.tenant.clone(),
                    ttl_ms: ttl,
                    service: None,
                };
                Op {
                    what: format!("grant lease ttl {ttl}"),
                    kind: OpKind::Propose(command.into(), Actor::App),
                    grant_ttl: Some(ttl),
                }
            }
            67..71 if !self.leases.is_empty() => {
                let ids: Vec<LeaseId> = self.leases.keys().copied().collect();
                let lease = *rng.pick(&ids);
                self.leases.remove(&lease);
                let command = RevokeLease {
                    tenant: self.tenant.clone(),
                    lease,
                    expected_revision: None,
                };
                propose(format!("revoke lease {}", lease.0), command.into(), Actor::App)
            }
            71..80 => {
                let passing = rng.chance(700);
                Op {
                    what: format!("ttl report {svc}#{known} passing={passing}"),
                    kind: OpKind::Duty(Request::TtlReport(self.target(slot, known), passing)),
                    grant_ttl: None,
                }
            }
            80..88 => {
                let stale: Vec<&((usize, u64), u64, Command)> = self
                    .sent_registers
                    .iter()
                    .filter(|(s, incarnation, _)| self.instances.get(s).is_some_and(|m| m.incarnation >= *incarnation))
                    .collect();
                if stale.is_empty() {
                    return Vec::new();
                }
                let (s, incarnation, command) = (*rng.pick(&stale)).clone();
                propose(
                    format!("stale replay of register {}#{incarnation}", self.name(s)),
                    command,
                    Actor::App,
                )
            }
            88..92 => return self.burst(rng.between(8, 24)),
            _ => return Vec::new(),
        };
        vec![op]
    }

    /// Unrelated writes, many: what pushes a deregistration out of a revision-counted
    /// history.
    fn burst(&mut self, count: u64) -> Vec<Op> {
        (0..count)
            .map(|_| {
                self.filler_flip += 1;
                let n = self.filler_flip;
                let command = Register {
                    target: Target {
                        key: self.filler.clone(),
                        instance: instance_id(self.prefix, n % 4),
                        incarnation: Incarnation(n),
                    },
                    spec: spec((2, n % 4)),
                    lease: LeaseSpec::None,
                    expected_revision: None,
                };
                Op {
                    what: format!("filler register #{n}"),
                    kind: OpKind::Propose(command.into(), Actor::App),
                    grant_ttl: None,
                }
            })
            .collect()
    }

    /// A renewal of a lease the clients hold, now and then.
    pub fn renewals(&mut self, rng: &mut SimRng) -> Vec<(LeaseId, u64)> {
        let mut renew = Vec::new();
        for (lease, ttl) in &self.leases {
            if rng.chance(150) && renew.len() < 3 {
                renew.push((*lease, *ttl));
            }
        }
        renew
    }
}

/// Instance `n` of the workload whose names begin with `prefix`.
pub fn instance_id(prefix: &str, n: u64) -> InstanceId {
    InstanceId::new(&format!("{prefix}{n}")).expect("a valid instance id")
}

fn spec(slot: (usize, u64)) -> EndpointSpec {
    EndpointSpec {
        addresses: vec![AddressSpec {
            ip: format!("10.0.{}.{}", slot.0, slot.1 + 1),
            scope: None,
        }],
        ..EndpointSpec::default()
    }
}
