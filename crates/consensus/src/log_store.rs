//! The Raft log and vote on redb, written by one thread that turns many appends into one
//! fsynced transaction (group commit).
//!
//! ```text
//!  append(entries, callback) ─┐
//!  append(entries, callback) ─┼─▶ channel ─▶ writer thread: one write transaction for all
//!  save_vote / truncate ──────┘                queued ops, one commit (fsync), then every
//!                                              callback in order
//! ```
//!
//! openraft acknowledges a client write only after its entry's `LogFlushed` callback fires,
//! which here is after the commit that holds it: nothing is acknowledged before it is on disk.
//!
//! # Correctness
//! - Operations are applied in the order they were issued (one channel, one thread), and a
//!   transaction is atomic, so a crash leaves a prefix of the issued operations — but for the
//!   saved committed id, which may be up to [`HOLD_COMMITTED`] older (see [`write_loop`]).
//! - The newest entries are also kept in memory ([`crate::log_tail`]): replication reads them
//!   from there instead of decoding them back from the file.
//! - A reader asking the file for entries beyond what is durable first waits for the writer
//!   to drain, so it never misses an entry openraft believes appended.

use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};

use openraft::storage::{LogFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{AnyError, ErrorSubject, ErrorVerb, StorageIOError, Vote};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use crate::log_tail::LogTail;
use crate::snapshot_store::DurableSnapshot;
use crate::types::{Entry, LogId, StorageError, TypeConfig};

/// redb's page cache for the log file. redb's default is 1 GiB, and its cache keeps every
/// page read until that bound: every node reads its whole log at open (the integrity check)
/// and a leader reads it back for a lagging follower, so a node could hold its whole live
/// log in memory (about 11 MiB in the soak; SPEC R6). The log is read back only at open and
/// for catch-up, and its recent entries are in memory anyway (`log_tail`): 1 MiB keeps the
/// B-tree's inner pages and a batch's writes, and the rest comes from the OS's file cache.
/// (Register's instruction count is the same at 1 MiB as at 4 MiB, within 0.3%.)
const LOG_CACHE_BYTES: usize = 1 << 20;

pub(crate) const LOG: TableDefinition<'_, u64, &[u8]> = TableDefinition::new("log");
pub(crate) const META: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("meta");
// The metadata keys, shared with the simulated store (`sim_log_store`).
pub(crate) const VOTE: &str = "vote";
pub(crate) const COMMITTED: &str = "committed";
pub(crate) const LAST_PURGED: &str = "last_purged";

/// How long a save of the committed id waits for a transaction to ride with ([`write_loop`]).
const HOLD_COMMITTED: std::time::Duration = std::time::Duration::from_secs(1);

/// Ops drained into one transaction at most: bounds a transaction's size and the latency of
/// the first op in it, while leaving room for hundreds of concurrent writers per fsync.
const MAX_OPS_PER_COMMIT: usize = 4096;

enum WriteOp {
    Append {
        entries: Vec<(u64, Vec<u8>)>,
        last: u64,
        done: LogFlushed<TypeConfig>,
    },
    Meta {
        key: &'static str,
        value: Vec<u8>,
        done: Reply,
    },
    Truncate {
        from: u64,
        done: Reply,
    },
    Purge {
        upto: u64,
        last_purged: Vec<u8>,
        done: Reply,
    },
    Barrier {
        done: Reply,
    },
}

type Reply = tokio::sync::oneshot::Sender<Result<(), io::Error>>;

/// The log store. Cheap to clone: clones share the database and the writer.
#[derive(Clone)]
pub(crate) struct LogStore {
    // Field order matters: a clone drops its database handle before its sender, so when the
    // writer sees the channel close, its own handle is the last one.
    db: Arc<Database>,
    writer: mpsc::Sender<WriteOp>,
    thread: Arc<Mutex<Option<std::thread::JoinHandle<()>>>>,
    /// The highest index whose append is durable.
    durable: Arc<AtomicU64>,
    /// The highest index handed to the writer.
    issued: Arc<AtomicU64>,
    cache: Arc<Mutex<Cache>>,
    /// The newest entries, for replication.
    tail: Arc<Mutex<LogTail>>,
    /// Purges stop at the snapshot on disk, once the state machine is attached.
    purge_floor: Option<DurableSnapshot>,
}

#[derive(Default)]
struct Cache {
    last_log: Option<LogId>,
    last_purged: Option<LogId>,
}

pub(crate) fn io_error(e: impl std::error::Error + Send + Sync + 'static) -> io::Error {
    io::Error::other(e)
}

pub(crate) fn storage_error(
    subject: ErrorSubject<u64>,
    verb: ErrorVerb,
    e: impl std::error::Error + 'static,
) -> StorageError {
    StorageIOError::new(subject, verb, AnyError::new(&e)).into()
}

// JSON, not a compact binary format: the command types use `skip_serializing_if` and
// internally tagged enums for a readable API, which non-self-describing formats cannot read
// back. A registration encodes in about a microsecond; the fsync dominates anyway.
pub(crate) fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, io::Error> {
    serde_json::from_slice(bytes).map_err(io_error)
}

pub(crate) fn encode<T: serde::Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).expect("log entries and Raft metadata always serialise")
}

