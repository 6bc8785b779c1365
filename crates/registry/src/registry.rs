//! The registry state machine: [`Registry::apply`] and the reads.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use muster_auth::AclTable;
use muster_core::{
    DeleteReason, Endpoint, Event, Incarnation, InstanceId, Label, NamespaceKey, Rejection, Revision, ServiceKey,
    ServiceSnapshot, ServiceUpdate,
};

use crate::applied::{Applied, ReadError};
use crate::command::{Command, CommandMeta, Register, Target};
use crate::config::RegistryConfig;
use crate::drains::{DrainDeadline, DrainTable};
use crate::fences::{Fence, FenceTable};
use crate::leases::{Lease, LeaseTable};
use crate::plan::{Delete, Plan, Planned};
use crate::service::{Change, ServiceState, delete_event};

/// How long a service left empty stays in listings (`services`, the dashboard, Consul's
/// catalog): 5 minutes outlasts a redeploy that takes every instance down before the new
/// ones register, while a retired or mistyped service leaves the lists the same hour, long
/// before its history is released (`history_revisions`).
pub const EMPTY_LISTED_MS: u64 = 5 * 60 * 1000;

/// The highest incarnation a command may carry: 2^53 − 1, the largest integer every JSON
/// client (JavaScript's doubles included) represents exactly, so no client can present an
/// incarnation it cannot read back. It also keeps an instance from being squatted: a record
/// at `u64::MAX` could never be replaced by a newer incarnation. The registrar's schemes stay
/// far below it (a start counter never gets there; start-time milliseconds × 1,000 reach it
/// around the year 2255).
pub const MAX_INCARNATION: u64 = (1 << 53) - 1;

/// What a change-log query covers (SPEC W4: per key or per namespace).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// One service.
    Service(ServiceKey),
    /// Every service of one namespace.
    Namespace(NamespaceKey),
}

/// One page of a service's endpoints, all read at one revision (SPEC W2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// The global revision the page was read at: pass it back to read the next page.
    pub at: Revision,
    /// The service's last change at or before `at`.
    pub revision: Revision,
    /// The digest of the whole set at `at`.
    pub digest: muster_core::Digest,
    /// How many endpoints the whole set holds.
    pub total: usize,
    /// This page's endpoints, sorted by instance.
    pub endpoints: Vec<Arc<Endpoint>>,
    /// The instance to continue after, if more remain.
    pub next: Option<InstanceId>,
}

impl Page {
    /// The one page of a known service with no endpoints (or of none held here, mirrored
    /// from another region), read at `at`.
    pub fn empty(at: Revision) -> Page {
        Page {
            at,
            revision: Revision::ZERO,
            digest: muster_core::Digest::EMPTY,
            total: 0,
            endpoints: Vec::new(),
            next: None,
        }
    }
}

/// What an imported registry is assembled from (`state.rs` checks and builds them).
pub(crate) struct Parts {
    pub(crate) policy: RegistryConfig,
    pub(crate) policy_revision: Option<Revision>,
    pub(crate) revision: Revision,
    pub(crate) compacted: Revision,
    pub(crate) services: Vec<ServiceState>,
    pub(crate) leases: LeaseTable,
    pub(crate) usage: BTreeMap<Label, Usage>,
    pub(crate) touched: VecDeque<(Revision, Arc<ServiceKey>)>,
    pub(crate) fences: FenceTable,
    pub(crate) clock_ms: u64,
}

/// One endpoint's change within a commit.
enum Write {
    Put(Arc<Endpoint>),
    Delete {
        fence: muster_core::Incarnation,
        reason: DeleteReason,
    },
}

/// What a tenant holds, for quotas. `services` counts live (non-empty) services only; a
/// tenant whose usage is all zero is forgotten, so the map holds exactly the tenants that
/// count against `max_tenants`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Usage {
    pub(crate) services: u64,
    pub(crate) endpoints: u64,
    pub(crate) leases: u64,
}

