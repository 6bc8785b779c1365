//! The snapshot files of a data directory: the current snapshot, the one before it, and a
//! private temporary file for every write in progress.
//!
//! ```text
//!  build / install ──▶ snapshot.json.tmp.<pid>.<n> (write, fsync)
//!                          │ lock; newer than snapshot.json?
//!                          ├─ no  ──▶ removed (an older snapshot never replaces a newer one)
//!                          └─ yes ──▶ snapshot.json ──rename──▶ snapshot.prev.json
//!                                     tmp ──rename──▶ snapshot.json; fsync the directory
//! ```
//!
//! Two writers can run at once on a follower (openraft builds a snapshot in a task of its
//! own while the state machine installs one from the leader), so each writes its own
//! temporary file, and the swap into place happens under one lock that compares log ids.
//!
//! # Correctness
//! - A crash at any point leaves `snapshot.json` whole (old or new), or — between the two
//!   renames — only `snapshot.prev.json`, which [`SnapshotFiles::open`] then falls back to.
//! - `snapshot.json` only ever moves forward in log order: a write whose last log id is not
//!   newer than the current file's is discarded. So a build that started before an install
//!   and finished after it cannot put the older state back after the log was purged.
//! - A current file that cannot be read, whose checksum does not hold or that does not parse
//!   falls back to the previous one (the node then opens only if its log reaches back to it:
//!   `Node::open` refuses, naming the files, rather than start behind).
//! - A current file that was not loaded is never rotated over the previous one: the next
//!   write moves it aside to `snapshot.json.corrupt` and keeps the previous file, the one
//!   that was good (SPEC R1).

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::types::LogId;

pub(crate) const CURRENT: &str = "snapshot.json";
pub(crate) const PREVIOUS: &str = "snapshot.prev.json";
const TEMPORARY_PREFIX: &str = "snapshot.json.tmp";
/// Where a current file that could not be loaded goes when the next snapshot is written.
const SET_ASIDE: &str = "snapshot.json.corrupt";

/// One stored snapshot, as found on disk.
#[derive(Debug)]
pub(crate) struct Candidate {
    /// The file it was read from.
    pub(crate) name: &'static str,
    /// Its bytes, or why they could not be read (then the next one is tried).
    pub(crate) bytes: Result<Vec<u8>, io::Error>,
}

/// Whether a write became the current snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stored {
    /// It is `snapshot.json` now.
    Current,
    /// The current file is as new or newer; the write was discarded.
    Superseded,
}

/// The newest snapshot this process wrote or loaded.
#[derive(Debug, Default, Clone, Copy)]
struct Current {
    /// Its last log id.
    last_log_id: Option<LogId>,
    /// The file it is in: `snapshot.json` once written here or loaded from there; the
    /// previous file when that is what loaded (a file at `snapshot.json` is then one that
    /// could not be); `None` when none loaded.
    file: Option<&'static str>,
}

impl Current {
    /// Whether `snapshot.json` is known good.
    fn good(&self) -> bool {
        self.file == Some(CURRENT)
    }
}

/// A data directory's snapshot files.
#[derive(Debug)]
pub(crate) struct SnapshotFiles {
    dir: PathBuf,
    /// What this process knows of `snapshot.json`; the lock every swap and every read of
    /// the current file holds.
    current: Mutex<Current>,
    /// Numbers temporary files, unique within the process (the pid makes them unique across).
    writes: AtomicU64,
}

