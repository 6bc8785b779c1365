//! The lease table: which leases exist and which endpoints hang on each.
//!
//! Only grants, attachments and removals live here, all changed by committed commands.
//! Deadlines do not (DESIGN "Leases off the log"): renewals touch the leader's in-memory
//! deadline table, and expiry comes back as one `ExpireLeases` command.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use muster_core::{InstanceId, Label, LeaseId, Revision, ServiceKey};
use serde::{Deserialize, Serialize};

/// A granted lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// Its id.
    pub id: LeaseId,
    /// The tenant whose records may attach to it.
    pub tenant: Label,
    /// The TTL granted: a renewal pushes the deadline to now + TTL.
    pub ttl_ms: u64,
    /// The revision it was granted at.
    pub revision: Revision,
    /// The service it was granted for: only that service's endpoints attach, and its
    /// renewals and revocation are judged on that service's rules (SPEC L4). None: a lease
    /// of the whole tenant (granted so, or before leases named a service).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceKey>,
}

/// Leases and the reverse index from lease to endpoints.
#[derive(Debug, Clone, Default)]
pub(crate) struct LeaseTable {
    leases: BTreeMap<LeaseId, Lease>,
    /// One entry per attached endpoint, ordered by lease so a lease's endpoints are a range.
    /// Service keys are shared with the service table, so an entry costs 40 bytes.
    attachments: BTreeSet<(LeaseId, Arc<ServiceKey>, InstanceId)>,
    next_id: u64,
}

impl LeaseTable {
    pub(crate) fn new(next_id: LeaseId) -> LeaseTable {
        LeaseTable {
            next_id: next_id.0,
            ..LeaseTable::default()
        }
    }

    /// The id the next grant gets. Ids start at 1 and are never reused.
    pub(crate) fn next_id(&self) -> LeaseId {
        LeaseId(self.next_id.max(1))
    }

    pub(crate) fn get(&self, id: LeaseId) -> Option<&Lease> {
        self.leases.get(&id)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Lease> {
        self.leases.values()
    }

    pub(crate) fn insert(&mut self, lease: Lease) {
        self.next_id = self.next_id.max(lease.id.0 + 1);
        self.leases.insert(lease.id, lease);
    }

    pub(crate) fn remove(&mut self, id: LeaseId) -> Option<Lease> {
        self.leases.remove(&id)
    }

    pub(crate) fn attach(&mut self, id: LeaseId, key: &Arc<ServiceKey>, instance: &InstanceId) {
        self.attachments.insert((id, Arc::clone(key), instance.clone()));
    }

    pub(crate) fn detach(&mut self, id: LeaseId, key: &Arc<ServiceKey>, instance: &InstanceId) {
        self.attachments.remove(&(id, Arc::clone(key), instance.clone()));
    }

    /// The endpoints attached to a lease, ordered by service and instance.
    pub(crate) fn attached(&self, id: LeaseId) -> impl Iterator<Item = (&Arc<ServiceKey>, &InstanceId)> {
        self.attachments
            .range((id, min_key(), min_instance())..)
            .take_while(move |(lease, _, _)| *lease == id)
            .map(|(_, key, instance)| (key, instance))
    }
}

/// The smallest service key and instance id: "0" is the least valid DNS label in byte order
/// (labels cannot start with '-', and '0' sorts before every other allowed character).
fn min_key() -> Arc<ServiceKey> {
    static MIN: std::sync::OnceLock<Arc<ServiceKey>> = std::sync::OnceLock::new();
    Arc::clone(MIN.get_or_init(|| Arc::new(ServiceKey::new("0", "0", "0").expect("'0' is a valid label"))))
}

fn min_instance() -> InstanceId {
    InstanceId::new("0").expect("'0' is a valid label")
}
