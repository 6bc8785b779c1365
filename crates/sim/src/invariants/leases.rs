//! Invariants on leases: **a minority neither extends nor expires a lease**, and **a grant
//! mints one lease however often it is retried**.
//!
//! - Floor: a lease granted by a write sent at `t` with TTL `ttl`, or renewed by a renewal
//!   sent at `t` and acknowledged, must not leave the registry before `t + ttl` (unless it
//!   was revoked). A node cut off from the majority that acknowledged a renewal (extending
//!   nothing the cluster will honour), or that expired a lease on a deadline the majority
//!   moved, breaks it. Removal time is when the first node applied the removal, which is
//!   at or after the commit.
//! - Exactly once: every grant in the workload asks for a TTL no other grant asks for, so
//!   two leases with one TTL are one grant applied twice.
//! - At the end, after a quiet period longer than any TTL with no renewals, every lease is
//!   gone (the leader's duties expire what nobody renews).

use std::collections::{BTreeMap, BTreeSet};

use muster_core::LeaseId;

use super::history::RevisionRecord;

/// What the lease invariants track.
#[derive(Default)]
pub struct Leases {
    /// The leases after the last revision walked.
    current: BTreeMap<LeaseId, u64>,
    /// TTL → the lease minted for it.
    minted: BTreeMap<u64, LeaseId>,
    /// Grant TTLs the workload asked for → when the grant was sent.
    grants_sent: BTreeMap<u64, u64>,
    /// Lease → the latest `sent + ttl` an acknowledged renewal (or its grant) promised.
    floor: BTreeMap<LeaseId, u64>,
    /// Leases the workload tried to revoke (their removal is not an expiry).
    revoked: BTreeSet<LeaseId>,
    /// Lease → when it left the registry.
    removed_at: BTreeMap<LeaseId, u64>,
}

impl Leases {
    /// The workload sends a grant asking for `ttl` (unique) at `sent_ms`.
    pub fn grant_sent(&mut self, ttl: u64, sent_ms: u64) {
        self.grants_sent.insert(ttl, sent_ms);
    }

    /// The workload tries to revoke `lease`.
    pub fn revoke_sent(&mut self, lease: LeaseId) {
        self.revoked.insert(lease);
    }

    /// A renewal of `lease` sent at `sent_ms` was acknowledged.
    pub fn renewed(&mut self, lease: LeaseId, ttl: u64, sent_ms: u64) -> Result<(), String> {
        let promise = sent_ms + ttl;
        let floor = self.floor.entry(lease).or_default();
        *floor = (*floor).max(promise);
        self.check_floor(lease)
    }

    fn check_floor(&self, lease: LeaseId) -> Result<(), String> {
        if self.revoked.contains(&lease) {
            return Ok(());
        }
        match (self.removed_at.get(&lease), self.floor.get(&lease)) {
            (Some(removed), Some(floor)) if removed < floor => Err(format!(
                "lease {} left the registry at {removed} ms, but a grant or acknowledged renewal \
                 promised it until at least {floor} ms",
                lease.0
            )),
            _ => Ok(()),
        }
    }

    /// Walks one revision.
    pub fn process(&mut self, revision: u64, record: &RevisionRecord) -> Result<(), String> {
        for (id, ttl) in &record.leases_after {
            if self.current.contains_key(id) {
                continue;
            }
            if let Some(first) = self.minted.insert(*ttl, *id) {
                return Err(format!(
                    "revision {revision} minted lease {} for the grant asking {ttl} ms, which already \
                     minted lease {}: one grant applied twice",
                    id.0, first.0
                ));
            }
            if let Some(sent) = self.grants_sent.get(ttl) {
                let floor = self.floor.entry(*id).or_default();
                *floor = (*floor).max(sent + ttl);
            }
        }
        let gone: Vec<LeaseId> = self
            .current
            .keys()
            .filter(|id| !record.leases_after.contains_key(id))
            .copied()
            .collect();
        for id in gone {
            self.removed_at.insert(id, record.first_applied_ms);
            self.check_floor(id)?;
        }
        self.current.clone_from(&record.leases_after);
        Ok(())
    }

    /// The leases that still exist.
    pub fn live(&self) -> impl Iterator<Item = &LeaseId> {
        self.current.keys()
    }

    /// The TTL of a live lease.
    pub fn ttl(&self, lease: LeaseId) -> Option<u64> {
        self.current.get(&lease).copied()
    }
}
