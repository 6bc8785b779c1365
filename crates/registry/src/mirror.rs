//! Mirrors of peer regions (SPEC G2): the sets this region imports, held exactly as their
//! own region's history made them.
//!
//! A mirror is replicated state like any other: the importing region's leader watches the
//! peer and proposes [`Mirror`] commands; every replica applies them alike. A mirrored set
//! changes only by its source region's updates, each of which must continue the set held
//! (`prev_revision`) and end at the digest the source stated, or by a complete replacement
//! from a fresh snapshot. Nothing here expires, evicts or times out: a mirrored endpoint's
//! lease is its own region's business. Mirrored sets live apart from local services, so
//! local reads and watches never mix another region's endpoints in; only a failover policy's
//! decision adds them to what DNS and xDS serve (SPEC G1; `muster_federation`'s `tiers`).

use std::collections::BTreeMap;
use std::sync::Arc;

use muster_core::federation::ImportScope;
use muster_core::{InstanceId, Label, Rejection, Revision, ServiceKey, ServiceSnapshot, ServiceUpdate};
use serde::{Deserialize, Serialize};

use crate::applied::{Applied, Unchanged};
use crate::command::Command;
use crate::registry::Registry;

/// Bring one import of one peer region up to the peer's revision `cursor`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mirror {
    /// The source region.
    pub region: Label,
    /// The import this is for.
    pub import: ImportScope,
    /// The source region's global revision everything up to which is now applied (updates
    /// past it may come along: a watch's cursor moves only at its `progress` frames).
    pub cursor: Revision,
    /// What changed.
    pub change: MirrorChange,
}

/// What a [`Mirror`] command carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MirrorChange {
    /// The import's complete sets at `cursor` (a fresh snapshot): any set held for the
    /// import and not among them is forgotten (it no longer exists in the source region).
    Replace(Vec<ServiceSnapshot>),
    /// The source region's updates after the held cursor, in revision order.
    Updates(Vec<ServiceUpdate>),
    /// Nothing changed up to `cursor`: the source region was heard from.
    Progress,
    /// The import is no longer configured: its sets are forgotten (an operator's removal,
    /// proposed by the region's leader; nothing else ever drops a mirrored set).
    Forget,
}

/// One import's mirrored sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorImport {
    /// The source region.
    pub region: Label,
    /// The import.
    pub import: ImportScope,
    /// Everything of the import up to this source revision is applied.
    pub cursor: Revision,
    /// When the source region was last heard from (the committing command's time, ms).
    pub synced_at_ms: u64,
    /// The mirrored sets, by service.
    pub sets: BTreeMap<ServiceKey, Arc<ServiceSnapshot>>,
}

/// Every import of every peer region, by (region, import).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct MirrorTable {
    imports: BTreeMap<(Label, ImportScope), MirrorImport>,
}

impl MirrorTable {
    pub(crate) fn from_imports(imports: impl IntoIterator<Item = MirrorImport>) -> MirrorTable {
        MirrorTable {
            imports: imports
                .into_iter()
                .map(|i| ((i.region.clone(), i.import.clone()), i))
                .collect(),
        }
    }

