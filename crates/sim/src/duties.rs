//! The leader's duties, as the simulation performs them: lease deadlines and expiry, the
//! ends of drains, in-flight reports and TTL checks — on the simulated clock, in one
//! module, so that the replicated leader engine can take its place.
//!
//! ```text
//!  workload ──renew / in-flight / TTL report──▶ via node ──(network)──▶ leader's duties
//!  every TICK on each node: leading? ── takeover: every lease gets now + grace + ttl
//!                                     ├─ ExpireLeases for deadlines passed
//!                                     ├─ Deregister (CAS) for drains past their grace
//!                                     └─ SetServing(not_serving) for TTL checks not reported
//! ```
//!
//! Lease deadlines are leader memory (DESIGN "Leases off the log"): a renewal is accepted
//! only after the leader confirmed, with a quorum, that it still leads, and only while the
//! lease exists and its deadline has not passed. A drain's grace is committed state: the
//! `Drain` command carries it in its reason (`grace=<ms>`), and whichever node leads ends
//! it at the drain's time plus its grace, compare-and-swap on the draining record so a
//! drain the owner lifted is not ended.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use muster_consensus::Node;
use muster_core::{Actor, Incarnation, InstanceId, LeaseId, Principal, ServiceKey, ServingState};
use muster_registry::{Command, CommandMeta, Deregister, ExpireLeases, LeaseDeadlines, SetServing, Target};

use crate::clock::Clock;
use crate::invariants::Checks;
use crate::net::Net;

/// How often each node's duties run: 100 ms, as the server's lease keeper.
pub const TICK: Duration = Duration::from_millis(100);
/// What a new leader adds to every lease before expiring anything: more than an election
/// (600 ms at most), as the server's keeper.
pub const ELECTION_GRACE_MS: u64 = 1_000;
/// A TTL check's window: an instance that reported must report again within 3 s.
pub const TTL_CHECK_MS: u64 = 3_000;
/// How long a duty's own write may take before it is tried again next tick.
const WRITE_WAIT: Duration = Duration::from_secs(6);
/// The prefix of a drain's reason that carries its grace.
pub const GRACE_PREFIX: &str = "grace=";

/// A request to the leader's duties.
#[derive(Debug, Clone)]
pub enum Request {
    /// Renew a lease.
    Renew(LeaseId),
    /// The instance has nothing in flight: end its drain now.
    InFlightZero(Target),
    /// A TTL check's report.
    TtlReport(Target, bool),
}

#[derive(Default)]
struct DutyState {
    leading: bool,
    deadlines: LeaseDeadlines,
    ttl_checks: BTreeMap<(ServiceKey, InstanceId), (Incarnation, u64)>,
}

/// Every node's duties.
pub struct Duties {
    net: Arc<Net>,
    clock: Clock,
    checks: Arc<Mutex<Checks>>,
    states: Mutex<BTreeMap<u64, DutyState>>,
    /// Armed by the "leader change during lease expiry" fault: the next leader to propose
    /// an expiry is isolated at that moment.
    pub trap: Mutex<bool>,
    /// The leader the trap isolated (the driver schedules the heal).
    pub trapped: Mutex<Option<u64>>,
}

fn meta(clock: Clock, who: &str, actor: Actor) -> CommandMeta {
    CommandMeta {
        at_ms: clock.now_ms(),
        principal: Principal::new(who).expect("a valid principal"),
        actor,
    }
}

impl Duties {
    /// The duties of every node of `net`.
    pub fn new(net: Arc<Net>, clock: Clock, checks: Arc<Mutex<Checks>>) -> Arc<Duties> {
        Arc::new(Duties {
            net,
            clock,
            checks,
            states: Mutex::new(BTreeMap::new()),
            trap: Mutex::new(false),
            trapped: Mutex::new(None),
        })
    }

    fn with_state<R>(&self, id: u64, f: impl FnOnce(&mut DutyState) -> R) -> R {
        let mut states = self.states.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        f(states.entry(id).or_default())
    }

