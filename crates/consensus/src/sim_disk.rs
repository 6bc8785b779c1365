//! A simulated disk: what a node's log, vote and snapshots are written to in the
//! deterministic simulation (`muster-sim`), in memory and on the caller's clock.
//!
//! ```text
//!  Node (process) ──writes, in issue order──▶ SimDisk ◀──kept across── restart (a new Node
//!       │                                      │  log, vote, committed,        on the same disk)
//!       └── power_cut(): writes still in flight  │  snapshot + previous
//!           are lost, never acknowledged         └─ faults: slow writes, failing writes
//! ```
//!
//! The redb store has a writer thread and the snapshot files go through `spawn_blocking`:
//! real threads on the real clock, which no seed can replay. A `SimDisk` does the same jobs
//! in tokio tasks and timers only, so on a paused current-thread runtime every write lands
//! at a simulated instant decided by the schedule.
//!
//! # Correctness
//! - A write is durable once the store reports it done, and only then: the log store
//!   answers openraft after the disk took the write (never before), so nothing is
//!   acknowledged that a crash could lose.
//! - Each open of the disk is one power cycle ([`SimDisk::power`]); a write issued in an
//!   older one is refused ([`SimDisk::power_cut`] is the crash). A crash so leaves a prefix
//!   of the writes issued, like the real store's transactions.
//! - Snapshots keep the same rules as the data directory's files: newer wins, the previous
//!   one is kept, and a current one that does not parse falls back to it.

use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::types::LogId;

/// A simulated disk, shared by every process a simulated node runs (cheap to clone).
#[derive(Clone, Default)]
pub struct SimDisk {
    inner: Arc<Mutex<DiskState>>,
}

impl std::fmt::Debug for SimDisk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state();
        f.debug_struct("SimDisk")
            .field("log_entries", &state.log.len())
            .field("power", &state.power)
            .field("writes", &state.writes)
            .finish()
    }
}

#[derive(Default)]
pub(crate) struct DiskState {
    /// Encoded log entries by index.
    pub(crate) log: BTreeMap<u64, Vec<u8>>,
    /// Encoded vote, committed log id and last purged log id.
    pub(crate) meta: BTreeMap<&'static str, Vec<u8>>,
    /// Stored snapshots, newest first (the current one, then the previous one).
    snapshots: Vec<(Option<LogId>, Vec<u8>)>,
    /// The power cycle writes must belong to.
    power: u64,
    /// How long every write takes.
    write_delay: Duration,
    /// How many of the next writes fail.
    failing_writes: u32,
    /// Writes taken and writes failed, for the simulation's statistics.
    writes: u64,
    failed: u64,
}

/// One write to the disk, applied whole or not at all.
pub(crate) enum DiskWrite {
    /// Log entries `(index, encoded)`.
    Append(Vec<(u64, Vec<u8>)>),
    /// A metadata key.
    Meta(&'static str, Vec<u8>),
    /// Removes entries from `from` on.
    Truncate(u64),
    /// Removes entries up to `upto`, recording the last purged log id.
    Purge { upto: u64, last_purged: Vec<u8> },
}

impl SimDisk {
    /// An empty disk.
    pub fn new() -> SimDisk {
        SimDisk::default()
    }

