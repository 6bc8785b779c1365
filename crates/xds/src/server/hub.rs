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

use crate::{Cohort, Kind, Versioned};
use muster_consensus::ApplyObserver;
use muster_core::{Label, Revision, ServiceKey, ServiceSnapshot};
use muster_registry::{Applied, Registry};
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
    /// Streams woken by the service's changes.
    streams: HashMap<u64, Wake>,
    /// Streams that keep its cached resources without being woken (a wildcard lists it).
    pins: HashSet<u64>,
    cache: Cached,
}

impl Entry {
    fn is_unused(&self) -> bool {
        self.streams.is_empty() && self.pins.is_empty()
    }
}

#[derive(Default)]
struct Maps {
    /// Boxed: a stream may name 10,000 services, and the table's buckets (and the copies
    /// it leaves while it grows) then hold a pointer each rather than a whole entry, a
    /// third of the size (SPEC W4).
    services: HashMap<ServiceKey, Box<Entry>>,
    /// Wildcard subscribers by tenant.
    tenants: HashMap<Label, HashMap<u64, Wake>>,
}

impl Maps {
    /// Wakes every stream watching `key`.
    fn wake(&self, key: &ServiceKey) {
        if let Some(entry) = self.services.get(key) {
            for wake in entry.streams.values() {
                wake.notify_one();
            }
        }
    }

    /// `leave` takes a stream out of `key`'s entry (its watchers, its pins or both); the
    /// last one out removes the entry and its cache.
    fn release(&mut self, key: &ServiceKey, leave: impl FnOnce(&mut Entry)) {
        if let Some(entry) = self.services.get_mut(key) {
            leave(entry);
            if entry.is_unused() {
                self.services.remove(key);
            }
        }
    }
}

/// The xDS side of the apply path (an [`ApplyObserver`]), and the shared resource cache.
#[derive(Default)]
pub struct XdsHub {
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
            maps.release(key, |entry| {
                entry.streams.remove(&id);
            });
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

    /// Makes stream `id` pin exactly `keys`: their cached resources stay while it lists
    /// them, and their changes do not wake it.
    pub(crate) fn pin(&self, id: u64, keys: &HashSet<ServiceKey>, previous: &HashSet<ServiceKey>) {
        let mut maps = self.lock();
        for key in previous.difference(keys) {
            maps.release(key, |entry| {
                entry.pins.remove(&id);
            });
        }
        for key in keys.difference(previous) {
            maps.services.entry(key.clone()).or_default().pins.insert(id);
        }
    }

    /// Stream `id` is gone: it leaves every service it watched or pinned and any tenant list.
    pub(crate) fn leave(&self, id: u64, watched: &HashSet<ServiceKey>, pinned: &HashSet<ServiceKey>) {
        let mut maps = self.lock();
        for key in watched.iter().chain(pinned) {
            maps.release(key, |entry| {
                entry.streams.remove(&id);
                entry.pins.remove(&id);
            });
        }
        maps.tenants.retain(|_, streams| {
            streams.remove(&id);
            !streams.is_empty()
        });
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
            let built = Arc::new(crate::build(kind, name, revision, snapshot, cohort));
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
        // Listener 0, route 1, cluster 2.
        let index = kind as usize;
        let cached = |maps: &Maps| {
            let (_, statics) = maps.services.get(key)?.cache.statics.as_ref()?;
            Some(Arc::clone(&statics[index]))
        };
        if let Some(found) = cached(&self.lock()) {
            return found;
        }
        // Built outside the lock: the apply path waits on it under the registry's.
        let statics = [Kind::Listener, Kind::Route, Kind::Cluster]
            .map(|kind| Arc::new(crate::build(kind, name, revision, snapshot, cohort)));
        let mut maps = self.lock();
        if let Some(found) = cached(&maps) {
            return found;
        }
        let found = Arc::clone(&statics[index]);
        if let Some(entry) = maps.services.get_mut(key) {
            entry.cache.statics = Some((revision, statics));
        }
        found
    }

    /// Wakes the streams of `key`: its served set changed with no command (a failover tier
    /// whose mirror passed its stale budget).
    pub fn wake(&self, key: &ServiceKey) {
        self.lock().wake(key);
    }

