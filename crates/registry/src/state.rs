//! The whole registry as one serialisable value: what a Raft snapshot stores.
//!
//! Only primary state is written (records, tombstones, leases, retained history); indexes
//! (lease attachments, tenant usage, the compaction queue) are rebuilt on import. Everything
//! is written in key order, so export → import → export gives the same bytes.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use muster_core::{Incarnation, InstanceId, LeaseId, Revision, ServiceSnapshot, ServingState};
use serde::{Deserialize, Serialize};

use crate::config::RegistryConfig;
use crate::drains::{DrainDeadline, DrainTable};
use crate::leases::{Lease, LeaseTable};
use crate::registry::{Registry, Usage};
use crate::service::{Change, ServiceState, Tombstone};

/// A registry's complete state, for snapshots. Opaque: produce it with
/// [`Registry::export`], consume it with [`Registry::import`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegistryState {
    revision: Revision,
    compacted: Revision,
    next_lease: LeaseId,
    leases: Vec<Lease>,
    services: Vec<ServiceRecord>,
    /// Drain deadlines (absent from snapshots written before drains were committed state).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    drains: Vec<DrainDeadline>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct ServiceRecord {
    snapshot: Arc<ServiceSnapshot>,
    tombstones: Vec<TombstoneRecord>,
    history: Vec<Change>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct TombstoneRecord {
    instance: InstanceId,
    incarnation: Incarnation,
    revision: Revision,
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
                tombstones: s
                    .tombstones
                    .iter()
                    .map(|(instance, t)| TombstoneRecord {
                        instance: instance.clone(),
                        incarnation: t.incarnation,
                        revision: t.revision,
                    })
                    .collect(),
                history: s.history.iter().cloned().collect(),
            })
            .collect();
        RegistryState {
            revision: self.revision(),
            compacted: self.compacted(),
            next_lease: self.lease_table().next_id(),
            leases: self.lease_table().iter().cloned().collect(),
            services,
            drains: self.drains().cloned().collect(),
        }
    }

    /// Rebuilds a registry from exported state, checking that it is consistent (digests match
    /// their records, history is ordered, every attached lease exists).
    pub fn import(config: RegistryConfig, state: RegistryState) -> Result<Registry, ImportError> {
        let fail = |what: String| Err(ImportError(what));
        let mut leases = LeaseTable::new(state.next_lease);
        let mut usage: BTreeMap<_, Usage> = BTreeMap::new();
        for lease in state.leases {
            if lease.id >= state.next_lease || lease.revision > state.revision {
                return fail(format!("lease {} is newer than the state", lease.id));
            }
            usage.entry(lease.tenant.clone()).or_default().leases += 1;
            leases.insert(lease);
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
                service.tombstones.insert(
                    t.instance,
                    Tombstone {
                        incarnation: t.incarnation,
                        revision: t.revision,
                    },
                );
            }
            let tenant_usage = usage.entry(key.tenant.clone()).or_default();
            tenant_usage.services += 1;
            tenant_usage.endpoints += service.current.len() as u64;
            for endpoint in service.current.iter() {
                if let Some(id) = endpoint.lease {
                    match leases.get(id) {
                        Some(lease) if lease.tenant == key.tenant => {
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
        Ok(Registry::from_parts(
            config,
            state.revision,
            state.compacted,
            services,
            leases,
            usage,
            touched.into(),
        )
        .with_drains(drains))
    }
}
