//! Events, per-service updates and snapshots: how a service's endpoint set travels.
//!
//! A [`ServiceSnapshot`] is a complete set at the service's revision. A [`ServiceUpdate`]
//! carries all events of one revision for one service, the service's previous revision and
//! the digest of the resulting set. [`ServiceSnapshot::apply`] is the one place that joins
//! them, used alike by the registry's tests, the client's view and the lab: it accepts only
//! the contiguous next update, checks the digest, and leaves the snapshot untouched when
//! anything is off.

use std::ops::Bound;
use std::sync::Arc;

use imbl::OrdMap;
use serde::ser::SerializeStruct;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::{Digest, Endpoint, Incarnation, InstanceId, Revision, ServiceKey};

/// Why an endpoint left the set (SPEC L7).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeleteReason {
    /// Explicitly deregistered, or its lease was revoked.
    Deregistered,
    /// Its lease expired.
    LeaseExpired,
    /// Removed by an operator without the instance's incarnation.
    Evicted,
}

/// One change to one endpoint.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// The endpoint was created or changed; this is its whole new record.
    Put {
        /// The new record.
        #[cfg_attr(feature = "openapi", schema(value_type = Endpoint))]
        endpoint: Arc<Endpoint>,
    },
    /// The endpoint was removed.
    Delete {
        /// Which instance.
        instance: InstanceId,
        /// The incarnation that was removed.
        incarnation: Incarnation,
        /// Why.
        reason: DeleteReason,
    },
}

impl Event {
    /// The instance the event is about.
    pub fn instance(&self) -> &InstanceId {
        match self {
            Event::Put { endpoint } => &endpoint.instance,
            Event::Delete { instance, .. } => instance,
        }
    }
}

/// All events of one revision for one service, with the proof of contiguity and completeness.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceUpdate {
    /// The service.
    pub key: ServiceKey,
    /// The revision of this change.
    pub revision: Revision,
    /// The service's previous change (0 when this update creates the service).
    pub prev_revision: Revision,
    /// The digest of the service's endpoint set after this update.
    pub digest: Digest,
    /// The events, sorted by instance, at most one per instance.
    pub events: Vec<Event>,
}

/// Why an update could not be applied to a snapshot. The snapshot is unchanged; the receiver
/// should take a fresh snapshot.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GapError {
    /// The update is for another service.
    #[error("update for {update} applied to a snapshot of {snapshot}")]
    WrongService {
        /// The snapshot's service.
        snapshot: Box<ServiceKey>,
        /// The update's service.
        update: Box<ServiceKey>,
    },
    /// Something between the snapshot and the update was missed.
    #[error("gap: snapshot is at revision {have}, update {revision} follows revision {prev}")]
    Gap {
        /// The snapshot's revision.
        have: Revision,
        /// The update's revision.
        revision: Revision,
        /// The update's previous revision.
        prev: Revision,
    },
    /// The events do not produce the set the update vouches for.
    #[error("digest mismatch at revision {revision}: update says {expected}, applying it gives {actual}")]
    DigestMismatch {
        /// The update's revision.
        revision: Revision,
        /// The update's digest.
        expected: Digest,
        /// The digest the snapshot reached.
        actual: Digest,
    },
}

/// The complete endpoint set of one service at one revision. Clone is O(1) (a persistent
/// map shares structure), so snapshots are handed out and kept cheaply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceSnapshot {
    key: ServiceKey,
    revision: Revision,
    digest: Digest,
    endpoints: OrdMap<InstanceId, Entry>,
}

/// A record with its fingerprint, so that replacing or removing it never rehashes it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    endpoint: Arc<Endpoint>,
    fingerprint: u64,
}

impl ServiceSnapshot {
    /// The empty set of a service that has no history yet (revision 0).
    pub fn empty(key: ServiceKey) -> ServiceSnapshot {
        ServiceSnapshot {
            key,
            revision: Revision::ZERO,
            digest: Digest::EMPTY,
            endpoints: OrdMap::new(),
        }
    }

    /// A set built from its parts; the digest is computed.
    pub fn from_endpoints(
        key: ServiceKey,
        revision: Revision,
        endpoints: impl IntoIterator<Item = Arc<Endpoint>>,
    ) -> ServiceSnapshot {
        let mut snapshot = ServiceSnapshot::empty(key);
        for endpoint in endpoints {
            snapshot.put(endpoint);
        }
        snapshot.revision = revision;
        snapshot
    }

    /// The service.
    pub fn key(&self) -> &ServiceKey {
        &self.key
    }

    /// The service's last change.
    pub fn revision(&self) -> Revision {
        self.revision
    }

    /// The digest of the set.
    pub fn digest(&self) -> Digest {
        self.digest
    }

    /// How many endpoints.
    pub fn len(&self) -> usize {
        self.endpoints.len()
    }