/// The deterministic registry state machine.
///
/// `apply` takes a command and its [`CommandMeta`] (time and caller are inputs) and either
/// refuses it, changing nothing, or commits it at one new revision. Reads hand out shared,
/// immutable snapshots. No clock, no randomness, no hash-map order: the same commands give
/// the same state, events and bytes on every replica.
#[derive(Debug, Clone)]
pub struct Registry {
    /// The policy in force: replicated, changed only by a committed `SetPolicy`.
    policy: RegistryConfig,
    /// The revision the policy in force was committed at; `None` while it is still the one
    /// the registry was created with (no `SetPolicy` committed yet).
    policy_revision: Option<Revision>,
    pub(crate) revision: Revision,
    /// Every revision up to and including this one has left the change history.
    compacted: Revision,
    namespaces: BTreeMap<NamespaceKey, BTreeMap<Label, ServiceState>>,
    leases: LeaseTable,
    usage: BTreeMap<Label, Usage>,
    /// (revision, service) for every retained change, oldest first: what compaction visits.
    touched: VecDeque<(Revision, Arc<ServiceKey>)>,
    /// What fences removed instances, for `fence_retention_ms`.
    fences: FenceTable,
    /// The latest command time committed (ms): a command is judged at the later of this and
    /// its own `at_ms`. Proposers stamp `at_ms` with their own clocks (a follower's write, a
    /// leader after a change), which need not agree and may step back; judging by the
    /// committed maximum keeps time in the log monotonic, so a proposer whose clock is behind
    /// cannot time out fences or drains early (SPEC R6).
    clock_ms: u64,
    /// When drained instances are to be deregistered (`drains.rs`).
    drains: DrainTable,
    /// The tokens in force (`acl.rs`, SPEC S1).
    pub(crate) acl: AclTable,
    /// What this region mirrors of its peers (`mirror.rs`, SPEC G2).
    pub(crate) mirrors: crate::mirror::MirrorTable,
    /// The format commands are applied at (architecture.md "Formats and versions"): raised only by a
    /// committed `RaiseFormat`, so every replica switches at the same command.
    pub(crate) format: u32,
}

impl Registry {
    /// An empty registry at revision 0 whose initial policy is `policy` (the config file's):
    /// the only time a configuration decides; later changes are committed `SetPolicy`s.
    pub fn new(policy: RegistryConfig) -> Registry {
        Registry {
            policy,
            policy_revision: None,
            revision: Revision::ZERO,
            compacted: Revision::ZERO,
            namespaces: BTreeMap::new(),
            leases: LeaseTable::new(muster_core::LeaseId(1)),
            usage: BTreeMap::new(),
            touched: VecDeque::new(),
            fences: FenceTable::default(),
            clock_ms: 0,
            drains: DrainTable::default(),
            acl: AclTable::default(),
            mirrors: crate::mirror::MirrorTable::default(),
            format: muster_core::FIRST_FORMAT,
        }
    }

    /// Applies one command: either every effect at one new revision, or a refusal that
    /// changes nothing.
    pub fn apply(&mut self, command: &Command, meta: &CommandMeta) -> Result<Applied, Rejection> {
        let judged = CommandMeta {
            at_ms: meta.at_ms.max(self.clock_ms),
            principal: meta.principal.clone(),
            actor: meta.actor,
        };
        let applied = self.judge(command, &judged)?;
        if applied.unchanged.is_none() || applied.unchanged == Some(crate::applied::Unchanged::PolicyAdopted) {
            self.clock_ms = judged.at_ms;
        }
        Ok(applied)
    }

    /// The latest command time committed, in ms (see the field's doc).
    pub fn clock_ms(&self) -> u64 {
        self.clock_ms
    }

    fn judge(&mut self, command: &Command, meta: &CommandMeta) -> Result<Applied, Rejection> {
        self.check_principal(meta)?;
        self.check_not_mirrored(command)?;
        let planned = match command {
            Command::Register(c) => self.plan_register(c, meta)?,
            Command::RegisterNext(c) => self.plan_register(&self.next_incarnation(c, meta.at_ms), meta)?,
            Command::SetServing(c) => self.plan_serving(&c.target, c.state, &c.reason, c.expected_revision, meta)?,
            Command::Drain(c) => self.plan_drain(c, meta)?,
            Command::Deregister(c) => self.plan_deregister(c, meta)?,
            Command::Evict(c) => self.plan_evict(c)?,
            Command::GrantLease(c) => self.plan_grant(c)?,
            Command::RevokeLease(c) => self.plan_revoke(c)?,
            Command::ExpireLeases(c) => self.plan_expire(c),
            Command::AclBootstrap(c) => return self.bootstrap(c, meta),
            Command::CreateToken(c) => return self.create_token(c, meta),
            Command::RevokeToken(c) => return self.revoke_token(c),
            Command::Mirror(c) => return self.apply_mirror(c, meta.at_ms),
            Command::RaiseFormat(c) => return self.raise_format(*c),
            Command::SetPolicy(c) => match self.plan_policy(c)? {
                Some(planned) => planned,
                None => return Ok(self.adopt_policy(c.policy.clone(), meta.at_ms)),
            },
        };
        Ok(match planned {
            Planned::Unchanged(applied) => applied,
            Planned::Commit(plan) => self.commit(plan, meta.at_ms),
        })
    }

