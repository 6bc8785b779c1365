//! The Raft state machine: the registry, applied in log order, and its snapshots on disk.
//!
//! The registry lives in memory (shared with readers through an `RwLock`); durability comes
//! from the log plus snapshots. A snapshot is the registry's exported state with the last
//! applied log id, membership and the [`AppliedBatches`] table, written through
//! [`SnapshotFiles`] (a private temporary file, fsync, a newer-wins swap, the previous
//! snapshot kept). On open the newest readable snapshot is loaded, and openraft replays the
//! log after it.
//!
//! # Correctness
//! - A snapshot is a consistent cut (SPEC R6): [`RaftStateMachine::get_snapshot_builder`]
//!   runs between applies and takes its view then (a clone of the registry and of the batch
//!   table, with the last applied log id), and `build_snapshot` — which openraft runs in a
//!   task of its own, concurrently with later applies — only serialises that view. Entries
//!   applied after the builder was taken are in neither the snapshot's state nor its
//!   `last_log_id`, so replaying the log after it applies each exactly once.
//! - A batch is applied at most once whatever number of times it reaches the log (retries
//!   after a lost reply or a leader change): [`AppliedBatches`]. The observer hears of each
//!   of its proposals once too, applied or refused ([`ApplyObserver::judged`]); a retry is
//!   answered from the table and reported to nobody.

use std::io::{self, Cursor};
use std::sync::{Arc, RwLock};

use muster_registry::{Registry, RegistryConfig, RegistryState};
use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine, Snapshot, SnapshotMeta};
use openraft::{AnyError, BasicNode, EntryPayload, ErrorSubject, ErrorVerb, StorageIOError, StoredMembership};
use serde::{Deserialize, Serialize};

use crate::applied_batches::{AppliedBatches, Seen};
use crate::node::{ApplyObserver, Judged};
#[cfg(doc)]
use crate::snapshot_files::SnapshotFiles;
use crate::snapshot_store::{DurableSnapshot, SnapshotStore};
use crate::types::{Batch, Entry, LogId, Outcome, StorageError, TypeConfig};

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
    /// Absent in snapshots written before batches had ids.
    #[serde(default)]
    batches: AppliedBatches,
}

/// A snapshot file's metadata alone: what sending a stored snapshot needs. The rest of the
/// file is skipped by the parser (serde ignores unknown fields) without building the state,
/// which would be a transient copy of the whole registry on the leader (SPEC R5).
#[derive(Deserialize)]
struct StoredMeta {
    meta: SnapshotMeta<u64, BasicNode>,
}

/// Which stored snapshot a state machine opened on, and why the newer ones were passed over.
#[derive(Debug, Default)]
pub(crate) struct Opened {
    /// The file loaded (`None`: none was, the state starts empty).
    pub(crate) loaded: Option<&'static str>,
    /// Each snapshot passed over, with the reason: `"snapshot.json: its checksum ..."`.
    pub(crate) passed_over: Vec<String>,
}

pub(crate) struct StateMachine {
    shared: Arc<Shared>,
    config: RegistryConfig,
    last_applied: Option<LogId>,
    membership: StoredMembership<u64, BasicNode>,
    batches: AppliedBatches,
    files: SnapshotStore,
    durable: DurableSnapshot,
    /// The size of the last snapshot this node built: the next one's buffer is sized from it
    /// (see [`SnapshotBuilder::build_snapshot`]).
    built_bytes: Arc<std::sync::atomic::AtomicUsize>,
    opened: Opened,
    /// Entries up to this index are applied again at start ([`Judged::replayed`]).
    replay_until: u64,
}

/// A log entry raises the registry format past what this build applies.
#[derive(Debug, thiserror::Error)]
#[error(
    "the log raises the registry format to {0}; this build applies formats up to {max}: start this node on a newer build",
    max = muster_core::FORMAT
)]
struct FormatTooNew(u32);

/// The format a batch raises the registry to, if this build cannot apply it.
fn newer_format(batch: &Batch) -> Option<u32> {
    batch.proposals.iter().find_map(|proposal| match &proposal.command {
        muster_registry::Command::RaiseFormat(raise) if raise.format > muster_core::FORMAT => Some(raise.format),
        _ => None,
    })
}

fn sm_error(verb: ErrorVerb, e: impl std::error::Error + 'static) -> StorageError {
    StorageIOError::new(ErrorSubject::StateMachine, verb, AnyError::new(&e)).into()
}

fn snapshot_error(verb: ErrorVerb, e: impl std::error::Error + 'static) -> StorageError {
    StorageIOError::new(ErrorSubject::Snapshot(None), verb, AnyError::new(&e)).into()
}

impl StateMachine {
    /// Loads the newest readable snapshot from `dir`, if there is one.
    #[cfg(test)]
    pub(crate) fn open(
        dir: &std::path::Path,
        config: RegistryConfig,
        observer: Arc<dyn ApplyObserver>,
    ) -> Result<StateMachine, io::Error> {
        StateMachine::open_in(SnapshotStore::open_dir(dir)?, config, observer)
    }

