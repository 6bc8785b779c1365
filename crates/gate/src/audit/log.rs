//! [`AuditLog`]: the newest mutations and, apart from them, the newest denials, numbered in
//! one sequence and paged newest first across both.
//!
//! ```text
//!                     next_seq ──▶ one number for both rings
//!   mutations: evicted ◀── [seq 3][seq 7][seq 8] … ◀── push           (audit.retention)
//!   denials:   evicted ◀── [seq 1][seq 2][seq 4] … ◀── denied (counted
//!                               ▲                       into an open     (audit.denial_retention)
//!                               │                       record, or new)
//!   page: both rings below the cursor, merged by seq, newest first ◀
//! ```
//!
//! # Correctness
//! - Mutations and denials live in two rings with their own retention, so no number of
//!   denials evicts a mutation (SPEC S8); `evicted` and `denials_evicted` count each ring's
//!   drops.
//! - Sequence numbers increase along each ring (each pushes at the back with the next number
//!   and drops at the front), so the records below a cursor are found in each by a binary
//!   search, and merging the two by `seq` gives one order, newest first, for every page.
//! - A denial counted into an open record (`super::aggregate`) changes that record's
//!   `count` and `last_at_ms`, never its `seq`: pages already begun stay where they were.
//! - A cursor names the start of this log it was issued in (`epoch`): a cursor from another
//!   node, or from before a restart (whose numbers mean other records), is refused rather
//!   than answered with the wrong records.
//!
//! # Cost
//! A push is a lock, a `VecDeque` push and perhaps a pop: cheap enough for the apply path,
//! which holds the registry's write lock. A denial adds a hash of its key and a binary
//! search. A page walks both rings from the cursor until it has `limit` matches and one more
//! (to know whether to offer a next cursor), so a query whose filters match little scans up
//! to both rings — 20,000 records by default, about a millisecond — holding the lock, which
//! an apply then waits for.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Mutex, PoisonError};

use muster_core::api::{AuditKind, AuditRecord, AuditReply};
use muster_core::{ErrorCode, Label, Principal, ServiceKey};

use crate::audit::aggregate::{DenialKey, OpenAggregates, within_window};
use crate::audit::filter::{AuditFilter, Cursor};

/// A request refused before it reached the log, as the node that refused it saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// Who asked: `None` when the caller could not be authenticated.
    pub principal: Option<Principal>,
    /// The tenant the request addressed, when it named one.
    pub tenant: Option<Label>,
    /// The service the request addressed, when it named one.
    pub key: Option<ServiceKey>,
    /// What it asked to do: the auth verb (`read`, `register`, `admin`, ...), or `cluster` for
    /// a node-to-node request.
    pub verb: String,
    /// The method and path asked for, e.g. `PUT /v1/registry/acme/prod/api/api-0`.
    pub resource: String,
    /// The code the request was answered with (`unauthenticated`, `permission_denied`, ...).
    pub code: ErrorCode,
    /// Why, for people.
    pub reason: String,
    /// Where the request came from ([`muster_http::peer::Peer::addr`]; the accept loop gives every
    /// request one, so `None` only for a request that did not come through it).
    pub source: Option<SocketAddr>,
    /// When: this node's clock, Unix milliseconds.
    pub at_ms: u64,
}

/// The audit rings (see the module docs). Shared: the apply path and the request handlers
/// push, the route reads.
pub struct AuditLog {
    /// Mutation records kept at most (`audit.retention`).
    retention: usize,
    /// Denial records kept at most (`audit.denial_retention`).
    denial_retention: usize,
    /// Distinguishes this log's cursors from another node's or an earlier start's.
    epoch: u64,
    trail: Mutex<Trail>,
}

struct Trail {
    /// The number the next record gets, mutation or denial.
    next_seq: u64,
    mutations: Ring,
    denials: Ring,
    /// The denial record each key counts into (SPEC S4).
    open: OpenAggregates,
}

/// One kind's records, oldest first, their `seq`s increasing.
struct Ring {
    records: VecDeque<AuditRecord>,
    evicted: u64,
}

