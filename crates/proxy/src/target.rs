//! A listener's target: the service's view (a shared [`Resolver`]), the listener's own
//! balancer and local ejections (a [`Picker`]), its retry budget, and the requests in flight
//! per endpoint (SPEC D3, C1–C5).
//!
//! ```text
//!  Resolver (one per service, shared) ──view──▶ Picker (per listener: balancer, ejections)
//!       │                                          │ pick ──▶ Chosen { endpoint, addr }
//!       └──subscribe──▶ departed(endpoint): resolves once the registry drains or removes it
//!  InFlight guard: call_started on creation, call_ended + count on drop
//! ```

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use muster_client::FailoverTier;
use muster_client::Member;
use muster_client::OutlierDetector;
use muster_client::Resolver;
use muster_client::Risk;
use muster_client::{EligibilityConfig, HashRingConfig, LocalityConfig};
use muster_client::{PickError, Picker, Strategy};
use muster_core::{Incarnation, InstanceId, Protocol, ServingState};

use crate::budget::RetryBudget;
use crate::clock;
use crate::config::{BalancerKind, ListenerConfig, ProxyConfig};

/// One run of one instance: what in-flight counts and upstream pools are keyed by.
pub type EndpointKey = (InstanceId, Incarnation);

/// The key of an endpoint record.
pub fn key_of(endpoint: &Member) -> EndpointKey {
    (endpoint.instance.clone(), endpoint.incarnation)
}

/// How many times the balancer is asked for an endpoint not tried yet and with the
/// listener's port before the proxy settles for a tried one (or refuses).
const CHOOSE_DRAWS: usize = 8;

/// A listener's counters, read by `/metrics`.
#[derive(Debug, Default)]
pub struct Stats {
    /// Requests (HTTP) or connections (TCP) forwarded and answered.
    pub ok: AtomicU64,
    /// Requests or connections that failed after every allowed attempt.
    pub failed: AtomicU64,
    /// Refused: no view, or no eligible endpoint.
    pub refused: AtomicU64,
    /// Retries sent.
    pub retries: AtomicU64,
    /// Retries wanted but refused by the budget.
    pub budget_exhausted: AtomicU64,
    /// Local ejections.
    pub ejections: AtomicU64,
}

impl Stats {
    /// Adds one to a counter.
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// An endpoint chosen for one attempt.
#[derive(Debug, Clone)]
pub struct Chosen {
    /// The record.
    pub endpoint: Arc<Member>,
    /// Where to connect.
    pub addr: SocketAddr,
    /// What that port speaks, as registered.
    pub protocol: Protocol,
}

/// Why nothing could be chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// There is no view (registry unreachable since start, no last-known-good).
    NoView,
    /// The view holds no eligible endpoint.
    NoEndpoint,
}

impl Refusal {
    /// The stable code, in logs and error bodies.
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::NoView => "no_view",
            Refusal::NoEndpoint => "no_endpoint",
        }
    }
}

/// A listener's runtime state.
pub struct Target {
    /// The listener's settings.
    pub config: ListenerConfig,
    resolver: Arc<Resolver>,
    picker: Picker,
    /// The failover tier the picker balances over too, when the proxy follows one.
    tier: Option<FailoverTier>,
    budget: Mutex<RetryBudget>,
    in_flight: Mutex<HashMap<EndpointKey, u64>>,
    /// The counters.
    pub stats: Stats,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target").field("listen", &self.config.listen).finish()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Target {
    /// The target of `listener`, over `resolver`'s view.
    pub fn new(listener: &ListenerConfig, proxy: &ProxyConfig, resolver: Arc<Resolver>) -> Target {
        let strategy = match listener.balancer {
            BalancerKind::P2c => Strategy::LeastRequest,
            BalancerKind::Weighted => Strategy::Weighted,
            BalancerKind::RoundRobin => Strategy::RoundRobin,
            BalancerKind::Hash => Strategy::Hash(HashRingConfig::default()),
            BalancerKind::Locality => Strategy::Locality(LocalityConfig {
                region: proxy.region.clone(),
                zone: proxy.zone.clone(),
                ..LocalityConfig::default()
            }),
        };
        let picker = Picker::new(
            Resolver::clone(&resolver),
            EligibilityConfig::default(),
            strategy,
            OutlierDetector::default(),
        )
        .expect("the default hash ring has points");
        Target {
            config: listener.clone(),
            resolver,
            picker,
            tier: None,
            budget: Mutex::new(RetryBudget::new(listener.budget)),
            in_flight: Mutex::new(HashMap::new()),
            stats: Stats::default(),
        }
    }

