//! The client's compact endpoint record and set (SPEC C1, C3, C4; the SPEC C target of at
//! most 300 bytes of view per endpoint).
//!
//! ```text
//!  Endpoint (server record: provenance, observation, labels, checks, lease ...)
//!     │  Member::from_endpoint: fingerprint() once, routing fields kept
//!     ▼
//!  Member { instance, incarnation, addresses, ports*, locality*, serving, weight, capacity,
//!           revision, fingerprint }          * shared between members that are equal
//!     │
//!  MemberSet { key, revision, digest, OrdSet<Arc<Member>> by instance }
//! ```
//!
//! A view needs two things from a record: what eligibility and the balancers route on, and
//! its share of the set's [`Digest`] (the sum of the records' fingerprints), so that every
//! update can still be checked against the digest the server vouches for. [`Member`] keeps
//! exactly those: the fingerprint is computed from the full record when it arrives (in a
//! snapshot or an update's `put`) and cached, so replacing or removing a member later never
//! needs the fields it dropped. Identical port lists and localities (a fleet's usual case)
//! are shared, not copied per member.
//!
//! # Correctness
//!
//! - `digest` is always the wrapping sum of the members' fingerprints, and each fingerprint is
//!   [`Endpoint::fingerprint`] of the record the member was made from.
//! - [`MemberSet::apply`] accepts only the contiguous next update of the lineage whose events
//!   reproduce the update's digest, exactly as [`muster_core::ServiceSnapshot::apply`] does;
//!   on any error the set is unchanged.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::sync::Arc;

use imbl::OrdSet;
use muster_core::{
    Address, Digest, Endpoint, Event, GapError, Incarnation, InstanceId, Locality, NamedPort, Revision, ServiceKey,
    ServiceSnapshot, ServiceUpdate, ServingState,
};
use serde::{Deserialize, Serialize};

/// What the client keeps of an endpoint: its identity, where to reach it, whether and how
/// much it may be routed to, and its fingerprint. Field names are [`Endpoint`]'s.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Member {
    /// The stable workload identity.
    pub instance: InstanceId,
    /// The fencing token of this run of the instance.
    pub incarnation: Incarnation,
    /// Canonical addresses, at least one.
    pub addresses: Box<[Address]>,
    /// Named ports (shared between members with the same list).
    pub ports: Arc<[NamedPort]>,
    /// Where it runs (shared between members in the same place).
    pub locality: Arc<Locality>,
    /// Whether it may get new work.
    pub serving: ServingState,
    /// Relative share of new work.
    pub weight: u16,
    /// Optional bound on concurrent work, a hint for balancers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<u32>,
    /// The revision at which the record last changed.
    pub revision: Revision,
    /// [`Endpoint::fingerprint`] of the full record: this member's share of the set digest.
    fingerprint: u64,
}

impl Member {
    /// The compact record of `endpoint`, fingerprinted.
    pub fn from_endpoint(endpoint: &Endpoint) -> Member {
        Member::interned(endpoint, &mut Interner::default())
    }

    fn interned(endpoint: &Endpoint, interner: &mut Interner) -> Member {
        Member {
            instance: endpoint.instance.clone(),
            incarnation: endpoint.incarnation,
            addresses: endpoint.addresses.clone(),
            ports: interner.ports(&endpoint.ports),
            locality: interner.locality(&endpoint.locality),
            serving: endpoint.serving,
            weight: endpoint.weight,
            capacity: endpoint.capacity,
            revision: endpoint.revision,
            fingerprint: endpoint.fingerprint(),
        }
    }

    /// [`Endpoint::fingerprint`] of the record this member was made from.
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }
}

impl From<&Endpoint> for Member {
    fn from(endpoint: &Endpoint) -> Member {
        Member::from_endpoint(endpoint)
    }
}

/// Port lists and localities already held, to share instead of copy. Bounded: a set with
/// more distinct values than this just stores the rest unshared (correct, only larger); 16
/// covers a fleet's few port layouts and zones while keeping the linear scan cheap.
#[derive(Default)]
struct Interner {
    ports: Vec<Arc<[NamedPort]>>,
    localities: Vec<Arc<Locality>>,
}

const INTERNED: usize = 16;

impl Interner {
    /// Seeded with what `member` holds.
    fn like(member: Option<&Member>) -> Interner {
        let mut interner = Interner::default();
        if let Some(member) = member {
            interner.ports.push(Arc::clone(&member.ports));
            interner.localities.push(Arc::clone(&member.locality));
        }
        interner
    }

    fn ports(&mut self, ports: &[NamedPort]) -> Arc<[NamedPort]> {
        if let Some(held) = self.ports.iter().find(|held| ***held == *ports) {
            return Arc::clone(held);
        }
        let fresh: Arc<[NamedPort]> = ports.into();
        if self.ports.len() < INTERNED {
            self.ports.push(Arc::clone(&fresh));
        }
        fresh
    }