impl Ring {
    fn new(retention: usize) -> Ring {
        Ring {
            records: VecDeque::with_capacity(retention.clamp(1, PREALLOCATE)),
            evicted: 0,
        }
    }

    /// How many records have a `seq` below `seq`: they are the first ones.
    fn count_below(&self, seq: u64) -> usize {
        self.records.partition_point(|record| record.seq < seq)
    }

    /// The record numbered `seq`, while held.
    fn get_mut(&mut self, seq: u64) -> Option<&mut AuditRecord> {
        let at = self.records.binary_search_by_key(&seq, |record| record.seq).ok()?;
        self.records.get_mut(at)
    }

    /// Appends `record`, then drops (and returns) the oldest while more than `retention` are
    /// held.
    fn push(&mut self, record: AuditRecord, retention: usize) -> Option<AuditRecord> {
        self.records.push_back(record);
        if self.records.len() <= retention {
            return None;
        }
        self.evicted += 1;
        self.records.pop_front()
    }
}

impl Trail {
    /// Numbers `record` and pushes it into its kind's ring; its `seq`.
    fn push(&mut self, mut record: AuditRecord, retention: usize, denial_retention: usize) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        record.seq = seq;
        match record.kind {
            AuditKind::Mutation => {
                self.mutations.push(record, retention);
            }
            AuditKind::Denial => {
                if let Some(evicted) = self.denials.push(record, denial_retention) {
                    self.open.evicted(&evicted);
                }
            }
        }
        seq
    }
}

impl AuditLog {
    /// An empty log keeping the newest `retention` mutations and `denial_retention` denials
    /// (each at least 1); `epoch` must differ between starts and nodes (a random number).
    pub fn new(retention: usize, denial_retention: usize, epoch: u64) -> AuditLog {
        AuditLog {
            retention: retention.max(1),
            denial_retention: denial_retention.max(1),
            epoch,
            trail: Mutex::new(Trail {
                next_seq: 1,
                mutations: Ring::new(retention),
                denials: Ring::new(denial_retention),
                open: OpenAggregates::default(),
            }),
        }
    }

    /// Appends a record to its kind's ring, numbering it (its `seq` is overwritten); drops
    /// that ring's oldest beyond its retention. The apply path pushes mutations here; a
    /// denial pushed here is kept as it is, not counted into another ([`AuditLog::denied`]
    /// counts).
    pub(crate) fn push(&self, record: AuditRecord) {
        let mut trail = self.trail.lock().unwrap_or_else(PoisonError::into_inner);
        trail.push(record, self.retention, self.denial_retention);
    }

    /// Records a denial (outcome `denied:<code>`): counted into the open record of its key
    /// (source IP, principal, tenant, verb, code, reason) when one was made within the last
    /// `DENIAL_INTERVAL_MS` (`aggregate`), else a new record. The
    /// auth layer calls this for every `unauthenticated` or `permission_denied` answer; the
    /// browser guard for its refusals; the cluster listener for a wrong secret; a stream for
    /// its token's revocation.
    pub fn denied(&self, denial: Denial) {
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
        let record = AuditRecord {
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
            reason: Some(cut(reason)),
            resource: Some(cut(resource)),
            source: source.map(|addr| addr.to_string()),
            log_index: None,
            origin: None,
            count: Some(1),
            last_at_ms: Some(at_ms),
        };
        let aggregate = DenialKey::of(&record);
        let mut trail = self.trail.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(seq) = trail.open.get(&aggregate)
            && let Some(open) = trail.denials.get_mut(seq)
            && within_window(open, at_ms)
        {
            open.count = Some(open.count.unwrap_or(1).saturating_add(1));
            open.last_at_ms = open.last_at_ms.max(Some(at_ms));
            return;
        }
        let seq = trail.push(record, self.retention, self.denial_retention);
        trail.open.open(aggregate, seq);
    }

    /// One page, newest first across mutations and denials: the records below `cursor` (all,
    /// without one) that `filter` admits, at most `limit` (at least 1), and a cursor for the
    /// rest when more match.
    #[cfg(test)]
    pub fn page(&self, filter: &AuditFilter, cursor: Option<Cursor>, limit: usize) -> Result<AuditReply, StaleCursor> {
        self.page_visible(filter, cursor, limit, &|_| true)
    }