    /// Balances over the service's failover tier too (SPEC G1).
    #[must_use]
    pub fn with_failover(mut self, tier: FailoverTier) -> Target {
        self.picker = self.picker.with_failover(tier.clone());
        self.tier = Some(tier);
        self
    }

    /// The failover tier it follows, if any (a clone: its own change notifications).
    pub fn tier(&self) -> Option<FailoverTier> {
        self.tier.clone()
    }

    /// Whether new work may still go to `key`: the view routes it (see [`routed`]), or it is
    /// a member of the failover tier now.
    pub fn routes(&self, view: &muster_client::view::View, key: &EndpointKey) -> bool {
        routed(view, key)
            || self.tier.as_ref().is_some_and(|tier| {
                tier.members()
                    .iter()
                    .any(|member| member.instance == key.0 && member.incarnation == key.1)
            })
    }

    /// The resolver of the listener's service.
    pub fn resolver(&self) -> &Arc<Resolver> {
        &self.resolver
    }

    /// The picker (balancer and local ejections).
    pub fn picker(&self) -> &Picker {
        &self.picker
    }

    /// Whether any view exists (from the registry or a last-known-good file).
    pub fn has_view(&self) -> bool {
        self.resolver.view().active().is_some()
    }

    /// Chooses an endpoint for one attempt. The view may be older than the stale budget: a
    /// proxy keeps forwarding to its last known good set through a registry outage and
    /// reports the age (SPEC C2, read-only risk with stale reads allowed).
    ///
    /// A retry passes the endpoints already tried in `avoid`: the balancer is asked again (up
    /// to eight draws) for another one, since a retry to the endpoint that just failed rarely
    /// helps; only if it offers nothing else is a tried one used again. This makes a repeat
    /// unlikely (a P2C draw over three endpoints repeats with p ≈ 1/3 per draw), not impossible.
    pub fn choose(&self, affinity: Option<u64>, avoid: &[EndpointKey]) -> Result<Chosen, Refusal> {
        let now = clock::now_ms();
        let mut fallback = None;
        for draw in 0..CHOOSE_DRAWS {
            let pick = match affinity {
                // A retry of a keyed request leaves its ring point: any endpoint will do.
                Some(key) if draw == 0 && avoid.is_empty() => self.picker.pick_keyed(Risk::ReadOnly, key, now),
                _ => self.picker.pick(Risk::ReadOnly, now),
            }
            .map_err(|err| match err {
                PickError::NoEndpoint => Refusal::NoEndpoint,
                _ => Refusal::NoView,
            })?;
            // An endpoint without the listener's port (a rollout adding the port) is drawn
            // past, like one already tried.
            let Some((addr, protocol)) = self.port_of(&pick.endpoint) else {
                continue;
            };
            let fresh = !avoid.contains(&key_of(&pick.endpoint));
            let chosen = Chosen {
                endpoint: pick.endpoint,
                addr,
                protocol,
            };
            if fresh {
                return Ok(chosen);
            }
            fallback = Some(chosen);
        }
        fallback.ok_or(Refusal::NoEndpoint)
    }

    /// Where `endpoint` takes this listener's traffic: its first reachable address and the
    /// configured named port (or its first port).
    pub fn address(&self, endpoint: &Member) -> Option<SocketAddr> {
        self.port_of(endpoint).map(|(addr, _)| addr)
    }

