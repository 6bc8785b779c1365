//! [`LeaderEngine`]: the leader's duties as one pure state machine.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use muster_core::api::{CheckReportReply, LeaseReply};
use muster_core::{Actor, Event, InstanceId, Label, LeaseId, Revision, ServiceKey, ServiceUpdate, ServingState};
use muster_health::checker::{Checker, CheckerConfig, Decision, ProbeId, TtlReport};
use muster_health::hysteresis::ProbeResult;
use muster_health::preservation::{Brakes, Counts, in_routing};
use muster_registry::{Deregister, ExpireLeases, LeaseDeadlines, LeaseGrant, Registry, SetServing, Target};
use rand_core::RngCore;

use crate::expiry::unprotected;
use crate::io::{Duty, InFlightReply, Note, Now, Outcome, Output, Proposal, RenewRefused, Reply, ReplyTo, Tag};

/// How often a tick is due: 100 ms. Expiry is then at most 100 ms late, well under the 1 s
/// minimum TTL, and a tick that finds nothing due is a few ordered-set lookups.
pub const TICK_MS: u64 = 100;

/// How often lease deadlines are reconciled with the registry's leases: 5 s. Reconciling
/// walks every lease (tens of milliseconds at a million), so it runs rarely; grants and
/// revocations reach the table directly in between.
pub const RECONCILE_EVERY_MS: u64 = 5_000;

/// Leases expired per command: 4,096 keeps one log entry in the tens of KiB and one apply
/// short; a larger backlog (after a long pause) drains over the next ticks.
pub const MAX_EXPIRE_BATCH: usize = 4096;

/// What a new leader adds to every lease's TTL before expiring anything: more than an
/// election timeout (600 ms at most), so a renewal sent to the old leader during the election
/// is not lost (SPEC R4).
pub const ELECTION_GRACE_MS: u64 = 1_000;

/// What a proposal in flight was for.
#[derive(Debug)]
enum Purpose {
    Expire(Vec<LeaseId>),
    EndDrain {
        slot: (ServiceKey, InstanceId),
        reply: Option<ReplyTo>,
    },
    Check {
        key: ServiceKey,
        instance: InstanceId,
        removal: bool,
        report: Option<ReplyTo>,
    },
}

/// A TTL report waiting for the proposals it caused.
#[derive(Debug)]
struct ReportWait {
    key: ServiceKey,
    instance: InstanceId,
    remaining: usize,
    revision: Option<Revision>,
}

/// The leader's duties: lease deadlines, drain deadlines, self-preservation and the health
/// checker's decisions. Every event takes the registry as it is now (a read, never a write)
/// and the time; every answer is a list of [`Output`]s for the shell to carry out.
pub struct LeaderEngine<R> {
    leading: bool,
    leases: LeaseDeadlines,
    brakes: Brakes,
    checker: Checker<R>,
    /// The registry revision the checker has caught up with.
    synced: Revision,
    next_reconcile_ms: u64,
    next_tag: u64,
    pending: HashMap<Tag, Purpose>,
    /// Leases whose expiry is proposed and not settled.
    expiring: BTreeSet<LeaseId>,
    /// Drains whose end is proposed and not settled.
    ending: BTreeSet<(ServiceKey, InstanceId)>,
    /// Checker removals proposed and not settled, per service (the brakes count them gone).
    pending_removals: HashMap<ServiceKey, usize>,
    reports: BTreeMap<ReplyTo, ReportWait>,
}

impl<R: RngCore> LeaderEngine<R> {
    /// An engine that does not lead yet; the checker draws its jitter from `rng`.
    pub fn new(checker: CheckerConfig, brakes: Brakes, rng: R) -> LeaderEngine<R> {
        LeaderEngine {
            leading: false,
            leases: LeaseDeadlines::new(),
            brakes,
            checker: Checker::new(checker, rng),
            synced: Revision::ZERO,
            next_reconcile_ms: 0,
            next_tag: 0,
            pending: HashMap::new(),
            expiring: BTreeSet::new(),
            ending: BTreeSet::new(),
            pending_removals: HashMap::new(),
            reports: BTreeMap::new(),
        }
    }

