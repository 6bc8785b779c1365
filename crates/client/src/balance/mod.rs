//! Eligibility (SPEC C3) and the balancers (SPEC C4), all over one eligible set.
//!
//! # Design
//!
//! ```text
//!  active view: Arc<Member>s at a revision ───┐
//!  local ejections (eject::OutlierDetector) ──┼─▶ EligibleSet::build   O(n log n), once per
//!  EligibilityConfig (degraded? scopes, panic)┘        │               view or ejection change
//!                                                      ▼
//!              known = reachable, not starting, not draining; eligible ones first; panic?
//!                                                      │ each balancer precomputes, O(n)
//!        ┌──────────────┬───────────────┬──────────────┼──────────────┐
//!    RoundRobin   SmoothWeighted   LeastRequest     HashRing    LocalityAware
//!        └──────────────┴───────────────┴──────────────┴──────────────┘
//!                                                      │ pick: O(1); weighted: O(distinct
//!                                                      │ weights); locality: O(log n)
//!                                                      ▼
//!                                  Pick { endpoint, revision, reason }
//! ```
//!
//! The caller owns the rebuild: whenever the view's revision changes, or the outlier detector
//! ejects an endpoint or an ejection ends (`OutlierDetector::next_return_ms`), it builds a new
//! [`EligibleSet`] and new balancers from it ([`LeastRequest::rebuild`] keeps its in-flight
//! counts). Picks never scan the set and never allocate; the `Arc` clone in the [`Pick`] is
//! their only shared-memory write. Measured medians (500 endpoints, `benches/balance.rs`):
//! round robin 21 ns, smooth weighted 23 ns, P2C 24 ns, consistent hash 26 ns, locality 31 ns.
//!
//! [`HashRing`] needs no randomness and takes a key instead. The others implement [`Balancer`],
//! whose `pick` takes the RNG: P2C and locality draw on every pick, round robin and smooth
//! weighted only when built (a random starting point, so a fleet does not move in step).
//!
//! Everything here is pure: time is a `now_ms` input, randomness an injected
//! [`RngCore`], so that tests and the lab replay exact pick sequences.
//!
//! # Eligibility and panic
//!
//! An endpoint is *eligible* when its authoritative serving state is `ready` (or `degraded`,
//! if the caller accepts it), one of its addresses is reachable from the caller's scopes, and
//! this client has not ejected it (`eligibility`). The *known* endpoints are the reachable
//! ones that are not `starting` or `draining`: the pool the panic threshold is measured against
//! and falls back to. When fewer than `panic_threshold` of the known endpoints are eligible,
//! the health evidence is more likely wrong (a partitioned checker, a shared dependency) than
//! the fleet dead, so every balancer picks over all known endpoints instead and says
//! [`PickReason::Panic`] (Envoy's healthy panic threshold, SPEC H5).
//!
//! # Tracing
//!
//! Every [`Pick`] carries the endpoint, the revision of the view the set was built from and
//! the [`PickReason`]; [`Pick::trace`] adds the service key for a log line or span (SPEC C8).

use std::fmt;
use std::sync::Arc;

use muster_core::{Incarnation, InstanceId, Revision, ServiceKey};
use rand_core::RngCore;

use crate::member::Member;

pub(crate) mod config;
mod draw;
pub(crate) mod eligibility;
pub(crate) mod hash;
pub(crate) mod locality;
mod p2c;
mod round_robin;
mod weighted;

#[cfg(test)]
pub(crate) mod fixtures;

// What an application names is at the crate root (the picker's configuration, its pick);
// the balancers and the eligible set they share are here, for a picker of your own.
pub(crate) use config::{ConfigError, Fraction};
pub(crate) use eligibility::EligibilityConfig;
pub use eligibility::{EligibleSet, Excluded, SetMode, Standing, Unhealthy};
pub use hash::HashRing;
pub(crate) use hash::HashRingConfig;
pub(crate) use locality::LocalityConfig;
pub use locality::{LocalityAware, Proximity, Tier};
pub use p2c::LeastRequest;
pub use round_robin::RoundRobin;
pub use weighted::SmoothWeighted;

/// A balancer that picks without a request key. [`HashRing`] takes a key instead.
pub trait Balancer {
    /// Picks an endpoint for one new request, or `None` when nothing may be picked.
    fn pick<R: RngCore + ?Sized>(&mut self, rng: &mut R) -> Option<Pick>;
}

/// One selection: the endpoint, the view revision it came from and why it was chosen.
#[derive(Debug, Clone, PartialEq)]
pub struct Pick {
    /// The chosen endpoint.
    pub endpoint: Arc<Member>,
    /// The revision of the view the eligible set was built from.
    pub revision: Revision,
    /// Why this endpoint's pool was used.
    pub reason: PickReason,
}

