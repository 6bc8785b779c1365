//! The whole registry as one serialisable value: what a Raft snapshot stores.
//!
//! Only primary state is written (records, fences, leases, retained history, the policy in
//! force); indexes (lease attachments, tenant usage, the compaction and fence-expiry queues)
//! are rebuilt on import. Everything is written in key order, so export → import → export
//! gives the same bytes.
//!
//! Fields added since snapshots were first written are `#[serde(default)]`, so an older
//! snapshot still loads: one without a policy gets the policy passed to
//! [`Registry::import`] (the config file's) at revision 0, and its per-service tombstones
//! become fences removed at the newest time the state records (the latest observation of any
//! endpoint), the best lower bound it holds for "now".

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use muster_auth::{AclState, AclTable};
use muster_core::federation::ImportScope;
use muster_core::{Incarnation, InstanceId, Label, LeaseId, Revision, ServiceKey, ServiceSnapshot, ServingState};
use serde::{Deserialize, Serialize};

use crate::config::RegistryConfig;
use crate::drains::{DrainDeadline, DrainTable};
use crate::fences::{Fence, FenceTable};
use crate::leases::{Lease, LeaseTable};
use crate::mirror::{MirrorImport, MirrorTable};
use crate::registry::{Parts, Registry, Usage};
use crate::service::{Change, ServiceState};

/// A registry's complete state, for snapshots. Opaque: produce it with
/// [`Registry::export`], consume it with [`Registry::import`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegistryState {
    revision: Revision,
    compacted: Revision,
    next_lease: LeaseId,
    leases: Vec<Lease>,
    services: Vec<ServiceRecord>,
    /// Removed instances still fenced, by service then instance.
    #[serde(default)]
    fences: Vec<FenceRecord>,
    /// The policy in force; absent in snapshots from before it was replicated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    policy: Option<PolicyRecord>,
    /// The latest command time committed (absent in older snapshots: 0, and the first
    /// command after sets it).
    #[serde(default)]
    clock_ms: u64,
    /// Drain deadlines (absent from snapshots written before drains were committed state).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    drains: Vec<DrainDeadline>,
    /// The tokens in force (absent from snapshots written before access control).
    #[serde(default, skip_serializing_if = "is_empty_acl")]
    acl: AclState,
    /// What this region mirrors of its peers (absent from snapshots written before
    /// federation, and while nothing is mirrored).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    mirrors: Vec<MirrorRecord>,
    /// The format commands are applied at (architecture.md "Formats and versions"); absent: the
    /// first, and so not written while it is, which keeps a snapshot readable by a node of
    /// the second wave until the format is raised.
    #[serde(default = "first_format", skip_serializing_if = "is_first_format")]
    format: u32,
}

fn first_format() -> u32 {
    muster_core::FIRST_FORMAT
}