impl LogStore {
    /// Opens or creates the log database and starts its writer thread.
    pub(crate) fn open(path: &Path) -> Result<LogStore, io::Error> {
        // A repair found at an earlier open is refused at every open after it: redb keeps its
        // repair, so the file alone no longer shows that entries were dropped.
        let damaged = damage_marker(path);
        if let Ok(why) = std::fs::read_to_string(&damaged) {
            return Err(io::Error::other(format!(
                "{why} (recorded in {}: remove it once this log is restored, or clear this member's data \
                 directory and add it again)",
                damaged.display()
            )));
        }
        let mut db = Database::builder()
            .set_cache_size(LOG_CACHE_BYTES)
            .create(path)
            .map_err(io_error)?;
        // Every page against its checksum, once, before anything is read (SPEC R1): a
        // flipped bit in a stored entry is found here, not by a follower that is sent it.
        // Opening already repaired what a crash left half-written, so a repair now means
        // damage to committed pages: refused, as the entries it dropped were acknowledged.
        match db.check_integrity() {
            Ok(true) => {}
            Ok(false) => {
                let why = "the log failed its integrity check and redb repaired it by going back to an \
                           earlier commit: acknowledged entries may be missing";
                std::fs::write(&damaged, why)?;
                return Err(io::Error::other(format!("{why} (recorded in {})", damaged.display())));
            }
            Err(error) => return Err(io::Error::other(format!("the log failed its integrity check: {error}"))),
        }
        let txn = db.begin_write().map_err(io_error)?;
        txn.open_table(LOG).map_err(io_error)?;
        txn.open_table(META).map_err(io_error)?;
        txn.commit().map_err(io_error)?;
        let db = Arc::new(db);

        let last_purged: Option<LogId> = read_meta(&db, LAST_PURGED)?;
        let last_entry = {
            let txn = db.begin_read().map_err(io_error)?;
            let table = txn.open_table(LOG).map_err(io_error)?;
            let last = table.last().map_err(io_error)?;
            match last {
                Some((_, bytes)) => Some(decode::<Entry>(bytes.value())?.log_id),
                None => None,
            }
        };
        let last_log = last_entry.or(last_purged);
        let last_index = last_log.map_or(0, |id| id.index);
        let durable = Arc::new(AtomicU64::new(last_index));
        let (writer, ops) = mpsc::channel();
        let thread_db = Arc::clone(&db);
        let thread_durable = Arc::clone(&durable);
        // Where an injected disk failure is looked up (tests only: `fault_injection`).
        let dir = path.parent().unwrap_or(path);
        let fault_key = dir.canonicalize().unwrap_or_else(|_| dir.to_owned());
        let thread = std::thread::Builder::new()
            .name("muster-log-writer".into())
            .spawn(move || write_loop(&thread_db, &ops, &thread_durable, &fault_key))?;
        Ok(LogStore {
            db,
            writer,
            thread: Arc::new(Mutex::new(Some(thread))),
            durable,
            issued: Arc::new(AtomicU64::new(last_index)),
            cache: Arc::new(Mutex::new(Cache { last_log, last_purged })),
            tail: Arc::default(),
            purge_floor: None,
        })
    }

