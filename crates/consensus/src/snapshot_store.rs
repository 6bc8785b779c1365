//! Where the state machine keeps its snapshots: the data directory's files, or a simulated
//! disk. Both keep the same rules (newer wins, the previous snapshot kept); only the
//! directory needs a blocking task, which a deterministic simulation cannot have.

use std::io;
use std::path::Path;
use std::sync::Arc;

use crate::sim_disk::SimSnapshots;
use crate::snapshot_files::{Candidate, SnapshotFiles, Stored};
use crate::types::LogId;

/// The last log index covered by a snapshot that is on disk (or on the simulated disk), shared
/// by the state machine, which advances it when a snapshot is stored or loaded, and the log
/// store, which never purges past it.
///
/// openraft 0.9 purges the log as soon as it hands a snapshot to the state machine, without
/// waiting for the snapshot to be written (a follower installing the leader's snapshot, in
/// particular): a crash in between left the log purged past every snapshot on disk, and
/// the node could not open again (found by the deterministic simulation). A purge beyond
/// this index waits until a snapshot covering it is stored. (Skipping it instead is not
/// safe: openraft also truncates around an installed snapshot, and a skipped purge leaves a
/// hole between the last purged entry and the next one.)
///
/// The wait runs inside openraft's core, so it must end as soon as its answer is known: when
/// the snapshot is stored, and also when storing it failed (a damaged transfer, a full disk),
/// which [`DurableSnapshot::failed`] records; only a store that hangs meets [`PURGE_WAIT`].
#[derive(Debug, Clone, Default)]
pub(crate) struct DurableSnapshot(Arc<Durable>);

#[derive(Debug, Default)]
struct Durable {
    /// The index covered by a snapshot on disk (0: none).
    index: std::sync::atomic::AtomicU64,
    /// A snapshot this store was given could not be stored: openraft stops on the error, and a
    /// purge waiting for that snapshot fails at once instead of holding the core.
    failed: std::sync::atomic::AtomicBool,
}

impl DurableSnapshot {
    /// The index covered (0: no snapshot).
    pub(crate) fn index(&self) -> u64 {
        self.0.index.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Records that a snapshot up to `last_log_id` is on disk.
    pub(crate) fn advance(&self, last_log_id: Option<LogId>) {
        let index = last_log_id.map_or(0, |id| id.index);
        self.0.index.fetch_max(index, std::sync::atomic::Ordering::AcqRel);
    }

    /// Records that a snapshot could not be read or stored: a purge waiting for it fails now.
    pub(crate) fn failed(&self) {
        self.0.failed.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Whether purging the log up to `index` keeps every entry after the snapshot on disk.
    pub(crate) fn allows_purge(&self, index: u64) -> bool {
        index <= self.index()
    }

    /// Waits until purging up to `index` is safe, polling every millisecond (a poll, not a
    /// notification, so a simulation on a paused clock stays deterministic); `Err` once a
    /// snapshot failed to store, or after [`PURGE_WAIT`]: the caller fails rather than purge.
    pub(crate) async fn until_purge_allowed(&self, index: u64) -> Result<(), io::Error> {
        let deadline = tokio::time::Instant::now() + PURGE_WAIT;
        while !self.allows_purge(index) {
            if self.0.failed.load(std::sync::atomic::Ordering::Acquire) {
                return Err(io::Error::other(format!(
                    "the snapshot covering log index {index} could not be stored; not purging"
                )));
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(io::Error::other(format!(
                    "no snapshot covering log index {index} was stored within {PURGE_WAIT:?}; not purging"
                )));
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        Ok(())
    }
}

/// How long a purge waits for the snapshot that covers it: far beyond writing one (a
/// fraction of a second for a large registry); past it the store has failed.
const PURGE_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// A state machine's snapshot store. Cheap to clone.
#[derive(Clone)]
pub(crate) enum SnapshotStore {
    /// `snapshot.json` and its previous file in the data directory.
    Files(Arc<SnapshotFiles>),
    /// A simulated disk.
    Sim(SimSnapshots),
}

impl SnapshotStore {
    /// The data directory's snapshot files.
    pub(crate) fn open_dir(dir: &Path) -> Result<SnapshotStore, io::Error> {
        Ok(SnapshotStore::Files(Arc::new(SnapshotFiles::open(dir)?)))
    }

    /// The stored snapshots, newest first.
    pub(crate) fn candidates(&self) -> Result<Vec<Candidate>, io::Error> {
        match self {
            SnapshotStore::Files(files) => files.candidates(),
            SnapshotStore::Sim(sim) => Ok(sim
                .candidates()
                .into_iter()
                .zip(["the simulated current snapshot", "the simulated previous snapshot"])
                .map(|(bytes, name)| Candidate { name, bytes: Ok(bytes) })
                .collect()),
        }
    }

    /// Records which snapshot was loaded (`None`: none was) and its last log id.
    pub(crate) fn loaded(&self, name: Option<&str>, last_log_id: Option<LogId>) {
        if let SnapshotStore::Files(files) = self {
            files.loaded(name, last_log_id);
        }
    }

    /// The current snapshot's bytes.
    pub(crate) fn read_current(&self) -> Result<Option<Vec<u8>>, io::Error> {
        match self {
            SnapshotStore::Files(files) => files.read_current(),
            SnapshotStore::Sim(sim) => Ok(sim.read_current()),
        }
    }

    /// Stores a snapshot taken at `last_log_id`; it becomes current only if newer. The bytes
    /// come back, moved and not copied: a snapshot can be large.
    pub(crate) async fn store(
        &self,
        last_log_id: Option<LogId>,
        bytes: Vec<u8>,
    ) -> (Result<Stored, io::Error>, Vec<u8>) {
        match self {
            SnapshotStore::Files(files) => {
                let files = Arc::clone(files);
                let written = tokio::task::spawn_blocking(move || {
                    let stored = files.store(last_log_id, &bytes);
                    (stored, bytes)
                });
                // A panicked write lost the bytes too; the caller fails on the error.
                written
                    .await
                    .unwrap_or_else(|gone| (Err(io::Error::other(gone)), Vec::new()))
            }
            SnapshotStore::Sim(sim) => {
                let stored = sim
                    .store(last_log_id, bytes.clone())
                    .await
                    .map(|current| match current {
                        true => Stored::Current,
                        false => Stored::Superseded,
                    });
                (stored, bytes)
            }
        }
    }
}