    /// Every import, in (region, import) order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &MirrorImport> {
        self.imports.values()
    }

    fn get_mut(&mut self, region: &Label, import: &ImportScope) -> Option<&mut MirrorImport> {
        self.imports.get_mut(&(region.clone(), import.clone()))
    }

    /// One import, if anything was ever mirrored for it.
    pub(crate) fn get(&self, region: &Label, import: &ImportScope) -> Option<&MirrorImport> {
        self.imports.get(&(region.clone(), import.clone()))
    }

    /// The region that mirrors `instance` of `key`, if one does.
    pub(crate) fn owner_of(&self, key: &ServiceKey, instance: &InstanceId) -> Option<&Label> {
        if self.imports.is_empty() {
            return None;
        }
        self.imports
            .values()
            .find(|i| i.sets.get(key).is_some_and(|set| set.get(instance).is_some()))
            .map(|i| &i.region)
    }

    /// Applies a mirror command, or refuses it changing nothing. Returns the services whose
    /// set changed, sorted (a `Progress`, or updates all already applied, change none).
    pub(crate) fn apply(&mut self, command: &Mirror, at_ms: u64) -> Result<Vec<ServiceKey>, Rejection> {
        if command.change == MirrorChange::Forget {
            let key = (command.region.clone(), command.import.clone());
            return Ok(self
                .imports
                .remove(&key)
                .map(|forgotten| forgotten.sets.into_keys().collect())
                .unwrap_or_default());
        }
        let gap = |detail: String| Rejection::MirrorGap {
            region: command.region.clone(),
            import: command.import.to_string(),
            detail,
        };
        let held_cursor = self
            .get(&command.region, &command.import)
            .map_or(Revision::ZERO, |i| i.cursor);
        // A cursor never steps back: not for a deposed leader's late proposal, and not for a
        // fresh snapshot read from a peer node that lags what is held (a follower behind the
        // leader the updates came from), which would bring back endpoints the peer removed.
        if command.cursor < held_cursor {
            return Err(gap(format!(
                "cursor {} is behind the held cursor {held_cursor}",
                command.cursor
            )));
        }
        // Heard from, nothing changed: no set is copied.
        if let (MirrorChange::Progress, Some(import)) =
            (&command.change, self.get_mut(&command.region, &command.import))
        {
            import.cursor = command.cursor;
            import.synced_at_ms = at_ms;
            return Ok(Vec::new());
        }
        let held = self.get(&command.region, &command.import);
        let mut sets = held.map(|i| i.sets.clone()).unwrap_or_default();
        let changed = match &command.change {
            MirrorChange::Replace(snapshots) => {
                for snapshot in snapshots {
                    self.check_scope(command, snapshot.key())?;
                    if snapshot.revision() > command.cursor {
                        return Err(gap(format!(
                            "{} is at revision {}, after the cursor {}",
                            snapshot.key(),
                            snapshot.revision(),
                            command.cursor
                        )));
                    }
                }
                let replaced: BTreeMap<ServiceKey, Arc<ServiceSnapshot>> = snapshots
                    .iter()
                    .map(|s| (s.key().clone(), Arc::new(s.clone())))
                    .collect();
                // Changed: every set gone, new, or not the same as the one held.
                let mut changed: Vec<ServiceKey> = sets
                    .keys()
                    .chain(replaced.keys())
                    .filter(|key| sets.get(*key) != replaced.get(*key))
                    .cloned()
                    .collect();
                changed.sort();
                changed.dedup();
                sets = replaced;
                changed
            }
            MirrorChange::Updates(updates) => {
                let mut changed = Vec::new();
                for update in updates {
                    self.check_scope(command, &update.key)?;
                    if apply_update(&mut sets, update).map_err(|e| gap(e.to_string()))? {
                        changed.push(update.key.clone());
                    }
                }
                changed.sort();
                changed.dedup();
                changed
            }
            MirrorChange::Progress | MirrorChange::Forget => Vec::new(),
        };
        self.imports.insert(
            (command.region.clone(), command.import.clone()),
            MirrorImport {
                region: command.region.clone(),
                import: command.import.clone(),
                cursor: command.cursor,
                synced_at_ms: at_ms,
                sets,
            },
        );
        Ok(changed)
    }

    fn check_scope(&self, command: &Mirror, key: &ServiceKey) -> Result<(), Rejection> {
        if command.import.covers(key) {
            Ok(())
        } else {
            Err(Rejection::MirrorOutOfScope {
                region: command.region.clone(),
                import: command.import.to_string(),
                key: Box::new(key.clone()),
            })
        }
    }
}

/// Applies one source update to the held sets: it must continue the held set's lineage and
/// end at the stated digest. A set the source made anew (`prev_revision` 0, after it was
/// released there) replaces a held set only when that set is empty, as the source's was.
fn apply_update(
    sets: &mut BTreeMap<ServiceKey, Arc<ServiceSnapshot>>,
    update: &ServiceUpdate,
) -> Result<bool, muster_core::GapError> {
    let set = sets
        .entry(update.key.clone())
        .or_insert_with(|| Arc::new(ServiceSnapshot::empty(update.key.clone())));
    if update.prev_revision == Revision::ZERO && set.is_empty() && set.revision() < update.revision {
        *set = Arc::new(ServiceSnapshot::empty(update.key.clone()));
    }
    Arc::make_mut(set).apply(update)
}

impl Registry {
    pub(crate) fn with_mirrors(mut self, mirrors: MirrorTable) -> Registry {
        self.mirrors = mirrors;
        self
    }

    /// Every import mirrored from a peer region, in (region, import) order.
    pub fn mirrors(&self) -> impl Iterator<Item = &MirrorImport> {
        self.mirrors.iter()
    }

    /// One import's mirror, if it ever applied anything.
    pub fn mirror(&self, region: &Label, import: &ImportScope) -> Option<&MirrorImport> {
        self.mirrors.get(region, import)
    }

    /// `key`'s set as mirrored from each peer region that holds it: (import, set).
    pub fn mirrored(&self, key: &ServiceKey) -> impl Iterator<Item = (&MirrorImport, &Arc<ServiceSnapshot>)> {
        self.mirrors
            .iter()
            .filter_map(move |i| i.sets.get(key).map(|set| (i, set)))
    }

