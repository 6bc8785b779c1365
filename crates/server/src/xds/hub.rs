//! Who watches what over xDS, and the resources they are sent (SPEC D5; DESIGN "Encode once,
//! send many").
//!
//! ```text
//!  Node (registry write lock) ──applied──▶ XdsHub ──▶ services[key]: notify each stream (a permit)
//!                                              └────▶ tenants[t]: wildcard streams, when a service
//!                                                     of t appears or goes
//!  stream woken ──▶ XdsHub::resources(kind, names) ──▶ snapshot (O(1) under the read lock)
//!                        └─▶ cache[key]: assignment per (revision, cohort), listener/route/cluster
//!                            per lineage — built by the first stream that needs it, shared after
//! ```
//!
//! # Correctness
//! - No lost wake-up: a stream joins a service's entry before it reads the registry, and the
//!   apply path notifies under the registry's write lock; `Notify::notify_one` keeps a permit
//!   for a stream that is busy, so a change lands either before the read or as a wake-up.
//! - The cache is keyed by the snapshot's revision: a stream that read a newer snapshot
//!   than the cached one builds and replaces it; nothing is ever served from a revision
//!   other than the one the stream read.
//! - Entries (and their cache) live while a stream subscribes; the last one out removes them.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use muster_consensus::ApplyObserver;
use muster_core::{Label, Revision, ServiceKey, ServiceSnapshot};
use muster_registry::{Applied, Registry};
use muster_xds::{Cohort, Kind, Versioned};
use tokio::sync::Notify;

/// A stream's wake-up: notified once per batch of changes it has not yet looked at.
pub(crate) type Wake = Arc<Notify>;

#[derive(Default)]
struct Cached {
    /// Listener, route, cluster of the current lineage, at the revision the service was
    /// first seen (they depend on the name only, so an endpoint change does not resend them).
    statics: Option<(Revision, [Arc<Versioned>; 3])>,
    /// Assignments by cohort, all at one revision.
    assignments: Option<(Revision, HashMap<Cohort, Arc<Versioned>>)>,
}

#[derive(Default)]
struct Entry {
    streams: HashMap<u64, Wake>,
    cache: Cached,
}

#[derive(Default)]
struct Maps {
    services: HashMap<ServiceKey, Entry>,
    /// Wildcard subscribers by tenant.
    tenants: HashMap<Label, HashMap<u64, Wake>>,
}

/// The xDS side of the apply path, and the shared resource cache.
#[derive(Default)]
pub(crate) struct XdsHub {
    maps: Mutex<Maps>,
}

impl std::fmt::Debug for XdsHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let maps = self.lock();
        f.debug_struct("XdsHub")
            .field("services", &maps.services.len())
            .field("tenants", &maps.tenants.len())
            .finish()
    }
}

