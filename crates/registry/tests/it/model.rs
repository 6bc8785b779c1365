//! A deliberately simple reference model of the registry's semantics, written from SPEC
//! L1–L7 and the crate docs without looking at the registry's data structures: plain maps,
//! no persistence tricks, no digests. The property tests check the registry against it.

use std::collections::{BTreeMap, BTreeSet};

use muster_core::{Actor, ServingState};

/// The operations the property tests generate, over a small universe of names so that
/// collisions (same instance, older incarnation, shared lease) are frequent.
#[derive(Debug, Clone)]
pub(crate) enum Op {
    Register {
        service: u8,
        instance: u8,
        incarnation: u64,
        ip: u8,
        weight: u32,
        lease: LeaseChoice,
        expected: Option<u64>,
    },
    Serving {
        service: u8,
        instance: u8,
        incarnation: u64,
        state: ServingState,
        owner: bool,
        expected: Option<u64>,
    },
    Drain {
        service: u8,
        instance: u8,
        incarnation: u64,
        owner: bool,
    },
    Deregister {
        service: u8,
        instance: u8,
        incarnation: u64,
        expected: Option<u64>,
    },
    Evict {
        service: u8,
        instance: u8,
    },
    Grant {
        ttl_ms: u64,
    },
    Revoke {
        lease: u64,
    },
    Expire {
        leases: Vec<u64>,
    },
}

