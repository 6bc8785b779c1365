//! The zone as the server shares it: the registry's apply path stages changes in O(1), the
//! query path folds them in before it answers.
//!
//! ```text
//!  ApplyObserver (registry write lock held)          DNS query (UDP/TCP task)
//!     stage(key, snapshot, revision)                    answer(packet)
//!       │ pending[key] = snapshot (Arc clone)             │ dirty? ─yes─▶ zone.write():
//!       │ dirty = true                                    │   take pending, Zone::update each
//!       ▼                                                 ▼
//!     Mutex<Pending>  ──────────────────────────────▶  RwLock<Zone> ──read──▶ answer bytes
//! ```
//!
//! # Correctness
//! - A change is visible at the next query after its revision is applied: staging happens
//!   under the registry's write lock, before the write's reply leaves the server, and every
//!   query checks `dirty` before it reads the zone.
//! - No query answers from a zone older than a staging it has seen: `dirty` is cleared only
//!   by the task that holds the zone's write lock while it takes the pending set, so a query
//!   that finds `dirty` clear waits on the read lock until that fold has finished.
//! - The work under the registry lock is a map insert per touched service; building answers
//!   happens on the DNS side, only for the services touched (latest snapshot wins).

use std::collections::BTreeMap;
use std::mem;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use muster_core::{Label, Revision, ServiceKey, ServiceSnapshot};

use crate::{Outcome, QueryStats, Transport, Zone};

#[derive(Default)]
struct Pending {
    /// Forget everything before applying `services` (a reset).
    reset: bool,
    services: BTreeMap<ServiceKey, Option<Arc<ServiceSnapshot>>>,
    revision: Option<Revision>,
}

/// A [`Zone`] fed from the registry's apply path and read by the DNS listener.
pub struct LiveZone {
    zone: RwLock<Zone>,
    pending: Mutex<Pending>,
    dirty: AtomicBool,
    /// The zone's tenant: other tenants' changes are not even staged.
    tenant: Label,
    /// Queries answered, by response code.
    stats: QueryStats,
}

impl LiveZone {
    /// Shares `zone`.
    pub fn new(zone: Zone) -> LiveZone {
        LiveZone {
            tenant: zone.config().tenant.clone(),
            zone: RwLock::new(zone),
            pending: Mutex::new(Pending::default()),
            dirty: AtomicBool::new(false),
            stats: QueryStats::default(),
        }
    }

    /// Stages one service's new snapshot (`None`: the registry no longer knows it) as of
    /// `revision`. Cheap: meant to be called under the registry's write lock.
    pub fn stage(&self, key: &ServiceKey, snapshot: Option<Arc<ServiceSnapshot>>, revision: Revision) {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        if key.tenant == self.tenant {
            pending.services.insert(key.clone(), snapshot);
        }
        pending.revision = Some(revision);
        self.dirty.store(true, Ordering::Release);
    }

    /// Stages a whole new state: the zone is emptied, then holds exactly `snapshots`.
    pub fn stage_reset(&self, snapshots: impl IntoIterator<Item = Arc<ServiceSnapshot>>, revision: Revision) {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        pending.reset = true;
        pending.services.clear();
        for snapshot in snapshots {
            if snapshot.key().tenant == self.tenant {
                pending.services.insert(snapshot.key().clone(), Some(snapshot));
            }
        }
        pending.revision = Some(revision);
        self.dirty.store(true, Ordering::Release);
    }

    /// The one tenant this zone shows.
    pub fn tenant(&self) -> &Label {
        &self.tenant
    }

    /// Folds staged changes in, then answers `packet` into `out` (and counts the outcome);
    /// `rotation` as in [`Zone::answer`].
    pub fn answer(&self, packet: &[u8], transport: Transport, rotation: u32, out: &mut Vec<u8>) -> Outcome {
        self.catch_up();
        let outcome = self
            .zone
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .answer(packet, transport, rotation, out);
        self.stats.record(&outcome);
        outcome
    }

    /// The queries answered so far, by response code.
    pub fn stats(&self) -> &QueryStats {
        &self.stats
    }

    /// Runs `read` on the zone as of now (staged changes folded in).
    pub fn read<T>(&self, read: impl FnOnce(&Zone) -> T) -> T {
        self.catch_up();
        read(&self.zone.read().unwrap_or_else(PoisonError::into_inner))
    }

    fn catch_up(&self) {
        if !self.dirty.load(Ordering::Acquire) {
            return;
        }
        let mut zone = self.zone.write().unwrap_or_else(PoisonError::into_inner);
        let pending = {
            let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
            self.dirty.store(false, Ordering::Release);
            mem::take(&mut *pending)
        };
        if pending.reset {
            zone.clear();
        }
        for (key, snapshot) in &pending.services {
            zone.update(key, snapshot.as_deref());
        }
        if let Some(revision) = pending.revision {
            zone.set_revision(revision);
        }
    }
}