    /// The index of the committed id the log holds (0: none).
    pub(crate) fn committed_index(&self) -> Result<u64, io::Error> {
        Ok(read_meta::<Option<LogId>>(&self.db, COMMITTED)?
            .flatten()
            .map_or(0, |id| id.index))
    }

    /// The index of the last entry purged from the log (0: none).
    pub(crate) fn last_purged_index(&self) -> u64 {
        self.cache().last_purged.map_or(0, |id| id.index)
    }

    /// From now on, purges never go past the snapshot `durable` says is on disk.
    pub(crate) fn guard_purges(&mut self, durable: DurableSnapshot) {
        self.purge_floor = Some(durable);
    }

    /// The writer thread, to join once every store clone is gone: it exits when the last one
    /// drops its sender, and drops the last database handle (releasing redb's file lock)
    /// before it ends. Taken once.
    pub(crate) fn take_writer_thread(&self) -> Option<std::thread::JoinHandle<()>> {
        self.thread
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
    }

    async fn send(&self, op: impl FnOnce(Reply) -> WriteOp) -> Result<(), io::Error> {
        let (done, wait) = tokio::sync::oneshot::channel();
        self.writer
            .send(op(done))
            .map_err(|_| io::Error::other("the log writer has stopped"))?;
        wait.await.map_err(|_| io::Error::other("the log writer has stopped"))?
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn tail(&self) -> std::sync::MutexGuard<'_, LogTail> {
        self.tail.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The file that records a repair [`LogStore::open`] refused: `raft-log.redb.damaged`.
fn damage_marker(path: &Path) -> std::path::PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".damaged");
    std::path::PathBuf::from(name)
}

fn read_meta<T: serde::de::DeserializeOwned>(db: &Database, key: &str) -> Result<Option<T>, io::Error> {
    let txn = db.begin_read().map_err(io_error)?;
    let table = txn.open_table(META).map_err(io_error)?;
    let value = table.get(key).map_err(io_error)?;
    value.map(|v| decode(v.value())).transpose()
}

/// The writer thread: drains queued ops into one transaction, commits, then answers them.
///
/// A batch of nothing but saves of the committed id gets no transaction of its own: the
/// newest rides with the next one, or is written alone after [`HOLD_COMMITTED`] without one,
/// or when the log closes. openraft needs the saved id to be no newer than the durable log,
/// which riding later keeps; an older one only means a restart applies less before its first
/// election commits the rest (SPEC R5). A lone writer otherwise paid two fsyncs per write,
/// the append's and then its commit's.
///
/// Fail-stop (SPEC R6): after a failed commit nothing more is written, and every later op
/// fails with that commit's cause. A later commit landing after a lost one would leave a
/// hole in the log, or a committed id naming entries that never reached the disk.
fn write_loop(db: &Database, ops: &mpsc::Receiver<WriteOp>, durable: &AtomicU64, fault_key: &Path) {
    let mut held: Option<WriteOp> = None;
    let mut failed: Option<String> = None;
    loop {
        // `alone`: what was held, written now with whatever else came.
        let (first, alone) = match ops.recv_timeout(HOLD_COMMITTED) {
            Ok(op) => (op, false),
            Err(mpsc::RecvTimeoutError::Timeout) => match held.take() {
                Some(op) => (op, true),
                None => continue,
            },
            Err(mpsc::RecvTimeoutError::Disconnected) => match held.take() {
                Some(op) => (op, true),
                None => break,
            },
        };
        let mut batch = vec![first];
        while batch.len() < MAX_OPS_PER_COMMIT {
            match ops.try_recv() {
                Ok(op) => batch.push(op),
                Err(_) => break,
            }
        }
        if let Some(cause) = &failed {
            held = None;
            let stopped = || io::Error::other(format!("the log writer stopped after a failed commit: {cause}"));
            answer(batch, &Err(stopped()));
            continue;
        }
        let batch = match alone {
            true => batch,
            false => match with_held(batch, &mut held) {
                Some(batch) => batch,
                None => continue,
            },
        };
        let result = match injected_failure(fault_key) {
            Some(error) => Err(error),
            None => commit(db, &batch),
        };
        if let Err(error) = &result {
            tracing::error!(%error, "a log commit failed; the log writer stops");
            failed = Some(error.to_string());
        }
        let highest = batch
            .iter()
            .filter_map(|op| {
                if let WriteOp::Append { last, .. } = op {
                    Some(*last)
                } else {
                    None
                }
            })
            .max();
        if result.is_ok()
            && let Some(highest) = highest
        {
            durable.fetch_max(highest, Ordering::AcqRel);
        }
        answer(batch, &result);
    }
}