    /// Whether the engine acts as leader.
    pub fn is_leading(&self) -> bool {
        self.leading
    }

    /// The lease deadline table (monotonic milliseconds).
    pub fn leases(&self) -> &LeaseDeadlines {
        &self.leases
    }

    /// The self-preservation brakes.
    pub fn brakes(&self) -> &Brakes {
        &self.brakes
    }

    /// Sets what this node's checker may probe (SPEC S6; see `muster_health::target`).
    pub fn set_target_policy(&mut self, targets: muster_health::target::TargetPolicy) {
        self.checker.set_target_policy(targets);
    }

    /// The checker: its endpoints, probes in flight, and the state checks combine to.
    pub fn checker(&self) -> &Checker<R> {
        &self.checker
    }

    /// When the next event is due by itself (monotonic ms): a tick, or sooner a checker turn.
    pub fn wake_at(&self, now: Now) -> u64 {
        let tick = now.monotonic_ms.saturating_add(TICK_MS);
        match self.checker.wake_at(now.monotonic_ms) {
            Some(at) if self.leading => at.min(tick),
            _ => tick,
        }
    }

    // ---- leadership -------------------------------------------------------------------

    /// This node became leader: every live lease gets a whole TTL plus [`ELECTION_GRACE_MS`]
    /// (renewals went to the old leader), and the checker starts from the registry as it is.
    /// Drain deadlines need nothing: they are committed state.
    pub fn became_leader(&mut self, registry: &Registry, now: Now) {
        self.leading = true;
        self.leases = LeaseDeadlines::new();
        let live = registry
            .leases()
            .map(|lease| (lease.id, lease.ttl_ms.saturating_add(ELECTION_GRACE_MS)));
        self.leases.reconcile(live, now.monotonic_ms);
        self.next_reconcile_ms = now.monotonic_ms.saturating_add(RECONCILE_EVERY_MS);
        self.resync(registry, now);
    }

    /// This node no longer leads: deadlines and checks are forgotten (the next leader keeps
    /// them). Proposals still in flight settle as usual and answer their callers.
    pub fn lost_leadership(&mut self) {
        self.leading = false;
        self.leases = LeaseDeadlines::new();
        self.checker.clear();
        self.expiring.clear();
        self.ending.clear();
    }

    /// The registry was replaced (a snapshot installed): the checker starts over from it.
    pub fn reset(&mut self, registry: &Registry, now: Now) {
        if self.leading {
            self.resync(registry, now);
        }
    }

    fn resync(&mut self, registry: &Registry, now: Now) {
        self.checker.clear();
        self.pending_removals.clear();
        for snapshot in registry.all_services() {
            for endpoint in snapshot.iter().filter(|e| !e.checks.is_empty()) {
                self.checker.sync(snapshot.key(), endpoint, now.monotonic_ms);
            }
        }
        self.synced = registry.revision();
    }

    // ---- registry changes -------------------------------------------------------------

    /// Updates the registry applied: the checker follows endpoints with checks. Updates at or
    /// before the revision the checker last read the registry at are skipped.
    pub fn applied(&mut self, updates: &[Arc<ServiceUpdate>], now: Now) {
        if !self.leading {
            return;
        }
        for update in updates.iter().filter(|u| u.revision > self.synced) {
            for event in &update.events {
                match event {
                    Event::Put { endpoint } => self.checker.sync(&update.key, endpoint, now.monotonic_ms),
                    Event::Delete { instance, .. } => self.checker.remove(&update.key, instance),
                }
            }
        }
    }

