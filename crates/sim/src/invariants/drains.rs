//! Invariants on drains (SPEC L6): **the end of a drain removes only a draining
//! endpoint**, and **every drain's grace ends**.
//!
//! - The leader's duties end a drain (its grace passed, or the instance reported nothing
//!   in flight) with a deregistration; if the owner lifted the drain meanwhile, that
//!   deregistration must not remove the endpoint, so it is compare-and-swap on the
//!   draining record. The history's walk knows each removal's previous state.
//! - At the end, after healing and a quiet period, no endpoint is still draining past its
//!   grace (plus an election and a tick): a grace that lived only in the memory of the node
//!   that took the drain, or of a leader that since lost office, breaks it.

use std::collections::BTreeMap;

use muster_core::{InstanceId, ServingState};

/// Drain ends waiting to be checked: (revision, instance) → what the drain end was for.
#[derive(Default)]
pub struct Drains {
    ends: BTreeMap<(u64, InstanceId), String>,
}

impl Drains {
    /// A drain end (its deregistration) committed at `revision`.
    pub fn ended(&mut self, revision: u64, instance: InstanceId, what: String) {
        self.ends.insert((revision, instance), what);
    }

    /// Checks the drain ends up to `walked` (the history walked so far).
    pub fn check(
        &mut self,
        walked: u64,
        removed_from: &BTreeMap<(u64, InstanceId), ServingState>,
    ) -> Result<(), String> {
        let due: Vec<(u64, InstanceId)> = self
            .ends
            .range(..(walked + 1, min_instance()))
            .map(|(k, _)| k.clone())
            .collect();
        for slot in due {
            let what = self.ends.remove(&slot).unwrap_or_default();
            match removed_from.get(&slot) {
                Some(ServingState::Draining) | None => {}
                Some(state) => {
                    return Err(format!(
                        "{what} removed {} at revision {} while it was {state:?}: the drain had been lifted",
                        slot.1, slot.0
                    ));
                }
            }
        }
        Ok(())
    }
}

fn min_instance() -> InstanceId {
    InstanceId::new("0").expect("'0' is a valid instance id")
}
