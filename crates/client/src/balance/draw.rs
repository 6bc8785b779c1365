//! Random draws shared by the balancers: unbiased bounded integers and weighted choice.

use std::sync::Arc;

use rand_core::RngCore;

use crate::member::Member;

/// A uniform index in `0..n` (`n > 0`) by Lemire's multiply-high: one 64-bit draw, no
/// division, bias at most `n / 2^64` (nil for any set a client holds).
pub(crate) fn below<R: RngCore + ?Sized>(rng: &mut R, n: u64) -> u64 {
    debug_assert!(n > 0);
    ((u128::from(rng.next_u64()) * u128::from(n)) >> 64) as u64
}

/// Endpoints chosen in proportion to their `weight`: cumulative weights, one draw and a
/// binary search per pick (9 probes for 500 endpoints).
#[derive(Debug, Clone, Default)]
pub(crate) struct WeightedPool {
    endpoints: Box<[Arc<Member>]>,
    /// `cumulative[i]` is the sum of the weights of endpoints `0..=i`.
    cumulative: Box<[u64]>,
}

impl WeightedPool {
    pub(crate) fn new(endpoints: Vec<Arc<Member>>) -> WeightedPool {
        let mut total = 0;
        let cumulative = endpoints
            .iter()
            .map(|endpoint| {
                total += effective_weight(endpoint);
                total
            })
            .collect();
        WeightedPool {
            endpoints: endpoints.into(),
            cumulative,
        }
    }

    pub(crate) fn sample<R: RngCore + ?Sized>(&self, rng: &mut R) -> Option<&Arc<Member>> {
        match self.endpoints.len() {
            0 => None,
            1 => self.endpoints.first(),
            _ => {
                let total = *self.cumulative.last()?;
                let ticket = below(rng, total);
                let index = self.cumulative.partition_point(|&end| end <= ticket);
                self.endpoints.get(index)
            }
        }
    }
}

/// An endpoint's share for the weighted balancers. The registry refuses weight 0; a hand-built
/// record that has one counts as 1, so no pool has a total of zero.
pub(crate) fn effective_weight(endpoint: &Member) -> u64 {
    u64::from(endpoint.weight.max(1))
}
