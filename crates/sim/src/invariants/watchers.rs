//! Invariant: **a watcher's revisions only move forward**.
//!
//! Each node process carries one watcher (its apply observer, what feeds watch streams and
//! DNS): it must see revisions rise by exactly one per applied change, and a reset (a
//! snapshot installed) must never take it back to an older revision.

use std::collections::BTreeMap;

/// The last revision each process's watcher saw, by (node, process).
#[derive(Default)]
pub struct Watchers {
    last: BTreeMap<(u64, u64), u64>,
}

impl Watchers {
    /// The watcher of `(node, process)` got an applied revision.
    pub fn applied(&mut self, node: u64, process: u64, revision: u64) -> Result<(), String> {
        let last = self.last.insert((node, process), revision);
        match last {
            Some(last) if revision != last + 1 => Err(format!(
                "node {node} (process {process}): watcher saw revision {revision} after {last}"
            )),
            _ => Ok(()),
        }
    }

    /// The watcher of `(node, process)` was reset to `revision`.
    pub fn reset(&mut self, node: u64, process: u64, revision: u64) -> Result<(), String> {
        let last = self.last.insert((node, process), revision);
        match last {
            Some(last) if revision < last => Err(format!(
                "node {node} (process {process}): watcher reset back to revision {revision} after {last}"
            )),
            _ => Ok(()),
        }
    }
}