/// Answers every op of `batch` with `result`.
fn answer(batch: Vec<WriteOp>, result: &Result<(), io::Error>) {
    for op in batch {
        let result = result
            .as_ref()
            .map(|_| ())
            .map_err(|e| io::Error::new(e.kind(), e.to_string()));
        match op {
            WriteOp::Append { done, .. } => done.log_io_completed(result),
            WriteOp::Meta { done, .. }
            | WriteOp::Truncate { done, .. }
            | WriteOp::Purge { done, .. }
            | WriteOp::Barrier { done } => {
                let _ = done.send(result);
            }
        }
    }
}

/// The transaction [`write_loop`] commits for `batch`: `None` when the batch only saves the
/// committed id (its newest save is `held` until the next one), else the batch with what was
/// held put first, so that a newer save in the batch overwrites it.
fn with_held(mut batch: Vec<WriteOp>, held: &mut Option<WriteOp>) -> Option<Vec<WriteOp>> {
    if batch.iter().all(saves_committed) {
        *held = batch.pop().or(held.take());
        return None;
    }
    if let Some(op) = held.take() {
        batch.insert(0, op);
    }
    Some(batch)
}

/// Whether `op` only saves the committed id.
fn saves_committed(op: &WriteOp) -> bool {
    matches!(op, WriteOp::Meta { key, .. } if *key == COMMITTED)
}

/// The failure a test injected for this log's directory, if any.
#[cfg(any(test, feature = "fault-injection"))]
fn injected_failure(fault_key: &Path) -> Option<io::Error> {
    crate::fault_injection::log_write_failure(fault_key)
}

#[cfg(not(any(test, feature = "fault-injection")))]
fn injected_failure(_fault_key: &Path) -> Option<io::Error> {
    None
}