    /// A disk holding what a data directory holds: its redb log (entries and metadata) and
    /// its snapshot files, byte for byte. The simulation so starts a node from a directory
    /// an older build wrote (the checked-in golden one). The directory is only read.
    pub fn from_data_dir(dir: &std::path::Path) -> Result<SimDisk, io::Error> {
        use redb::{ReadableDatabase, ReadableTable};
        let db = redb::ReadOnlyDatabase::open(dir.join("raft-log.redb")).map_err(io::Error::other)?;
        let read = db.begin_read().map_err(io::Error::other)?;
        let mut state = DiskState::default();
        let log = read.open_table(crate::log_store::LOG).map_err(io::Error::other)?;
        for row in log.iter().map_err(io::Error::other)? {
            let (index, bytes) = row.map_err(io::Error::other)?;
            state.log.insert(index.value(), bytes.value().to_vec());
        }
        let meta = read.open_table(crate::log_store::META).map_err(io::Error::other)?;
        for key in [
            crate::log_store::VOTE,
            crate::log_store::COMMITTED,
            crate::log_store::LAST_PURGED,
        ] {
            if let Some(bytes) = meta.get(key).map_err(io::Error::other)? {
                state.meta.insert(key, bytes.value().to_vec());
            }
        }
        for name in [crate::snapshot_files::CURRENT, crate::snapshot_files::PREVIOUS] {
            let bytes = match std::fs::read(dir.join(name)) {
                Ok(bytes) => bytes,
                Err(error) if error.kind() == io::ErrorKind::NotFound => continue,
                Err(error) => return Err(error),
            };
            #[derive(serde::Deserialize)]
            struct Head {
                meta: openraft::SnapshotMeta<u64, openraft::BasicNode>,
            }
            let head: Head = serde_json::from_slice(&bytes).map_err(io::Error::other)?;
            state.snapshots.push((head.meta.last_log_id, bytes));
        }
        Ok(SimDisk {
            inner: Arc::new(Mutex::new(state)),
        })
    }

    pub(crate) fn state(&self) -> std::sync::MutexGuard<'_, DiskState> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Makes every write take `delay` (a slow disk); zero: instant.
    pub fn set_write_delay(&self, delay: Duration) {
        self.state().write_delay = delay;
    }

    /// Makes the next `count` writes fail (a failing disk: the node's Raft stops on it).
    pub fn fail_next_writes(&self, count: u32) {
        self.state().failing_writes = count;
    }

    /// Cuts the power: writes issued so far but not yet done are lost. The next process to
    /// open the disk starts a new power cycle.
    pub fn power_cut(&self) {
        self.state().power += 1;
    }

    /// Writes taken and writes failed so far.
    pub fn write_counts(&self) -> (u64, u64) {
        let state = self.state();
        (state.writes, state.failed)
    }

    /// What the disk holds, in a line: for a failure message.
    pub fn describe(&self) -> String {
        let state = self.state();
        let meta: Vec<String> = state
            .meta
            .iter()
            .map(|(key, value)| format!("{key}={}", String::from_utf8_lossy(value)))
            .collect();
        format!(
            "log {:?}..={:?} ({} entries); {}; snapshots at {:?}",
            state.log.keys().next(),
            state.log.keys().next_back(),
            state.log.len(),
            meta.join(" "),
            state
                .snapshots
                .iter()
                .map(|(id, _)| id.map(|id| id.index))
                .collect::<Vec<_>>()
        )
    }

    /// The current power cycle: what an opening process writes under.
    pub(crate) fn power(&self) -> u64 {
        self.state().power
    }

    pub(crate) fn write_delay(&self) -> Duration {
        self.state().write_delay
    }

    /// Takes a write issued in power cycle `power`, unless the power was cut since or the
    /// disk fails it.
    pub(crate) fn write(&self, power: u64, write: DiskWrite) -> Result<(), io::Error> {
        let mut state = self.state();
        if state.power != power {
            return Err(io::Error::other("simulated power cut: the write was lost"));
        }
        if state.failing_writes > 0 {
            state.failing_writes -= 1;
            state.failed += 1;
            return Err(io::Error::other("simulated disk failure"));
        }
        state.writes += 1;
        match write {
            DiskWrite::Append(entries) => state.log.extend(entries),
            DiskWrite::Meta(key, value) => {
                state.meta.insert(key, value);
            }
            DiskWrite::Truncate(from) => {
                let _removed = state.log.split_off(&from);
            }
            DiskWrite::Purge { upto, last_purged } => {
                state.log = state.log.split_off(&(upto + 1));
                state.meta.insert(crate::log_store::LAST_PURGED, last_purged);
            }
        }
        Ok(())
    }

    /// The stored snapshots, newest first.
    pub(crate) fn snapshot_candidates(&self) -> Vec<Vec<u8>> {
        self.state().snapshots.iter().map(|(_, bytes)| bytes.clone()).collect()
    }

