//! Locality-aware balancing (SPEC C4, G1): prefer the caller's zone, then its region, then the
//! endpoints' explicit failover priorities, spilling traffic onward only in proportion to the
//! healthy capacity a tier lacks.
//!
//! # Tiers
//!
//! Each known endpoint falls in a [`Tier`]: its failover `priority` (from the record, 0 first),
//! then its [`Proximity`] to the caller (same zone, same region, other region). Tiers are
//! ordered lexicographically, priority first — a priority is the operator's explicit "use only
//! when lower tiers cannot serve", so it outranks nearness:
//!
//! ```text
//!   (0, same zone) < (0, same region) < (0, other region) < (1, same zone) < ...
//! ```
//!
//! Regions and zones compare as whole values, unknown (`None`) included: a caller and endpoints
//! that all say nothing about locality share one tier. [`LocalityConfig::farthest`] is the
//! cross-region policy: with `SameRegion`, other-region endpoints are never used, not even in a
//! panic.
//!
//! # Spillover — the exact rule (Envoy's priority load, overprovisioning = 1 / threshold)
//!
//! For tiers `0..k` in order, with `known_i` endpoints of which `eligible_i` are eligible:
//!
//! ```text
//!   health_i   = eligible_i / known_i                      (endpoint counts, not weights)
//!   capacity_i = min(1, health_i / spillover_threshold)    (threshold 0: 1 if any eligible)
//!   share_0    = capacity_0
//!   share_i    = min(1 - (share_0 + ... + share_{i-1}), capacity_i)
//!   if the shares sum to s < 1, every share is divided by s   (too little capacity anywhere:
//!                                                               spread what there is)
//! ```
//!
//! So a tier at or above the threshold keeps all its traffic; below it, it keeps
//! `health / threshold` and the rest flows to the next tier, as far as that tier's own capacity
//! goes. Example, threshold 0.8: the local zone has 10 endpoints, 4 eligible, so it keeps
//! 0.4 / 0.8 = 50% and the other 50% spills to the same region. Within a tier, endpoints are
//! chosen at random in proportion to `weight`. Picks from any tier but the first carry
//! [`PickReason::Spillover`].
//!
//! # Panic
//!
//! When the set is in panic ([`SetMode::Panic`](crate::balance::SetMode)) tiers are ignored, as
//! Envoy ignores zone-aware routing in panic: picks spread over all known endpoints within
//! `farthest`, by weight, and say [`PickReason::Panic`].

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use muster_core::{Label, Locality, Revision};
use rand_core::RngCore;

use crate::balance::draw::WeightedPool;
use crate::balance::{Balancer, EligibleSet, Fraction, Pick, PickReason, SetMode};
use crate::member::Member;

/// How near an endpoint is to the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Proximity {
    /// Same region and same zone.
    SameZone,
    /// Same region, another zone.
    SameRegion,
    /// Another region.
    OtherRegion,
}

impl Proximity {
    /// How near an endpoint at `locality` is to a caller in `region` / `zone`.
    pub fn between(region: Option<&Label>, zone: Option<&Label>, locality: &Locality) -> Proximity {
        if locality.region.as_ref() != region {
            Proximity::OtherRegion
        } else if locality.zone.as_ref() != zone {
            Proximity::SameRegion
        } else {
            Proximity::SameZone
        }
    }

    fn code(self) -> &'static str {
        match self {
            Proximity::SameZone => "same_zone",
            Proximity::SameRegion => "same_region",
            Proximity::OtherRegion => "other_region",
        }
    }
}

/// A failover tier: priority first, then proximity (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tier {
    /// The endpoints' failover priority, 0 preferred.
    pub priority: u8,
    /// Their nearness to the caller.
    pub proximity: Proximity,
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "priority {} {}", self.priority, self.proximity.code())
    }
}

/// Where the caller is and how readily it leaves its tier.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalityConfig {
    /// The caller's region.
    pub region: Option<Label>,
    /// The caller's zone.
    pub zone: Option<Label>,
    /// A tier with at least this fraction of its endpoints eligible keeps all its traffic.
    pub spillover_threshold: Fraction,
    /// The farthest endpoints this caller may use: `SameRegion` forbids cross-region failover.
    pub farthest: Proximity,
}

/// 70%: Envoy's overprovisioning factor of 1.4 treats a tier as able to carry its full load
/// while 1 / 1.4 ≈ 71% of it is healthy, on the assumption that fleets run with ~40% headroom.
const DEFAULT_SPILLOVER_THRESHOLD: Fraction = Fraction::percent(70);

impl Default for LocalityConfig {
    /// A caller with no locality, the 70% threshold, cross-region failover allowed.
    fn default() -> Self {
        LocalityConfig {
            region: None,
            zone: None,
            spillover_threshold: DEFAULT_SPILLOVER_THRESHOLD,
            farthest: Proximity::OtherRegion,
        }
    }
}