    /// Writes a plan at the next revision. Cannot fail: every check happened in planning.
    fn commit(&mut self, plan: Plan, at_ms: u64) -> Applied {
        let revision = self.revision.next();
        if let Some(policy) = plan.policy {
            self.policy = *policy;
            self.policy_revision = Some(revision);
        }
        if let Some(lease) = plan.grant {
            self.usage.entry(lease.tenant.clone()).or_default().leases += 1;
            self.leases.insert(*lease);
        }
        let mut writes: BTreeMap<ServiceKey, BTreeMap<InstanceId, Write>> = BTreeMap::new();
        for (key, endpoint) in plan.puts {
            writes
                .entry(key)
                .or_default()
                .insert(endpoint.instance.clone(), Write::Put(endpoint));
        }
        for Delete {
            key,
            instance,
            fence,
            reason,
        } in plan.deletes
        {
            writes
                .entry(key)
                .or_default()
                .insert(instance, Write::Delete { fence, reason });
        }
        let updates = writes
            .into_iter()
            .map(|(key, writes)| self.commit_service(key, writes, revision, at_ms))
            .collect();
        for id in plan.revoke {
            if let Some(lease) = self.leases.remove(id) {
                self.usage.entry(lease.tenant.clone()).or_default().leases -= 1;
                self.forget_idle_tenant(&lease.tenant);
            }
        }
        if let Some(drain) = plan.drain {
            self.drains.set(drain);
        }
        self.revision = revision;
        let released = self.prune_and_compact(at_ms);
        Applied {
            revision,
            updates,
            lease: plan.lease,
            unchanged: None,
            released,
            mirrored: Vec::new(),
        }
    }

    /// Applies one service's writes at `revision`: the snapshot (and its digest), fences,
    /// lease index, usage and history all move together.
    fn commit_service(
        &mut self,
        key: ServiceKey,
        writes: BTreeMap<InstanceId, Write>,
        revision: Revision,
        at_ms: u64,
    ) -> Arc<ServiceUpdate> {
        let usage = self.usage.entry(key.tenant.clone()).or_default();
        let service = self
            .namespaces
            .entry(key.namespace_key())
            .or_default()
            .entry(key.service.clone())
            .or_insert_with(|| ServiceState::new(key.clone()));
        let snapshot = Arc::make_mut(&mut service.current);
        let was_live = !snapshot.is_empty();
        let prev_revision = snapshot.revision();
        let mut events = Vec::with_capacity(writes.len());
        let mut before = Vec::with_capacity(writes.len());
        for (instance, write) in writes {
            let (old, new_lease) = match &write {
                Write::Put(endpoint) => (snapshot.put(Arc::clone(endpoint)), endpoint.lease),
                Write::Delete { .. } => (snapshot.remove(&instance), None),
            };
            let old_lease = old.as_ref().and_then(|e| e.lease);
            if old_lease != new_lease {
                if let Some(id) = old_lease {
                    self.leases.detach(id, &service.key, &instance);
                }
                if let Some(id) = new_lease {
                    self.leases.attach(id, &service.key, &instance);
                }
            }
            // A put that is not the same incarnation draining, or a delete, lifts the drain.
            let still_draining = matches!(&write, Write::Put(endpoint)
                if endpoint.serving == muster_core::ServingState::Draining
                    && self.drains.get(&service.key, &instance).is_some_and(|d| d.incarnation == endpoint.incarnation));
            if !still_draining {
                self.drains.clear(&service.key, &instance);
            }
            match write {
                Write::Put(endpoint) => {
                    usage.endpoints += u64::from(old.is_none());
                    self.fences.remove(&service.key, &instance);
                    events.push(Event::Put { endpoint });
                }
                Write::Delete { fence, reason } => {
                    let removed = old.as_ref().expect("plans only delete live endpoints");
                    usage.endpoints -= 1;
                    events.push(delete_event(removed, reason));
                    let fence = Fence {
                        incarnation: fence.max(removed.incarnation),
                        revision,
                        removed_at_ms: at_ms,
                    };
                    self.fences.insert(&service.key, instance, fence);
                }
            }
            before.push(old);
        }
        match (was_live, !snapshot.is_empty()) {
            (false, true) => usage.services += 1,
            (true, false) => usage.services -= 1,
            _ => {}
        }
        snapshot.set_revision(revision);
        let update = Arc::new(ServiceUpdate {
            key,
            revision,
            prev_revision,
            digest: snapshot.digest(),
            events,
        });
        service.history.push_back(Change {
            update: Arc::clone(&update),
            before: before.into(),
        });
        self.touched.push_back((revision, Arc::clone(&service.key)));
        self.forget_idle_tenant(&update.key.tenant);
        update
    }