    /// The current snapshot.
    pub(crate) fn current_snapshot(&self) -> Option<Vec<u8>> {
        self.state().snapshots.first().map(|(_, bytes)| bytes.clone())
    }

    /// Stores a snapshot taken at `last_log_id` if it is newer than the current one, keeping
    /// the current one as the previous; `Ok(false)`: superseded, discarded.
    pub(crate) fn store_snapshot(
        &self,
        power: u64,
        last_log_id: Option<LogId>,
        bytes: Vec<u8>,
    ) -> Result<bool, io::Error> {
        let mut state = self.state();
        if state.power != power {
            return Err(io::Error::other("simulated power cut: the snapshot was lost"));
        }
        if state.failing_writes > 0 {
            state.failing_writes -= 1;
            state.failed += 1;
            return Err(io::Error::other("simulated disk failure"));
        }
        state.writes += 1;
        if let Some((current, _)) = state.snapshots.first()
            && last_log_id <= *current
        {
            return Ok(false);
        }
        state.snapshots.insert(0, (last_log_id, bytes));
        state.snapshots.truncate(2);
        Ok(true)
    }
}

/// The snapshots of one process on a simulated disk: the state machine's store when the
/// node runs on a [`SimDisk`].
#[derive(Clone)]
pub(crate) struct SimSnapshots {
    disk: SimDisk,
    power: u64,
}

impl SimSnapshots {
    pub(crate) fn new(disk: &SimDisk) -> SimSnapshots {
        SimSnapshots {
            disk: disk.clone(),
            power: disk.power(),
        }
    }

    pub(crate) fn candidates(&self) -> Vec<Vec<u8>> {
        self.disk.snapshot_candidates()
    }

    pub(crate) fn read_current(&self) -> Option<Vec<u8>> {
        self.disk.current_snapshot()
    }

    /// Writes after the disk's write delay; `Ok(false)`: a newer one was already stored.
    pub(crate) async fn store(&self, last_log_id: Option<LogId>, bytes: Vec<u8>) -> Result<bool, io::Error> {
        let delay = self.disk.write_delay();
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        self.disk.store_snapshot(self.power, last_log_id, bytes)
    }
}

#[cfg(test)]
mod tests {
    use openraft::CommittedLeaderId;

    use super::*;

    fn log_id(index: u64) -> Option<LogId> {
        Some(LogId::new(CommittedLeaderId::new(1, 1), index))
    }

    #[test]
    fn a_write_issued_before_a_power_cut_is_lost() {
        let disk = SimDisk::new();
        let before = disk.power();
        disk.write(before, DiskWrite::Append(vec![(1, b"one".to_vec())]))
            .unwrap();
        disk.power_cut();
        assert!(
            disk.write(before, DiskWrite::Append(vec![(2, b"two".to_vec())]))
                .is_err()
        );
        assert_eq!(disk.state().log.keys().copied().collect::<Vec<_>>(), [1]);
    }

    #[test]
    fn failing_writes_fail_then_the_disk_recovers() {
        let disk = SimDisk::new();
        disk.fail_next_writes(1);
        assert!(disk.write(0, DiskWrite::Meta("vote", b"v".to_vec())).is_err());
        disk.write(0, DiskWrite::Meta("vote", b"v".to_vec())).unwrap();
        assert_eq!(disk.write_counts(), (1, 1));
    }

    #[test]
    fn an_older_snapshot_never_replaces_a_newer_one_and_the_previous_is_kept() {
        let disk = SimDisk::new();
        assert!(disk.store_snapshot(0, log_id(10), b"ten".to_vec()).unwrap());
        assert!(disk.store_snapshot(0, log_id(20), b"twenty".to_vec()).unwrap());
        assert!(!disk.store_snapshot(0, log_id(15), b"fifteen".to_vec()).unwrap());
        assert_eq!(disk.snapshot_candidates(), [b"twenty".to_vec(), b"ten".to_vec()]);
    }
}
