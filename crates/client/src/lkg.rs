//! Last-known-good on disk (SPEC C1 step 1): the active set and the revision it is current
//! to, written together, atomically, so a restart never holds a revision newer than its set.

use std::io::{self, Write};
use std::path::Path;

use muster_core::{Revision, ServiceSnapshot};
use serde::{Deserialize, Serialize};

use crate::view::View;

/// What is saved: the set (its digest is re-verified on load) and where to resume.
#[derive(Debug, Serialize, Deserialize)]
pub struct LastKnownGood {
    /// The set.
    pub snapshot: ServiceSnapshot,
    /// The global revision it was current to.
    pub current_to: Revision,
    /// When it was last confirmed by the server, in the caller's clock (ms).
    pub confirmed_ms: u64,
}

/// Saves the view's active set, if it has one: temporary file, fsync, rename, fsync of the
/// directory, so a crash leaves the old file or the new one, whole.
pub fn save(view: &View, now_ms: u64, path: &Path) -> io::Result<bool> {
    let (Some(active), Some(current_to)) = (view.active(), view.resume_from()) else {
        return Ok(false);
    };
    let age = view.status(now_ms).age_ms.unwrap_or(0);
    let saved = LastKnownGood {
        snapshot: muster_core::ServiceSnapshot::clone(active),
        current_to,
        confirmed_ms: now_ms.saturating_sub(age),
    };
    let bytes = serde_json::to_vec(&saved).map_err(io::Error::other)?;
    // `<name>.tmp` beside it, not `with_extension`: that would make `a.json` and `a.lkg` (or a
    // file already named `a.tmp`) share one temporary, and the rename would stop being atomic.
    let mut temporary_name = path.file_name().unwrap_or_default().to_owned();
    temporary_name.push(".tmp");
    let temporary = path.with_file_name(temporary_name);
    let mut file = std::fs::File::create(&temporary)?;
    file.write_all(&bytes)?;
    file.sync_all()?;
    std::fs::rename(&temporary, path)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(true)
}

/// Loads a saved set: `Ok(None)` when there is none; an error when it is unreadable or its
/// digest does not match its endpoints (a damaged file is never trusted).
pub fn load(path: &Path) -> io::Result<Option<LastKnownGood>> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(io::Error::other),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}