    /// Puts the first committed policy in force at the current revision: nothing the registry
    /// holds changes (only history and fences beyond the new bounds go), so no revision is
    /// spent, and a log that starts with it replays alike whatever policy each replica was
    /// created with.
    /// Raises the format: from this command on, every replica applies what it adds.
    fn raise_format(&mut self, command: crate::RaiseFormat) -> Result<Applied, Rejection> {
        if command.format > muster_core::FORMAT {
            return Err(Rejection::InvalidField {
                field: "format".into(),
                reason: format!(
                    "this node applies formats up to {}, not {}",
                    muster_core::FORMAT,
                    command.format
                ),
            });
        }
        let unchanged = if command.format > self.format {
            self.format = command.format;
            crate::applied::Unchanged::FormatRaised
        } else {
            crate::applied::Unchanged::AlreadyCommitted
        };
        Ok(Applied {
            revision: self.revision,
            updates: Vec::new(),
            lease: None,
            unchanged: Some(unchanged),
            released: Vec::new(),
            mirrored: Vec::new(),
        })
    }

    /// The refusal of a command that needs format `needed` while the registry is below it.
    pub(crate) fn needs_format(&self, needed: u32, what: &str) -> Result<(), Rejection> {
        if self.format >= needed {
            return Ok(());
        }
        Err(Rejection::UpgradePending {
            what: what.to_owned(),
            format: self.format,
            needed,
        })
    }

    fn adopt_policy(&mut self, policy: RegistryConfig, at_ms: u64) -> Applied {
        self.policy = policy;
        self.policy_revision = Some(self.revision);
        let released = self.prune_and_compact(at_ms);
        Applied {
            revision: self.revision,
            updates: Vec::new(),
            lease: None,
            unchanged: Some(crate::applied::Unchanged::PolicyAdopted),
            released,
            mirrored: Vec::new(),
        }
    }

    /// Prunes expired fences and compacts history: the services that became unknown (SPEC
    /// W5), sorted: released ones, and released ones whose last fence just expired.
    fn prune_and_compact(&mut self, at_ms: u64) -> Vec<ServiceKey> {
        let unfenced = self.fences.prune(at_ms, self.policy.fence_retention_ms);
        let mut gone = self.compact();
        gone.extend(unfenced.into_iter().filter(|key| self.service(key).is_none()));
        gone.sort();
        gone.dedup();
        gone
    }

    /// Compacts history after a commit that wrote no local service (a mirror's).
    pub(crate) fn compact_now(&mut self) -> Vec<ServiceKey> {
        self.compact()
    }

    /// Forgets a tenant that holds nothing, so it stops counting against `max_tenants`.
    fn forget_idle_tenant(&mut self, tenant: &Label) {
        if self.usage.get(tenant).is_some_and(|u| *u == Usage::default()) {
            self.usage.remove(tenant);
        }
    }