    /// How many services some stream watches or pins (each an entry with its cache).
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
        // A mirrored set feeds a covered service's failover tier (`muster_federation`'s `tiers`).
        for key in &applied.mirrored {
            maps.wake(key);
        }
        for update in &applied.updates {
            maps.wake(&update.key);
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

#[cfg(test)]
mod tests {
    use muster_core::{Digest, ServiceUpdate};

    use super::*;

    fn key(service: &str) -> ServiceKey {
        ServiceKey::new("acme", "prod", service).unwrap()
    }

    fn applied(key: &ServiceKey, revision: u64, prev: u64) -> Applied {
        Applied {
            revision: Revision(revision),
            updates: vec![Arc::new(ServiceUpdate {
                key: key.clone(),
                revision: Revision(revision),
                prev_revision: Revision(prev),
                digest: Digest::EMPTY,
                events: Vec::new(),
            })],
            lease: None,
            unchanged: None,
            released: Vec::new(),
            mirrored: Vec::new(),
        }
    }

    /// Whether `wake` holds a permit (it was notified), taking it.
    fn woken(wake: &Wake) -> bool {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let notified = std::pin::pin!(wake.notified());
        std::future::Future::poll(notified, &mut cx).is_ready()
    }

    #[test]
    fn a_change_wakes_the_streams_of_that_service_only_and_new_services_wake_wildcards() {
        let hub = XdsHub::default();
        let registry = Registry::new(muster_registry::RegistryConfig::default());
        let (api, web, wildcard) = (
            Arc::new(Notify::new()),
            Arc::new(Notify::new()),
            Arc::new(Notify::new()),
        );
        hub.watch(1, &api, &HashSet::from([key("api")]), None, &HashSet::new());
        hub.watch(2, &web, &HashSet::from([key("web")]), None, &HashSet::new());
        hub.watch(3, &wildcard, &HashSet::new(), Some(&key("api").tenant), &HashSet::new());
        hub.applied(&registry, &applied(&key("api"), 5, 4));
        assert!(woken(&api));
        assert!(!woken(&web));
        assert!(
            !woken(&wildcard),
            "an existing service changed: the list of services did not"
        );
        hub.applied(&registry, &applied(&key("new"), 6, 0));
        assert!(woken(&wildcard));
        assert!(!woken(&api));

        // A pinned service keeps its entry (its cache) but does not wake its pinner.
        hub.pin(3, &HashSet::from([key("api")]), &HashSet::new());
        hub.leave(1, &HashSet::from([key("api")]), &HashSet::new());
        assert_eq!(hub.watched(), 2, "api is still pinned");
        hub.applied(&registry, &applied(&key("api"), 7, 6));
        assert!(!woken(&wildcard), "a pinned service's change does not wake");
        hub.leave(2, &HashSet::from([key("web")]), &HashSet::new());
        hub.leave(3, &HashSet::new(), &HashSet::from([key("api")]));
        assert_eq!(hub.watched(), 0, "the last stream out removes the entry and its cache");
    }

    #[test]
    fn one_encoding_per_revision_and_cohort_is_shared_by_every_stream() {
        let hub = XdsHub::default();
        let wake = Arc::new(Notify::new());
        hub.watch(1, &wake, &HashSet::from([key("api")]), None, &HashSet::new());
        let at = |revision| ServiceSnapshot::from_endpoints(key("api"), Revision(revision), Vec::new());
        let zone = |zone: &str| Cohort {
            region: Some("r1".into()),
            zone: Some(zone.into()),
        };
        let first = hub.resource(Kind::Endpoint, "api.prod", &at(7), &zone("a"));
        let again = hub.resource(Kind::Endpoint, "api.prod", &at(7), &zone("a"));
        assert!(Arc::ptr_eq(&first, &again));
        let other_zone = hub.resource(Kind::Endpoint, "api.prod", &at(7), &zone("b"));
        assert!(!Arc::ptr_eq(&first, &other_zone));
        let newer = hub.resource(Kind::Endpoint, "api.prod", &at(8), &zone("a"));
        assert_eq!(newer.revision, Revision(8));
        // An older read never replaces a newer encoding.
        let older = hub.resource(Kind::Endpoint, "api.prod", &at(7), &zone("a"));
        assert_eq!(older.revision, Revision(7));
        assert!(Arc::ptr_eq(
            &newer,
            &hub.resource(Kind::Endpoint, "api.prod", &at(8), &zone("a"))
        ));
        // Listener, route and cluster keep the lineage's first revision across changes.
        let listener = hub.resource(Kind::Listener, "api.prod", &at(7), &zone("a"));
        let later = hub.resource(Kind::Listener, "api.prod", &at(9), &zone("b"));
        assert!(Arc::ptr_eq(&listener, &later));
        assert_eq!(later.revision, Revision(7));
    }
}
