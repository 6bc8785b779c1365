//! Last-known-good on disk (SPEC C1 step 1): the active set and the revision it is current
//! to, written together, atomically, so a restart never holds a revision newer than its set.
//!
//! ```text
//!  muster-lkg 1 <xxh3-64 of the body, 16 hex digits>\n
//!  {"key":..,"revision":..,"digest":..,"members":[..],"current_to":..,"confirmed_ms":..}
//! ```
//!
//! The set is the view's compact [`MemberSet`], which cannot recompute its records'
//! fingerprints (the fields they cover are not kept). So the file carries two checks: the
//! body's checksum (any changed byte) and the set digest, which must equal the sum of the
//! members' saved fingerprints. A file failing either is never trusted.

use std::io::{self, Write};
use std::path::Path;

use muster_core::{Digest, Revision, ServiceKey};
use serde::{Deserialize, Serialize};

use crate::member::{Member, MemberSet};
use crate::view::View;

/// The first word of the header line, and the format's version.
const MAGIC: &str = "muster-lkg 1 ";

/// What is saved: the set (its checksum and digest are re-verified on load) and where to
/// resume.
#[derive(Debug)]
pub struct LastKnownGood {
    /// The set.
    pub snapshot: MemberSet,
    /// The global revision it was current to.
    pub current_to: Revision,
    /// When it was last confirmed by the server, in the caller's clock (ms).
    pub confirmed_ms: u64,
}

/// The body as written.
#[derive(Serialize, Deserialize)]
struct Body<M> {
    key: ServiceKey,
    revision: Revision,
    digest: Digest,
    members: M,
    current_to: Revision,
    confirmed_ms: u64,
}

fn checksum(body: &[u8]) -> String {
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(body))
}

/// Saves the view's active set, if it has one: temporary file, fsync, rename, fsync of the
/// directory, so a crash leaves the old file or the new one, whole.
pub fn save(view: &View, now_ms: u64, path: &Path) -> io::Result<bool> {
    let (Some(active), Some(current_to)) = (view.active(), view.resume_from()) else {
        return Ok(false);
    };
    let age = view.status(now_ms).age_ms.unwrap_or(0);
    let body = Body {
        key: active.key().clone(),
        revision: active.revision(),
        digest: active.digest(),
        members: active.iter().map(|member| &**member).collect::<Vec<&Member>>(),
        current_to,
        confirmed_ms: now_ms.saturating_sub(age),
    };
    let body = serde_json::to_vec(&body).map_err(io::Error::other)?;
    let mut bytes = format!("{MAGIC}{}\n", checksum(&body)).into_bytes();
    bytes.extend_from_slice(&body);
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

/// Loads a saved set: `Ok(None)` when there is none; an error when it is unreadable, its
/// checksum fails or its digest does not match its members (a damaged file is never
/// trusted).
pub fn load(path: &Path) -> io::Result<Option<LastKnownGood>> {
    match std::fs::read(path) {
        Ok(bytes) => decode(&bytes)
            .map(Some)
            .map_err(|why| io::Error::new(io::ErrorKind::InvalidData, why)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

fn decode(bytes: &[u8]) -> Result<LastKnownGood, String> {
    let newline = bytes
        .iter()
        .position(|&b| b == b'\n')
        .ok_or("not a last-known-good file: no header line")?;
    let (header, body) = (&bytes[..newline], &bytes[newline + 1..]);
    let stated = std::str::from_utf8(header)
        .ok()
        .and_then(|header| header.strip_prefix(MAGIC))
        .ok_or("not a last-known-good file of this version")?;
    if stated != checksum(body) {
        return Err(format!("checksum {stated} does not match the saved set"));
    }
    let body: Body<Vec<Member>> = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let snapshot = MemberSet::from_members(body.key, body.revision, body.digest, body.members)?;
    Ok(LastKnownGood {
        snapshot,
        current_to: body.current_to,
        confirmed_ms: body.confirmed_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::balance::fixtures::{Fixture, REVISION};

    fn saved_view() -> View {
        let key = ServiceKey::new("acme", "prod", "api").unwrap();
        let endpoints = (0..2).map(|n| Fixture::ready(n).endpoint());
        let snapshot = muster_core::ServiceSnapshot::from_endpoints(key.clone(), REVISION, endpoints);
        let mut view = View::new(key);
        view.install(snapshot, REVISION, 100);
        view
    }

    #[test]
    fn a_saved_set_loads_back_whole() {
        let view = saved_view();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("api.lkg");
        assert!(save(&view, 150, &path).unwrap());
        let loaded = load(&path).unwrap().unwrap();
        assert_eq!(&loaded.snapshot, &**view.active().unwrap());
        assert_eq!((loaded.current_to, loaded.confirmed_ms), (REVISION, 100));
    }

    /// A body whose checksum holds but whose members do not sum to its digest (a writer's
    /// bug, not a damaged disk) is refused too.
    #[test]
    fn a_set_whose_members_miss_its_digest_is_refused_even_with_a_good_checksum() {
        let view = saved_view();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("api.lkg");
        save(&view, 150, &path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let newline = bytes.iter().position(|&b| b == b'\n').unwrap();
        let mut body: serde_json::Value = serde_json::from_slice(&bytes[newline + 1..]).unwrap();
        body["members"].as_array_mut().unwrap().pop();
        let body = serde_json::to_vec(&body).unwrap();
        let mut forged = format!("{MAGIC}{}\n", checksum(&body)).into_bytes();
        forged.extend_from_slice(&body);
        std::fs::write(&path, forged).unwrap();
        let refused = load(&path).unwrap_err();
        assert_eq!(refused.kind(), io::ErrorKind::InvalidData);
        assert!(refused.to_string().contains("digest"), "{refused}");
    }

    #[test]
    fn a_file_of_another_format_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("api.lkg");
        std::fs::write(&path, b"{\"snapshot\":{}}").unwrap();
        assert_eq!(load(&path).unwrap_err().kind(), io::ErrorKind::InvalidData);
    }
}
