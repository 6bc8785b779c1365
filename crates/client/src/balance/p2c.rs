//! Power of two choices, least request: draw two distinct endpoints at random, send the
//! request to the one with fewer requests in flight (relative to its weight).
//!
//! Two random choices get nearly all the benefit of scanning for the least loaded endpoint
//! (Mitzenmacher) at O(1), and unlike "always the least loaded" they do not herd every client
//! onto the one endpoint that just came back empty.
//!
//! # Load reports
//!
//! The caller reports each request's start and end ([`LeastRequest::start`],
//! [`LeastRequest::end`]). Counts are per endpoint (instance and incarnation) and survive
//! [`LeastRequest::rebuild`]: a request that started before a view change ends after it.
//! Reports about an endpoint that is not in the set (it left, or is a replaced incarnation)
//! are ignored, and an end without a start never drives a count below zero.
//!
//! # Weights
//!
//! With different weights the load compared is `(in_flight + 1) / weight` (Envoy's weighted
//! least request with an active-request bias of 1); with equal weights that is just the
//! in-flight count.

use std::collections::HashMap;
use std::sync::Arc;

use muster_core::{Incarnation, InstanceId, Revision};
use rand_core::RngCore;

use crate::balance::draw::{below, effective_weight};
use crate::balance::{Balancer, EligibleSet, Pick, PickReason};
use crate::member::Member;

/// Power-of-two-choices least-request over an [`EligibleSet`]'s routable endpoints.
#[derive(Debug, Clone)]
pub struct LeastRequest {
    endpoints: Box<[Arc<Member>]>,
    in_flight: Box<[u32]>,
    /// Where each instance sits in `endpoints`, for load reports.
    slots: HashMap<InstanceId, (Incarnation, usize)>,
    revision: Revision,
    reason: PickReason,
}

impl LeastRequest {
    /// A balancer over `set` with nothing in flight.
    pub fn new(set: &EligibleSet) -> LeastRequest {
        let mut balancer = LeastRequest {
            endpoints: Box::default(),
            in_flight: Box::default(),
            slots: HashMap::new(),
            revision: set.revision(),
            reason: set.routing_reason(),
        };
        balancer.rebuild(set);
        balancer
    }

    /// Moves to a new `set`, keeping the in-flight counts of endpoints that stay.
    pub fn rebuild(&mut self, set: &EligibleSet) {
        let endpoints: Box<[Arc<Member>]> = set.routable().into();
        let mut in_flight = vec![0; endpoints.len()];
        let mut slots = HashMap::with_capacity(endpoints.len());
        for (slot, endpoint) in endpoints.iter().enumerate() {
            if let Some(previous) = self.slot_of(endpoint) {
                in_flight[slot] = self.in_flight[previous];
            }
            slots.insert(endpoint.instance.clone(), (endpoint.incarnation, slot));
        }
        *self = LeastRequest {
            endpoints,
            in_flight: in_flight.into(),
            slots,
            revision: set.revision(),
            reason: set.routing_reason(),
        };
    }

    /// Records that a request to `endpoint` started.
    pub fn start(&mut self, endpoint: &Member) {
        if let Some(slot) = self.slot_of(endpoint) {
            self.in_flight[slot] = self.in_flight[slot].saturating_add(1);
        }
    }

    /// Records that a request to `endpoint` ended, however it ended.
    pub fn end(&mut self, endpoint: &Member) {
        if let Some(slot) = self.slot_of(endpoint) {
            self.in_flight[slot] = self.in_flight[slot].saturating_sub(1);
        }
    }

    /// Requests in flight to `endpoint`, as reported; `None` when it is not in the set.
    pub fn in_flight(&self, endpoint: &Member) -> Option<u32> {
        self.slot_of(endpoint).map(|slot| self.in_flight[slot])
    }

    fn slot_of(&self, endpoint: &Member) -> Option<usize> {
        match self.slots.get(&endpoint.instance) {
            Some(&(incarnation, slot)) if incarnation == endpoint.incarnation => Some(slot),
            _ => None,
        }
    }

    /// Whether `a` is no more loaded than `b`: `(in_flight + 1) / weight`, cross-multiplied.
    fn lighter(&self, a: usize, b: usize) -> bool {
        let load = |slot: usize| u64::from(self.in_flight[slot]) + 1;
        load(a) * effective_weight(&self.endpoints[b]) <= load(b) * effective_weight(&self.endpoints[a])
    }
}

impl Balancer for LeastRequest {
    fn pick<R: RngCore + ?Sized>(&mut self, rng: &mut R) -> Option<Pick> {
        let len = self.endpoints.len() as u64;
        let chosen = match len {
            0 => return None,
            1 => 0,
            _ => {
                let first = below(rng, len) as usize;
                // A second draw from the other len - 1, so the two are always distinct.
                let mut second = below(rng, len - 1) as usize;
                if second >= first {
                    second += 1;
                }
                if self.lighter(first, second) { first } else { second }
            }
        };
        Some(Pick {
            endpoint: Arc::clone(&self.endpoints[chosen]),
            revision: self.revision,
            reason: self.reason,
        })
    }
}

#[cfg(test)]
#[path = "p2c_tests.rs"]
mod tests;
