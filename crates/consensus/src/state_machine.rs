//! The Raft state machine: the registry, applied in log order, and its snapshots on disk.
//!
//! The registry lives in memory (shared with readers through an `RwLock`); durability comes
//! from the log plus snapshots. A snapshot is the registry's exported state with the last
//! applied log id and membership, written to `snapshot.json` atomically (temporary file,
//! fsync, rename, fsync of the directory). On open the snapshot is loaded, and openraft
//! replays the log after it.

use std::io::{self, Cursor, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use muster_registry::{Registry, RegistryConfig, RegistryState};
use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine, Snapshot, SnapshotMeta};
use openraft::{AnyError, BasicNode, EntryPayload, ErrorSubject, ErrorVerb, StorageIOError, StoredMembership};
use serde::{Deserialize, Serialize};

use crate::node::ApplyObserver;
use crate::types::{Entry, LogId, Outcome, StorageError, TypeConfig};

/// What readers share with the state machine.
pub(crate) struct Shared {
    pub(crate) registry: RwLock<Registry>,
    pub(crate) observer: Arc<dyn ApplyObserver>,
    /// The index of the last applied log entry (Raft's metrics report it late).
    pub(crate) applied_index: std::sync::atomic::AtomicU64,
}

impl Shared {
    pub(crate) fn write(&self) -> std::sync::RwLockWriteGuard<'_, Registry> {
        self.registry.write().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn read(&self) -> std::sync::RwLockReadGuard<'_, Registry> {
        self.registry.read().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A snapshot file's contents.
#[derive(Serialize, Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMeta<u64, BasicNode>,
    state: RegistryState,
}

pub(crate) struct StateMachine {
    shared: Arc<Shared>,
    config: RegistryConfig,
    last_applied: Option<LogId>,
    membership: StoredMembership<u64, BasicNode>,
    dir: PathBuf,
}

const SNAPSHOT_FILE: &str = "snapshot.json";

fn sm_error(verb: ErrorVerb, e: impl std::error::Error + 'static) -> StorageError {
    StorageIOError::new(ErrorSubject::StateMachine, verb, AnyError::new(&e)).into()
}

fn snapshot_error(verb: ErrorVerb, e: impl std::error::Error + 'static) -> StorageError {
    StorageIOError::new(ErrorSubject::Snapshot(None), verb, AnyError::new(&e)).into()
}

impl StateMachine {
    /// Loads the last snapshot from `dir`, if there is one.
    pub(crate) fn open(
        dir: &Path,
        config: RegistryConfig,
        observer: Arc<dyn ApplyObserver>,
    ) -> Result<StateMachine, io::Error> {
        let mut machine = StateMachine {
            shared: Arc::new(Shared {
                registry: RwLock::new(Registry::new(config.clone())),
                observer,
                applied_index: std::sync::atomic::AtomicU64::new(0),
            }),
            config,
            last_applied: None,
            membership: StoredMembership::default(),
            dir: dir.to_owned(),
        };
        if let Some(bytes) = read_snapshot_file(dir)? {
            machine.restore(&bytes)?;
        } else {
            machine.shared.observer.reset(&machine.shared.read());
        }
        Ok(machine)
    }

    pub(crate) fn shared(&self) -> Arc<Shared> {
        Arc::clone(&self.shared)
    }

    fn restore(&mut self, bytes: &[u8]) -> Result<(), io::Error> {
        let stored: StoredSnapshot = serde_json::from_slice(bytes).map_err(io::Error::other)?;
        let registry = Registry::import(self.config.clone(), stored.state).map_err(io::Error::other)?;
        let mut current = self.shared.write();
        *current = registry;
        self.last_applied = stored.meta.last_log_id;
        self.membership = stored.meta.last_membership;
        self.shared.applied_index.store(
            self.last_applied.map_or(0, |id| id.index),
            std::sync::atomic::Ordering::Release,
        );
        self.shared.observer.reset(&current);
        Ok(())
    }
}