    fn locality(&mut self, locality: &Locality) -> Arc<Locality> {
        if let Some(held) = self.localities.iter().find(|held| ***held == *locality) {
            return Arc::clone(held);
        }
        let fresh = Arc::new(locality.clone());
        if self.localities.len() < INTERNED {
            self.localities.push(Arc::clone(&fresh));
        }
        fresh
    }
}

/// A member ordered and looked up by instance alone (one member per instance).
#[derive(Debug, Clone)]
struct ByInstance(Arc<Member>);

impl PartialEq for ByInstance {
    fn eq(&self, other: &Self) -> bool {
        self.0.instance == other.0.instance
    }
}

impl Eq for ByInstance {}

impl PartialOrd for ByInstance {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ByInstance {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.instance.cmp(&other.0.instance)
    }
}

impl Borrow<InstanceId> for ByInstance {
    fn borrow(&self) -> &InstanceId {
        &self.0.instance
    }
}

/// A service's complete set at one revision, as compact members, with its digest. Clone is
/// O(1) (a persistent set shares structure), as for [`ServiceSnapshot`].
#[derive(Debug, Clone)]
pub struct MemberSet {
    key: ServiceKey,
    revision: Revision,
    digest: Digest,
    members: OrdSet<ByInstance>,
}

impl PartialEq for MemberSet {
    /// Same service, revision, digest and members (compared whole, not only by instance).
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
            && self.revision == other.revision
            && self.digest == other.digest
            && self.len() == other.len()
            && self.iter().zip(other.iter()).all(|(a, b)| a == b)
    }
}

impl Eq for MemberSet {}

impl MemberSet {
    /// The empty set of a service that has no history yet (revision 0).
    pub fn empty(key: ServiceKey) -> MemberSet {
        MemberSet {
            key,
            revision: Revision::ZERO,
            digest: Digest::EMPTY,
            members: OrdSet::new(),
        }
    }

    /// The compact form of a complete set (whose digest was checked when it was decoded).
    pub fn from_snapshot(snapshot: &ServiceSnapshot) -> MemberSet {
        let mut interner = Interner::default();
        let mut set = MemberSet::empty(snapshot.key().clone());
        for endpoint in snapshot.iter() {
            set.put(Member::interned(endpoint, &mut interner));
        }
        set.revision = snapshot.revision();
        debug_assert_eq!(set.digest, snapshot.digest(), "fingerprints are Endpoint::fingerprint");
        set
    }

    /// A set of already fingerprinted members (a saved set): refused unless their
    /// fingerprints sum to `digest` and no instance repeats.
    pub(crate) fn from_members(
        key: ServiceKey,
        revision: Revision,
        digest: Digest,
        members: impl IntoIterator<Item = Member>,
    ) -> Result<MemberSet, String> {
        let mut set = MemberSet::empty(key);
        let mut count = 0;
        for member in members {
            set.put(member);
            count += 1;
        }
        if set.len() != count {
            return Err("the set lists an instance twice".to_owned());
        }
        if set.digest != digest {
            return Err(format!(
                "the set's digest {digest} does not match its members ({})",
                set.digest
            ));
        }
        set.revision = revision;
        Ok(set)
    }

    /// The service.
    pub fn key(&self) -> &ServiceKey {
        &self.key
    }

    /// The service's last change.
    pub fn revision(&self) -> Revision {
        self.revision
    }

    /// The digest of the set: the sum of its members' fingerprints.
    pub fn digest(&self) -> Digest {
        self.digest
    }

    /// How many members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the set is empty (which is an answer, not "unknown", SPEC W5).
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// One member.
    pub fn get(&self, instance: &InstanceId) -> Option<&Arc<Member>> {
        self.members.get(instance).map(|member| &member.0)
    }

    /// The members, sorted by instance.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Member>> {
        self.members.iter().map(|member| &member.0)
    }

    fn put(&mut self, member: Member) {
        self.digest = self.digest.with(member.fingerprint);
        if let Some(old) = self.members.insert(ByInstance(Arc::new(member))) {
            self.digest = self.digest.without(old.0.fingerprint);
        }
    }

    fn remove(&mut self, instance: &InstanceId) {
        if let Some(old) = self.members.remove(instance) {
            self.digest = self.digest.without(old.0.fingerprint);
        }
    }

    /// Applies the next update of this service's lineage, checking its digest.
    ///
    /// Returns `Ok(false)` for an update at or before the set's revision (a replay already
    /// applied), `Ok(true)` once applied. On any error the set is unchanged.
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
        // Shares with what the instance held before, else with the set's first member.
        let first = self.iter().next().map(Arc::clone);
        for event in &update.events {
            match event {
                Event::Put { endpoint } => {
                    let mut interner = Interner::like(self.get(&endpoint.instance).or(first.as_ref()).map(|m| &**m));
                    next.put(Member::interned(endpoint, &mut interner));
                }
                Event::Delete { instance, .. } => next.remove(instance),
            }
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

#[cfg(test)]
#[path = "member_tests.rs"]
mod tests;
