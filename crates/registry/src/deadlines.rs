//! The lease deadline table (DESIGN "Leases off the log"): pure, time as input.
//!
//! Grants, revocations and expiries are committed commands; deadlines are not. They live in
//! this table, in the leader's memory, so a renewal is a map update rather than a log write.
//! The leader engine (`muster-leader`) feeds it the registry's leases and the time, and
//! proposes what [`LeaseDeadlines::expired`] returns as one `ExpireLeases` command; the
//! server's leader task and the lab (`muster-lab`) drive the same engine. It lives in this crate, beside
//! the registry whose leases it times, so that both can use it.
//!
//! ```text
//!  grant / attach ──▶ ensure(id, ttl, now)      deadline = now + ttl unless one exists
//!  renew          ──▶ renew(id, ttl, now)       deadline = now + ttl; refused once passed
//!  keeper tick    ──▶ reconcile(live, now)      missing ones get now + ttl (restart!),
//!                                               ones gone from the registry are dropped
//!                 ──▶ expired(now, max)         deadlines ≤ now, earliest first
//! ```
//!
//! # Correctness
//! - A lease the registry holds but this table does not (after a restart, or a grant the
//!   table has not seen yet) gets `now + ttl` when it is first seen: a restart extends every
//!   deadline instead of expiring everything at boot.
//! - Once a deadline has passed, renewal is refused: expiry is server-authoritative, and a
//!   late renewal cannot revive a lease the keeper is about to expire.
//! - Ids are never reused, so `reconcile` only drops entries up to the highest live id: a
//!   lease granted after the registry was read is not mistaken for a revoked one.

use std::collections::{BTreeMap, BTreeSet};

use muster_core::LeaseId;

/// A renewal was refused: the lease's deadline has passed (it is expiring).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeadlinePassed;

/// Deadlines in monotonic milliseconds, by lease and by time.
#[derive(Debug, Default)]
pub struct LeaseDeadlines {
    by_lease: BTreeMap<LeaseId, u64>,
    by_deadline: BTreeSet<(u64, LeaseId)>,
}

impl LeaseDeadlines {
    /// An empty table.
    pub fn new() -> LeaseDeadlines {
        LeaseDeadlines::default()
    }

    /// How many leases have a deadline.
    pub fn len(&self) -> usize {
        self.by_lease.len()
    }

    /// Whether no lease has a deadline.
    pub fn is_empty(&self) -> bool {
        self.by_lease.is_empty()
    }

    /// A lease's deadline, if it has one.
    pub fn deadline(&self, id: LeaseId) -> Option<u64> {
        self.by_lease.get(&id).copied()
    }

    /// The lease's deadline, giving it `now + ttl` if it has none (a new grant, an attach).
    pub fn ensure(&mut self, id: LeaseId, ttl_ms: u64, now_ms: u64) -> u64 {
        match self.deadline(id) {
            Some(deadline) => deadline,
            None => self.set(id, now_ms.saturating_add(ttl_ms)),
        }
    }

    /// Pushes the deadline to `now + ttl`, unless it has already passed.
    pub fn renew(&mut self, id: LeaseId, ttl_ms: u64, now_ms: u64) -> Result<u64, DeadlinePassed> {
        if self.deadline(id).is_some_and(|deadline| deadline <= now_ms) {
            return Err(DeadlinePassed);
        }
        Ok(self.set(id, now_ms.saturating_add(ttl_ms)))
    }

    /// Drops a lease's deadline (revoked or expired).
    pub fn forget(&mut self, id: LeaseId) {
        if let Some(deadline) = self.by_lease.remove(&id) {
            self.by_deadline.remove(&(deadline, id));
        }
    }

    /// Brings the table in line with the registry's leases `(id, ttl)`: a lease without a
    /// deadline gets `now + ttl`; a deadline whose lease is gone is dropped, up to the highest
    /// live id (see "Correctness").
    pub fn reconcile(&mut self, live: impl IntoIterator<Item = (LeaseId, u64)>, now_ms: u64) {
        let mut live_ids = BTreeSet::new();
        for (id, ttl_ms) in live {
            self.ensure(id, ttl_ms, now_ms);
            live_ids.insert(id);
        }
        let highest = live_ids.last().copied();
        let gone: Vec<LeaseId> = self
            .by_lease
            .keys()
            .copied()
            .filter(|id| highest.is_some_and(|h| *id <= h) && !live_ids.contains(id))
            .collect();
        for id in gone {
            self.forget(id);
        }
    }