fn is_first_format(format: &u32) -> bool {
    *format == muster_core::FIRST_FORMAT
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct MirrorRecord {
    region: Label,
    import: ImportScope,
    cursor: Revision,
    synced_at_ms: u64,
    sets: Vec<Arc<ServiceSnapshot>>,
}

fn is_empty_acl(acl: &AclState) -> bool {
    *acl == AclState::default()
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct ServiceRecord {
    snapshot: Arc<ServiceSnapshot>,
    /// Only in older snapshots: fences kept per service, as long as its history.
    #[serde(default, skip_serializing)]
    tombstones: Vec<TombstoneRecord>,
    history: Vec<Change>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct TombstoneRecord {
    instance: InstanceId,
    incarnation: Incarnation,
    revision: Revision,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct FenceRecord {
    key: ServiceKey,
    instance: InstanceId,
    incarnation: Incarnation,
    revision: Revision,
    removed_at_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct PolicyRecord {
    /// The revision it was committed at; absent for the policy the registry was created
    /// with, which travels with the state so a replica installing it judges alike.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    revision: Option<Revision>,
    policy: RegistryConfig,
}

/// Why a [`RegistryState`] was refused: it does not describe a state this registry could
/// have reached.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("registry state is inconsistent: {0}")]
pub struct ImportError(String);

impl Registry {
    /// The whole state, for a snapshot.
    pub fn export(&self) -> RegistryState {
        let services = self
            .namespaces()
            .flat_map(|services| services.values())
            .map(|s| ServiceRecord {
                snapshot: Arc::clone(&s.current),
                tombstones: Vec::new(),
                history: s.history.iter().cloned().collect(),
            })
            .collect();
        let fences = self
            .fence_table()
            .iter()
            .map(|(key, instance, fence)| FenceRecord {
                key: ServiceKey::clone(key),
                instance: instance.clone(),
                incarnation: fence.incarnation,
                revision: fence.revision,
                removed_at_ms: fence.removed_at_ms,
            })
            .collect();
        RegistryState {
            revision: self.revision(),
            compacted: self.compacted(),
            next_lease: self.lease_table().next_id(),
            leases: self.lease_table().iter().cloned().collect(),
            services,
            fences,
            policy: Some(PolicyRecord {
                revision: self.policy_committed().then(|| self.policy_revision()),
                policy: self.policy().clone(),
            }),
            clock_ms: self.clock_ms(),
            drains: self.drains().cloned().collect(),
            acl: self.acl().export(),
            mirrors: self
                .mirrors()
                .map(|m| MirrorRecord {
                    region: m.region.clone(),
                    import: m.import.clone(),
                    cursor: m.cursor,
                    synced_at_ms: m.synced_at_ms,
                    sets: m.sets.values().cloned().collect(),
                })
                .collect(),
            format: self.format(),
        }
    }

    /// Rebuilds a registry from exported state, checking that it is consistent (digests match
    /// their records, history is ordered, every attached lease exists). The state's own
    /// policy is put in force; `initial_policy` (the config file's) only stands in for a
    /// snapshot written before the policy was replicated.
    pub fn import(initial_policy: RegistryConfig, state: RegistryState) -> Result<Registry, ImportError> {
        let fail = |what: String| Err(ImportError(what));
        if state.format > muster_core::FORMAT {
            return fail(format!(
                "the state is at format {}; this node applies formats up to {}: upgrade it",
                state.format,
                muster_core::FORMAT
            ));
        }
        let (policy_revision, policy) = match state.policy {
            Some(record) if record.revision.is_some_and(|r| r > state.revision) => {
                return fail("the policy is set at a revision beyond the state's".into());
            }
            Some(record) => (record.revision, record.policy),
            None => (None, initial_policy),
        };
        let mut fences = FenceTable::default();
        let legacy_removed_at_ms = state
            .services
            .iter()
            .flat_map(|record| record.snapshot.iter())
            .map(|endpoint| endpoint.observation.at_ms)
            .max()
            .unwrap_or(0);
        let mut leases = LeaseTable::new(state.next_lease);
        let mut usage: BTreeMap<_, Usage> = BTreeMap::new();
        for lease in state.leases {
            if lease.id >= state.next_lease || lease.revision > state.revision {
                return fail(format!("lease {} is newer than the state", lease.id));
            }
            if lease.service.as_ref().is_some_and(|key| key.tenant != lease.tenant) {
                return fail(format!("lease {} is for another tenant's service", lease.id));
            }
            usage.entry(lease.tenant.clone()).or_default().leases += 1;
            leases.insert(lease);
        }
        for fence in state.fences {
            if fence.revision > state.revision {
                return fail(format!(
                    "{}: the fence on '{}' is newer than the state",
                    fence.key, fence.instance
                ));
            }
            let fence_record = Fence {
                incarnation: fence.incarnation,
                revision: fence.revision,
                removed_at_ms: fence.removed_at_ms,
            };
            fences.insert(&Arc::new(fence.key), fence.instance, fence_record);
        }
        let mut services = Vec::new();
        let mut touched = Vec::new();
        for record in state.services {
            let key = record.snapshot.key().clone();
            let mut service = ServiceState::new(key.clone());
            service.current = record.snapshot;
            if service.current.revision() > state.revision {
                return fail(format!(
                    "{key} is at revision {} beyond the state's",
                    service.current.revision()
                ));
            }
            let mut last = state.compacted;
            for change in &record.history {
                let update = &change.update;
                if update.key != key || update.revision <= last || update.events.len() != change.before.len() {
                    return fail(format!(
                        "history of {key} is out of order at revision {}",
                        update.revision
                    ));
                }
                last = update.revision;
                touched.push((update.revision, Arc::clone(&service.key)));
            }
            if let Some(newest) = record.history.last() {
                let (update, current) = (&newest.update, &service.current);
                if update.revision != current.revision() || update.digest != current.digest() {
                    return fail(format!("{key}: the newest update does not produce the current set"));
                }
            }
            service.history = VecDeque::from(record.history);
            for t in record.tombstones {
                let fence = Fence {
                    incarnation: t.incarnation,
                    revision: t.revision,
                    removed_at_ms: legacy_removed_at_ms,
                };
                fences.insert(&service.key, t.instance, fence);
            }
            if service.is_released() {
                continue;
            }
            if !service.current.is_empty() {
                let tenant_usage = usage.entry(key.tenant.clone()).or_default();
                tenant_usage.services += 1;
                tenant_usage.endpoints += service.current.len() as u64;
            }
            for endpoint in service.current.iter() {
                if let Some(id) = endpoint.lease {
                    match leases.get(id) {
                        Some(lease)
                            if lease.tenant == key.tenant
                                && lease.service.as_ref().is_none_or(|owner| *owner == key) =>
                        {
                            leases.attach(id, &service.key, &endpoint.instance)
                        }
                        _ => {
                            return fail(format!(
                                "{key}: '{}' holds lease {id}, which does not exist",
                                endpoint.instance
                            ));
                        }
                    }
                }
            }
            services.push(service);
        }
        touched.sort();
        let acl = AclTable::import(state.acl).map_err(|e| ImportError(format!("acl: {e}")))?;
        let mut drains = DrainTable::default();
        for drain in state.drains {
            let draining = services
                .iter()
                .find(|s| *s.key == drain.key)
                .and_then(|s| s.current.get(&drain.instance))
                .is_some_and(|e| e.incarnation == drain.incarnation && e.serving == ServingState::Draining);
            if !draining {
                return fail(format!(
                    "{}: '{}' has a drain deadline but is not draining at incarnation {}",
                    drain.key, drain.instance, drain.incarnation
                ));
            }
            drains.set(drain);
        }
        let mut imports = Vec::new();
        for record in state.mirrors {
            if let Some(set) = record.sets.iter().find(|s| !record.import.covers(s.key())) {
                return fail(format!(
                    "mirror of {}: {} is outside {}",
                    record.region,
                    set.key(),
                    record.import
                ));
            }
            imports.push(MirrorImport {
                region: record.region,
                import: record.import,
                cursor: record.cursor,
                synced_at_ms: record.synced_at_ms,
                sets: record.sets.into_iter().map(|s| (s.key().clone(), s)).collect(),
            });
        }
        let mirrors = MirrorTable::from_imports(imports);
        Ok(Registry::from_parts(Parts {
            policy,
            policy_revision,
            revision: state.revision,
            compacted: state.compacted,
            services,
            leases,
            usage,
            touched: touched.into(),
            fences,
            clock_ms: state.clock_ms,
        })
        .with_drains(drains)
        .with_acl(acl)
        .with_mirrors(mirrors)
        .with_format(state.format))
    }
}