    /// A local write addressed to an instance only a peer region holds is refused: only that
    /// region's history changes it (SPEC G2). A registration is always this region's own
    /// record (instance names such as `api-0` recur across regions), and so is any write to
    /// an instance registered here.
    pub(crate) fn check_not_mirrored(&self, command: &Command) -> Result<(), Rejection> {
        if matches!(command, Command::Register(_) | Command::RegisterNext(_)) {
            return Ok(());
        }
        let Some((key, instance, _)) = command.target() else {
            return Ok(());
        };
        let Some(region) = self.mirrors.owner_of(key, instance) else {
            return Ok(());
        };
        if self.snapshot(key).is_some_and(|set| set.get(instance).is_some()) {
            return Ok(());
        }
        Err(Rejection::MirroredReadOnly {
            key: Box::new(key.clone()),
            instance: instance.clone(),
            region: region.clone(),
        })
    }

    /// Applies a [`Mirror`]: a change to any mirrored set commits at a new revision (no local
    /// service changes, so it carries no updates); a mirror that only heard from its source
    /// records that and spends none.
    pub(crate) fn apply_mirror(&mut self, command: &Mirror, at_ms: u64) -> Result<Applied, Rejection> {
        let mirrored = self.mirrors.apply(command, at_ms)?;
        if mirrored.is_empty() {
            return Ok(Applied {
                revision: self.revision,
                updates: Vec::new(),
                lease: None,
                unchanged: Some(Unchanged::MirrorCurrent),
                released: Vec::new(),
                mirrored,
            });
        }
        self.revision = self.revision.next();
        let released = self.compact_now();
        Ok(Applied {
            revision: self.revision,
            updates: Vec::new(),
            lease: None,
            unchanged: None,
            released,
            mirrored,
        })
    }
}

#[cfg(test)]
mod tests {
    use muster_core::{Digest, Event};

    use super::*;

    fn key(service: &str) -> ServiceKey {
        ServiceKey::new("default", "prod", service).unwrap()
    }

    fn mirror(cursor: u64, change: MirrorChange) -> Mirror {
        Mirror {
            region: Label::new("region", "a").unwrap(),
            import: ImportScope::parse("default", "prod/*").unwrap(),
            cursor: Revision(cursor),
            change,
        }
    }

    #[test]
    fn an_update_that_does_not_continue_the_held_set_is_refused_and_changes_nothing() {
        let mut table = MirrorTable::default();
        let set = ServiceSnapshot::from_endpoints(key("api"), Revision(4), []);
        table.apply(&mirror(5, MirrorChange::Replace(vec![set])), 10).unwrap();
        let skipped = ServiceUpdate {
            key: key("api"),
            revision: Revision(9),
            prev_revision: Revision(7),
            digest: Digest::EMPTY,
            events: Vec::new(),
        };
        let before = table.clone();
        let refused = table.apply(&mirror(9, MirrorChange::Updates(vec![skipped])), 20);
        assert_eq!(refused.unwrap_err().code(), "mirror_gap");
        assert_eq!(table, before);
    }

    #[test]
    fn forget_drops_the_import_and_names_its_sets_and_an_unknown_one_changes_nothing() {
        let mut table = MirrorTable::default();
        let set = ServiceSnapshot::from_endpoints(key("api"), Revision(4), []);
        table.apply(&mirror(5, MirrorChange::Replace(vec![set])), 10).unwrap();
        let forgotten = table.apply(&mirror(5, MirrorChange::Forget), 20).unwrap();
        assert_eq!(forgotten, [key("api")]);
        assert!(table.iter().next().is_none());
        assert!(table.apply(&mirror(0, MirrorChange::Forget), 30).unwrap().is_empty());
    }

    #[test]
    fn a_service_outside_the_import_is_refused() {
        let mut table = MirrorTable::default();
        let other = ServiceSnapshot::from_endpoints(ServiceKey::new("default", "dev", "api").unwrap(), Revision(1), []);
        let refused = table.apply(&mirror(1, MirrorChange::Replace(vec![other])), 0);
        assert_eq!(refused.unwrap_err().code(), "mirror_out_of_scope");
        assert!(table.iter().next().is_none());
    }

    #[test]
    fn an_older_cursor_is_refused_so_a_deposed_leaders_mirror_cannot_step_back() {
        let mut table = MirrorTable::default();
        table.apply(&mirror(8, MirrorChange::Progress), 0).unwrap();
        let refused = table.apply(&mirror(6, MirrorChange::Progress), 1);
        assert_eq!(refused.unwrap_err().code(), "mirror_gap");
        let held = table.iter().next().unwrap();
        assert_eq!((held.cursor, held.synced_at_ms), (Revision(8), 0));
    }

    fn record(instance: &str, revision: u64) -> muster_core::Endpoint {
        serde_json::from_value(serde_json::json!({
            "instance": instance, "incarnation": 1, "addresses": [{"ip": "10.0.0.1"}], "ports": [],
            "locality": {}, "serving": "ready", "weight": 100, "labels": {}, "revision": revision,
            "provenance": {"registrar": "anonymous", "policy_revision": 0},
            "observation": {"actor": "app", "principal": "anonymous", "at_ms": 0, "reason": ""}
        }))
        .unwrap()
    }

