//! Invariant: **every acknowledged write is present, as acknowledged**.
//!
//! A write acknowledged with a new revision must be that revision's change on every node
//! (its hash equals the history's record), and no node may end below it; a write
//! acknowledged as already committed names a revision that exists. Checked at the
//! acknowledgement (the proposer applied it before answering) and again at the end, after
//! healing, against every node.

use std::collections::BTreeMap;

use super::history::History;

/// One acknowledged write.
#[derive(Debug, Clone)]
pub struct Ack {
    /// What it was, for a failure message.
    pub what: String,
    /// The revision it names.
    pub revision: u64,
    /// Hash of the `Applied` it was answered with, when it committed a new revision.
    pub committed: Option<u64>,
}

/// The acknowledged writes.
#[derive(Default)]
pub struct Acknowledged {
    acks: BTreeMap<u64, Ack>,
}

impl Acknowledged {
    /// Records an acknowledgement (op id → ack) and checks it against the history.
    pub fn ack(&mut self, op: u64, ack: Ack, history: &History) -> Result<(), String> {
        let result = check(&ack, history);
        self.acks.insert(op, ack);
        result
    }

    /// At the end: every acknowledged write against the final history and the revision
    /// every node reached.
    pub fn check_final(&self, history: &History, lowest_node_revision: u64) -> Result<(), String> {
        for ack in self.acks.values() {
            check(ack, history)?;
            if ack.revision > lowest_node_revision {
                return Err(format!(
                    "{} was acknowledged at revision {}, but a node ended at revision {lowest_node_revision}",
                    ack.what, ack.revision
                ));
            }
        }
        Ok(())
    }

    /// How many writes were acknowledged.
    pub fn len(&self) -> usize {
        self.acks.len()
    }

    /// Whether none was.
    pub fn is_empty(&self) -> bool {
        self.acks.is_empty()
    }
}

fn check(ack: &Ack, history: &History) -> Result<(), String> {
    match (ack.committed, history.revisions.get(&ack.revision)) {
        (Some(hash), Some(record)) if record.hash != hash => Err(format!(
            "{} was acknowledged as revision {}, which every node applied as {}",
            ack.what,
            ack.revision,
            super::history::summary(&record.updates)
        )),
        (Some(_), None) => Err(format!(
            "{} was acknowledged as revision {}, which no node applied",
            ack.what, ack.revision
        )),
        (None, _) if ack.revision > history.highest() => Err(format!(
            "{} was acknowledged as already committed at revision {}, beyond every node",
            ack.what, ack.revision
        )),
        _ => Ok(()),
    }
}
