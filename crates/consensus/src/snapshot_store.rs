//! Where the state machine keeps its snapshots: the data directory's files, or a simulated
//! disk. Both keep the same rules (newer wins, the previous snapshot kept); only the
//! directory needs a blocking task, which a deterministic simulation cannot have.

use std::io;
use std::path::Path;
use std::sync::Arc;

use crate::sim_disk::SimSnapshots;
use crate::snapshot_files::{SnapshotFiles, Stored};
use crate::types::LogId;

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
    pub(crate) fn candidates(&self) -> Result<Vec<Vec<u8>>, io::Error> {
        match self {
            SnapshotStore::Files(files) => files.candidates(),
            SnapshotStore::Sim(sim) => Ok(sim.candidates()),
        }
    }

    /// Records the last log id of the snapshot that was loaded.
    pub(crate) fn loaded(&self, last_log_id: Option<LogId>) {
        if let SnapshotStore::Files(files) = self {
            files.loaded(last_log_id);
        }
    }

    /// The current snapshot's bytes.
    pub(crate) fn read_current(&self) -> Result<Option<Vec<u8>>, io::Error> {
        match self {
            SnapshotStore::Files(files) => files.read_current(),
            SnapshotStore::Sim(sim) => Ok(sim.read_current()),
        }
    }

    /// Stores a snapshot taken at `last_log_id`; it becomes current only if newer.
    pub(crate) async fn store(&self, last_log_id: Option<LogId>, bytes: &[u8]) -> Result<Stored, io::Error> {
        match self {
            SnapshotStore::Files(files) => {
                let files = Arc::clone(files);
                let bytes = bytes.to_vec();
                tokio::task::spawn_blocking(move || files.store(last_log_id, &bytes))
                    .await
                    .map_err(io::Error::other)?
            }
            SnapshotStore::Sim(sim) => Ok(match sim.store(last_log_id, bytes.to_vec()).await? {
                true => Stored::Current,
                false => Stored::Superseded,
            }),
        }
    }
}
