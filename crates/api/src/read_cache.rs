//! Snapshot reads encoded once per service revision (SPEC K1, W2), as watch frames are.
//!
//! ```text
//!  GET /v1/registry/{t}/{ns}/{svc} (whole current set)
//!    under the read lock: the service's snapshot (an Arc) and the global revision
//!    ──▶ cache[key] holds this service revision? ──yes──▶ its `endpoints` JSON
//!                                               └─no──▶ encode the snapshot's endpoints once, keep them
//!    ──▶ {"revision":R,"service_revision":S,"digest":D,"total":N,"endpoints":<cached>,"protection_active":P}
//! ```
//!
//! Only the `endpoints` array is cached: the global revision and the protection status change
//! without the service changing, so they are written around it on every read. The reply is
//! byte for byte what serialising `SnapshotReply` gives (tested). A service's entry is replaced
//! when its revision moves; the cache holds at most [`MAX_BYTES`] of JSON, and makes room by
//! dropping the entries of other services (any of them: a dropped entry costs one encode).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use muster_core::{Digest, Revision, ServiceKey};

/// The JSON kept in all: 64 MiB, the endpoints of ~200,000 endpoints' worth of services.
pub(crate) const MAX_BYTES: usize = 64 << 20;

/// The encoded `endpoints` arrays of recently read services.
#[derive(Debug)]
pub(crate) struct ReadCache {
    state: Mutex<State>,
    max_bytes: usize,
}

#[derive(Debug, Default)]
struct State {
    entries: HashMap<ServiceKey, (Revision, Bytes)>,
    bytes: usize,
}

impl Default for ReadCache {
    fn default() -> Self {
        ReadCache::new(MAX_BYTES)
    }
}

impl ReadCache {
    /// A cache holding at most `max_bytes` of JSON.
    pub(crate) fn new(max_bytes: usize) -> ReadCache {
        ReadCache {
            state: Mutex::default(),
            max_bytes,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The encoded endpoints of `key` at service revision `revision`, if kept.
    pub(crate) fn get(&self, key: &ServiceKey, revision: Revision) -> Option<Bytes> {
        match self.state().entries.get(key) {
            Some((kept, json)) if *kept == revision => Some(json.clone()),
            _ => None,
        }
    }

    /// Keeps `json` as the endpoints of `key` at `revision`, unless an entry of a later
    /// revision is already there (a slower reader of an older snapshot) or `json` alone is
    /// over the budget.
    pub(crate) fn put(&self, key: &ServiceKey, revision: Revision, json: Bytes) {
        if json.len() > self.max_bytes {
            return;
        }
        let mut state = self.state();
        if let Some((kept, old)) = state.entries.get(key) {
            if *kept >= revision {
                return;
            }
            let freed = old.len();
            state.bytes -= freed;
            state.entries.remove(key);
        }
        while state.bytes + json.len() > self.max_bytes {
            let Some(victim) = state.entries.keys().next().cloned() else {
                break;
            };
            if let Some((_, old)) = state.entries.remove(&victim) {
                state.bytes -= old.len();
            }
        }
        state.bytes += json.len();
        state.entries.insert(key.clone(), (revision, json));
    }

    /// How many services and bytes are kept.
    #[cfg(test)]
    fn usage(&self) -> (usize, usize) {
        let state = self.state();
        (state.entries.len(), state.bytes)
    }
}

/// What a whole-set reply says besides its endpoints.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReplyHead {
    /// The global revision read at.
    pub(crate) at: Revision,
    /// The service's last change.
    pub(crate) service_revision: Revision,
    /// The set's digest.
    pub(crate) digest: Digest,
    /// How many endpoints it holds.
    pub(crate) total: usize,
    /// Whether self-preservation holds the service.
    pub(crate) protection_active: bool,
}

/// The reply's body: `head`'s fields around the encoded `endpoints`, in `SnapshotReply`'s
/// field order.
pub(crate) fn reply_body(head: &ReplyHead, endpoints: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut body = Vec::with_capacity(endpoints.len() + 160);
    // Writing to a Vec cannot fail.
    let _ = write!(
        body,
        "{{\"revision\":{},\"service_revision\":{},\"digest\":",
        head.at.0, head.service_revision.0
    );
    let _ = serde_json::to_writer(&mut body, &head.digest);
    let _ = write!(body, ",\"total\":{},\"endpoints\":", head.total);
    body.extend_from_slice(endpoints);
    let _ = write!(body, ",\"protection_active\":{}}}", head.protection_active);
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(service: &str) -> ServiceKey {
        ServiceKey::new("acme", "prod", service).unwrap()
    }

    #[test]
    fn an_entry_serves_only_its_own_revision_and_a_later_one_replaces_it() {
        let cache = ReadCache::new(1_000);
        cache.put(&key("api"), Revision(5), Bytes::from_static(b"[1]"));
        assert_eq!(cache.get(&key("api"), Revision(5)).as_deref(), Some(&b"[1]"[..]));
        assert_eq!(
            cache.get(&key("api"), Revision(6)),
            None,
            "a newer set is not the kept one"
        );
        assert_eq!(cache.get(&key("web"), Revision(5)), None);
        cache.put(&key("api"), Revision(7), Bytes::from_static(b"[1,2]"));
        assert_eq!(cache.get(&key("api"), Revision(5)), None);
        assert_eq!(cache.get(&key("api"), Revision(7)).as_deref(), Some(&b"[1,2]"[..]));
        cache.put(&key("api"), Revision(6), Bytes::from_static(b"[old]"));
        assert_eq!(
            cache.get(&key("api"), Revision(7)).as_deref(),
            Some(&b"[1,2]"[..]),
            "never goes back"
        );
        assert_eq!(cache.usage(), (1, 5));
    }

    #[test]
    fn the_byte_budget_holds_by_dropping_other_services() {
        let cache = ReadCache::new(10);
        cache.put(&key("a"), Revision(1), Bytes::from_static(b"12345"));
        cache.put(&key("b"), Revision(1), Bytes::from_static(b"12345"));
        assert_eq!(cache.usage(), (2, 10));
        cache.put(&key("c"), Revision(1), Bytes::from_static(b"123"));
        let (services, bytes) = cache.usage();
        assert!(bytes <= 10 && services == 2, "{services} services, {bytes} bytes");
        assert!(cache.get(&key("c"), Revision(1)).is_some());
        cache.put(&key("huge"), Revision(1), Bytes::from(vec![b'x'; 11]));
        assert_eq!(
            cache.get(&key("huge"), Revision(1)),
            None,
            "over the whole budget: not kept"
        );
    }

    #[test]
    fn the_body_is_exactly_the_serialised_reply() {
        use muster_core::api::SnapshotReply;
        let reply: SnapshotReply = serde_json::from_value(serde_json::json!({
            "revision": 42, "service_revision": 40,
            "digest": serde_json::to_value(Digest::EMPTY).unwrap(),
            "total": 0, "endpoints": [], "protection_active": true,
        }))
        .unwrap();
        let head = ReplyHead {
            at: reply.revision,
            service_revision: reply.service_revision,
            digest: reply.digest,
            total: reply.total,
            protection_active: reply.protection_active,
        };
        let body = reply_body(&head, &serde_json::to_vec(&reply.endpoints).unwrap());
        assert_eq!(String::from_utf8(body).unwrap(), serde_json::to_string(&reply).unwrap());
    }
}