    /// A lease was granted (or attached) through this node: its deadline, starting now if
    /// it has none.
    pub fn granted(&mut self, grant: LeaseGrant, now: Now) -> LeaseReply {
        let deadline = if self.leading {
            self.leases.ensure(grant.id, grant.ttl_ms, now.monotonic_ms)
        } else {
            // The leader gives it a deadline when it next reconciles; this is what it will be.
            now.monotonic_ms.saturating_add(grant.ttl_ms)
        };
        LeaseReply {
            id: grant.id,
            ttl_ms: grant.ttl_ms,
            deadline_unix_ms: now.unix_of(deadline),
        }
    }

    /// A lease was revoked.
    pub fn revoked(&mut self, id: LeaseId) {
        self.leases.forget(id);
    }

    // ---- requests ---------------------------------------------------------------------

    /// A renewal: no log write, the deadline moves to now + TTL (SPEC R4).
    pub fn renew(
        &mut self,
        registry: &Registry,
        tenant: &Label,
        id: LeaseId,
        now: Now,
    ) -> Result<LeaseReply, RenewRefused> {
        if !self.leading {
            return Err(RenewRefused::NotLeading);
        }
        let ttl_ms = registry
            .lease(id)
            .filter(|lease| lease.tenant == *tenant)
            .map(|lease| lease.ttl_ms)
            .ok_or(RenewRefused::NotFound)?;
        let deadline = self
            .leases
            .renew(id, ttl_ms, now.monotonic_ms)
            .map_err(|_| RenewRefused::NotFound)?;
        Ok(LeaseReply {
            id,
            ttl_ms,
            deadline_unix_ms: now.unix_of(deadline),
        })
    }

    /// An instance reports how many requests it still serves: zero ends its drain's grace at
    /// once — a deregistration fenced by the record's revision, so a drain the owner lifted
    /// meanwhile is never ended (SPEC L6).
    pub fn in_flight(&mut self, registry: &Registry, target: Target, in_flight: u64, reply: ReplyTo) -> Vec<Output> {
        if !self.leading {
            return vec![Output::Reply {
                to: reply,
                reply: Reply::NotLeading,
            }];
        }
        let nothing = || Output::Reply {
            to: reply,
            reply: Reply::InFlight(InFlightReply::NothingEnded {
                revision: registry.revision(),
            }),
        };
        let pending = registry
            .drain_deadline(&target.key, &target.instance)
            .is_some_and(|drain| drain.incarnation == target.incarnation);
        if in_flight != 0 || !pending {
            return vec![nothing()];
        }
        match self.end_drain(registry, &target.key, &target.instance, Some(reply)) {
            Some(output) => vec![output],
            None => vec![nothing()],
        }
    }

    /// A TTL check's report; answered once any change it caused has settled.
    pub fn ttl_report(&mut self, registry: &Registry, report: &TtlReport, reply: ReplyTo, now: Now) -> Vec<Output> {
        if !self.leading {
            return vec![Output::Reply {
                to: reply,
                reply: Reply::NotLeading,
            }];
        }
        self.brakes.expire(now.monotonic_ms);
        // A note is the reason the registry records: control characters (a multi-line
        // output) become spaces and it is cut to the text limit, so it is never refused.
        let limit = registry.policy().limits.max_text_bytes;
        let fit;
        let report = match &report.note {
            Some(note) if note.len() > limit || note.chars().any(char::is_control) => {
                let mut end = note.len().min(limit);
                while !note.is_char_boundary(end) {
                    end -= 1;
                }
                let clean = note[..end].replace(char::is_control, " ");
                fit = TtlReport {
                    note: Some(clean),
                    ..report.clone()
                };
                &fit
            }
            _ => report,
        };
        let decisions = {
            let pending = &self.pending_removals;
            self.checker
                .report(report, now.monotonic_ms, &mut self.brakes, &mut |key| {
                    counts(registry, pending, key)
                })
        };
        let decisions = match decisions {
            Ok(decisions) => decisions,
            Err(refused) => {
                return vec![Output::Reply {
                    to: reply,
                    reply: Reply::Report(Err(refused)),
                }];
            }
        };
        let mut outputs = Vec::new();
        for decision in decisions {
            self.decide(registry, decision, Some(reply), &mut outputs);
        }
        let remaining = outputs.iter().filter(|o| matches!(o, Output::Propose(_))).count();
        if remaining == 0 {
            outputs.push(Output::Reply {
                to: reply,
                reply: Reply::Report(Ok(report_reply(registry, &report.key, &report.instance, None))),
            });
        } else {
            self.reports.insert(
                reply,
                ReportWait {
                    key: report.key.clone(),
                    instance: report.instance.clone(),
                    remaining,
                    revision: None,
                },
            );
        }
        self.protection_notes(&mut outputs);
        outputs
    }