    /// Drops history older than the policy's number of revisions, and releases the services
    /// left empty whose last change it dropped (their fences stay in the fence table).
    fn compact(&mut self) -> Vec<ServiceKey> {
        let mut released = Vec::new();
        let floor = Revision(self.revision.0.saturating_sub(self.policy.history_revisions));
        if floor <= self.compacted {
            return released;
        }
        while let Some((revision, key)) = self.touched.front() {
            if *revision > floor {
                break;
            }
            let namespace_key = key.namespace_key();
            if let Some(services) = self.namespaces.get_mut(&namespace_key)
                && let Some(service) = services.get_mut(&key.service)
            {
                service.compact(floor);
                if service.is_released() {
                    services.remove(&key.service);
                    if services.is_empty() {
                        self.namespaces.remove(&namespace_key);
                    }
                    released.push(ServiceKey::clone(key));
                }
            }
            self.touched.pop_front();
        }
        self.compacted = floor;
        released.sort();
        released
    }

    // ---- reads -------------------------------------------------------------------------

    /// The registry with its format (an import).
    pub(crate) fn with_format(mut self, format: u32) -> Registry {
        self.format = format;
        self
    }

    /// The format commands are applied at ([`muster_core::FORMAT`]; raised by a committed
    /// [`RaiseFormat`](crate::RaiseFormat)).
    pub fn format(&self) -> u32 {
        self.format
    }

    /// The policy commands are judged by now (replicated: see [`SetPolicy`](crate::SetPolicy)).
    pub fn policy(&self) -> &RegistryConfig {
        &self.policy
    }

    /// The revision the policy in force was committed at; 0 while it is still the one the
    /// registry was created with.
    pub fn policy_revision(&self) -> Revision {
        self.policy_revision.unwrap_or(Revision::ZERO)
    }

    /// Whether the policy in force was committed by a `SetPolicy` (false: it is still the
    /// one given at construction, which the log does not record). The consensus layer
    /// commits one before the first other command, so the log says which policy judges it.
    pub fn policy_committed(&self) -> bool {
        self.policy_revision.is_some()
    }

    /// How many tenants hold anything (a live service or a lease): what `max_tenants` bounds.
    pub fn tenant_count(&self) -> usize {
        self.usage.len()
    }

    /// How many live (non-empty) services a tenant holds: what `services_per_tenant` bounds.
    pub fn live_services(&self, tenant: &Label) -> u64 {
        self.usage(tenant).services
    }

    /// The current global revision.
    pub fn revision(&self) -> Revision {
        self.revision
    }

    /// Every revision up to and including this one has been compacted away.
    pub fn compacted(&self) -> Revision {
        self.compacted
    }

    /// The current endpoint set of a service, shared (O(1) after the lookup). `None` means
    /// the service is unknown; a known service with no endpoints is an empty snapshot (W5).
    pub fn snapshot(&self, key: &ServiceKey) -> Option<Arc<ServiceSnapshot>> {
        self.service(key).map(|s| Arc::clone(&s.current))
    }

    /// The current set of a known service (SPEC W5: unknown is not empty): its
    /// snapshot, or an empty one for a service released with its removals still fenced
    /// (known, and empty). `None`: nothing of it is held, the service is unknown.
    pub fn known_snapshot(&self, key: &ServiceKey) -> Option<Arc<ServiceSnapshot>> {
        self.snapshot(key).or_else(|| {
            self.fences
                .last_removal_ms(key)
                .map(|_| Arc::new(ServiceSnapshot::empty(key.clone())))
        })
    }

    /// The endpoint set of a service as it was at global revision `at` (within retained
    /// history). `Ok(None)`: the service did not exist then.
    pub fn snapshot_at(&self, key: &ServiceKey, at: Revision) -> Result<Option<Arc<ServiceSnapshot>>, ReadError> {
        self.check_readable(at)?;
        Ok(self.service(key).and_then(|s| s.snapshot_at(at)))
    }

    /// One page of a service's endpoints at revision `at` (the current one when `None`), after
    /// instance `after`. Read every page at the `at` of the first to see one consistent set.
    pub fn page(
        &self,
        key: &ServiceKey,
        at: Option<Revision>,
        after: Option<&InstanceId>,
        limit: usize,
    ) -> Result<Option<Page>, ReadError> {
        let at = at.unwrap_or(self.revision);
        let Some(snapshot) = self.snapshot_at(key, at)? else {
            return Ok(None);
        };
        let (endpoints, next) = snapshot.page(after, limit);
        Ok(Some(Page {
            at,
            revision: snapshot.revision(),
            digest: snapshot.digest(),
            total: snapshot.len(),
            endpoints,
            next,
        }))
    }

