//! Which expired leases self-preservation lets go (SPEC H5), read from the registry: a lease
//! is held when removing any serving endpoint attached to it is held; all of a lease's
//! endpoints leave together or none does.

use std::collections::HashMap;

use muster_core::{LeaseId, ServiceKey};
use muster_health::preservation::{Brakes, Counts, Verdict, in_routing};
use muster_registry::Registry;

use crate::io::Note;

/// The leases of `expired` the brakes allow, in order, and a note for each one held.
/// Removals let go are counted in the brakes; serving endpoints already let go in this
/// batch are subtracted from their service's count (the registry does not show them gone
/// yet), and so are `pending` removals other duties proposed that have not committed.
pub(crate) fn unprotected(
    registry: &Registry,
    brakes: &mut Brakes,
    pending: &HashMap<ServiceKey, usize>,
    expired: Vec<LeaseId>,
    now_ms: u64,
) -> (Vec<LeaseId>, Vec<Note>) {
    let mut notes = Vec::new();
    if expired.is_empty() {
        return (expired, notes);
    }
    // Each touched service's counts, computed once however many of its endpoints expire.
    let mut service_counts: HashMap<ServiceKey, Counts> = HashMap::new();
    let mut leaving: HashMap<ServiceKey, usize> = HashMap::new();
    let mut allowed = Vec::with_capacity(expired.len());
    'leases: for id in expired {
        let endpoints: Vec<(ServiceKey, bool)> = registry
            .lease_endpoints(id)
            .into_iter()
            .map(|(key, instance)| {
                let snapshot = registry.snapshot(&key);
                let serving = snapshot
                    .as_ref()
                    .and_then(|s| s.get(&instance).map(|e| in_routing(e.serving)))
                    .unwrap_or(false);
                service_counts.entry(key.clone()).or_insert_with(|| {
                    let counts = snapshot.map_or_else(Counts::default, |s| Counts::of(s.iter().map(|e| e.serving)));
                    Counts {
                        serving: counts.serving.saturating_sub(pending.get(&key).copied().unwrap_or(0)),
                        ..counts
                    }
                });
                (key, serving)
            })
            .collect();
        let mut this_lease: HashMap<&ServiceKey, usize> = HashMap::new();
        for (key, _) in endpoints.iter().filter(|(_, serving)| *serving) {
            let mut counts = service_counts.get(key).copied().unwrap_or_default();
            counts.serving = counts.serving.saturating_sub(leaving.get(key).copied().unwrap_or(0));
            let in_this_lease = this_lease.get(key).copied().unwrap_or(0);
            if let Verdict::Hold(why) = brakes.check(key, counts, in_this_lease, now_ms) {
                notes.push(Note::ExpiryHeld {
                    lease: id,
                    key: key.clone(),
                    reason: why,
                });
                continue 'leases;
            }
            *this_lease.entry(key).or_insert(0) += 1;
        }
        for (key, count) in this_lease {
            for _ in 0..count {
                brakes.record(key, now_ms);
            }
            *leaving.entry(key.clone()).or_insert(0) += count;
        }
        allowed.push(id);
    }
    (allowed, notes)
}
