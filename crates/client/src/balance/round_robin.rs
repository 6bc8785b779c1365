//! Round robin: each routable endpoint in turn, weights ignored.
//!
//! The rotation starts at a random position, drawn from the injected RNG when the balancer is
//! built: a fleet of clients that all rebuild at the same revision would otherwise all send
//! their first request to the same endpoint.

use std::sync::Arc;

use muster_core::Revision;
use rand_core::RngCore;

use crate::balance::draw::below;
use crate::balance::{Balancer, EligibleSet, Pick, PickReason};
use crate::member::Member;

/// Round robin over an [`EligibleSet`]'s routable endpoints.
#[derive(Debug, Clone)]
pub struct RoundRobin {
    endpoints: Box<[Arc<Member>]>,
    next: usize,
    revision: Revision,
    reason: PickReason,
}

impl RoundRobin {
    /// A rotation over `set`, starting at a position drawn from `rng`.
    pub fn new<R: RngCore + ?Sized>(set: &EligibleSet, rng: &mut R) -> RoundRobin {
        let endpoints: Box<[Arc<Member>]> = set.routable().into();
        let next = if endpoints.is_empty() {
            0
        } else {
            below(rng, endpoints.len() as u64) as usize
        };
        RoundRobin {
            endpoints,
            next,
            revision: set.revision(),
            reason: set.routing_reason(),
        }
    }
}

impl Balancer for RoundRobin {
    fn pick<R: RngCore + ?Sized>(&mut self, _rng: &mut R) -> Option<Pick> {
        let endpoint = self.endpoints.get(self.next)?;
        self.next += 1;
        if self.next == self.endpoints.len() {
            self.next = 0;
        }
        Some(Pick {
            endpoint: Arc::clone(endpoint),
            revision: self.revision,
            reason: self.reason,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::balance::fixtures::{Fixture, rng, set_of};

    #[test]
    fn each_eligible_endpoint_in_turn_from_a_random_start() {
        let set = set_of((0..5).map(|n| Fixture::ready(n).build()));
        let mut balancer = RoundRobin::new(&set, &mut rng(7));
        let firsts: Vec<_> = (0..10)
            .map(|_| balancer.pick(&mut rng(0)).unwrap().endpoint.instance.to_string())
            .collect();
        // Ten picks over five endpoints: two full rotations in one fixed order.
        assert_eq!(firsts[..5], firsts[5..]);
        let mut sorted = firsts[..5].to_vec();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), 5, "{firsts:?}");
        // The start differs between seeds (desynchronises a fleet rebuilt at one revision).
        let starts: std::collections::BTreeSet<_> = (0..20)
            .map(|seed| {
                RoundRobin::new(&set, &mut rng(seed))
                    .pick(&mut rng(0))
                    .unwrap()
                    .endpoint
                    .instance
                    .clone()
            })
            .collect();
        assert!(starts.len() > 1, "every seed started at {starts:?}");
    }

    #[test]
    fn an_empty_set_picks_nothing() {
        let set = set_of([]);
        assert!(RoundRobin::new(&set, &mut rng(1)).pick(&mut rng(1)).is_none());
    }
}