    /// The services of a namespace, sorted by name, each as its current snapshot.
    pub fn services(&self, namespace: &NamespaceKey) -> Vec<Arc<ServiceSnapshot>> {
        self.namespaces
            .get(namespace)
            .map(|services| services.values().map(|s| Arc::clone(&s.current)).collect())
            .unwrap_or_default()
    }

    /// The services of a namespace that listings show at `now_ms` (SPEC U1, W5), sorted by
    /// name: all but those left empty more than [`EMPTY_LISTED_MS`] ago, by their last
    /// removal's logged time. Such a service is still known: its reads answer an empty set
    /// and its fences hold until they expire.
    pub fn listed_services(&self, namespace: &NamespaceKey, now_ms: u64) -> Vec<Arc<ServiceSnapshot>> {
        let mut services = self.services(namespace);
        services.retain(|set| {
            !set.is_empty()
                || self
                    .fences
                    .last_removal_ms(set.key())
                    .is_some_and(|at| at.saturating_add(EMPTY_LISTED_MS) > now_ms)
        });
        services
    }

    /// Every service known only by its fences (released, its removals still fenced), sorted.
    pub fn fenced_only(&self) -> impl Iterator<Item = &ServiceKey> {
        self.fences
            .services()
            .map(|key| &**key)
            .filter(|key| self.service(key).is_none())
    }

    /// Every service of every tenant, each as its current snapshot (for rebuilding derived
    /// state after a reset: the checker, DNS answers).
    pub fn all_services(&self) -> impl Iterator<Item = &Arc<ServiceSnapshot>> {
        self.namespaces
            .values()
            .flat_map(|services| services.values().map(|s| &s.current))
    }

    /// The namespaces that hold services (known ones, possibly empty), sorted.
    pub fn namespace_keys(&self) -> impl Iterator<Item = &NamespaceKey> {
        self.namespaces.keys()
    }

    /// Every update of `scope` after `since`, oldest first (ties by service), each carrying
    /// its `prev_revision` and digest; or `Compacted` if any of them may be gone. Never a
    /// partial answer.
    pub fn changes_since(&self, scope: &Scope, since: Revision) -> Result<Vec<Arc<ServiceUpdate>>, ReadError> {
        if since < self.compacted {
            return Err(ReadError::Compacted {
                compacted: self.compacted,
                current: self.revision,
            });
        }
        Ok(match scope {
            Scope::Service(key) => self
                .service(key)
                .map(|s| s.updates_after(since).cloned().collect())
                .unwrap_or_default(),
            Scope::Namespace(namespace) => {
                let mut updates: Vec<Arc<ServiceUpdate>> = self
                    .namespaces
                    .get(namespace)
                    .into_iter()
                    .flat_map(|services| services.values())
                    .flat_map(|s| s.updates_after(since).cloned())
                    .collect();
                // Services come in name order, each oldest first: a stable sort by revision
                // keeps name order within a revision.
                updates.sort_by_key(|u| u.revision);
                updates
            }
        })
    }

    /// A lease, if it exists.
    pub fn lease(&self, id: muster_core::LeaseId) -> Option<&Lease> {
        self.leases.get(id)
    }

    /// Every lease, by id: what a new leader extends deadlines for.
    pub fn leases(&self) -> impl Iterator<Item = &Lease> {
        self.leases.iter()
    }

    /// The endpoints attached to a lease, by service and instance.
    pub fn lease_endpoints(&self, id: muster_core::LeaseId) -> Vec<(ServiceKey, InstanceId)> {
        self.leases
            .attached(id)
            .map(|(key, instance)| (ServiceKey::clone(key), instance.clone()))
            .collect()
    }

    /// An instance's drain deadline, if a drain with a grace is in effect (SPEC L6).
    pub fn drain_deadline(&self, key: &ServiceKey, instance: &InstanceId) -> Option<&DrainDeadline> {
        self.drains.get(key, instance)
    }

