//! Denials counted, not kept one by one (SPEC S4, S8): a flood of refused requests from one
//! source is one record per [`DENIAL_INTERVAL_MS`] with a `count`, so it neither fills the
//! denials' ring with copies nor hides the other callers' denials behind them.
//!
//! ```text
//!  denial ──▶ key (source IP, principal, tenant, verb, code, reason)
//!               │
//!               ├─ open[key] = seq, its record still held, now < its at_ms + 10 s
//!               │      └─▶ that record: count += 1, last_at_ms = now        (no new record)
//!               └─ otherwise ─▶ a new record (count 1), at once; open[key] = its seq
//! ```
//!
//! # Correctness
//! - The first denial of a key is on record at once; a window is anchored at its record's
//!   `at_ms`, so a record stops changing [`DENIAL_INTERVAL_MS`] after it was made (a log
//!   shipper that reads it later reads its final count).
//! - Every entry of [`OpenAggregates`] names a record the denials' ring still holds: an entry
//!   is dropped when its record is evicted, and replaced when its key opens a new window.
//!   Keys are distinct and so are the records they name, so the index holds at most
//!   `denial_retention` entries, however many sources, principals or reasons a flood makes up.
//! - The key is the source's IP, not its port: a client opens a new connection (a new port)
//!   as cheaply as it sends a request, so a port would make every connection a new record.
//!   The tenant and verb are in the key so that a record's `tenant` (which decides who may
//!   read it, SPEC S3) and `verb` are true of every request it counts.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

use muster_core::Label;
use muster_core::api::AuditRecord;

/// How long one aggregate record keeps counting: 10 s. Short enough that a record's `at_ms`
/// and `last_at_ms` place a probe within seconds, and an operator watching the trail sees a
/// new record of an ongoing flood every 10 s; long enough that a flood at any rate costs one
/// record per source and reason per 10 s (the default 10,000 records then hold a day of one
/// source's flood, or an hour of thirty sources' at once).
pub(crate) const DENIAL_INTERVAL_MS: u64 = 10_000;

/// What makes two denials one record's.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct DenialKey {
    ip: Option<IpAddr>,
    principal: Option<String>,
    tenant: Option<Label>,
    verb: String,
    outcome: String,
    reason: Option<String>,
}

impl DenialKey {
    /// The key of a denial record (the same for the record as made and as evicted).
    pub(crate) fn of(record: &AuditRecord) -> DenialKey {
        DenialKey {
            ip: record
                .source
                .as_deref()
                .and_then(|source| source.parse::<SocketAddr>().ok())
                .map(|addr| addr.ip().to_canonical()),
            principal: record.principal.clone(),
            tenant: record.tenant.clone(),
            verb: record.verb.clone(),
            outcome: record.outcome.clone(),
            reason: record.reason.clone(),
        }
    }
}

/// The record (by `seq`) each key counts into, while the ring holds it.
#[derive(Debug, Default)]
pub(crate) struct OpenAggregates {
    open: HashMap<DenialKey, u64>,
}

impl OpenAggregates {
    /// The record `key` last opened, if one is indexed.
    pub(crate) fn get(&self, key: &DenialKey) -> Option<u64> {
        self.open.get(key).copied()
    }

    /// `seq` is now `key`'s record.
    pub(crate) fn open(&mut self, key: DenialKey, seq: u64) {
        self.open.insert(key, seq);
    }

    /// `record` left the ring: its key's entry goes, unless a newer record of the key holds it.
    pub(crate) fn evicted(&mut self, record: &AuditRecord) {
        let key = DenialKey::of(record);
        if self.open.get(&key) == Some(&record.seq) {
            self.open.remove(&key);
        }
    }

    /// Entries held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.open.len()
    }
}

/// Whether a denial at `at_ms` counts into `record` (made at its `at_ms`): within the window.
/// A clock that stepped back counts in too, rather than opening records out of order.
pub(crate) fn within_window(record: &AuditRecord, at_ms: u64) -> bool {
    at_ms < record.at_ms.saturating_add(DENIAL_INTERVAL_MS)
}