    fn meta() -> crate::CommandMeta {
        crate::CommandMeta {
            at_ms: 10,
            principal: muster_core::Principal::new("anonymous").unwrap(),
            actor: muster_core::Actor::Owner,
        }
    }

    #[test]
    fn a_local_write_to_a_mirrored_instance_is_refused_and_the_mirror_survives_a_snapshot() {
        let mut registry = Registry::new(crate::RegistryConfig::default());
        let set = ServiceSnapshot::from_endpoints(key("api"), Revision(7), [Arc::new(record("a-1", 7))]);
        let mirrored = registry
            .apply(
                &Command::Mirror(mirror(9, MirrorChange::Replace(vec![set.clone()]))),
                &meta(),
            )
            .unwrap();
        assert_eq!((mirrored.revision, mirrored.updates.len()), (Revision(1), 0));
        let register = crate::Register {
            target: crate::Target {
                key: key("api"),
                instance: InstanceId::new("a-1").unwrap(),
                incarnation: muster_core::Incarnation(2),
            },
            spec: serde_json::from_str(r#"{"addresses":[{"ip":"10.0.0.9"}]}"#).unwrap(),
            lease: crate::LeaseSpec::None,
            expected_revision: None,
        };
        let a_1 = register.target.clone();
        let writes = [
            Command::SetServing(crate::SetServing {
                target: a_1.clone(),
                state: muster_core::ServingState::NotServing,
                reason: "no".into(),
                expected_revision: None,
            }),
            Command::Drain(crate::Drain {
                target: a_1.clone(),
                reason: "no".into(),
                grace_ms: None,
                expected_revision: None,
            }),
            Command::Deregister(crate::Deregister {
                target: a_1.clone(),
                expected_revision: None,
            }),
            Command::Evict(crate::Evict {
                key: key("api"),
                instance: a_1.instance.clone(),
                expected_revision: None,
            }),
        ];
        for write in &writes {
            let refused = registry.apply(write, &meta()).unwrap_err();
            assert_eq!(refused.code(), "mirrored_read_only", "{write:?}");
        }
        assert!(registry.snapshot(&key("api")).is_none(), "nothing local was written");
        assert_eq!(registry.mirrored(&key("api")).next().unwrap().1.digest(), set.digest());
        // A registration of the same name is this region's own record, beside the mirror.
        registry.apply(&Command::Register(register), &meta()).unwrap();
        assert_eq!(registry.snapshot(&key("api")).unwrap().len(), 1);
        // The mirror is part of the replicated state: a snapshot carries it.
        let restored = Registry::import(crate::RegistryConfig::default(), registry.export()).unwrap();
        let (import, held) = restored.mirrored(&key("api")).next().unwrap();
        assert_eq!((import.cursor, held.digest()), (Revision(9), set.digest()));
        assert_eq!(restored.export(), registry.export());
    }

    #[test]
    fn a_snapshot_from_a_peer_node_behind_the_held_cursor_is_refused_so_removed_endpoints_do_not_reappear() {
        let mut table = MirrorTable::default();
        let now = ServiceSnapshot::from_endpoints(key("api"), Revision(7), []);
        table.apply(&mirror(9, MirrorChange::Replace(vec![now])), 10).unwrap();
        let older = ServiceSnapshot::from_endpoints(key("web"), Revision(3), []);
        let before = table.clone();
        let refused = table.apply(&mirror(4, MirrorChange::Replace(vec![older])), 20);
        assert_eq!(refused.unwrap_err().code(), "mirror_gap");
        assert_eq!(table, before);
    }

    #[test]
    fn a_wrong_digest_is_refused() {
        let mut table = MirrorTable::default();
        let endpoint: muster_core::Endpoint = serde_json::from_value(serde_json::json!({
            "instance": "a-1", "incarnation": 1, "addresses": [{"ip": "10.0.0.1"}], "ports": [],
            "locality": {}, "serving": "ready", "weight": 100, "labels": {}, "revision": 3,
            "provenance": {"registrar": "anonymous", "policy_revision": 0},
            "observation": {"actor": "app", "principal": "anonymous", "at_ms": 0, "reason": ""}
        }))
        .unwrap();
        let update = ServiceUpdate {
            key: key("api"),
            revision: Revision(3),
            prev_revision: Revision::ZERO,
            digest: Digest::EMPTY,
            events: vec![Event::Put {
                endpoint: Arc::new(endpoint),
            }],
        };
        let refused = table.apply(&mirror(3, MirrorChange::Updates(vec![update])), 0);
        assert_eq!(refused.unwrap_err().code(), "mirror_gap");
    }
}