    /// Whether the set is empty (which is an answer, not "unknown", SPEC W5).
    pub fn is_empty(&self) -> bool {
        self.endpoints.is_empty()
    }

    /// One endpoint.
    pub fn get(&self, instance: &InstanceId) -> Option<&Arc<Endpoint>> {
        self.endpoints.get(instance).map(|e| &e.endpoint)
    }

    /// The endpoints, sorted by instance.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Endpoint>> {
        self.endpoints.values().map(|e| &e.endpoint)
    }

    /// Up to `limit` endpoints after `after` (exclusive), sorted by instance, and the instance
    /// to continue after if more remain.
    pub fn page(&self, after: Option<&InstanceId>, limit: usize) -> (Vec<Arc<Endpoint>>, Option<InstanceId>) {
        let mut items: Vec<Arc<Endpoint>> = match after {
            Some(after) => self
                .endpoints
                .range::<_, InstanceId>((Bound::Excluded(after), Bound::Unbounded))
                .take(limit.saturating_add(1))
                .map(|(_, e)| Arc::clone(&e.endpoint))
                .collect(),
            None => self.iter().take(limit.saturating_add(1)).cloned().collect(),
        };
        let next = if items.len() > limit {
            items.truncate(limit);
            items.last().map(|e| e.instance.clone())
        } else {
            None
        };
        (items, next)
    }

    /// Inserts or replaces a record, keeping the digest current. Returns the record replaced.
    pub fn put(&mut self, endpoint: Arc<Endpoint>) -> Option<Arc<Endpoint>> {
        let fingerprint = endpoint.fingerprint();
        self.digest = self.digest.with(fingerprint);
        let old = self
            .endpoints
            .insert(endpoint.instance.clone(), Entry { endpoint, fingerprint })?;
        self.digest = self.digest.without(old.fingerprint);
        Some(old.endpoint)
    }

    /// Removes a record, keeping the digest current. Returns the record removed.
    pub fn remove(&mut self, instance: &InstanceId) -> Option<Arc<Endpoint>> {
        let old = self.endpoints.remove(instance)?;
        self.digest = self.digest.without(old.fingerprint);
        Some(old.endpoint)
    }

    /// Sets the revision of the set (after applying a change at that revision).
    pub fn set_revision(&mut self, revision: Revision) {
        self.revision = revision;
    }

    /// Applies the next update of this service's lineage.
    ///
    /// Returns `Ok(false)` for an update at or before the snapshot's revision (a replay
    /// already applied), `Ok(true)` once applied. On any error the snapshot is unchanged.
    pub fn apply(&mut self, update: &ServiceUpdate) -> Result<bool, GapError> {
        if update.key != self.key {
            return Err(GapError::WrongService {
                snapshot: Box::new(self.key.clone()),
                update: Box::new(update.key.clone()),
            });
        }
        if update.revision <= self.revision {
            return Ok(false);
        }
        if update.prev_revision != self.revision {
            return Err(GapError::Gap {
                have: self.revision,
                revision: update.revision,
                prev: update.prev_revision,
            });
        }
        let mut next = self.clone();
        for event in &update.events {
            match event {
                Event::Put { endpoint } => next.put(Arc::clone(endpoint)),
                Event::Delete { instance, .. } => next.remove(instance),
            };
        }
        if next.digest != update.digest {
            return Err(GapError::DigestMismatch {
                revision: update.revision,
                expected: update.digest,
                actual: next.digest,
            });
        }
        next.revision = update.revision;
        *self = next;
        Ok(true)
    }
}

impl Serialize for ServiceSnapshot {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut s = serializer.serialize_struct("ServiceSnapshot", 4)?;
        s.serialize_field("key", &self.key)?;
        s.serialize_field("revision", &self.revision)?;
        s.serialize_field("digest", &self.digest)?;
        s.serialize_field("endpoints", &SerializeValues(&self.endpoints))?;
        s.end()
    }
}

struct SerializeValues<'a>(&'a OrdMap<InstanceId, Entry>);

impl Serialize for SerializeValues<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.values().map(|e| &e.endpoint))
    }
}

impl<'de> Deserialize<'de> for ServiceSnapshot {
    /// Rebuilds the set and refuses it unless its digest is the one stated.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Wire {
            key: ServiceKey,
            revision: Revision,
            digest: Digest,
            endpoints: Vec<Arc<Endpoint>>,
        }
        let wire = Wire::deserialize(deserializer)?;
        let count = wire.endpoints.len();
        let snapshot = ServiceSnapshot::from_endpoints(wire.key, wire.revision, wire.endpoints);
        if snapshot.len() != count {
            return Err(serde::de::Error::custom("snapshot lists an instance twice"));
        }
        if snapshot.digest != wire.digest {
            return Err(serde::de::Error::custom(format!(
                "snapshot digest {} does not match its endpoints ({})",
                wire.digest, snapshot.digest
            )));
        }
        Ok(snapshot)
    }
}