    /// A probe's result.
    pub fn probe_result(&mut self, registry: &Registry, id: ProbeId, result: ProbeResult, now: Now) -> Vec<Output> {
        let pending = &self.pending_removals;
        let decision = self
            .checker
            .record(id, result, now.monotonic_ms, &mut self.brakes, &mut |key| {
                counts(registry, pending, key)
            });
        let mut outputs = Vec::new();
        if let Some(decision) = decision {
            self.decide(registry, decision, None, &mut outputs);
        }
        self.protection_notes(&mut outputs);
        outputs
    }

    /// What the brakes began or stopped holding, as notes (SPEC H5: a hold is told once).
    fn protection_notes(&mut self, outputs: &mut Vec<Output>) {
        outputs.extend(self.brakes.take_changes().into_iter().map(|change| {
            Output::Note(Note::Protection {
                key: change.key,
                active: change.active,
                serving: change.counts.serving,
                total: change.counts.total,
            })
        }));
    }

    // ---- time -------------------------------------------------------------------------

    /// Time passed: reconcile lease deadlines now and then, end drains whose grace passed,
    /// expire leases whose deadline passed (as the brakes allow), start due probes and act on
    /// TTL deadlines that passed.
    pub fn tick(&mut self, registry: &Registry, now: Now) -> Vec<Output> {
        if !self.leading {
            return Vec::new();
        }
        let mut outputs = Vec::new();
        if now.monotonic_ms >= self.next_reconcile_ms {
            let live = registry.leases().map(|lease| (lease.id, lease.ttl_ms));
            self.leases.reconcile(live, now.monotonic_ms);
            self.next_reconcile_ms = now.monotonic_ms.saturating_add(RECONCILE_EVERY_MS);
        }
        let due: Vec<(ServiceKey, InstanceId)> = registry
            .drains_due(now.unix_ms)
            .map(|drain| (drain.key.clone(), drain.instance.clone()))
            .filter(|slot| !self.ending.contains(slot))
            .collect();
        for (key, instance) in due {
            outputs.extend(self.end_drain(registry, &key, &instance, None));
        }
        self.brakes.expire(now.monotonic_ms);
        self.expire_leases(registry, now, &mut outputs);
        let (probes, decisions) = {
            let pending = &self.pending_removals;
            self.checker.due(now.monotonic_ms, &mut self.brakes, &mut |key| {
                counts(registry, pending, key)
            })
        };
        outputs.extend(probes.into_iter().map(Output::Probe));
        for decision in decisions {
            self.decide(registry, decision, None, &mut outputs);
        }
        self.protection_notes(&mut outputs);
        outputs
    }