    /// Every drain deadline, by service and instance.
    pub fn drains(&self) -> impl Iterator<Item = &DrainDeadline> {
        self.drains.iter()
    }

    /// The drains whose grace ended by `now_ms` (Unix milliseconds), earliest first.
    pub fn drains_due(&self, now_ms: u64) -> impl Iterator<Item = &DrainDeadline> {
        self.drains.due(now_ms)
    }

    /// How many drains have a deadline.
    pub fn drain_count(&self) -> usize {
        self.drains.len()
    }

    fn check_readable(&self, at: Revision) -> Result<(), ReadError> {
        if at > self.revision {
            return Err(ReadError::FutureRevision {
                requested: at,
                current: self.revision,
            });
        }
        if at < self.compacted {
            return Err(ReadError::Compacted {
                compacted: self.compacted,
                current: self.revision,
            });
        }
        Ok(())
    }

    // ---- crate internals ---------------------------------------------------------------

    pub(crate) fn service(&self, key: &ServiceKey) -> Option<&ServiceState> {
        self.namespaces.get(&key.namespace_key())?.get(&key.service)
    }

    pub(crate) fn lease_table(&self) -> &LeaseTable {
        &self.leases
    }

    pub(crate) fn fence_table(&self) -> &FenceTable {
        &self.fences
    }

    /// The highest incarnation known for an instance at `now_ms`: live, or removed and still
    /// fenced.
    pub(crate) fn highest_incarnation(
        &self,
        key: &ServiceKey,
        instance: &InstanceId,
        now_ms: u64,
    ) -> Option<Incarnation> {
        let live = self
            .service(key)
            .and_then(|s| s.current.get(instance))
            .map(|e| e.incarnation);
        live.max(self.fence(key, instance, now_ms).map(|f| f.incarnation))
    }

    /// `register` for the incarnation after the highest this registry knows for its instance
    /// at `now_ms` (1 for an instance it knows nothing of). Read from committed state while
    /// applying, so every replica and every leader picks the same number, and each pick is
    /// above every incarnation the instance had: it fences them all (SPEC L2).
    fn next_incarnation(&self, register: &Register, now_ms: u64) -> Register {
        let target = &register.target;
        let next = self
            .highest_incarnation(&target.key, &target.instance, now_ms)
            .map_or(Incarnation(1), |highest| Incarnation(highest.0.saturating_add(1)));
        Register {
            target: Target {
                incarnation: next,
                ..target.clone()
            },
            ..register.clone()
        }
    }

    /// The fence on a removed instance, if it holds at `now_ms`.
    pub(crate) fn fence(&self, key: &ServiceKey, instance: &InstanceId, now_ms: u64) -> Option<&Fence> {
        self.fences.get(key, instance, now_ms, self.policy.fence_retention_ms)
    }

    pub(crate) fn namespaces(&self) -> impl Iterator<Item = &BTreeMap<Label, ServiceState>> {
        self.namespaces.values()
    }

    /// Assembles an imported registry; `state.rs` has checked the parts.
    pub(crate) fn from_parts(parts: Parts) -> Registry {
        let Parts {
            policy,
            policy_revision,
            revision,
            compacted,
            services,
            leases,
            usage,
            touched,
            fences,
            clock_ms,
        } = parts;
        let mut namespaces: BTreeMap<NamespaceKey, BTreeMap<Label, ServiceState>> = BTreeMap::new();
        for service in services {
            namespaces
                .entry(service.key.namespace_key())
                .or_default()
                .insert(service.key.service.clone(), service);
        }
        Registry {
            policy,
            policy_revision,
            revision,
            compacted,
            namespaces,
            leases,
            usage,
            touched,
            fences,
            clock_ms,
            drains: DrainTable::default(),
            acl: AclTable::default(),
            mirrors: crate::mirror::MirrorTable::default(),
            format: muster_core::FIRST_FORMAT,
        }
    }

    /// Puts an imported drain table in place; `state.rs` has checked it.
    pub(crate) fn with_drains(mut self, drains: DrainTable) -> Registry {
        self.drains = drains;
        self
    }

    pub(crate) fn usage(&self, tenant: &Label) -> Usage {
        self.usage.get(tenant).copied().unwrap_or_default()
    }
}