    /// Loads the newest readable snapshot from `files`, if there is one; one that cannot be
    /// read is passed over (and named in [`StateMachine::opened`]), so the caller can tell
    /// whether the log reaches back to what was loaded.
    pub(crate) fn open_in(
        files: SnapshotStore,
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
            batches: AppliedBatches::default(),
            files: files.clone(),
            durable: DurableSnapshot::default(),
            built_bytes: Arc::default(),
            opened: Opened::default(),
            replay_until: 0,
        };
        for candidate in files.candidates()? {
            let restored = candidate.bytes.and_then(|bytes| machine.restore(&bytes));
            match restored {
                Ok(()) => {
                    files.loaded(Some(candidate.name), machine.last_applied);
                    machine.durable.advance(machine.last_applied);
                    machine.opened.loaded = Some(candidate.name);
                    return Ok(machine);
                }
                Err(error) => {
                    tracing::error!(file = candidate.name, %error, "a stored snapshot cannot be loaded; trying the one before it");
                    machine.opened.passed_over.push(format!("{}: {error}", candidate.name));
                }
            }
        }
        files.loaded(None, None);
        machine.shared.observer.reset(&machine.shared.read());
        Ok(machine)
    }

    /// Which snapshot was loaded, and which were passed over and why.
    pub(crate) fn opened(&self) -> &Opened {
        &self.opened
    }

    /// The index of the last entry the loaded snapshot covers (0: none).
    pub(crate) fn snapshot_index(&self) -> u64 {
        self.last_applied.map_or(0, |id| id.index)
    }

    /// Marks entries up to `index` (the committed id the log held at open) as replayed.
    pub(crate) fn replays_until(&mut self, index: u64) {
        self.replay_until = index;
    }

    /// What the log store consults before it purges.
    pub(crate) fn durable_snapshot(&self) -> DurableSnapshot {
        self.durable.clone()
    }

    pub(crate) fn shared(&self) -> Arc<Shared> {
        Arc::clone(&self.shared)
    }

    /// Checks, stores and loads a snapshot received from the leader (parsed once).
    async fn install(&mut self, meta: &SnapshotMeta<u64, BasicNode>, bytes: Vec<u8>) -> Result<(), StorageError> {
        crate::snapshot_seal::unseal(&bytes).map_err(|e| snapshot_error(ErrorVerb::Read, e))?;
        let stored: StoredSnapshot = serde_json::from_slice(&bytes).map_err(|e| snapshot_error(ErrorVerb::Read, e))?;
        if stored.meta.last_log_id != meta.last_log_id {
            let mismatch = io::Error::other("snapshot data does not match its metadata");
            return Err(snapshot_error(ErrorVerb::Read, mismatch));
        }
        let bytes = store(&self.files, &self.durable, meta.last_log_id, bytes)
            .await
            .map_err(|e| sm_error(ErrorVerb::Write, e))?;
        self.load(stored).map_err(|e| sm_error(ErrorVerb::Write, e))?;
        self.built_bytes
            .store(bytes.len(), std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    fn restore(&mut self, bytes: &[u8]) -> Result<(), io::Error> {
        crate::snapshot_seal::unseal(bytes).map_err(io::Error::other)?;
        let stored: StoredSnapshot = serde_json::from_slice(bytes).map_err(io::Error::other)?;
        self.load(stored)?;
        self.built_bytes
            .store(bytes.len(), std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Makes a parsed snapshot the state machine's state.
    fn load(&mut self, stored: StoredSnapshot) -> Result<(), io::Error> {
        let registry = Registry::import(self.config.clone(), stored.state).map_err(io::Error::other)?;
        let mut current = self.shared.write();
        *current = registry;
        self.last_applied = stored.meta.last_log_id;
        self.membership = stored.meta.last_membership;
        self.batches = stored.batches;
        self.shared.applied_index.store(
            self.last_applied.map_or(0, |id| id.index),
            std::sync::atomic::Ordering::Release,
        );
        self.shared.observer.reset(&current);
        Ok(())
    }

    /// Applies one batch, unless it is a retry of one already applied (then its first
    /// verdicts) or a late copy of an older one (then nothing).
    fn apply_batch(&mut self, registry: &mut Registry, log_index: u64, batch: Batch) -> Outcome {
        let seen = batch.id.map(|id| (id, self.batches.seen(id)));
        match seen {
            Some((_, Seen::Retry(outcome))) => return outcome,
            Some((_, Seen::Stale)) => return Outcome(Vec::new()),
            Some((_, Seen::New)) | None => {}
        }
        let origin = batch.id.map(|id| id.origin);
        let outcome = Outcome(
            batch
                .proposals
                .iter()
                .enumerate()
                .map(|(position, proposal)| {
                    let result = registry.apply(&proposal.command, &proposal.meta);
                    if let Ok(applied) = &result {
                        self.shared.observer.applied(registry, applied);
                    }
                    self.shared.observer.judged(&Judged {
                        log_index,
                        position,
                        origin,
                        command: &proposal.command,
                        meta: &proposal.meta,
                        result: &result,
                        replayed: log_index <= self.replay_until,
                    });
                    result
                })
                .collect(),
        );
        if let Some((id, _)) = seen {
            let at_ms = batch
                .proposals
                .iter()
                .map(|proposal| proposal.meta.at_ms)
                .max()
                .unwrap_or(0);
            self.batches.record(id, log_index, at_ms, outcome.clone());
        }
        outcome
    }
}

/// Builds a snapshot of the view taken when the builder was: later applies cannot change it.
pub(crate) struct SnapshotBuilder {
    registry: Registry,
    batches: AppliedBatches,
    last_applied: Option<LogId>,
    membership: StoredMembership<u64, BasicNode>,
    files: SnapshotStore,
    durable: DurableSnapshot,
    built_bytes: Arc<std::sync::atomic::AtomicUsize>,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
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
            state: self.registry.export(),
            batches: self.batches.clone(),
        };
        // Sized from the last one (plus an eighth): a buffer grown by doubling holds up to twice
        // the snapshot, and three times while it is copied; the soak's memory is flat only if
        // a snapshot's transient is one buffer the allocator hands back whole (SPEC R5).
        let last = self.built_bytes.load(std::sync::atomic::Ordering::Relaxed);
        let bytes = crate::snapshot_seal::sealed(last + last / 8, |bytes| serde_json::to_writer(bytes, &stored))
            .map_err(|e| snapshot_error(ErrorVerb::Write, e))?;
        drop(stored);
        self.built_bytes
            .store(bytes.len(), std::sync::atomic::Ordering::Relaxed);
        let bytes = store(&self.files, &self.durable, meta.last_log_id, bytes)
            .await
            .map_err(|e| snapshot_error(ErrorVerb::Write, e))?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(bytes)),
        })
    }
}