fn commit(db: &Database, batch: &[WriteOp]) -> Result<(), io::Error> {
    let txn = db.begin_write().map_err(io_error)?;
    {
        let mut log = txn.open_table(LOG).map_err(io_error)?;
        let mut meta = txn.open_table(META).map_err(io_error)?;
        for op in batch {
            match op {
                WriteOp::Append { entries, .. } => {
                    for (index, bytes) in entries {
                        log.insert(*index, bytes.as_slice()).map_err(io_error)?;
                    }
                }
                WriteOp::Meta { key, value, .. } => {
                    meta.insert(*key, value.as_slice()).map_err(io_error)?;
                }
                WriteOp::Truncate { from, .. } => {
                    log.retain_in(*from.., |_, _| false).map_err(io_error)?;
                }
                WriteOp::Purge { upto, last_purged, .. } => {
                    log.retain_in(..=*upto, |_, _| false).map_err(io_error)?;
                    meta.insert(LAST_PURGED, last_purged.as_slice()).map_err(io_error)?;
                }
                WriteOp::Barrier { .. } => {}
            }
        }
    }
    txn.commit().map_err(io_error)
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let start = match range.start_bound() {
            Bound::Included(&n) => n,
            Bound::Excluded(&n) => n + 1,
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&n) => n.saturating_add(1),
            Bound::Excluded(&n) => n,
            Bound::Unbounded => u64::MAX,
        };
        if let Some(entries) = self.tail().range(start, end) {
            return Ok(entries);
        }
        let wanted_last = end.saturating_sub(1).min(self.issued.load(Ordering::Acquire));
        if wanted_last > self.durable.load(Ordering::Acquire) {
            self.send(|done| WriteOp::Barrier { done })
                .await
                .map_err(|e| storage_error(ErrorSubject::Logs, ErrorVerb::Read, e))?;
        }
        let read = || -> Result<Vec<Entry>, io::Error> {
            let txn = self.db.begin_read().map_err(io_error)?;
            let table = txn.open_table(LOG).map_err(io_error)?;
            let mut entries = Vec::new();
            for item in table.range(start..end).map_err(io_error)? {
                let (_, bytes) = item.map_err(io_error)?;
                entries.push(decode::<Entry>(bytes.value())?);
            }
            Ok(entries)
        };
        read().map_err(|e| storage_error(ErrorSubject::Logs, ErrorVerb::Read, e))
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let cache = self.cache();
        Ok(LogState {
            last_purged_log_id: cache.last_purged,
            last_log_id: cache.last_log,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), StorageError> {
        let value = encode(vote);
        self.send(|done| WriteOp::Meta { key: VOTE, value, done })
            .await
            .map_err(|e| storage_error(ErrorSubject::Vote, ErrorVerb::Write, e))
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, StorageError> {
        read_meta(&self.db, VOTE).map_err(|e| storage_error(ErrorSubject::Vote, ErrorVerb::Read, e))
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        // Queued behind the appends it covers, and not awaited: openraft only needs it to be
        // at most as new as what is durable, which the writer's ordering guarantees.
        let (done, _ignored) = tokio::sync::oneshot::channel();
        let op = WriteOp::Meta {
            key: COMMITTED,
            value: encode(&committed),
            done,
        };
        self.writer
            .send(op)
            .map_err(|e| storage_error(ErrorSubject::Store, ErrorVerb::Write, io_error(e)))
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(read_meta::<Option<LogId>>(&self.db, COMMITTED)
            .map_err(|e| storage_error(ErrorSubject::Store, ErrorVerb::Read, e))?
            .flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let mut encoded = Vec::new();
        let mut kept = Vec::new();
        let mut last = None;
        for entry in entries {
            let bytes = encode(&entry);
            let size = bytes.len();
            last = Some(entry.log_id);
            encoded.push((entry.log_id.index, bytes));
            kept.push((entry, size));
        }
        {
            let durable = self.durable.load(Ordering::Acquire);
            let mut tail = self.tail();
            for (entry, size) in kept {
                tail.push(entry, size, durable);
            }
        }
        let Some(last) = last else {
            callback.log_io_completed(Ok(()));
            return Ok(());
        };
        self.cache().last_log = Some(last);
        self.issued.fetch_max(last.index, Ordering::AcqRel);
        self.writer
            .send(WriteOp::Append {
                entries: encoded,
                last: last.index,
                done: callback,
            })
            .map_err(|e| storage_error(ErrorSubject::Logs, ErrorVerb::Write, io_error(e)))
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.tail().truncate(log_id.index);
        self.send(|done| WriteOp::Truncate {
            from: log_id.index,
            done,
        })
        .await
        .map_err(|e| storage_error(ErrorSubject::Logs, ErrorVerb::Delete, e))?;
        let previous = if log_id.index == 0 {
            None
        } else {
            let mut reader = self.clone();
            reader
                .try_get_log_entries(log_id.index - 1..log_id.index)
                .await?
                .pop()
                .map(|e| e.log_id)
        };
        self.durable.fetch_min(log_id.index.saturating_sub(1), Ordering::AcqRel);
        self.issued.fetch_min(log_id.index.saturating_sub(1), Ordering::AcqRel);
        let mut cache = self.cache();
        cache.last_log = previous.or(cache.last_purged);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        if let Some(floor) = &self.purge_floor {
            floor
                .until_purge_allowed(log_id.index)
                .await
                .map_err(|e| storage_error(ErrorSubject::Logs, ErrorVerb::Delete, e))?;
        }
        let last_purged = encode(&log_id);
        self.send(|done| WriteOp::Purge {
            upto: log_id.index,
            last_purged,
            done,
        })
        .await
        .map_err(|e| storage_error(ErrorSubject::Logs, ErrorVerb::Delete, e))?;
        self.tail().purge(log_id.index);
        let mut cache = self.cache();
        cache.last_purged = Some(log_id);
        if cache.last_log.is_none_or(|last| last.index < log_id.index) {
            cache.last_log = Some(log_id);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(key: &'static str, value: u8) -> WriteOp {
        let (done, _) = tokio::sync::oneshot::channel();
        WriteOp::Meta {
            key,
            value: vec![value],
            done,
        }
    }

    fn written(batch: &[WriteOp]) -> Vec<(&'static str, u8)> {
        batch
            .iter()
            .map(|op| match op {
                WriteOp::Meta { key, value, .. } => (*key, value[0]),
                _ => ("other", 0),
            })
            .collect()
    }

    #[test]
    fn saves_of_the_committed_id_alone_wait_for_the_next_transaction_and_the_newest_rides_first() {
        let mut held = None;
        assert!(with_held(vec![meta(COMMITTED, 1)], &mut held).is_none());
        assert!(with_held(vec![meta(COMMITTED, 2), meta(COMMITTED, 3)], &mut held).is_none());
        let batch = with_held(vec![meta(VOTE, 9), meta(COMMITTED, 4)], &mut held).expect("a vote commits");
        assert_eq!(written(&batch), [(COMMITTED, 3), (VOTE, 9), (COMMITTED, 4)]);
        assert!(held.is_none());
        let batch = with_held(vec![meta(VOTE, 8)], &mut held).expect("a vote commits");
        assert_eq!(written(&batch), [(VOTE, 8)]);
    }

    #[test]
    fn a_held_committed_id_is_written_alone_when_nothing_comes_to_ride_with() {
        let dir = tempfile::tempdir().expect("a scratch directory");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        let mut store = LogStore::open(&dir.path().join("log.redb")).expect("the log opens");
        let committed = Some(LogId::new(openraft::CommittedLeaderId::new(1, 1), 5));
        runtime.block_on(store.save_committed(committed)).expect("queued");
        // A bounded poll, not a timing assertion: the writer saves it on its own eventually.
        for _ in 0..200 {
            if runtime.block_on(store.read_committed()).expect("readable").is_some() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("the committed id was never written");
    }

    #[test]
    fn after_a_failed_commit_the_writer_writes_nothing_more_even_once_the_disk_answers_again() {
        // Trace: a disk refuses one commit, then takes writes again; a later commit landing
        // after the lost one would leave a hole in the log (SPEC R6).
        let dir = tempfile::tempdir().expect("a scratch directory");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime");
        let mut store = LogStore::open(&dir.path().join("log.redb")).expect("the log opens");
        let vote = |term| Vote::new(term, 1);
        runtime
            .block_on(store.save_vote(&vote(1)))
            .expect("a healthy disk takes it");
        crate::fault_injection::fail_log_writes(dir.path());
        let failed = runtime
            .block_on(store.save_vote(&vote(2)))
            .expect_err("the disk refuses it");
        assert!(failed.to_string().contains("injected fault"), "{failed}");
        crate::fault_injection::heal(dir.path());
        let stopped = runtime
            .block_on(store.save_vote(&vote(3)))
            .expect_err("nothing is written after a failure");
        assert!(
            stopped.to_string().contains("stopped after a failed commit"),
            "{stopped}"
        );
        assert!(
            stopped.to_string().contains("injected fault"),
            "names the first cause: {stopped}"
        );
        assert_eq!(runtime.block_on(store.read_vote()).expect("readable"), Some(vote(1)));
    }

    #[test]
    fn a_held_committed_id_is_written_when_the_log_closes() {
        let dir = tempfile::tempdir().expect("a scratch directory");
        let path = dir.path().join("log.redb");
        {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("a runtime");
            let mut store = LogStore::open(&path).expect("the log opens");
            let committed = Some(LogId::new(openraft::CommittedLeaderId::new(1, 1), 7));
            runtime.block_on(store.save_committed(committed)).expect("queued");
            let writer = store.take_writer_thread().expect("the writer runs");
            drop(store);
            writer.join().expect("the writer ends");
        }
        let mut store = LogStore::open(&path).expect("the log opens again");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        let read = runtime.block_on(store.read_committed()).expect("readable");
        assert_eq!(read.map(|id| id.index), Some(7));
    }
}