    /// The page of the records `visible` also admits: what the caller's rules let
    /// it read (SPEC S3).
    pub fn page_visible(
        &self,
        filter: &AuditFilter,
        cursor: Option<Cursor>,
        limit: usize,
        visible: &dyn Fn(&AuditRecord) -> bool,
    ) -> Result<AuditReply, StaleCursor> {
        let limit = limit.max(1);
        let trail = self.trail.lock().unwrap_or_else(PoisonError::into_inner);
        let below = match cursor {
            None => trail.next_seq,
            Some(cursor) if cursor.epoch == self.epoch && cursor.before <= trail.next_seq => cursor.before,
            Some(_) => return Err(StaleCursor),
        };
        let mutations = trail
            .mutations
            .records
            .range(..trail.mutations.count_below(below))
            .rev();
        let denials = trail.denials.records.range(..trail.denials.count_below(below)).rev();
        let mut matching = newest_first(mutations, denials).filter(|record| filter.admits(record) && visible(record));
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
            evicted: trail.mutations.evicted,
            denial_retention: self.denial_retention,
            denials_evicted: trail.denials.evicted,
        })
    }

    /// Denial keys indexed for counting: at most `denial_retention`.
    #[cfg(test)]
    pub fn open_aggregates(&self) -> usize {
        self.trail.lock().unwrap_or_else(PoisonError::into_inner).open.len()
    }
}

/// What a way in may do with the trail (SPEC S4): read it as its rules allow and record a
/// denial. Mutations come only from the apply path, which holds the log itself, so no
/// adapter can write one.
#[derive(Clone, Copy)]
pub struct AuditView<'a>(&'a AuditLog);

impl<'a> AuditView<'a> {
    pub(crate) fn new(log: &'a AuditLog) -> AuditView<'a> {
        AuditView(log)
    }

    /// Records a denial ([`AuditLog::denied`]).
    pub fn denied(self, denial: Denial) {
        self.0.denied(denial);
    }

    /// A page of what `visible` admits ([`AuditLog::page_visible`]).
    pub fn page_visible(
        self,
        filter: &AuditFilter,
        cursor: Option<Cursor>,
        limit: usize,
        visible: &dyn Fn(&AuditRecord) -> bool,
    ) -> Result<AuditReply, StaleCursor> {
        self.0.page_visible(filter, cursor, limit, visible)
    }
}

/// Two sequences each newest first (decreasing `seq`), merged into one newest first.
fn newest_first<'a>(
    a: impl Iterator<Item = &'a AuditRecord>,
    b: impl Iterator<Item = &'a AuditRecord>,
) -> impl Iterator<Item = &'a AuditRecord> {
    let (mut a, mut b) = (a.peekable(), b.peekable());
    std::iter::from_fn(move || match (a.peek(), b.peek()) {
        (Some(x), Some(y)) if x.seq > y.seq => a.next(),
        (Some(_), Some(_)) | (None, _) => b.next(),
        (Some(_), None) => a.next(),
    })
}

/// `text` cut to at most [`MAX_DENIAL_TEXT`] bytes (at a character boundary, with `…`).
fn cut(mut text: String) -> String {
    if text.len() > MAX_DENIAL_TEXT {
        let mut end = MAX_DENIAL_TEXT - '…'.len_utf8();
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

/// Bytes a denial's `reason` and `resource` keep at most: 512. Both can quote what the caller
/// sent (a path, an `Origin`, a `Host`), which the listener bounds only by its header limit
/// (tens of KiB); 512 bytes keep any real path and header value whole, and bound the
/// denials' ring at about 20 MiB at its default retention whatever a caller sends.
const MAX_DENIAL_TEXT: usize = 512;

/// A cursor this log did not issue since it started (another node's, or from before a
/// restart).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StaleCursor;

/// Records allocated up front at most, per ring: a large retention grows as records come
/// instead of reserving memory a quiet node never uses.
const PREALLOCATE: usize = 1024;