/// Writes a snapshot's bytes (newer wins, [`SnapshotFiles::store`]) and hands them back; a
/// failure is recorded in `durable` (a purge waiting for this snapshot then fails at once).
async fn store(
    files: &SnapshotStore,
    durable: &DurableSnapshot,
    last_log_id: Option<LogId>,
    bytes: Vec<u8>,
) -> Result<Vec<u8>, io::Error> {
    let (stored, bytes) = files.store(last_log_id, bytes).await;
    let stored = stored.inspect_err(|_| durable.failed())?;
    if stored == crate::snapshot_files::Stored::Current {
        durable.advance(last_log_id);
    }
    if stored == crate::snapshot_files::Stored::Superseded {
        tracing::debug!(
            ?last_log_id,
            "a newer snapshot is already on disk; this one was discarded"
        );
    }
    Ok(bytes)
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
        let shared = Arc::clone(&self.shared);
        let mut registry = shared.write();
        for entry in entries {
            // A log raising the registry format past what this build applies was written by
            // a cluster this node's build cannot follow (architecture.md "Formats and
            // versions"): it stops, as on a storage failure, before applying anything of it,
            // rather than go on under other rules than its peers.
            if let EntryPayload::Normal(batch) = &entry.payload
                && let Some(format) = newer_format(batch)
            {
                return Err(sm_error(ErrorVerb::Write, FormatTooNew(format)));
            }
            self.last_applied = Some(entry.log_id);
            self.shared
                .applied_index
                .store(entry.log_id.index, std::sync::atomic::Ordering::Release);
            outcomes.push(match entry.payload {
                EntryPayload::Blank => Outcome(Vec::new()),
                EntryPayload::Normal(batch) => self.apply_batch(&mut registry, entry.log_id.index, batch),
                EntryPayload::Membership(membership) => {
                    self.membership = StoredMembership::new(Some(entry.log_id), membership);
                    Outcome(Vec::new())
                }
            });
        }
        Ok(outcomes)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        // The view is taken here, between applies (see the module's Correctness section).
        SnapshotBuilder {
            registry: self.shared.read().clone(),
            batches: self.batches.clone(),
            last_applied: self.last_applied,
            membership: self.membership.clone(),
            files: self.files.clone(),
            durable: self.durable.clone(),
            built_bytes: Arc::clone(&self.built_bytes),
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
        let installed = self.install(meta, snapshot.into_inner()).await;
        if installed.is_err() {
            // openraft purged the log up to this snapshot already, and that purge waits for
            // it to be stored: it must fail now, not hold the core (snapshot_store).
            self.durable.failed();
        }
        installed
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        let Some(bytes) = self
            .files
            .read_current()
            .map_err(|e| snapshot_error(ErrorVerb::Read, e))?
        else {
            return Ok(None);
        };
        // Never sent on if it rotted on disk since it was written: this node stops on the error
        // (another leads), rather than every follower that needs it stopping on installing it.
        crate::snapshot_seal::unseal(&bytes).map_err(|e| snapshot_error(ErrorVerb::Read, e))?;
        let stored: StoredMeta = serde_json::from_slice(&bytes).map_err(|e| snapshot_error(ErrorVerb::Read, e))?;
        Ok(Some(Snapshot {
            meta: stored.meta,
            snapshot: Box::new(Cursor::new(bytes)),
        }))
    }
}
