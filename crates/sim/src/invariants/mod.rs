//! The invariants, one per file (openraft's style), and [`Checks`], which feeds them.
//!
//! ```text
//!  observers (every apply, every reset) ──┐
//!  driver samples (between steps) ────────┼──▶ Checks ──▶ history ─ walk in revision order ─▶ fencing
//!  acknowledgements, renewals, drains ────┘                                                  leases
//!                                                                                           drains
//!  with two regions: region a's history + region b's samples ──▶ federation
//! ```
//!
//! The first broken invariant is kept, with its name; the run stops at the next step.

pub mod acknowledged;
pub mod drains;
pub mod federation;
pub mod fencing;
pub mod history;
pub mod leases;
pub mod watchers;

use acknowledged::Acknowledged;
use drains::Drains;
use fencing::Fencing;
use history::{History, RevisionRecord};
use leases::Leases;
use watchers::Watchers;

/// A broken invariant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Which one.
    pub invariant: &'static str,
    /// What happened.
    pub detail: String,
}

/// Every invariant's state.
#[derive(Default)]
pub struct Checks {
    /// Revisions and samples.
    pub history: History,
    /// Acknowledged writes.
    pub acknowledged: Acknowledged,
    /// Watchers.
    pub watchers: Watchers,
    /// Fences.
    pub fencing: Fencing,
    /// Leases.
    pub leases: Leases,
    /// Drains.
    pub drains: Drains,
    /// The history is walked up to here.
    walked: u64,
    /// The first violation.
    pub violation: Option<Violation>,
}

impl Checks {
    /// Keeps the first violation.
    pub fn fail(&mut self, invariant: &'static str, result: Result<(), String>) {
        if let Err(detail) = result
            && self.violation.is_none()
        {
            self.violation = Some(Violation { invariant, detail });
        }
    }

    /// A node process applied a revision.
    pub fn applied(&mut self, node: u64, process: u64, revision: u64, record: RevisionRecord) {
        let watched = self.watchers.applied(node, process, revision);
        self.fail("watcher revisions are monotonic", watched);
        let same = self.history.applied(node, revision, record);
        self.fail("the same revision is the same change on every node", same);
        self.walk();
    }

    /// A node process's state was replaced (opened from a snapshot, or installed one).
    pub fn reset(&mut self, node: u64, process: u64, revision: u64) {
        let watched = self.watchers.reset(node, process, revision);
        self.fail("watcher revisions are monotonic", watched);
    }

    /// A sample of a node between steps.
    pub fn sample(&mut self, node: u64, applied_index: u64, revision: u64, state_hash: u64) {
        let same = self.history.sample(node, applied_index, revision, state_hash);
        self.fail("every node at the same applied index holds the same state", same);
    }

    /// Walks the history as far as it is known without gaps.
    fn walk(&mut self) {
        while let Some(record) = self.history.revisions.get(&(self.walked + 1)) {
            let revision = self.walked + 1;
            let fenced = self.fencing.process(revision, record);
            let leased = self.leases.process(revision, record);
            self.walked = revision;
            self.fail("no older incarnation revives", fenced);
            self.fail("leases: grants mint once, and no lease leaves before its floor", leased);
        }
        let drained = self.drains.check(self.walked, &self.fencing.removed_from);
        self.fail("a drain's end removes only a draining endpoint", drained);
    }

    /// How far the history was walked.
    pub fn walked(&self) -> u64 {
        self.walked
    }
}
