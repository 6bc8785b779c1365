//! Resolve and pick in one call (SPEC C1–C5, C8): the resolver's current view, checked
//! against the stale budget for the operation's risk, turned into an eligible set (local
//! ejections applied) and a balancer, rebuilt only when the view's set or the ejections
//! change, then one pick, traced.
//!
//! ```text
//!  Resolver ──view──▶ usable(risk)? ──▶ EligibleSet + balancer (cached per set and
//!                                        ejection epoch) ──▶ Pick ── span: service, revision,
//!                                                                    instance, incarnation, reason
//!  call outcome ──report_success / report_failure──▶ OutlierDetector (local only)
//! ```

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::balance::{
    Balancer, ConfigError, EligibilityConfig, EligibleSet, HashRing, HashRingConfig, LeastRequest, LocalityAware,
    LocalityConfig, Pick, RoundRobin, SmoothWeighted,
};
use crate::eject::OutlierDetector;
use crate::member::{Member, MemberSet};
use crate::resolver::Resolver;
use crate::seed::SplitMix64;
use crate::tier::FailoverTier;
use crate::view::{Risk, StaleError};
use rand_core::RngCore;

/// Which balancer a [`Picker`] uses.
#[derive(Debug, Clone)]
pub enum Strategy {
    /// Each eligible endpoint in turn.
    RoundRobin,
    /// In proportion to the endpoints' weights (smooth, nginx-style).
    Weighted,
    /// Same zone, then region, then failover priorities, with spillover.
    Locality(LocalityConfig),
    /// Power of two choices by requests in flight: report each call's start and end with
    /// [`Picker::call_started`] / [`Picker::call_ended`].
    LeastRequest,
    /// Consistent hashing for affinity: [`Picker::pick_keyed`] sends one key to one endpoint
    /// for as long as it stays eligible.
    Hash(HashRingConfig),
}

/// Why nothing was picked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PickError {
    /// The view may not be used for this operation (no view yet, or too stale).
    #[error(transparent)]
    View(#[from] StaleError),
    /// The view is usable but holds no endpoint that may be picked (an empty set is an
    /// answer, never a reason to use an older one).
    #[error("no_endpoint: no eligible endpoint")]
    NoEndpoint,
}

impl PickError {
    /// A stable machine-readable code: `unavailable`, `unknown_service`, `stale`,
    /// `no_endpoint`. The `Display` starts with it, once.
    pub fn code(&self) -> &'static str {
        match self {
            PickError::View(stale) => stale.code(),
            PickError::NoEndpoint => "no_endpoint",
        }
    }
}

enum Built {
    RoundRobin(RoundRobin),
    Weighted(SmoothWeighted),
    Locality(LocalityAware),
    LeastRequest(LeastRequest),
    Hash(HashRing),
}

struct Cache {
    /// The set the balancer was built from (compared by pointer).
    set: Option<Arc<MemberSet>>,
    /// The failover tier it was built with (compared by pointer).
    tier: Option<Arc<[Arc<Member>]>>,
    /// The ejection state it was built with.
    epoch: u64,
    /// When an ejection ends and the set must be rebuilt.
    rebuild_at_ms: Option<u64>,
    eligible: Option<EligibleSet>,
    balancer: Option<Built>,
    ejections: OutlierDetector,
    epoch_now: u64,
    rng: SplitMix64,
}

/// Resolves a service and picks endpoints for calls.
pub struct Picker {
    resolver: Resolver,
    /// Another region's endpoints balanced over beside the view while the region's failover
    /// decision spills (SPEC G1).
    tier: Option<FailoverTier>,
    eligibility: EligibilityConfig,
    strategy: Strategy,
    cache: Mutex<Cache>,
}

impl std::fmt::Debug for Picker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Picker")
            .field("service", self.resolver.key())
            .field("strategy", &self.strategy)
            .finish()
    }
}

impl Picker {
    /// A picker over `resolver`'s views; refuses a strategy that cannot work (a hash ring
    /// without points).
    pub fn new(
        resolver: Resolver,
        eligibility: EligibilityConfig,
        strategy: Strategy,
        ejections: OutlierDetector,
    ) -> Result<Picker, ConfigError> {
        if let Strategy::Hash(config) = &strategy
            && config.vnodes_per_endpoint == 0
        {
            return Err(ConfigError::Zero {
                field: "vnodes_per_endpoint",
            });
        }
        let key = resolver.key().clone();
        Ok(Picker {
            resolver,
            tier: None,
            eligibility,
            strategy,
            cache: Mutex::new(Cache {
                set: None,
                tier: None,
                epoch: 0,
                rebuild_at_ms: None,
                eligible: None,
                balancer: None,
                ejections,
                epoch_now: 0,
                rng: SplitMix64::per_process(&key),
            }),
        })
    }

    /// Balances over `tier`'s members too, beside the view's: the endpoints a federated
    /// region's failover decision spills to, re-weighted to the spilled share.
    #[must_use]
    pub fn with_failover(mut self, tier: FailoverTier) -> Picker {
        self.tier = Some(tier);
        self
    }