impl LocalityConfig {
    /// The tier of `endpoint` for this caller.
    pub fn tier_of(&self, endpoint: &Member) -> Tier {
        Tier {
            priority: endpoint.locality.priority,
            proximity: Proximity::between(self.region.as_ref(), self.zone.as_ref(), &endpoint.locality),
        }
    }
}

/// Locality-aware balancing over an [`EligibleSet`].
#[derive(Debug, Clone)]
pub struct LocalityAware {
    /// The tiers that get traffic, in order.
    tiers: Box<[TierPool]>,
    revision: Revision,
}

/// One tier's eligible endpoints and where its share of the draw ends.
#[derive(Debug, Clone)]
struct TierPool {
    tier: Option<Tier>,
    share: f64,
    /// A draw `r` (uniform u64) lands in the first tier with `r < share_end`; the last tier
    /// takes every draw (`u64::MAX`).
    share_end: u64,
    endpoints: WeightedPool,
    reason: PickReason,
}

/// Counts for one tier while building.
#[derive(Default)]
struct TierCount {
    known: usize,
    eligible: Vec<Arc<Member>>,
}

impl LocalityAware {
    /// Tiers and shares for `set` as seen by the caller in `config`.
    pub fn new(set: &EligibleSet, config: &LocalityConfig) -> LocalityAware {
        let within_reach = |endpoint: &&Arc<Member>| config.tier_of(endpoint).proximity <= config.farthest;
        let tiers = match set.mode() {
            SetMode::Panic => {
                let all: Vec<_> = set.known().iter().filter(within_reach).cloned().collect();
                vec![TierPool {
                    tier: None,
                    share: 1.0,
                    share_end: u64::MAX,
                    endpoints: WeightedPool::new(all),
                    reason: PickReason::Panic,
                }]
            }
            SetMode::Normal => {
                let mut counts: BTreeMap<Tier, TierCount> = BTreeMap::new();
                let eligible_len = set.eligible().len();
                for (index, endpoint) in set.known().iter().enumerate().filter(|(_, e)| within_reach(e)) {
                    let count = counts.entry(config.tier_of(endpoint)).or_default();
                    count.known += 1;
                    if index < eligible_len {
                        count.eligible.push(Arc::clone(endpoint));
                    }
                }
                spill(counts, config.spillover_threshold)
            }
        };
        LocalityAware {
            tiers: tiers.into(),
            revision: set.revision(),
        }
    }

    /// Each tier that gets traffic and its share of it (one `None` tier with share 1 in
    /// panic).
    pub fn shares(&self) -> impl Iterator<Item = (Option<Tier>, f64)> + '_ {
        self.tiers.iter().map(|pool| (pool.tier, pool.share))
    }

    /// Picks a tier by its share, then an endpoint in it by weight.
    pub fn pick<R: RngCore + ?Sized>(&self, rng: &mut R) -> Option<Pick> {
        let pool = match &*self.tiers {
            [only] => only,
            tiers => {
                let draw = rng.next_u64();
                tiers
                    .iter()
                    .find(|pool| draw < pool.share_end)
                    .or_else(|| tiers.last())?
            }
        };
        Some(Pick {
            endpoint: Arc::clone(pool.endpoints.sample(rng)?),
            revision: self.revision,
            reason: pool.reason,
        })
    }
}

impl Balancer for LocalityAware {
    fn pick<R: RngCore + ?Sized>(&mut self, rng: &mut R) -> Option<Pick> {
        LocalityAware::pick(self, rng)
    }
}

/// The spillover rule of the module docs, over tiers in order.
fn spill(counts: BTreeMap<Tier, TierCount>, threshold: Fraction) -> Vec<TierPool> {
    let mut remaining = 1.0_f64;
    let mut pools = Vec::new();
    for (index, (tier, count)) in counts.into_iter().enumerate() {
        let health = count.eligible.len() as f64 / count.known as f64;
        let capacity = if threshold.get() == 0.0 {
            if count.eligible.is_empty() { 0.0 } else { 1.0 }
        } else {
            (health / threshold.get()).min(1.0)
        };
        let share = remaining.min(capacity);
        remaining -= share;
        if share > 0.0 {
            pools.push(TierPool {
                tier: Some(tier),
                share,
                share_end: 0,
                endpoints: WeightedPool::new(count.eligible),
                reason: if index == 0 {
                    PickReason::Normal
                } else {
                    PickReason::Spillover(tier)
                },
            });
        }
    }
    let total: f64 = pools.iter().map(|pool| pool.share).sum();
    let mut cumulative = 0.0;
    for pool in &mut pools {
        pool.share /= total;
        cumulative += pool.share;
        // 2^64 as f64; the cast saturates, so the last tier ends at u64::MAX.
        pool.share_end = (cumulative * 18_446_744_073_709_551_616.0) as u64;
    }
    if let Some(last) = pools.last_mut() {
        last.share_end = u64::MAX;
    }
    pools
}

#[cfg(test)]
#[path = "locality_tests.rs"]
mod tests;
