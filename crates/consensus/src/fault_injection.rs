//! Disk failures on demand, for tests of what a node does when its storage fails: it stops
//! acknowledging, says why, and its server exits (SPEC R2, R6). Compiled only with the
//! `fault-injection` feature, which test builds enable through a dev-dependency; a release
//! binary has no way to arm it.
//!
//! A fault is keyed by data directory, so a test that started a whole server (which opens its
//! node itself) can fail that node's disk knowing only the directory it gave it.
//!
//! # Correctness
//! - An armed directory makes every later commit of its log writer fail with an I/O error
//!   before redb commits anything: what the writer answers then is exactly what a disk that
//!   refuses writes would make it answer (openraft sees a failed `append`, a fatal error).
//! - Arming never touches data already on disk; [`heal`] lets a later open of the same
//!   directory work again.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

/// The directories whose log writes fail, as given (and canonicalised when they exist).
static FAILING: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn key(data_dir: &Path) -> PathBuf {
    data_dir.canonicalize().unwrap_or_else(|_| data_dir.to_owned())
}

/// Makes every later log write of the node whose data directory is `data_dir` fail, as on a
/// disk that has died.
pub fn fail_log_writes(data_dir: &Path) {
    FAILING
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(key(data_dir));
}

/// Undoes [`fail_log_writes`] for `data_dir`.
pub fn heal(data_dir: &Path) {
    let key = key(data_dir);
    FAILING
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .retain(|dir| *dir != key);
}

/// The error a log commit in `data_dir` fails with now, if its disk was failed.
pub(crate) fn log_write_failure(data_dir: &Path) -> Option<io::Error> {
    let failing = FAILING.lock().unwrap_or_else(PoisonError::into_inner);
    failing
        .iter()
        .any(|dir| dir == data_dir)
        .then(|| io::Error::other("injected fault: the disk refused the log write"))
}