    /// Up to `max` leases whose deadline is at or before `now`, earliest first.
    pub fn expired(&self, now_ms: u64, max: usize) -> Vec<LeaseId> {
        self.by_deadline
            .iter()
            .take_while(|(deadline, _)| *deadline <= now_ms)
            .take(max)
            .map(|(_, id)| *id)
            .collect()
    }

    fn set(&mut self, id: LeaseId, deadline: u64) -> u64 {
        if let Some(old) = self.by_lease.insert(id, deadline) {
            self.by_deadline.remove(&(old, id));
        }
        self.by_deadline.insert((deadline, id));
        deadline
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: u64 = 1_000;

    #[test]
    fn a_grant_gets_now_plus_ttl_and_expires_unless_renewed() {
        let mut table = LeaseDeadlines::new();
        assert_eq!(table.ensure(LeaseId(1), TTL, 100), 1_100);
        assert_eq!(table.ensure(LeaseId(1), TTL, 500), 1_100, "ensure keeps a deadline");
        assert!(table.expired(1_099, 10).is_empty());
        assert_eq!(table.expired(1_100, 10), vec![LeaseId(1)]);
    }

    #[test]
    fn renewal_pushes_the_deadline_without_a_log_write() {
        let mut table = LeaseDeadlines::new();
        table.ensure(LeaseId(1), TTL, 0);
        assert_eq!(table.renew(LeaseId(1), TTL, 900), Ok(1_900));
        assert!(table.expired(1_500, 10).is_empty());
        assert_eq!(table.expired(1_900, 10), vec![LeaseId(1)]);
    }

    #[test]
    fn a_late_renewal_cannot_revive_a_passed_deadline() {
        let mut table = LeaseDeadlines::new();
        table.ensure(LeaseId(1), TTL, 0);
        assert_eq!(table.renew(LeaseId(1), TTL, 1_000), Err(DeadlinePassed));
        assert_eq!(table.deadline(LeaseId(1)), Some(1_000));
    }

    #[test]
    fn renewing_an_unknown_lease_starts_its_deadline() {
        // After a restart the table is empty; the registry vouched for the lease.
        let mut table = LeaseDeadlines::new();
        assert_eq!(table.renew(LeaseId(4), TTL, 50), Ok(1_050));
    }

    #[test]
    fn restart_extends_every_deadline_instead_of_expiring_at_boot() {
        // Trace: the server stops, comes back long after every deadline would have passed.
        let mut table = LeaseDeadlines::new();
        table.reconcile([(LeaseId(1), TTL), (LeaseId(2), 5_000)], 10);
        assert!(table.expired(10, 10).is_empty());
        assert_eq!(table.deadline(LeaseId(1)), Some(1_010));
        assert_eq!(table.deadline(LeaseId(2)), Some(5_010));
    }

    #[test]
    fn reconcile_drops_leases_gone_from_the_registry_but_not_newer_grants() {
        let mut table = LeaseDeadlines::new();
        for id in 1..=4 {
            table.ensure(LeaseId(id), TTL, 0);
        }
        // Lease 2 was revoked; lease 4 was granted after the registry was read.
        table.reconcile([(LeaseId(1), TTL), (LeaseId(3), TTL)], 10);
        assert_eq!(table.deadline(LeaseId(2)), None);
        assert_eq!(table.deadline(LeaseId(4)), Some(1_000));
        assert_eq!(table.len(), 3);
    }

    #[test]
    fn expiry_is_batched_earliest_first_and_bounded() {
        let mut table = LeaseDeadlines::new();
        table.ensure(LeaseId(3), TTL, 0);
        table.ensure(LeaseId(1), TTL, 5);
        table.ensure(LeaseId(2), TTL, 2);
        assert_eq!(table.expired(2_000, 10), vec![LeaseId(3), LeaseId(2), LeaseId(1)]);
        assert_eq!(table.expired(2_000, 2), vec![LeaseId(3), LeaseId(2)]);
        table.forget(LeaseId(3));
        assert_eq!(table.expired(2_000, 10), vec![LeaseId(2), LeaseId(1)]);
    }
}