    fn cache(&self) -> MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Picks an endpoint for one call of this risk, at `now_ms` (the caller's clock for
    /// ejection times), and emits a `pick` span event carrying the selection (SPEC C8).
    pub fn pick(&self, risk: Risk, now_ms: u64) -> Result<Pick, PickError> {
        self.pick_with(risk, now_ms, None)
    }

    /// Like [`Picker::pick`], with an affinity key: with [`Strategy::Hash`] the same key goes
    /// to the same endpoint while it stays eligible; other strategies ignore the key.
    pub fn pick_keyed(&self, risk: Risk, key: u64, now_ms: u64) -> Result<Pick, PickError> {
        self.pick_with(risk, now_ms, Some(key))
    }

    fn pick_with(&self, risk: Risk, now_ms: u64, key: Option<u64>) -> Result<Pick, PickError> {
        let usable = self.resolver.usable(risk)?;
        let mut guard = self.cache();
        let cache = &mut *guard;
        let tier = self.tier.as_ref().map(FailoverTier::members);
        let same_tier = match (&cache.tier, &tier) {
            (Some(held), Some(now)) => Arc::ptr_eq(held, now),
            (held, now) => held.is_none() && now.is_none(),
        };
        let same_set = same_tier && cache.set.as_ref().is_some_and(|set| Arc::ptr_eq(set, &usable.snapshot));
        let ejection_ended = cache.rebuild_at_ms.is_some_and(|at| now_ms >= at);
        if !same_set || cache.epoch != cache.epoch_now || ejection_ended || cache.balancer.is_none() {
            let set = EligibleSet::build(
                usable.snapshot.revision(),
                usable.snapshot.iter().chain(tier.iter().flat_map(|tier| tier.iter())),
                &self.eligibility,
                &cache.ejections,
                now_ms,
            );
            let balancer = match (&self.strategy, cache.balancer.take()) {
                (Strategy::RoundRobin, _) => Built::RoundRobin(RoundRobin::new(&set, &mut cache.rng)),
                (Strategy::Weighted, _) => Built::Weighted(SmoothWeighted::new(&set, &mut cache.rng)),
                (Strategy::Locality(config), _) => Built::Locality(LocalityAware::new(&set, config)),
                // Rebuilt in place, so the requests in flight keep counting.
                (Strategy::LeastRequest, Some(Built::LeastRequest(mut p2c))) => {
                    p2c.rebuild(&set);
                    Built::LeastRequest(p2c)
                }
                (Strategy::LeastRequest, _) => Built::LeastRequest(LeastRequest::new(&set)),
                (Strategy::Hash(config), _) => {
                    Built::Hash(HashRing::new(&set, config).expect("points per endpoint checked in Picker::new"))
                }
            };
            cache.balancer = Some(balancer);
            cache.eligible = Some(set);
            cache.set = Some(Arc::clone(&usable.snapshot));
            cache.tier = tier;
            cache.epoch = cache.epoch_now;
            cache.rebuild_at_ms = cache.ejections.next_return_ms(now_ms);
        }
        let picked = match cache.balancer.as_mut() {
            Some(Built::RoundRobin(b)) => b.pick(&mut cache.rng),
            Some(Built::Weighted(b)) => b.pick(&mut cache.rng),
            Some(Built::Locality(b)) => Balancer::pick(b, &mut cache.rng),
            Some(Built::LeastRequest(b)) => b.pick(&mut cache.rng),
            // Without a key, any point of the ring: spread like random.
            Some(Built::Hash(ring)) => ring.pick_u64(key.unwrap_or_else(|| cache.rng.next_u64())),
            None => None,
        };
        let pick = picked.ok_or(PickError::NoEndpoint)?;
        // The span is built only when its event is wanted: a pick takes tens of nanoseconds,
        // formatting a span's fields a microsecond (and this runs under the cache lock).
        if tracing::enabled!(tracing::Level::DEBUG) {
            let span = pick.span(self.resolver.key());
            tracing::debug!(parent: &span, stale = usable.stale, age_ms = usable.age_ms, "pick");
        }
        Ok(pick)
    }

    /// A call to `endpoint` started (counts for [`Strategy::LeastRequest`]).
    pub fn call_started(&self, endpoint: &Member) {
        if let Some(Built::LeastRequest(p2c)) = self.cache().balancer.as_mut() {
            p2c.start(endpoint);
        }
    }

    /// A call to `endpoint` ended, whatever its outcome.
    pub fn call_ended(&self, endpoint: &Member) {
        if let Some(Built::LeastRequest(p2c)) = self.cache().balancer.as_mut() {
            p2c.end(endpoint);
        }
    }

    /// The call to `endpoint` succeeded.
    pub fn report_success(&self, endpoint: &Member, now_ms: u64) {
        self.cache().ejections.record_success(endpoint, now_ms);
    }

    /// The call to `endpoint` failed (connection refused, reset, timeout): counts toward its
    /// local ejection; an ejection rebuilds the eligible set at the next pick. Local only.
    /// Returns whether this failure ejected the endpoint.
    pub fn report_failure(&self, endpoint: &Member, now_ms: u64) -> bool {
        let mut cache = self.cache();
        let known = cache.eligible.as_ref().map_or(0, |set| set.known().len());
        let outcome = cache.ejections.record_failure(endpoint, known, now_ms);
        let ejected = matches!(outcome, crate::eject::FailureOutcome::Ejected(_));
        if ejected {
            cache.epoch_now += 1;
        }
        ejected
    }

    /// Whether this picker has ejected `endpoint` at `now_ms` (local evidence, SPEC H6).
    pub fn is_ejected(&self, endpoint: &Member, now_ms: u64) -> bool {
        self.cache().ejections.is_ejected(endpoint, now_ms)
    }

    /// The eligibility rule this picker applies.
    pub fn eligibility(&self) -> &EligibilityConfig {
        &self.eligibility
    }
}
