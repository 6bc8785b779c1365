//! Invariants of federation (SPEC G2), with two regions: region b mirrors region a's
//! `acme/prod/*` read-only.
//!
//! - **Provenance**: every set b mirrors, on every replica, is region a's set for that
//!   service exactly as a's committed history left it at the set's source revision (same
//!   records — endpoints, incarnations, per-endpoint revisions — same digest, same
//!   revision). a's sets are rebuilt here by walking a's history in revision order. And b's
//!   cursor never names a revision a has not committed.
//! - **No resurrection, no loss**: after the final heal and quiescence, b's mirror is a's
//!   current sets exactly (a set a released is absent or empty in b), at a's revision.
//! - **Both regions keep committing during a region partition**: checked by the driver
//!   ([`crate::regions`]) with [`local_commits`].
//! - **b changes a mirrored endpoint only by a's history**: provenance covers every change
//!   (an expiry, eviction or drain end of b's touching a mirrored record breaks it), and
//!   [`local_write_check`] runs on every apply of every replica: a local put of an
//!   instance b did not hold locally, while b mirrors it, is a local write the registry
//!   should have refused (`mirrored_read_only`).
//! - **Cursors are monotonic** on every replica (per process: a restarted node replays).
//! - **Replicas agree on the mirror table**: at one applied index, one table.

use std::collections::BTreeMap;
use std::sync::Arc;

use muster_core::federation::ImportScope;
use muster_core::{Event, Label, Revision, ServiceKey, ServiceSnapshot};
use muster_registry::{Applied, Registry};

use super::history::History;
use crate::observer::hash_json;

/// One import of a mirror table, for its hash: region, import, cursor, last heard from,
/// and each set's (source revision, hash).
type ImportSummary = (String, String, u64, u64, Vec<(u64, u64)>);

/// One replica of b's mirror, as sampled between steps.
#[derive(Debug, Clone)]
pub struct MirrorSample {
    /// The node.
    pub node: u64,
    /// Which start of it.
    pub process: u64,
    /// Its applied log index.
    pub applied_index: u64,
    /// The import's cursor (0: nothing mirrored yet).
    pub cursor: u64,
    /// Each mirrored set: (service, source revision, hash of the set).
    pub sets: Vec<(ServiceKey, u64, u64)>,
    /// A hash of the whole mirror table.
    pub table: u64,
}

impl MirrorSample {
    /// Reads one replica's mirror of `import` from `region`.
    pub fn read(
        node: u64,
        process: u64,
        applied_index: u64,
        registry: &Registry,
        region: &Label,
        import: &ImportScope,
    ) -> MirrorSample {
        let held = registry.mirror(region, import);
        let sets: Vec<(ServiceKey, u64, u64)> = held
            .map(|m| {
                m.sets
                    .values()
                    .map(|s| (s.key().clone(), s.revision().0, hash_json(&**s)))
                    .collect()
            })
            .unwrap_or_default();
        let table: Vec<ImportSummary> = registry
            .mirrors()
            .map(|m| {
                let sets = m.sets.values().map(|s| (s.revision().0, hash_json(&**s))).collect();
                (
                    m.region.to_string(),
                    m.import.to_string(),
                    m.cursor.0,
                    m.synced_at_ms,
                    sets,
                )
            })
            .collect();
        MirrorSample {
            node,
            process,
            applied_index,
            cursor: held.map_or(0, |m| m.cursor.0),
            table: hash_json(&table),
            sets,
        }
    }
}

/// What the federation invariants track.
pub struct Federation {
    import: ImportScope,
    /// a's sets of the import as of the last revision walked.
    sets: BTreeMap<ServiceKey, ServiceSnapshot>,
    /// (service, source revision) → hash of a's set as that revision left it.
    at: BTreeMap<(ServiceKey, u64), u64>,
    /// a's history is walked up to here.
    walked: u64,
    /// (node, process) → the highest cursor seen.
    cursors: BTreeMap<(u64, u64), u64>,
    /// Applied index → (mirror table hash, node that showed it first).
    tables: BTreeMap<u64, (u64, u64)>,
}

impl Federation {
    /// Nothing walked, nothing sampled.
    pub fn new(import: ImportScope) -> Federation {
        Federation {
            import,
            sets: BTreeMap::new(),
            at: BTreeMap::new(),
            walked: 0,
            cursors: BTreeMap::new(),
            tables: BTreeMap::new(),
        }
    }

    /// Walks region a's history as far as it is known without gaps.
    pub fn walk_source(&mut self, history: &History) -> Result<(), String> {
        while let Some(record) = history.revisions.get(&(self.walked + 1)) {
            let revision = self.walked + 1;
            for update in record.updates.iter().filter(|u| self.import.covers(&u.key)) {
                let set = self
                    .sets
                    .entry(update.key.clone())
                    .or_insert_with(|| ServiceSnapshot::empty(update.key.clone()));
                // A service a released (empty, history gone) and made again starts anew.
                if update.prev_revision == Revision::ZERO && set.is_empty() {
                    *set = ServiceSnapshot::empty(update.key.clone());
                }
                set.apply(update)
                    .map_err(|e| format!("region a's own history does not follow on at revision {revision}: {e}"))?;
                self.at
                    .insert((update.key.clone(), update.revision.0), hash_json(&*set));
            }
            self.walked = revision;
        }
        Ok(())
    }

