//! The Raft log and vote on a [`SimDisk`]: the simulation's stand-in for the redb store,
//! with the same write ordering and durability contract, in a tokio task instead of a thread.
//!
//! ```text
//!  append / save_vote / truncate / purge ──▶ view (this process's memory, at once)
//!                                        └─▶ writer task ──(disk's write delay)──▶ SimDisk
//!                                                         then the callback / reply, in order
//! ```
//!
//! # Correctness
//! - Reads are served from the view, which holds every operation issued (as openraft
//!   requires: an appended entry is readable before it is flushed).
//! - The disk takes operations in issue order, one at a time, and openraft hears of an
//!   append only after the disk took it: a crash ([`SimDisk::power_cut`]) loses only
//!   operations that were never acknowledged.
//! - After a failed write the writer fails every later one (openraft stops on the first
//!   failure anyway): what is on the disk stays a prefix of what was issued.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::sync::{Arc, Mutex};

use openraft::storage::{LogFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{ErrorSubject, ErrorVerb, Vote};
use tokio::sync::{mpsc, oneshot};

use crate::log_store::{COMMITTED, LAST_PURGED, VOTE, decode, encode, storage_error};
use crate::sim_disk::{DiskWrite, SimDisk};
use crate::snapshot_store::DurableSnapshot;
use crate::types::{Entry, LogId, StorageError, TypeConfig};

/// Who hears that a write is done.
enum Done {
    Flushed(LogFlushed<TypeConfig>),
    Reply(oneshot::Sender<Result<(), io::Error>>),
    Nobody,
}

/// What this process believes its log holds (every operation issued).
#[derive(Default)]
struct View {
    log: BTreeMap<u64, Entry>,
    last_purged: Option<LogId>,
    vote: Option<Vote<u64>>,
    committed: Option<LogId>,
}

/// The log store of one process on a simulated disk. Cheap to clone.
#[derive(Clone)]
pub(crate) struct SimLogStore {
    view: Arc<Mutex<View>>,
    writer: mpsc::UnboundedSender<(DiskWrite, Done)>,
    /// Purges stop at the snapshot on the disk, as the real store's do.
    purge_floor: Option<DurableSnapshot>,
}

impl SimLogStore {
    /// Opens the log on `disk` in a new power cycle and starts its writer task (on the
    /// current tokio runtime).
    pub(crate) fn open(disk: &SimDisk) -> Result<SimLogStore, io::Error> {
        let power = disk.power();
        let view = {
            let state = disk.state();
            let mut view = View::default();
            for (index, bytes) in &state.log {
                view.log.insert(*index, decode(bytes)?);
            }
            let meta = |key: &str| state.meta.get(key);
            view.vote = meta(VOTE).map(|b| decode(b)).transpose()?;
            view.committed = meta(COMMITTED)
                .map(|b| decode::<Option<LogId>>(b))
                .transpose()?
                .flatten();
            view.last_purged = meta(LAST_PURGED).map(|b| decode(b)).transpose()?;
            view
        };
        let (writer, mut ops) = mpsc::unbounded_channel::<(DiskWrite, Done)>();
        let disk = disk.clone();
        tokio::spawn(async move {
            // Fail-stop: after one failed write every later one fails too, so the disk
            // keeps a prefix of what was issued (a later `committed` or append landing
            // after a lost one would leave a hole below the commit index).
            let mut failed = false;
            while let Some((write, done)) = ops.recv().await {
                let delay = disk.write_delay();
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                let result = if failed {
                    Err(io::Error::other("the log writer stopped after a failed write"))
                } else {
                    disk.write(power, write)
                };
                failed |= result.is_err();
                match done {
                    Done::Flushed(callback) => callback.log_io_completed(result),
                    Done::Reply(reply) => {
                        let _ = reply.send(result);
                    }
                    Done::Nobody => {}
                }
            }
        });
        Ok(SimLogStore {
            view: Arc::new(Mutex::new(view)),
            writer,
            purge_floor: None,
        })
    }

    /// The index of the committed id the log holds (0: none).
    pub(crate) fn committed_index(&self) -> u64 {
        self.view().committed.map_or(0, |id| id.index)
    }

    /// The index of the last entry purged from the log (0: none).
    pub(crate) fn last_purged_index(&self) -> u64 {
        self.view().last_purged.map_or(0, |id| id.index)
    }

    /// From now on, purges never go past the snapshot `durable` says is on the disk.
    pub(crate) fn guard_purges(&mut self, durable: DurableSnapshot) {
        self.purge_floor = Some(durable);
    }

    fn view(&self) -> std::sync::MutexGuard<'_, View> {
        self.view.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn issue(&self, write: DiskWrite, done: Done) -> Result<(), io::Error> {
        self.writer
            .send((write, done))
            .map_err(|_| io::Error::other("the log writer has stopped"))
    }

    async fn write_and_wait(&self, write: DiskWrite) -> Result<(), io::Error> {
        let (reply, wait) = oneshot::channel();
        self.issue(write, Done::Reply(reply))?;
        wait.await.map_err(|_| io::Error::other("the log writer has stopped"))?
    }
}

impl RaftLogReader<TypeConfig> for SimLogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let start = match range.start_bound() {
            Bound::Included(&n) => Bound::Included(n),
            Bound::Excluded(&n) => Bound::Excluded(n),
            Bound::Unbounded => Bound::Unbounded,
        };
        let end = match range.end_bound() {
            Bound::Included(&n) => Bound::Included(n),
            Bound::Excluded(&n) => Bound::Excluded(n),
            Bound::Unbounded => Bound::Unbounded,
        };
        Ok(self.view().log.range((start, end)).map(|(_, e)| e.clone()).collect())
    }
}