    fn port_of(&self, endpoint: &Member) -> Option<(SocketAddr, Protocol)> {
        let ip = self.picker.eligibility().reachable_address(endpoint)?.ip;
        let port = match &self.config.port {
            Some(name) => endpoint.ports.iter().find(|p| &p.name == name)?,
            None => endpoint.ports.first()?,
        };
        Some((SocketAddr::new(ip, port.port), port.protocol))
    }

    /// An original request (or connection) started: it funds the retry budget.
    pub fn deposit(&self) {
        lock(&self.budget).deposit(clock::now_ms());
    }

    /// Takes a retry from the budget, counting a refusal.
    pub fn try_retry(&self) -> bool {
        let granted = lock(&self.budget).try_withdraw(clock::now_ms());
        Stats::bump(if granted {
            &self.stats.retries
        } else {
            &self.stats.budget_exhausted
        });
        granted
    }

    /// The outcome of one attempt, as local ejection evidence (SPEC H6).
    pub fn report(&self, endpoint: &Member, failed: bool) {
        let now = clock::now_ms();
        if failed {
            if self.picker.report_failure(endpoint, now) {
                Stats::bump(&self.stats.ejections);
                tracing::warn!(listener = %self.config.listen, instance = %endpoint.instance, incarnation = %endpoint.incarnation, "endpoint ejected locally");
            }
        } else {
            self.picker.report_success(endpoint, now);
        }
    }

    /// Counts a request in flight to `endpoint` until the guard drops.
    pub fn start(self: &Arc<Self>, endpoint: &Arc<Member>) -> InFlight {
        self.picker.call_started(endpoint);
        *lock(&self.in_flight).entry(key_of(endpoint)).or_default() += 1;
        InFlight {
            target: Arc::clone(self),
            endpoint: Arc::clone(endpoint),
        }
    }

    /// Requests in flight per endpoint.
    pub fn in_flight(&self) -> HashMap<EndpointKey, u64> {
        lock(&self.in_flight).clone()
    }

    /// Resolves once the registry no longer routes new work to `key`: it is draining, was
    /// removed, or a new incarnation replaced it (or, for a failover tier's member, the tier
    /// no longer holds it). A registry outage never resolves it for the view's endpoints (the
    /// view keeps its last set); a tier's are let go after ten failed reads of its decision.
    pub async fn departed(&self, key: &EndpointKey) {
        let mut views = self.resolver.subscribe();
        let mut tier = self.tier.clone();
        loop {
            if !self.routes(&views.borrow_and_update(), key) {
                return;
            }
            tokio::select! {
                changed = views.changed() => if changed.is_err() {
                    // The resolver stopped: the proxy is stopping, which has its own grace.
                    std::future::pending::<()>().await;
                },
                () = tier_changed(tier.as_mut()) => {}
            }
        }
    }
}

/// Resolves when `tier` changes; never without one, or once it cannot change any more.
pub(crate) async fn tier_changed(tier: Option<&mut FailoverTier>) {
    let changing = match tier {
        Some(tier) => tier.changed().await,
        None => false,
    };
    if !changing {
        std::future::pending::<()>().await;
    }
}

/// Whether `view` still routes new work to `key` (absent views route what they had).
pub fn routed(view: &muster_client::view::View, key: &EndpointKey) -> bool {
    let Some(set) = view.active() else {
        return true;
    };
    set.get(&key.0)
        .is_some_and(|endpoint| endpoint.incarnation == key.1 && !matches!(endpoint.serving, ServingState::Draining))
}

/// A request (or TCP stream) in flight to one endpoint.
pub struct InFlight {
    target: Arc<Target>,
    endpoint: Arc<Member>,
}

impl std::fmt::Debug for InFlight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InFlight")
            .field("instance", &self.endpoint.instance)
            .finish()
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.target.picker.call_ended(&self.endpoint);
        let mut counts = lock(&self.target.in_flight);
        let key = key_of(&self.endpoint);
        if let Some(count) = counts.get_mut(&key) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&key);
            }
        }
    }
}