    /// One replica of b, between steps: its cursor never steps back within a process, and
    /// never passes what region a committed.
    pub fn check_cursor(&mut self, sample: &MirrorSample) -> Result<(), String> {
        let n = sample.node;
        let last = self.cursors.insert((n, sample.process), sample.cursor);
        if let Some(last) = last
            && sample.cursor < last
        {
            return Err(format!(
                "b's n{n} (process {}): the mirror's cursor stepped back from {last} to {}",
                sample.process, sample.cursor
            ));
        }
        if sample.cursor > self.walked {
            return Err(format!(
                "b's n{n} holds cursor {}, beyond anything region a committed ({})",
                sample.cursor, self.walked
            ));
        }
        Ok(())
    }

    /// One replica of b, between steps: every mirrored set is a's at its source revision.
    pub fn check_provenance(&self, sample: &MirrorSample) -> Result<(), String> {
        for (key, revision, hash) in &sample.sets {
            if self.at.get(&(key.clone(), *revision)) != Some(hash) {
                let known = self.at.contains_key(&(key.clone(), *revision));
                return Err(format!(
                    "b's n{} mirrors {key} at source revision {revision}, {}",
                    sample.node,
                    if known {
                        "but its records or digest differ from region a's set at that revision"
                    } else {
                        "a revision at which region a never changed that service"
                    }
                ));
            }
        }
        Ok(())
    }

    /// One replica of b, between steps: at one applied index, one mirror table.
    pub fn check_agreement(&mut self, sample: &MirrorSample) -> Result<(), String> {
        match self.tables.get(&sample.applied_index) {
            None => {
                self.tables.insert(sample.applied_index, (sample.table, sample.node));
            }
            Some((seen, other)) if *seen != sample.table => {
                return Err(format!(
                    "at applied index {} b's n{} holds another mirror table than n{other}",
                    sample.applied_index, sample.node
                ));
            }
            Some(_) => {}
        }
        Ok(())
    }

    /// After the final heal and quiescence: `sample` is exactly region a's current sets of
    /// the import (`source`, read from a settled node) at a's revision `source_revision`.
    pub fn check_final(
        &self,
        sample: &MirrorSample,
        source: &[Arc<ServiceSnapshot>],
        source_revision: u64,
    ) -> Result<(), String> {
        let n = sample.node;
        if sample.cursor != source_revision {
            return Err(format!(
                "b's n{n} ends at cursor {}, region a at revision {source_revision}",
                sample.cursor
            ));
        }
        let wanted: BTreeMap<&ServiceKey, u64> = source
            .iter()
            .filter(|s| self.import.covers(s.key()) && !s.is_empty())
            .map(|s| (s.key(), hash_json(&**s)))
            .collect();
        let empty: BTreeMap<&ServiceKey, u64> = source
            .iter()
            .filter(|s| s.is_empty())
            .map(|s| (s.key(), hash_json(&**s)))
            .collect();
        for (key, revision, hash) in &sample.sets {
            match (wanted.get(key), empty.get(key)) {
                (Some(want), _) if want == hash => {}
                (Some(_), _) => {
                    return Err(format!(
                        "b's n{n} ends with {key} at source revision {revision}, not region a's current set"
                    ));
                }
                (None, Some(want)) if want == hash => {}
                (None, _) if self.sets.get(key).is_some_and(ServiceSnapshot::is_empty) => {}
                (None, _) => {
                    return Err(format!(
                        "b's n{n} ends with {key} (source revision {revision}), which region a does not hold: \
                         a resurrection"
                    ));
                }
            }
        }
        for key in wanted.keys() {
            if !sample.sets.iter().any(|(k, _, _)| k == *key) {
                return Err(format!("b's n{n} ends without {key}, which region a holds: a loss"));
            }
        }
        Ok(())
    }
}

/// On every apply of a local command: no change to an instance the replica did not hold
/// locally while a peer region's mirror holds it (the registry refuses those writes,
/// `mirrored_read_only`), but for a registration, which makes the region's own record of
/// the same name beside the mirror.
pub fn local_write_check(registry: &Registry, applied: &Applied) -> Result<(), String> {
    if applied.updates.is_empty() || registry.mirrors().next().is_none() {
        return Ok(());
    }
    let before = Revision(applied.revision.0.saturating_sub(1));
    for update in &applied.updates {
        let Ok(held) = registry.snapshot_at(&update.key, before) else {
            continue;
        };
        for event in &update.events {
            let Event::Put { endpoint } = event else { continue };
            if endpoint.observation.reason == "registered" {
                continue;
            }
            let local_before = held.as_ref().is_some_and(|s| s.get(&endpoint.instance).is_some());
            let owner = registry
                .mirrored(&update.key)
                .find(|(_, set)| set.get(&endpoint.instance).is_some())
                .map(|(import, _)| import.region.clone());
            if let (false, Some(region)) = (local_before, owner) {
                return Err(format!(
                    "revision {} wrote {}/{}#{} locally, an instance mirrored from region {region}",
                    applied.revision, update.key, endpoint.instance, endpoint.incarnation.0
                ));
            }
        }
    }
    Ok(())
}

/// How many revisions of `history` first applied within `from_ms..=to_ms` were local
/// writes: they changed a service or the leases (a mirror's commit changes neither).
pub fn local_commits(history: &History, from_ms: u64, to_ms: u64) -> usize {
    let mut previous_leases = None;
    let mut count = 0;
    for record in history.revisions.values() {
        let leases_changed = previous_leases.is_some_and(|p| p != &record.leases_after);
        let local = !record.updates.is_empty() || leases_changed || previous_leases.is_none();
        if local && (from_ms..=to_ms).contains(&record.first_applied_ms) {
            count += 1;
        }
        previous_leases = Some(&record.leases_after);
    }
    count
}
