//! The registry state machine: [`Registry::apply`] and the reads.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use muster_core::{
    DeleteReason, Endpoint, Event, InstanceId, Label, NamespaceKey, Rejection, Revision, ServiceKey, ServiceSnapshot,
    ServiceUpdate,
};

use crate::applied::{Applied, ReadError};
use crate::command::{Command, CommandMeta};
use crate::config::RegistryConfig;
use crate::drains::{DrainDeadline, DrainTable};
use crate::leases::{Lease, LeaseTable};
use crate::plan::{Delete, Plan, Planned};
use crate::service::{Change, ServiceState, Tombstone, delete_event};

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

/// One endpoint's change within a commit.
enum Write {
    Put(Arc<Endpoint>),
    Delete {
        fence: muster_core::Incarnation,
        reason: DeleteReason,
    },
}

/// What a tenant holds, for quotas.
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
    config: RegistryConfig,
    revision: Revision,
    /// Every revision up to and including this one has left the change history.
    compacted: Revision,
    namespaces: BTreeMap<NamespaceKey, BTreeMap<Label, ServiceState>>,
    leases: LeaseTable,
    usage: BTreeMap<Label, Usage>,
    /// (revision, service) for every retained change, oldest first: what compaction visits.
    touched: VecDeque<(Revision, Arc<ServiceKey>)>,
    /// When drained instances are to be deregistered (`drains.rs`).
    drains: DrainTable,
}

impl Registry {
    /// An empty registry at revision 0.
    pub fn new(config: RegistryConfig) -> Registry {
        Registry {
            config,
            revision: Revision::ZERO,
            compacted: Revision::ZERO,
            namespaces: BTreeMap::new(),
            leases: LeaseTable::new(muster_core::LeaseId(1)),
            usage: BTreeMap::new(),
            touched: VecDeque::new(),
            drains: DrainTable::default(),
        }
    }

    /// Applies one command: either every effect at one new revision, or a refusal that
    /// changes nothing.
    pub fn apply(&mut self, command: &Command, meta: &CommandMeta) -> Result<Applied, Rejection> {
        let planned = match command {
            Command::Register(c) => self.plan_register(c, meta)?,
            Command::SetServing(c) => self.plan_serving(&c.target, c.state, &c.reason, c.expected_revision, meta)?,
            Command::Drain(c) => self.plan_drain(c, meta)?,
            Command::Deregister(c) => self.plan_deregister(c)?,
            Command::Evict(c) => self.plan_evict(c)?,
            Command::GrantLease(c) => self.plan_grant(c)?,
            Command::RevokeLease(c) => self.plan_revoke(c)?,
            Command::ExpireLeases(c) => self.plan_expire(c),
        };
        Ok(match planned {
            Planned::Unchanged(applied) => applied,
            Planned::Commit(plan) => self.commit(plan),
        })
    }

    /// Writes a plan at the next revision. Cannot fail: every check happened in planning.
    fn commit(&mut self, plan: Plan) -> Applied {
        let revision = self.revision.next();
        if let Some(lease) = plan.grant {
            self.usage.entry(lease.tenant.clone()).or_default().leases += 1;
            self.leases.insert(lease);
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
            .map(|(key, writes)| self.commit_service(key, writes, revision))
            .collect();
        for id in plan.revoke {
            if let Some(lease) = self.leases.remove(id) {
                self.usage.entry(lease.tenant).or_default().leases -= 1;
            }
        }
        if let Some(drain) = plan.drain {
            self.drains.set(drain);
        }
        self.revision = revision;
        self.compact();
        Applied {
            revision,
            updates,
            lease: plan.lease,
            unchanged: None,
        }
    }

    /// Applies one service's writes at `revision`: the snapshot (and its digest), tombstones,
    /// lease index, usage and history all move together.
    fn commit_service(
        &mut self,
        key: ServiceKey,
        writes: BTreeMap<InstanceId, Write>,
        revision: Revision,
    ) -> Arc<ServiceUpdate> {
        let usage = self.usage.entry(key.tenant.clone()).or_default();
        let service = self
            .namespaces
            .entry(key.namespace_key())
            .or_default()
            .entry(key.service.clone())
            .or_insert_with(|| {
                usage.services += 1;
                ServiceState::new(key.clone())
            });
        let snapshot = Arc::make_mut(&mut service.current);
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
                    service.tombstones.remove(&instance);
                    events.push(Event::Put { endpoint });
                }
                Write::Delete { fence, reason } => {
                    let removed = old.as_ref().expect("plans only delete live endpoints");
                    usage.endpoints -= 1;
                    events.push(delete_event(removed, reason));
                    let tombstone = Tombstone {
                        incarnation: fence.max(removed.incarnation),
                        revision,
                    };
                    service.tombstones.insert(instance, tombstone);
                }
            }
            before.push(old);
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
            before,
        });
        self.touched.push_back((revision, Arc::clone(&service.key)));
        update
    }

    /// Drops history older than the configured number of revisions.
    fn compact(&mut self) {
        let floor = Revision(self.revision.0.saturating_sub(self.config.history_revisions));
        if floor <= self.compacted {
            return;
        }
        while let Some((revision, key)) = self.touched.front() {
            if *revision > floor {
                break;
            }
            if let Some(service) = self
                .namespaces
                .get_mut(&key.namespace_key())
                .and_then(|ns| ns.get_mut(&key.service))
            {
                service.compact(floor);
            }
            self.touched.pop_front();
        }
        self.compacted = floor;
    }

    // ---- reads -------------------------------------------------------------------------

    /// The configuration.
    pub fn config(&self) -> &RegistryConfig {
        &self.config
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

    pub(crate) fn namespaces(&self) -> impl Iterator<Item = &BTreeMap<Label, ServiceState>> {
        self.namespaces.values()
    }

    /// Assembles an imported registry; `state.rs` has checked the parts.
    pub(crate) fn from_parts(
        config: RegistryConfig,
        revision: Revision,
        compacted: Revision,
        services: Vec<ServiceState>,
        leases: LeaseTable,
        usage: BTreeMap<Label, Usage>,
        touched: VecDeque<(Revision, Arc<ServiceKey>)>,
    ) -> Registry {
        let mut namespaces: BTreeMap<NamespaceKey, BTreeMap<Label, ServiceState>> = BTreeMap::new();
        for service in services {
            namespaces
                .entry(service.key.namespace_key())
                .or_default()
                .insert(service.key.service.clone(), service);
        }
        Registry {
            config,
            revision,
            compacted,
            namespaces,
            leases,
            usage,
            touched,
            drains: DrainTable::default(),
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