    fn expire_leases(&mut self, registry: &Registry, now: Now, outputs: &mut Vec<Output>) {
        let expired: Vec<LeaseId> = self
            .leases
            .expired(now.monotonic_ms, MAX_EXPIRE_BATCH + self.expiring.len())
            .into_iter()
            .filter(|id| !self.expiring.contains(id))
            .take(MAX_EXPIRE_BATCH)
            .collect();
        let (allowed, notes) = unprotected(
            registry,
            &mut self.brakes,
            &self.pending_removals,
            expired,
            now.monotonic_ms,
        );
        outputs.extend(notes.into_iter().map(Output::Note));
        if allowed.is_empty() {
            return;
        }
        self.expiring.extend(allowed.iter().copied());
        let command = ExpireLeases {
            leases: allowed.clone(),
        };
        outputs.push(self.propose(Duty::LeaseKeeper, command.into(), Purpose::Expire(allowed)));
    }

    // ---- settling ---------------------------------------------------------------------

    /// How a proposal went; `registry` is read after it (committed or not).
    pub fn settled(&mut self, registry: &Registry, tag: Tag, outcome: Outcome) -> Vec<Output> {
        let Some(purpose) = self.pending.remove(&tag) else {
            return Vec::new();
        };
        let mut outputs = Vec::new();
        match purpose {
            Purpose::Expire(leases) => {
                for id in leases {
                    self.expiring.remove(&id);
                    if matches!(outcome, Outcome::Committed { .. }) {
                        self.leases.forget(id);
                    }
                }
            }
            Purpose::EndDrain { slot, reply } => {
                self.ending.remove(&slot);
                if let Some(to) = reply {
                    let reply = match outcome {
                        Outcome::Committed {
                            revision,
                            changed: true,
                        } => Reply::InFlight(InFlightReply::Ended { revision }),
                        Outcome::Committed { .. } | Outcome::Refused => Reply::InFlight(InFlightReply::NothingEnded {
                            revision: registry.revision(),
                        }),
                        Outcome::NotCommitted => Reply::NotCommitted,
                    };
                    outputs.push(Output::Reply { to, reply });
                }
            }
            Purpose::Check {
                key,
                instance,
                removal,
                report,
            } => {
                if removal && let Some(pending) = self.pending_removals.get_mut(&key) {
                    *pending = pending.saturating_sub(1);
                    if *pending == 0 {
                        self.pending_removals.remove(&key);
                    }
                }
                if matches!(outcome, Outcome::Refused | Outcome::NotCommitted) {
                    let registered = registry
                        .snapshot(&key)
                        .and_then(|snapshot| snapshot.get(&instance).map(|e| e.serving))
                        .unwrap_or(ServingState::Unknown);
                    self.checker.proposal_failed(&key, &instance, registered);
                }
                if let Some(to) = report
                    && let Some(wait) = self.reports.get_mut(&to)
                {
                    if let Outcome::Committed {
                        revision,
                        changed: true,
                    } = outcome
                    {
                        wait.revision = Some(revision);
                    }
                    wait.remaining -= 1;
                    if wait.remaining == 0 {
                        let wait = self.reports.remove(&to).expect("just seen");
                        let answer = report_reply(registry, &wait.key, &wait.instance, wait.revision);
                        outputs.push(Output::Reply {
                            to,
                            reply: Reply::Report(Ok(answer)),
                        });
                    }
                }
            }
        }
        outputs
    }

    // ---- helpers ----------------------------------------------------------------------

    /// Proposes the end of an instance's drain, fenced by the record's revision; `None` when
    /// the record is not draining (the owner lifted it, or it is gone).
    fn end_drain(
        &mut self,
        registry: &Registry,
        key: &ServiceKey,
        instance: &InstanceId,
        reply: Option<ReplyTo>,
    ) -> Option<Output> {
        let drain = registry.drain_deadline(key, instance)?;
        let record = registry
            .snapshot(key)
            .and_then(|snapshot| snapshot.get(instance).cloned())
            .filter(|e| e.incarnation == drain.incarnation && e.serving == ServingState::Draining)?;
        let slot = (key.clone(), instance.clone());
        if reply.is_none() && self.ending.contains(&slot) {
            return None;
        }
        self.ending.insert(slot.clone());
        let command = Deregister {
            target: Target {
                key: key.clone(),
                instance: instance.clone(),
                incarnation: drain.incarnation,
            },
            expected_revision: Some(record.revision),
        };
        Some(self.propose(Duty::Drain, command.into(), Purpose::EndDrain { slot, reply }))
    }