fn read_snapshot_file(dir: &Path) -> Result<Option<Vec<u8>>, io::Error> {
    match std::fs::read(dir.join(SNAPSHOT_FILE)) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Replaces `snapshot.json` atomically: a crash leaves the old file or the new one, whole.
fn write_snapshot_file(dir: &Path, bytes: &[u8]) -> Result<(), io::Error> {
    let temporary = dir.join("snapshot.json.tmp");
    let mut file = std::fs::File::create(&temporary)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&temporary, dir.join(SNAPSHOT_FILE))?;
    std::fs::File::open(dir)?.sync_all()
}

/// Builds snapshots from a consistent read of the registry.
pub(crate) struct SnapshotBuilder {
    shared: Arc<Shared>,
    last_applied: Option<LogId>,
    membership: StoredMembership<u64, BasicNode>,
    dir: PathBuf,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let state = self.shared.read().export();
        let snapshot_id = self
            .last_applied
            .map_or_else(|| "empty".to_owned(), |id| format!("{}-{}", id.leader_id, id.index));
        let meta = SnapshotMeta {
            last_log_id: self.last_applied,
            last_membership: self.membership.clone(),
            snapshot_id,
        };
        let stored = StoredSnapshot {
            meta: meta.clone(),
            state,
        };
        let bytes = serde_json::to_vec(&stored).map_err(|e| snapshot_error(ErrorVerb::Write, e))?;
        let dir = self.dir.clone();
        let written = bytes.clone();
        tokio::task::spawn_blocking(move || write_snapshot_file(&dir, &written))
            .await
            .map_err(|e| snapshot_error(ErrorVerb::Write, e))?
            .map_err(|e| snapshot_error(ErrorVerb::Write, e))?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(bytes)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership<u64, BasicNode>), StorageError> {
        Ok((self.last_applied, self.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Outcome>, StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let mut outcomes = Vec::new();
        let mut registry = self.shared.write();
        for entry in entries {
            self.last_applied = Some(entry.log_id);
            self.shared
                .applied_index
                .store(entry.log_id.index, std::sync::atomic::Ordering::Release);
            outcomes.push(match entry.payload {
                EntryPayload::Blank => Outcome(Vec::new()),
                EntryPayload::Normal(batch) => Outcome(
                    batch
                        .0
                        .iter()
                        .map(|proposal| {
                            let result = registry.apply(&proposal.command, &proposal.meta);
                            if let Ok(applied) = &result {
                                self.shared.observer.applied(&registry, applied);
                            }
                            result
                        })
                        .collect(),
                ),
                EntryPayload::Membership(membership) => {
                    self.membership = StoredMembership::new(Some(entry.log_id), membership);
                    Outcome(Vec::new())
                }
            });
        }
        Ok(outcomes)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        SnapshotBuilder {
            shared: Arc::clone(&self.shared),
            last_applied: self.last_applied,
            membership: self.membership.clone(),
            dir: self.dir.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let bytes = snapshot.into_inner();
        let stored: StoredSnapshot = serde_json::from_slice(&bytes).map_err(|e| snapshot_error(ErrorVerb::Read, e))?;
        if stored.meta.last_log_id != meta.last_log_id {
            let mismatch = io::Error::other("snapshot data does not match its metadata");
            return Err(snapshot_error(ErrorVerb::Read, mismatch));
        }
        let dir = self.dir.clone();
        let written = bytes.clone();
        tokio::task::spawn_blocking(move || write_snapshot_file(&dir, &written))
            .await
            .map_err(|e| sm_error(ErrorVerb::Write, e))?
            .map_err(|e| sm_error(ErrorVerb::Write, e))?;
        self.restore(&bytes).map_err(|e| sm_error(ErrorVerb::Write, e))
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        let Some(bytes) = read_snapshot_file(&self.dir).map_err(|e| snapshot_error(ErrorVerb::Read, e))? else {
            return Ok(None);
        };
        let stored: StoredSnapshot = serde_json::from_slice(&bytes).map_err(|e| snapshot_error(ErrorVerb::Read, e))?;
        Ok(Some(Snapshot {
            meta: stored.meta,
            snapshot: Box::new(Cursor::new(bytes)),
        }))
    }
}