impl XdsHub {
    fn lock(&self) -> MutexGuard<'_, Maps> {
        self.maps.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes stream `id` watch exactly `keys` (and its tenant's list of services when
    /// `wildcard` names one); call before reading the registry.
    pub(crate) fn watch(
        &self,
        id: u64,
        wake: &Wake,
        keys: &HashSet<ServiceKey>,
        wildcard: Option<&Label>,
        previous: &HashSet<ServiceKey>,
    ) {
        let mut maps = self.lock();
        for key in previous.difference(keys) {
            if let Some(entry) = maps.services.get_mut(key) {
                entry.streams.remove(&id);
                if entry.streams.is_empty() {
                    maps.services.remove(key);
                }
            }
        }
        for key in keys.difference(previous) {
            maps.services
                .entry(key.clone())
                .or_default()
                .streams
                .insert(id, Arc::clone(wake));
        }
        maps.tenants.retain(|tenant, streams| {
            if Some(tenant) != wildcard {
                streams.remove(&id);
            }
            !streams.is_empty()
        });
        if let Some(tenant) = wildcard {
            maps.tenants
                .entry(tenant.clone())
                .or_default()
                .insert(id, Arc::clone(wake));
        }
    }

    /// Stream `id` is gone.
    pub(crate) fn leave(&self, id: u64, keys: &HashSet<ServiceKey>) {
        self.watch(id, &Arc::new(Notify::new()), &HashSet::new(), None, keys);
    }

    /// Resource `kind` of `snapshot`'s service named `name`, as `cohort` sees it: from the
    /// cache when it was built at this revision, else built now and cached (when some stream
    /// watches the service).
    pub(crate) fn resource(
        &self,
        kind: Kind,
        name: &str,
        snapshot: &ServiceSnapshot,
        cohort: &Cohort,
    ) -> Arc<Versioned> {
        let revision = snapshot.revision();
        let key = snapshot.key();
        if kind == Kind::Endpoint {
            if let Some(found) = self.lock().services.get(key).and_then(|entry| {
                let (at, by_cohort) = entry.cache.assignments.as_ref()?;
                (*at == revision).then(|| by_cohort.get(cohort).cloned()).flatten()
            }) {
                return found;
            }
            let built = Arc::new(muster_xds::build(kind, name, revision, snapshot, cohort));
            let mut maps = self.lock();
            if let Some(entry) = maps.services.get_mut(key) {
                let slot = &mut entry.cache.assignments;
                match slot {
                    Some((at, by_cohort)) if *at == revision => {
                        by_cohort.insert(cohort.clone(), Arc::clone(&built));
                    }
                    Some((at, _)) if *at > revision => {}
                    _ => *slot = Some((revision, HashMap::from([(cohort.clone(), Arc::clone(&built))]))),
                }
            }
            return built;
        }
        let index = match kind {
            Kind::Listener => 0,
            Kind::Route => 1,
            _ => 2,
        };
        let mut maps = self.lock();
        let entry = maps.services.get_mut(key);
        let cached = entry.as_ref().and_then(|entry| entry.cache.statics.as_ref());
        if let Some((_, statics)) = cached {
            return Arc::clone(&statics[index]);
        }
        let statics = [Kind::Listener, Kind::Route, Kind::Cluster]
            .map(|kind| Arc::new(muster_xds::build(kind, name, revision, snapshot, cohort)));
        let found = Arc::clone(&statics[index]);
        if let Some(entry) = entry {
            entry.cache.statics = Some((revision, statics));
        }
        found
    }

    /// How many services some stream watches (for tests).
    #[cfg(test)]
    pub(crate) fn watched(&self) -> usize {
        self.lock().services.len()
    }
}

impl ApplyObserver for XdsHub {
    fn applied(&self, _registry: &Registry, applied: &Applied) {
        let mut maps = self.lock();
        if maps.services.is_empty() && maps.tenants.is_empty() {
            return;
        }
        for update in &applied.updates {
            if let Some(entry) = maps.services.get(&update.key) {
                for wake in entry.streams.values() {
                    wake.notify_one();
                }
            }
            if update.prev_revision == Revision::ZERO
                && let Some(streams) = maps.tenants.get(&update.key.tenant)
            {
                for wake in streams.values() {
                    wake.notify_one();
                }
            }
        }
        for key in &applied.released {
            if let Some(entry) = maps.services.get_mut(key) {
                // A new lineage, if it comes back, gets new listener/route/cluster versions.
                entry.cache = Cached::default();
                for wake in entry.streams.values() {
                    wake.notify_one();
                }
            }
            if let Some(streams) = maps.tenants.get(&key.tenant) {
                for wake in streams.values() {
                    wake.notify_one();
                }
            }
        }
    }

    fn reset(&self, _registry: &Registry) {
        let mut maps = self.lock();
        for entry in maps.services.values_mut() {
            entry.cache = Cached::default();
            for wake in entry.streams.values() {
                wake.notify_one();
            }
        }
        for wake in maps.tenants.values().flat_map(HashMap::values) {
            wake.notify_one();
        }
    }
}