impl SnapshotFiles {
    /// The files of `dir`, removing temporary files a crash left behind.
    pub(crate) fn open(dir: &Path) -> Result<SnapshotFiles, io::Error> {
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            if entry.file_name().to_string_lossy().starts_with(TEMPORARY_PREFIX) {
                std::fs::remove_file(entry.path())?;
            }
        }
        Ok(SnapshotFiles {
            dir: dir.to_owned(),
            current: Mutex::new(Current::default()),
            writes: AtomicU64::new(0),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Current> {
        self.current.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The stored snapshots, newest first: the current file, then the previous one. The
    /// caller loads the first that parses and then calls [`SnapshotFiles::loaded`].
    pub(crate) fn candidates(&self) -> Result<Vec<Candidate>, io::Error> {
        let _guard = self.lock();
        let mut found = Vec::new();
        for name in [CURRENT, PREVIOUS] {
            match read_optional(&self.dir.join(name)) {
                Ok(Some(bytes)) => found.push(Candidate { name, bytes: Ok(bytes) }),
                Ok(None) => {}
                Err(error) => found.push(Candidate {
                    name,
                    bytes: Err(io::Error::new(error.kind(), format!("unreadable: {error}"))),
                }),
            }
        }
        Ok(found)
    }

    /// Records which snapshot was loaded (`None`: none was) and its last log id.
    pub(crate) fn loaded(&self, name: Option<&str>, last_log_id: Option<LogId>) {
        let file = [CURRENT, PREVIOUS].into_iter().find(|file| name == Some(*file));
        *self.lock() = Current { last_log_id, file };
    }

    /// The newest good snapshot's bytes: `snapshot.json`, or the previous file while that is
    /// what loaded.
    pub(crate) fn read_current(&self) -> Result<Option<Vec<u8>>, io::Error> {
        let current = self.lock();
        match current.file {
            Some(file) => read_optional(&self.dir.join(file)),
            None => Ok(None),
        }
    }

    /// Writes a snapshot taken at `last_log_id`; it replaces the current one only if newer.
    /// Blocking: call it from a blocking task.
    pub(crate) fn store(&self, last_log_id: Option<LogId>, bytes: &[u8]) -> Result<Stored, io::Error> {
        let n = self.writes.fetch_add(1, Ordering::Relaxed);
        let temporary = self.dir.join(format!("{TEMPORARY_PREFIX}.{}.{n}", std::process::id()));
        let written = write_synced(&temporary, bytes);
        if let Err(error) = written {
            let _ = std::fs::remove_file(&temporary);
            return Err(error);
        }
        let mut current = self.lock();
        let current_exists = self.dir.join(CURRENT).exists();
        if current_exists && current.good() && last_log_id <= current.last_log_id {
            std::fs::remove_file(&temporary)?;
            return Ok(Stored::Superseded);
        }
        if current_exists {
            let to = match current.good() {
                true => PREVIOUS.to_owned(),
                false => set_aside_name(&self.dir),
            };
            std::fs::rename(self.dir.join(CURRENT), self.dir.join(to))?;
        }
        std::fs::rename(&temporary, self.dir.join(CURRENT))?;
        std::fs::File::open(&self.dir)?.sync_all()?;
        *current = Current {
            last_log_id,
            file: Some(CURRENT),
        };
        Ok(Stored::Current)
    }
}

/// The first free name of `snapshot.json.corrupt`, `snapshot.json.corrupt.1`, ...: each file
/// set aside is kept to look at.
fn set_aside_name(dir: &Path) -> String {
    (0_u32..)
        .map(|n| match n {
            0 => SET_ASIDE.to_owned(),
            n => format!("{SET_ASIDE}.{n}"),
        })
        .find(|name| !dir.join(name).exists())
        .unwrap_or_else(|| SET_ASIDE.to_owned())
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), io::Error> {
    let mut file = std::fs::File::create(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

fn read_optional(path: &Path) -> Result<Option<Vec<u8>>, io::Error> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
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
    fn an_older_snapshot_never_replaces_a_newer_one() {
        // Trace: a follower builds at index 100 while it installs the leader's snapshot at
        // 500; the build finishes last.
        let dir = tempfile::tempdir().unwrap();
        let files = SnapshotFiles::open(dir.path()).unwrap();
        assert_eq!(files.store(log_id(500), b"installed at 500").unwrap(), Stored::Current);
        assert_eq!(files.store(log_id(100), b"built at 100").unwrap(), Stored::Superseded);
        assert_eq!(files.read_current().unwrap().unwrap(), b"installed at 500");
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with(TEMPORARY_PREFIX))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    #[test]
    fn the_previous_snapshot_is_kept_and_offered_after_the_current_one() {
        let dir = tempfile::tempdir().unwrap();
        let files = SnapshotFiles::open(dir.path()).unwrap();
        files.store(log_id(10), b"ten").unwrap();
        files.store(log_id(20), b"twenty").unwrap();
        assert_eq!(bytes(&files), [b"twenty".to_vec(), b"ten".to_vec()]);
        // A crash between the two renames leaves only the previous file: it is still offered.
        std::fs::remove_file(dir.path().join(CURRENT)).unwrap();
        assert_eq!(bytes(&files), [b"ten".to_vec()]);
    }

    fn bytes(files: &SnapshotFiles) -> Vec<Vec<u8>> {
        files
            .candidates()
            .unwrap()
            .into_iter()
            .map(|c| c.bytes.unwrap())
            .collect()
    }

    #[test]
    fn a_current_file_that_was_not_loaded_is_set_aside_never_rotated_over_the_good_previous_one() {
        // Trace: snapshot.json is corrupt, the node loaded snapshot.prev.json and replayed
        // the log after it; its next snapshot must not push the good file out.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(PREVIOUS), b"good at 10").unwrap();
        std::fs::write(dir.path().join(CURRENT), b"corrupt").unwrap();
        let files = SnapshotFiles::open(dir.path()).unwrap();
        files.loaded(Some(PREVIOUS), log_id(10));
        // Older than the corrupt file's claim or not, the write goes in: the file there is
        // no snapshot this process could load.
        assert_eq!(files.store(log_id(12), b"new at 12").unwrap(), Stored::Current);
        assert_eq!(bytes(&files), [b"new at 12".to_vec(), b"good at 10".to_vec()]);
        assert_eq!(std::fs::read(dir.path().join(SET_ASIDE)).unwrap(), b"corrupt");
        // From then on the rotation is the usual one.
        files.store(log_id(20), b"new at 20").unwrap();
        assert_eq!(bytes(&files), [b"new at 20".to_vec(), b"new at 12".to_vec()]);
        // A second bad file is set aside beside the first, not over it.
        std::fs::write(dir.path().join(CURRENT), b"corrupt again").unwrap();
        files.loaded(Some(PREVIOUS), log_id(12));
        files.store(log_id(30), b"new at 30").unwrap();
        assert_eq!(std::fs::read(dir.path().join(SET_ASIDE)).unwrap(), b"corrupt");
        assert_eq!(
            std::fs::read(dir.path().join(format!("{SET_ASIDE}.1"))).unwrap(),
            b"corrupt again"
        );
    }

    #[test]
    fn temporary_files_of_a_crashed_write_are_removed_at_open() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(format!("{TEMPORARY_PREFIX}.77.0")), b"half").unwrap();
        SnapshotFiles::open(dir.path()).unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn concurrent_writers_use_their_own_temporary_files() {
        let dir = tempfile::tempdir().unwrap();
        let files = std::sync::Arc::new(SnapshotFiles::open(dir.path()).unwrap());
        let writers: Vec<_> = (1..=8_u64)
            .map(|i| {
                let files = std::sync::Arc::clone(&files);
                std::thread::spawn(move || {
                    let body = vec![u8::try_from(i).unwrap(); 64 * 1024];
                    files.store(log_id(i), &body).unwrap()
                })
            })
            .collect();
        for writer in writers {
            writer.join().unwrap();
        }
        // Whatever the interleaving, the newest is current and whole.
        assert_eq!(files.read_current().unwrap().unwrap(), vec![8_u8; 64 * 1024]);
    }
}