    /// The checker's set-serving of `proposal` (fenced by `expected`, when given).
    fn propose_serving(
        &mut self,
        proposal: muster_health::checker::Proposal,
        removal: bool,
        report: Option<ReplyTo>,
        expected: Option<Revision>,
    ) -> Output {
        let purpose = Purpose::Check {
            key: proposal.key.clone(),
            instance: proposal.instance.clone(),
            removal,
            report,
        };
        let command = SetServing {
            target: Target {
                key: proposal.key,
                instance: proposal.instance,
                incarnation: proposal.incarnation,
            },
            state: proposal.state,
            reason: proposal.reason,
            expected_revision: expected,
        };
        self.propose(Duty::Checker, command.into(), purpose)
    }

    fn decide(&mut self, registry: &Registry, decision: Decision, report: Option<ReplyTo>, outputs: &mut Vec<Output>) {
        match decision {
            Decision::Propose(proposal) => {
                let removal = !in_routing(proposal.state);
                if removal {
                    *self.pending_removals.entry(proposal.key.clone()).or_insert(0) += 1;
                }
                outputs.push(Output::Note(Note::Crossing {
                    key: proposal.key.clone(),
                    instance: proposal.instance.clone(),
                    state: proposal.state,
                    reason: proposal.reason.clone(),
                }));
                outputs.push(self.propose_serving(proposal, removal, report, None));
            }
            Decision::Note(proposal) => {
                // Only over a record whose state and observation are the checker's own, fenced
                // by its revision, so a note never sets a state nor takes over another actor's
                // observation (and a cluster below format 3 gets no write it would ignore).
                let record = registry
                    .snapshot(&proposal.key)
                    .and_then(|snapshot| snapshot.get(&proposal.instance).cloned());
                let Some(record) = record.filter(|record| {
                    registry.format() >= 3
                        && record.incarnation == proposal.incarnation
                        && record.serving == proposal.state
                        && record.observation.actor == Actor::Checker
                }) else {
                    return;
                };
                outputs.push(self.propose_serving(proposal, false, report, Some(record.revision)));
            }
            Decision::Held { key, instance, reason } => {
                outputs.push(Output::Note(Note::Held { key, instance, reason }))
            }
            Decision::Liveness {
                key,
                instance,
                health,
                reason,
            } => outputs.push(Output::Note(Note::Liveness {
                key,
                instance,
                health,
                reason,
            })),
        }
    }

    fn propose(&mut self, duty: Duty, command: muster_registry::Command, purpose: Purpose) -> Output {
        self.next_tag += 1;
        let tag = Tag(self.next_tag);
        self.pending.insert(tag, purpose);
        Output::Propose(Proposal { tag, duty, command })
    }
}

/// A service's counts as the registry holds them, minus removals proposed and not settled.
fn counts(registry: &Registry, pending: &HashMap<ServiceKey, usize>, key: &ServiceKey) -> Counts {
    let counts = registry
        .snapshot(key)
        .map(|snapshot| Counts::of(snapshot.iter().map(|e| e.serving)))
        .unwrap_or_default();
    Counts {
        serving: counts.serving.saturating_sub(pending.get(key).copied().unwrap_or(0)),
        ..counts
    }
}

fn report_reply(
    registry: &Registry,
    key: &ServiceKey,
    instance: &InstanceId,
    revision: Option<Revision>,
) -> CheckReportReply {
    let serving = registry
        .snapshot(key)
        .and_then(|snapshot| snapshot.get(instance).map(|e| e.serving));
    CheckReportReply {
        serving: serving.unwrap_or(ServingState::Unknown),
        revision,
    }
}