    /// Node `id` crashed: its memory is gone.
    pub fn forget(&self, id: u64) {
        self.states
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&id);
    }

    /// Runs node `id`'s duties every [`TICK`], for ever.
    pub fn spawn(self: &Arc<Self>, id: u64) {
        let duties = Arc::clone(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(TICK).await;
                match duties.net.node(id) {
                    Some(node) => duties.tick(id, &node).await,
                    None => duties.forget(id),
                }
            }
        });
    }

    async fn propose(
        &self,
        node: &Node,
        command: Command,
        who: &str,
        actor: Actor,
    ) -> Option<muster_registry::Applied> {
        // Leader duties are proposed on the leader only, never forwarded
        // (`Node::propose_as_leader`): an expiry relayed to the next leader would land
        // after renewals it accepted.
        let proposed = tokio::time::timeout(
            WRITE_WAIT,
            node.propose_as_leader(command, meta(self.clock, who, actor)),
        )
        .await;
        match proposed {
            Ok(Ok(Ok(applied))) => Some(applied),
            _ => None,
        }
    }

    async fn tick(&self, id: u64, node: &Node) {
        if !node.is_leader() {
            self.with_state(id, |state| state.leading = false);
            return;
        }
        let now = self.clock.now_ms();
        let live: Vec<(LeaseId, u64)> = node.read(|r| r.leases().map(|l| (l.id, l.ttl_ms)).collect());
        let expired = self.with_state(id, |state| {
            if state.leading {
                state.deadlines.reconcile(live, now);
            } else {
                state.deadlines = LeaseDeadlines::new();
                state.deadlines.reconcile(live, now + ELECTION_GRACE_MS);
                state.ttl_checks.clear();
                state.leading = true;
            }
            state.deadlines.expired(now, 64)
        });
        if !expired.is_empty() {
            let command = ExpireLeases {
                leases: expired.clone(),
            };
            let proposing = self.propose(node, command.into(), "sim-lease-keeper", Actor::Owner);
            if std::mem::take(&mut *self.trap.lock().unwrap_or_else(std::sync::PoisonError::into_inner)) {
                for other in self.net.nodes().into_keys().filter(|other| *other != id) {
                    self.net.cut(id, other);
                    self.net.cut(other, id);
                }
                *self.trapped.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(id);
            }
            if proposing.await.is_some() {
                self.with_state(id, |state| {
                    expired.iter().for_each(|lease| state.deadlines.forget(*lease))
                });
            }
        }
        for (target, revision) in due_drains(node, now) {
            self.end_drain(node, target, revision, "the drain's grace ended").await;
        }
        let due: Vec<((ServiceKey, InstanceId), Incarnation)> = self.with_state(id, |state| {
            let due: Vec<_> = state
                .ttl_checks
                .iter()
                .filter(|(_, (_, deadline))| *deadline <= now)
                .map(|(slot, (incarnation, _))| (slot.clone(), *incarnation))
                .collect();
            for (slot, _) in &due {
                state.ttl_checks.remove(slot);
            }
            due
        });
        for ((key, instance), incarnation) in due {
            let target = Target {
                key,
                instance,
                incarnation,
            };
            self.check_verdict(node, target, false, "ttl check not reported").await;
        }
    }

    /// Ends a drain: deregisters the record only if it is still the draining one.
    async fn end_drain(&self, node: &Node, target: Target, revision: muster_core::Revision, why: &str) -> Option<u64> {
        let instance = target.instance.clone();
        let command = Deregister {
            target,
            expected_revision: Some(revision),
        };
        let applied = self.propose(node, command.into(), "sim-drain", Actor::Owner).await?;
        if applied.unchanged.is_none() {
            let mut checks = self.checks.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            checks
                .drains
                .ended(applied.revision.0, instance, format!("a drain end ({why})"));
        }
        Some(applied.revision.0)
    }

    /// Proposes a checker verdict for a TTL check, if it changes the serving state.
    async fn check_verdict(&self, node: &Node, target: Target, passing: bool, why: &str) -> Option<u64> {
        let serving = node.read(|r| {
            r.snapshot(&target.key)
                .and_then(|s| s.get(&target.instance).map(|e| (e.incarnation, e.serving)))
        })?;
        let wanted = if passing {
            ServingState::Ready
        } else {
            ServingState::NotServing
        };
        if serving.0 != target.incarnation || serving.1 == wanted || serving.1 == ServingState::Draining {
            return None;
        }
        let command = SetServing {
            target,
            state: wanted,
            reason: why.to_owned(),
            expected_revision: None,
        };
        self.propose(node, command.into(), "sim-checker", Actor::Checker)
            .await
            .map(|a| a.revision.0)
    }

    /// A request, sent through node `via`: handled there if it leads, else carried over
    /// the network to the leader it knows. `Ok`: what the leader did.
    pub async fn request(self: &Arc<Self>, via: u64, request: Request) -> Result<String, String> {
        let node = self.net.node(via).ok_or("the node is down")?;
        if node.is_leader() {
            return self.handle(via, request).await;
        }
        let leader = node.status().leader.ok_or("no leader known")?;
        let duties = Arc::clone(self);
        self.net
            .exchange(
                via,
                leader,
                move |_| async move { duties.handle(leader, request).await },
                None,
            )
            .await
            .map_err(|lost| lost.to_string())?
    }

    /// The leader's side of a request.
    async fn handle(&self, id: u64, request: Request) -> Result<String, String> {
        let node = self.net.node(id).ok_or("the leader is down")?;
        if !node.is_leader() {
            return Err("not the leader".into());
        }
        match request {
            Request::Renew(lease) => {
                // Confirm leadership with a quorum before extending anything: an empty
                // expiry (it commits nothing) proposed here commits only in this term, and
                // once applied here the registry shows every lease removal before it. (Not
                // `Node::linearizable`: its wait sits on openraft's metrics watch, whose
                // waiters tokio wakes in an order drawn from its unseeded generator.)
                let confirm = ExpireLeases { leases: Vec::new() };
                let confirmed = tokio::time::timeout(
                    WRITE_WAIT,
                    node.propose_as_leader(confirm.into(), meta(self.clock, "sim-lease-keeper", Actor::Owner)),
                )
                .await;
                match confirmed {
                    Ok(Ok(Ok(_))) => {}
                    Ok(Ok(Err(rejection))) => return Err(rejection.code().to_owned()),
                    Ok(Err(error)) => return Err(error.to_string()),
                    Err(_) => return Err("no quorum".into()),
                }
                let Some(ttl) = node.read(|r| r.lease(lease).map(|l| l.ttl_ms)) else {
                    return Err("no such lease".into());
                };
                let now = self.clock.now_ms();
                self.with_state(id, |state| {
                    if !state.leading {
                        return Err("not leading yet".to_owned());
                    }
                    state
                        .deadlines
                        .renew(lease, ttl, now)
                        .map(|deadline| format!("renewed until {deadline}"))
                        .map_err(|_| "deadline passed".to_owned())
                })
            }
            Request::InFlightZero(target) => {
                let draining = node.read(|r| {
                    r.snapshot(&target.key).and_then(|s| {
                        s.get(&target.instance)
                            .filter(|e| e.incarnation == target.incarnation && e.serving == ServingState::Draining)
                            .map(|e| e.revision)
                    })
                });
                let Some(revision) = draining else {
                    return Ok("not draining: nothing to do".into());
                };
                match self.end_drain(&node, target, revision, "nothing in flight").await {
                    Some(revision) => Ok(format!("drain ended at revision {revision}")),
                    None => Err("the drain end did not commit".into()),
                }
            }
            Request::TtlReport(target, passing) => {
                let now = self.clock.now_ms();
                let slot = (target.key.clone(), target.instance.clone());
                self.with_state(id, |state| {
                    state.ttl_checks.insert(slot, (target.incarnation, now + TTL_CHECK_MS))
                });
                match self.check_verdict(&node, target, passing, "ttl report").await {
                    Some(revision) => Ok(format!("serving changed at revision {revision}")),
                    None => Ok("no change".into()),
                }
            }
        }
    }
}

/// The grace a simulated drain committed with, read back from its observation's reason.
pub(crate) fn drain_grace(endpoint: &muster_core::Endpoint) -> Option<u64> {
    endpoint
        .observation
        .reason
        .strip_prefix(GRACE_PREFIX)
        .and_then(|rest| rest.trim_end_matches("ms").parse::<u64>().ok())
}

/// The draining endpoints whose committed grace has ended by `now`.
fn due_drains(node: &Node, now: u64) -> Vec<(Target, muster_core::Revision)> {
    node.read(|r| {
        let mut due = Vec::new();
        for service in r.all_services() {
            for endpoint in service.iter() {
                if endpoint.serving != ServingState::Draining {
                    continue;
                }
                let grace = drain_grace(endpoint);
                if let Some(grace) = grace
                    && endpoint.observation.at_ms + grace <= now
                {
                    due.push((
                        Target {
                            key: service.key().clone(),
                            instance: endpoint.instance.clone(),
                            incarnation: endpoint.incarnation,
                        },
                        endpoint.revision,
                    ));
                }
            }
        }
        due
    })
}