impl Op {
    /// Points an endpoint operation at the `index`-th live endpoint, with its incarnation
    /// shifted by `delta` (-1: a stale caller, 0: the owner, +1: a newer run). Random names
    /// alone rarely hit the same endpoint twice; this makes drain-then-ready, replace-then-
    /// stale-renewal and the like common.
    pub(crate) fn retarget(&mut self, model: &Model, index: usize, delta: i8) {
        let Some((&(s, i), live)) = model.endpoints.iter().nth(index % model.endpoints.len().max(1)) else {
            return;
        };
        let shifted = live.incarnation.saturating_add_signed(i64::from(delta));
        match self {
            Op::Register {
                service,
                instance,
                incarnation,
                ..
            }
            | Op::Serving {
                service,
                instance,
                incarnation,
                ..
            }
            | Op::Drain {
                service,
                instance,
                incarnation,
                ..
            }
            | Op::Deregister {
                service,
                instance,
                incarnation,
                ..
            } => {
                (*service, *instance, *incarnation) = (s, i, shifted);
            }
            Op::Evict { service, instance } => (*service, *instance) = (s, i),
            Op::Grant { .. } | Op::Revoke { .. } | Op::Expire { .. } => {}
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum LeaseChoice {
    None,
    Attach(u64),
    Grant(u64),
}

/// Addresses by index; index 3 is not an address at all.
pub(crate) const IPS: [&str; 4] = ["10.0.0.1", "10.0.0.2", "10.0.0.3", "not-an-ip"];
pub(crate) const SERVICES: [&str; 3] = ["s0", "s1", "s2"];
pub(crate) const INSTANCES: [&str; 4] = ["i0", "i1", "i2", "i3"];
pub(crate) const MIN_TTL: u64 = 1_000;
pub(crate) const MAX_TTL: u64 = 3_600_000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ModelEndpoint {
    pub(crate) incarnation: u64,
    pub(crate) ip: String,
    pub(crate) weight: u32,
    pub(crate) serving: ServingState,
    pub(crate) lease: Option<u64>,
    pub(crate) revision: u64,
    /// Whether a drain's grace deadline is recorded (every drain in the model has one).
    pub(crate) drain_deadline: bool,
}

/// What the model predicts for one operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Committed at this new revision.
    Committed(u64),
    /// Accepted, nothing changed; the reply names this revision.
    Unchanged(u64),
    /// Refused with this code.
    Refused(&'static str),
}

#[derive(Debug, Default, Clone)]
pub(crate) struct Model {
    pub(crate) revision: u64,
    pub(crate) endpoints: BTreeMap<(u8, u8), ModelEndpoint>,
    /// Highest removed incarnation of an instance, and when it was removed.
    pub(crate) removed: BTreeMap<(u8, u8), (u64, u64)>,
    /// Lease id → TTL.
    pub(crate) leases: BTreeMap<u64, u64>,
    pub(crate) next_lease: u64,
    /// Services that ever had a committed change, and the revision of their last one.
    pub(crate) service_revision: BTreeMap<u8, u64>,
}

impl Model {
    pub(crate) fn new() -> Model {
        Model {
            next_lease: 1,
            ..Model::default()
        }
    }

    fn highest(&self, at: (u8, u8)) -> Option<u64> {
        let live = self.endpoints.get(&at).map(|e| e.incarnation);
        let removed = self.removed.get(&at).map(|r| r.0);
        live.max(removed)
    }

    fn commit(&mut self) -> u64 {
        self.revision += 1;
        self.revision
    }

    fn remove(&mut self, at: (u8, u8), fence: u64, revision: u64) {
        let gone = self.endpoints.remove(&at).expect("removing a live endpoint");
        self.removed.insert(at, (fence.max(gone.incarnation), revision));
        self.service_revision.insert(at.0, revision);
    }

    pub(crate) fn apply(&mut self, op: &Op) -> Verdict {
        use Verdict::*;
        match op.clone() {
            Op::Register {
                service,
                instance,
                incarnation,
                ip,
                weight,
                lease,
                expected,
            } => {
                let at = (service, instance);
                if ip as usize == 3 {
                    return Refused("invalid_address");
                }
                if weight == 0 {
                    return Refused("invalid_field");
                }
                let live = self.endpoints.get(&at).cloned();
                if let Some(highest) = self.highest(at)
                    && (incarnation < highest || (live.is_none() && incarnation == highest))
                {
                    return Refused("stale_incarnation");
                }
                let same = live.clone().filter(|e| e.incarnation == incarnation);
                let (lease_id, new_lease) = match lease {
                    LeaseChoice::None => (None, None),
                    LeaseChoice::Attach(id) if self.leases.contains_key(&id) => (Some(id), None),
                    LeaseChoice::Attach(_) => return Refused("lease_not_found"),
                    LeaseChoice::Grant(ttl) if !(MIN_TTL..=MAX_TTL).contains(&ttl) => return Refused("invalid_field"),
                    LeaseChoice::Grant(ttl) => {
                        match same
                            .as_ref()
                            .and_then(|e| e.lease)
                            .filter(|id| self.leases.get(id) == Some(&ttl))
                        {
                            Some(held) => (Some(held), None),
                            None => (Some(self.next_lease), Some(ttl)),
                        }
                    }
                };
                let ip = IPS[ip as usize].to_string();
                if let Some(e) = &same
                    && e.lease == lease_id
                    && e.ip == ip
                    && e.weight == weight
                {
                    return Unchanged(e.revision);
                }
                if let Some(expected) = expected
                    && expected != live.as_ref().map_or(0, |e| e.revision)
                {
                    return Refused("revision_mismatch");
                }
                let revision = self.commit();
                if let Some(ttl) = new_lease {
                    self.leases.insert(self.next_lease, ttl);
                    self.next_lease += 1;
                }
                let serving = same.as_ref().map_or(ServingState::Ready, |e| e.serving);
                // A re-registration of the same incarnation keeps its drain and its deadline.
                let drain_deadline = same.is_some_and(|e| e.drain_deadline);
                self.endpoints.insert(
                    at,
                    ModelEndpoint {
                        incarnation,
                        ip,
                        weight,
                        serving,
                        lease: lease_id,
                        revision,
                        drain_deadline,
                    },
                );
                self.removed.remove(&at);
                self.service_revision.insert(service, revision);
                Committed(revision)
            }
            Op::Serving {
                service,
                instance,
                incarnation,
                state,
                owner,
                expected,
            } => self.serving(service, instance, incarnation, state, owner, expected),
            Op::Drain {
                service,
                instance,
                incarnation,
                owner,
            } => {
                let at = (service, instance);
                let verdict = self.serving(service, instance, incarnation, ServingState::Draining, owner, None);
                let Some(live) = self.endpoints.get(&at).filter(|e| e.incarnation == incarnation) else {
                    return verdict;
                };
                match verdict {
                    // Already draining without a deadline: the drain records its grace at a
                    // revision of its own, the record itself unchanged.
                    Verdict::Unchanged(_) if live.serving == ServingState::Draining && !live.drain_deadline => {
                        let revision = self.commit();
                        self.endpoints.get_mut(&at).expect("live").drain_deadline = true;
                        Verdict::Committed(revision)
                    }
                    Verdict::Committed(revision) => {
                        self.endpoints.get_mut(&at).expect("live").drain_deadline = true;
                        Verdict::Committed(revision)
                    }
                    other => other,
                }
            }
            Op::Deregister {
                service,
                instance,
                incarnation,
                expected,
            } => {
                let at = (service, instance);
                let Some(live) = self.endpoints.get(&at).cloned() else {
                    return match self.removed.get(&at) {
                        Some((removed, revision)) if *removed == incarnation => Unchanged(*revision),
                        Some((removed, _)) if *removed > incarnation => Refused("stale_incarnation"),
                        _ => Refused("not_found"),
                    };
                };
                if incarnation < live.incarnation {
                    return Refused("stale_incarnation");
                }
                if expected.is_some_and(|e| e != live.revision) {
                    return Refused("revision_mismatch");
                }
                let revision = self.commit();
                self.remove(at, incarnation, revision);
                Committed(revision)
            }
            Op::Evict { service, instance } => {
                let at = (service, instance);
                let Some(live) = self.endpoints.get(&at).cloned() else {
                    return Refused("not_found");
                };
                let revision = self.commit();
                self.remove(at, live.incarnation, revision);
                Committed(revision)
            }
            Op::Grant { ttl_ms } => {
                if !(MIN_TTL..=MAX_TTL).contains(&ttl_ms) {
                    return Refused("invalid_field");
                }
                let revision = self.commit();
                self.leases.insert(self.next_lease, ttl_ms);
                self.next_lease += 1;
                Committed(revision)
            }
            Op::Revoke { lease } => {
                if !self.leases.contains_key(&lease) {
                    return Refused("lease_not_found");
                }
                Committed(self.drop_leases(&BTreeSet::from([lease])))
            }
            Op::Expire { leases } => {
                let live: BTreeSet<u64> = leases.into_iter().filter(|id| self.leases.contains_key(id)).collect();
                if live.is_empty() {
                    return Unchanged(self.revision);
                }
                Committed(self.drop_leases(&live))
            }
        }
    }

    fn serving(
        &mut self,
        service: u8,
        instance: u8,
        incarnation: u64,
        state: ServingState,
        owner: bool,
        expected: Option<u64>,
    ) -> Verdict {
        let at = (service, instance);
        if self.highest(at).is_some_and(|h| incarnation < h) {
            return Verdict::Refused("stale_incarnation");
        }
        let Some(live) = self
            .endpoints
            .get(&at)
            .cloned()
            .filter(|e| e.incarnation == incarnation)
        else {
            return Verdict::Refused("not_found");
        };
        if live.serving == state {
            return Verdict::Unchanged(live.revision);
        }
        if live.serving == ServingState::Draining && !owner {
            return Verdict::Unchanged(live.revision);
        }
        if expected.is_some_and(|e| e != live.revision) {
            return Verdict::Refused("revision_mismatch");
        }
        let revision = self.commit();
        let endpoint = self.endpoints.get_mut(&at).expect("live");
        endpoint.serving = state;
        endpoint.revision = revision;
        endpoint.drain_deadline = false;
        self.service_revision.insert(service, revision);
        Verdict::Committed(revision)
    }

    fn drop_leases(&mut self, leases: &BTreeSet<u64>) -> u64 {
        let revision = self.commit();
        let doomed: Vec<(u8, u8)> = self
            .endpoints
            .iter()
            .filter(|(_, e)| e.lease.is_some_and(|l| leases.contains(&l)))
            .map(|(at, _)| *at)
            .collect();
        for at in doomed {
            let incarnation = self.endpoints[&at].incarnation;
            self.remove(at, incarnation, revision);
        }
        for id in leases {
            self.leases.remove(id);
        }
        revision
    }

    pub(crate) fn actor(owner: bool) -> Actor {
        if owner { Actor::Owner } else { Actor::App }
    }
}