impl Pick {
    /// The chosen run of the instance.
    pub fn incarnation(&self) -> Incarnation {
        self.endpoint.incarnation
    }

    /// Everything SPEC C8 asks a selection to carry, for a log line or a `tracing` span.
    pub fn trace<'a>(&'a self, service: &'a ServiceKey) -> PickTrace<'a> {
        PickTrace {
            service,
            revision: self.revision,
            instance: &self.endpoint.instance,
            incarnation: self.endpoint.incarnation,
            reason: self.reason,
        }
    }

    /// A `tracing` span for the call made with this pick, carrying service, revision,
    /// endpoint, incarnation and reason (SPEC C8): enter it (or `instrument` the call's
    /// future with it) so everything the call logs says which selection it came from.
    pub fn span(&self, service: &ServiceKey) -> tracing::Span {
        tracing::info_span!(
            "pick",
            service = %service,
            revision = self.revision.0,
            instance = %self.endpoint.instance,
            incarnation = self.endpoint.incarnation.0,
            reason = self.reason.code(),
        )
    }
}

/// Why an endpoint was picked from the pool it was picked from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PickReason {
    /// The balancer's policy over the eligible endpoints (for the locality-aware balancer: in
    /// the most preferred tier that has endpoints).
    Normal,
    /// Locality-aware: the preferred tiers lacked healthy capacity, so this pick spilled over
    /// to the given (less preferred) tier.
    Spillover(Tier),
    /// Below the panic threshold: picked over all known endpoints, healthy or not.
    Panic,
}

impl PickReason {
    /// A stable machine-readable code: `normal`, `spillover` or `panic`.
    pub fn code(self) -> &'static str {
        match self {
            PickReason::Normal => "normal",
            PickReason::Spillover(_) => "spillover",
            PickReason::Panic => "panic",
        }
    }
}

impl fmt::Display for PickReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PickReason::Spillover(tier) => write!(f, "spillover to {tier}"),
            other => f.write_str(other.code()),
        }
    }
}

/// A pick with its service key: `service=acme/prod/api revision=42 instance=pod-7
/// incarnation=3 reason=normal`.
#[derive(Debug, Clone, Copy)]
pub struct PickTrace<'a> {
    /// The service the pick was for.
    pub service: &'a ServiceKey,
    /// The view revision.
    pub revision: Revision,
    /// The chosen instance.
    pub instance: &'a InstanceId,
    /// Its incarnation.
    pub incarnation: Incarnation,
    /// Why it was chosen.
    pub reason: PickReason,
}

impl fmt::Display for PickTrace<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "service={} revision={} instance={} incarnation={} reason={}",
            self.service, self.revision, self.instance, self.incarnation, self.reason
        )
    }
}

#[cfg(test)]
mod tests {
    use muster_core::ServiceKey;

    use super::*;
    use crate::balance::fixtures::{Fixture, rng, set_of};

    #[test]
    fn a_pick_traces_service_revision_endpoint_incarnation_and_reason() {
        let set = set_of([Fixture::ready(7).incarnation(3).build()]);
        let pick = RoundRobin::new(&set, &mut rng(0)).pick(&mut rng(0)).unwrap();
        let service = ServiceKey::new("acme", "prod", "api").unwrap();
        assert_eq!(
            pick.trace(&service).to_string(),
            "service=acme/prod/api revision=42 instance=ep-0007 incarnation=3 reason=normal"
        );
        let tier = Tier {
            priority: 1,
            proximity: Proximity::SameRegion,
        };
        assert_eq!(
            PickReason::Spillover(tier).to_string(),
            "spillover to priority 1 same_region"
        );
        assert_eq!(PickReason::Spillover(tier).code(), "spillover");
        assert_eq!(PickReason::Panic.code(), "panic");
    }

    #[test]
    fn a_picks_span_carries_the_selection_into_what_the_call_logs() {
        #[derive(Clone, Default)]
        struct Buffer(Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Buffer {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buffer = Buffer::default();
        let sink = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || sink.clone())
            .with_ansi(false)
            .finish();
        let set = set_of([Fixture::ready(7).incarnation(3).build()]);
        let pick = RoundRobin::new(&set, &mut rng(0)).pick(&mut rng(0)).unwrap();
        let service = ServiceKey::new("acme", "prod", "api").unwrap();
        tracing::subscriber::with_default(subscriber, || {
            let _call = pick.span(&service).entered();
            tracing::info!("request sent");
        });
        let logged = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        for field in [
            "service=acme/prod/api",
            "revision=42",
            "instance=ep-0007",
            "incarnation=3",
            "reason=\"normal\"",
        ] {
            assert!(logged.contains(field), "{field} missing from {logged}");
        }
    }
}