impl RaftLogStorage<TypeConfig> for SimLogStore {
    type LogReader = SimLogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let view = self.view();
        let last_log_id = view.log.values().next_back().map(|e| e.log_id).or(view.last_purged);
        Ok(LogState {
            last_purged_log_id: view.last_purged,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), StorageError> {
        self.view().vote = Some(*vote);
        self.write_and_wait(DiskWrite::Meta(VOTE, encode(vote)))
            .await
            .map_err(|e| storage_error(ErrorSubject::Vote, ErrorVerb::Write, e))
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, StorageError> {
        Ok(self.view().vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        // Not awaited, as on redb: queued behind the appends it covers.
        self.view().committed = committed;
        self.issue(DiskWrite::Meta(COMMITTED, encode(&committed)), Done::Nobody)
            .map_err(|e| storage_error(ErrorSubject::Store, ErrorVerb::Write, e))
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.view().committed)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let mut encoded = Vec::new();
        {
            let mut view = self.view();
            for entry in entries {
                encoded.push((entry.log_id.index, encode(&entry)));
                view.log.insert(entry.log_id.index, entry);
            }
        }
        if encoded.is_empty() {
            callback.log_io_completed(Ok(()));
            return Ok(());
        }
        self.issue(DiskWrite::Append(encoded), Done::Flushed(callback))
            .map_err(|e| storage_error(ErrorSubject::Logs, ErrorVerb::Write, e))
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let _removed = self.view().log.split_off(&log_id.index);
        self.write_and_wait(DiskWrite::Truncate(log_id.index))
            .await
            .map_err(|e| storage_error(ErrorSubject::Logs, ErrorVerb::Delete, e))
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        if let Some(floor) = &self.purge_floor {
            floor
                .until_purge_allowed(log_id.index)
                .await
                .map_err(|e| storage_error(ErrorSubject::Logs, ErrorVerb::Delete, e))?;
        }
        {
            let mut view = self.view();
            view.log = view.log.split_off(&(log_id.index + 1));
            view.last_purged = Some(log_id);
        }
        let last_purged = encode(&log_id);
        self.write_and_wait(DiskWrite::Purge {
            upto: log_id.index,
            last_purged,
        })
        .await
        .map_err(|e| storage_error(ErrorSubject::Logs, ErrorVerb::Delete, e))
    }
}
