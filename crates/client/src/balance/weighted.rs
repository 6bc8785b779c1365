//! Smooth weighted round robin, nginx style: over any window of picks each endpoint's share
//! tracks its `weight`, and heavy endpoints are interleaved with light ones rather than picked
//! in bursts (weights 5:1:1 give `a a b a c a a`, not `a a a a a b c`).
//!
//! # nginx's rule, and how a pick stays cheap
//!
//! nginx keeps a `current` per peer; on each pick every `current += weight`, the largest
//! `current` wins (ties to the earlier peer), and the winner's `current -= total_weight`.
//! Done literally that is O(n) per pick. Here peers of equal weight form a *class*: members of
//! a class gain the same amount every step, so the one with the largest `current` is always the
//! member picked least often so far, ties to the earlier one — the class is itself a rotation.
//! A class therefore keeps one `lead` (the `current` of its next member) and a cursor, and a
//! pick is O(number of distinct weights) — usually 1 to 3 — while producing exactly nginx's
//! sequence (`matches_the_literal_nginx_algorithm` checks it). A set where every weight differs
//! degrades to nginx's O(n).
//!
//! The peer order (which breaks ties) is the set's order rotated by an offset drawn from the
//! injected RNG at build, so a fleet of clients rebuilt at one revision does not start in step.

use std::collections::BTreeMap;
use std::sync::Arc;

use muster_core::Revision;
use rand_core::RngCore;

use crate::balance::draw::{below, effective_weight};
use crate::balance::{Balancer, EligibleSet, Pick, PickReason};
use crate::member::Member;

/// Smooth weighted round robin over an [`EligibleSet`]'s routable endpoints.
#[derive(Debug, Clone)]
pub struct SmoothWeighted {
    classes: Box<[WeightClass]>,
    /// Sum of all peers' weights: what the winner's `current` drops by.
    total_weight: i64,
    revision: Revision,
    reason: PickReason,
}

/// The peers of one weight, in peer order.
#[derive(Debug, Clone)]
struct WeightClass {
    weight: i64,
    /// nginx's `current` of the member at `next`. Members before `next` have been picked once
    /// more this round and sit exactly `total_weight` lower.
    lead: i64,
    /// (position in peer order, endpoint), ascending by position.
    members: Box<[(usize, Arc<Member>)]>,
    next: usize,
}

impl WeightClass {
    fn next_position(&self) -> usize {
        self.members[self.next].0
    }
}

impl SmoothWeighted {
    /// A schedule over `set`, its tie-break order rotated by an offset drawn from `rng`.
    pub fn new<R: RngCore + ?Sized>(set: &EligibleSet, rng: &mut R) -> SmoothWeighted {
        let len = set.routable().len();
        let rotation = if len == 0 { 0 } else { below(rng, len as u64) as usize };
        SmoothWeighted::with_rotation(set, rotation)
    }

    /// A schedule whose peer order is the set's order starting at index `rotation`.
    fn with_rotation(set: &EligibleSet, rotation: usize) -> SmoothWeighted {
        let routable = set.routable();
        let mut by_weight: BTreeMap<u64, Vec<(usize, Arc<Member>)>> = BTreeMap::new();
        for position in 0..routable.len() {
            let endpoint = &routable[(rotation + position) % routable.len()];
            by_weight
                .entry(effective_weight(endpoint))
                .or_default()
                .push((position, Arc::clone(endpoint)));
        }
        let total_weight = routable.iter().map(|e| effective_weight(e) as i64).sum();
        let classes = by_weight
            .into_iter()
            .map(|(weight, members)| WeightClass {
                weight: weight as i64,
                lead: 0,
                members: members.into(),
                next: 0,
            })
            .collect();
        SmoothWeighted {
            classes,
            total_weight,
            revision: set.revision(),
            reason: set.routing_reason(),
        }
    }
}

impl Balancer for SmoothWeighted {
    fn pick<R: RngCore + ?Sized>(&mut self, _rng: &mut R) -> Option<Pick> {
        let mut best = 0;
        for index in 0..self.classes.len() {
            let class = &mut self.classes[index];
            class.lead += class.weight;
            let (lead, position) = (class.lead, class.next_position());
            let leader = &self.classes[best];
            if lead > leader.lead || (lead == leader.lead && position < leader.next_position()) {
                best = index;
            }
        }
        let total_weight = self.total_weight;
        let class = self.classes.get_mut(best)?;
        let endpoint = Arc::clone(&class.members[class.next].1);
        class.next += 1;
        if class.next == class.members.len() {
            // Every member has now been picked once more: the new next member sits a full
            // total lower, exactly where nginx's `current -= total` left each of them.
            class.next = 0;
            class.lead -= total_weight;
        }
        Some(Pick {
            endpoint,
            revision: self.revision,
            reason: self.reason,
        })
    }
}

#[cfg(test)]
#[path = "weighted_tests.rs"]
mod tests;
