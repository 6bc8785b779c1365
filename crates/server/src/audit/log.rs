//! [`AuditLog`]: the newest records in a ring, numbered, paged newest first.
//!
//! ```text
//!   evicted ◀── front [seq 41][seq 42] … [seq 140] back ◀── push (seq 141)
//!                      ▲ first_seq           ▲ page starts here (or below a cursor), walks ◀
//! ```
//!
//! # Correctness
//! - Sequence numbers are contiguous in the ring (it only pushes at the back and drops at the
//!   front), so the record below a cursor is found by arithmetic, not a search.
//! - At most `retention` records are held; every drop is counted (`evicted`).
//! - A cursor names the start of this log it was issued in (`epoch`): a cursor from another
//!   node, or from before a restart (whose numbers mean other records), is refused rather
//!   than answered with the wrong records.
//!
//! # Cost
//! A push is a lock, a `VecDeque` push and perhaps a pop: cheap enough for the apply path,
//! which holds the registry's write lock. A page walks the ring from the cursor until it has
//! `limit` matches and one more (to know whether to offer a next cursor), so a query whose
//! filters match little scans up to the whole ring — 10,000 records by default, well under a
//! millisecond — holding the lock, which an apply then waits for.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Mutex, PoisonError};

use muster_core::api::{AuditKind, AuditRecord, AuditReply};
use muster_core::{ErrorCode, Label, Principal, ServiceKey};

use crate::audit::filter::{AuditFilter, Cursor};

/// A request refused before it reached the log, as the node that refused it saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Denial {
    /// Who asked: `None` when the caller could not be authenticated.
    pub(crate) principal: Option<Principal>,
    /// The tenant the request addressed, when it named one.
    pub(crate) tenant: Option<Label>,
    /// The service the request addressed, when it named one.
    pub(crate) key: Option<ServiceKey>,
    /// What it asked to do: the auth verb (`read`, `register`, `admin`, ...), or `cluster` for
    /// a node-to-node request.
    pub(crate) verb: String,
    /// The method and path asked for, e.g. `PUT /v1/registry/acme/prod/api/api-0`.
    pub(crate) resource: String,
    /// The code the request was answered with (`unauthenticated`, `permission_denied`, ...).
    pub(crate) code: ErrorCode,
    /// Why, for people.
    pub(crate) reason: String,
    /// Where the request came from ([`crate::peer::Peer::addr`]; the accept loop gives every
    /// request one, so `None` only for a request that did not come through it).
    pub(crate) source: Option<SocketAddr>,
    /// When: this node's clock, Unix milliseconds.
    pub(crate) at_ms: u64,
}

/// The audit ring (see the module docs). Shared: the apply path and the request handlers push,
/// the route reads.
pub(crate) struct AuditLog {
    retention: usize,
    /// Distinguishes this log's cursors from another node's or an earlier start's.
    epoch: u64,
    ring: Mutex<Ring>,
}

struct Ring {
    records: VecDeque<AuditRecord>,
    /// The number the next record gets.
    next_seq: u64,
    evicted: u64,
}

impl Ring {
    /// The number of the oldest record held (`next_seq` when empty).
    fn first_seq(&self) -> u64 {
        self.next_seq - self.records.len() as u64
    }
}

impl AuditLog {
    /// An empty log keeping the newest `retention` records (at least 1); `epoch` must differ
    /// between starts and nodes (a random number).
    pub(crate) fn new(retention: usize, epoch: u64) -> AuditLog {
        AuditLog {
            retention: retention.max(1),
            epoch,
            ring: Mutex::new(Ring {
                records: VecDeque::with_capacity(retention.clamp(1, PREALLOCATE)),
                next_seq: 1,
                evicted: 0,
            }),
        }
    }

    /// Appends a record, numbering it (its `seq` is overwritten); drops the oldest beyond the
    /// retention.
    pub(crate) fn push(&self, mut record: AuditRecord) {
        let mut ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
        record.seq = ring.next_seq;
        ring.next_seq += 1;
        ring.records.push_back(record);
        if ring.records.len() > self.retention {
            ring.records.pop_front();
            ring.evicted += 1;
        }
    }

    /// Records a denial (outcome `denied:<code>`). The auth layer calls this for every
    /// `unauthenticated` or `permission_denied` answer; the cluster listener for a wrong
    /// secret.
    pub(crate) fn denied(&self, denial: Denial) {
        let Denial {
            principal,
            tenant,
            key,
            verb,
            resource,
            code,
            reason,
            source,
            at_ms,
        } = denial;
        self.push(AuditRecord {
            seq: 0,
            at_ms,
            kind: AuditKind::Denial,
            principal: principal.map(|p| p.as_str().to_owned()),
            actor: None,
            verb,
            tenant: tenant.or_else(|| key.as_ref().map(|key| key.tenant.clone())),
            key: key.map(|key| key.to_string()),
            instance: None,
            incarnation: None,
            lease: None,
            accessor: None,
            revision: None,
            outcome: format!("denied:{}", code.as_str()),
            reason: Some(reason),
            resource: Some(resource),
            source: source.map(|addr| addr.to_string()),
            log_index: None,
            origin: None,
        });
    }

    /// One page, newest first: the records below `cursor` (all, without one) that `filter`
    /// admits, at most `limit` (at least 1), and a cursor for the rest when more match.
    pub(crate) fn page(
        &self,
        filter: &AuditFilter,
        cursor: Option<Cursor>,
        limit: usize,
    ) -> Result<AuditReply, StaleCursor> {
        let limit = limit.max(1);
        let ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
        let below = match cursor {
            None => ring.next_seq,
            Some(cursor) if cursor.epoch == self.epoch && cursor.before <= ring.next_seq => cursor.before,
            Some(_) => return Err(StaleCursor),
        };
        // Records with seq < below: the first `below - first_seq` of the ring.
        let end = below.saturating_sub(ring.first_seq()) as usize;
        let mut matching = ring.records.range(..end).rev().filter(|record| filter.admits(record));
        let records: Vec<AuditRecord> = matching.by_ref().take(limit).cloned().collect();
        let more = matching.next().is_some();
        let next_cursor = match records.last() {
            Some(last) if more => Some(
                Cursor {
                    epoch: self.epoch,
                    before: last.seq,
                }
                .encode(),
            ),
            _ => None,
        };
        Ok(AuditReply {
            records,
            next_cursor,
            retention: self.retention,
            evicted: ring.evicted,
        })
    }
}

/// A cursor this log did not issue since it started (another node's, or from before a
/// restart).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StaleCursor;

/// Records allocated up front at most: a large retention grows as records come instead of
/// reserving memory a quiet node never uses.
const PREALLOCATE: usize = 1024;
