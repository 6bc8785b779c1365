//! tower integration that needs no hand assembly (SPEC C5, C7, H6): a balancing
//! `tower::Service` for hyper and tonic clients, with call outcomes fed back into local
//! ejection by the service itself.
//!
//! ```text
//!            ┌──────────────────────────── Balance<N> ─────────────────────────────┐
//!  Request ─▶│ poll_ready: Picker::pick (P2C least-request, ejections applied)     │
//!            │             └─▶ per-endpoint service (N::new_service, cached)       │
//!            │ call:       call_started ─▶ inner call ─▶ classify ─▶ call_ended    │
//!            │                                   5xx, gRPC UNAVAILABLE, error ─▶ report_failure
//!            │                                   anything else ──────────────▶ report_success
//!            └──────────────────────────────────────────────────────────────────────┘
//! ```
//!
//! Two ways to route a picked endpoint:
//! - **one shared client** ([`BalanceBuilder::shared`], [`BalanceLayer`]): [`SetAuthority`]
//!   rewrites each request's URI to the endpoint's address and port and calls a clone of the
//!   shared service (hyper-util's pooled client: one pool, connections per endpoint);
//! - **one service per endpoint** ([`BalanceBuilder::per_endpoint`]): made on first pick
//!   from the endpoint's [`Target`] (e.g. a lazily connecting `tonic::transport::Channel`) and
//!   dropped when the endpoint leaves the view.
//!
//! For tower's own balancers, [`crate::discover::EndpointDiscover::with_ejections`] removes
//! ejected endpoints from discovery and inserts them again when the ejection ends, and
//! [`SharedEjections::report`] wraps each endpoint's service so that its outcomes eject.
//!
//! # Registry outages and errors
//! Balancers fail static by default (SPEC C2): their calls are [`Risk::ReadOnly`](crate::Risk),
//! so past the stale budget they keep the last known set (never an empty one), with drains,
//! removals and local ejections in force. A balancer whose calls mutate state says
//! `.risk(Risk::Mutation)` and then fails `stale` past the budget. A service the server holds
//! nothing of fails `unknown_service` at once; no first view in time fails `unavailable` with
//! the last connection error.
//!
//! # Outcomes
//! See [`Outcome`]: connect errors, resets and every other transport error, HTTP 5xx and a
//! `grpc-status: 14` (UNAVAILABLE) header count against the endpoint; anything else is a
//! success. A call ends (for least-request) when its response head arrives, as tower's
//! `CompleteOnResponse` counts it. Local only (SPEC H6): nothing is told to the registry.
//!
//! # Time
//! The ejection clock is tokio's (`tokio::time::Instant`), read here in the I/O shell and
//! passed to the pure detector as milliseconds (STYLE.md rule 3), so `tokio::time::pause`
//! drives it in tests.

mod balance;
mod classify;
mod ejections;

pub use balance::{
    Balance, BalanceBuilder, BalanceError, BalanceLayer, DEFAULT_FIRST_VIEW_TIMEOUT, NewEndpointService,
    NewSetAuthority, SetAuthority, Target,
};
pub use classify::{GRPC_UNAVAILABLE, Outcome};
pub use ejections::{ReportOutcome, SharedEjections};

/// Milliseconds since a fixed origin on tokio's clock: the time every ejection decision of
/// one balancer is made in.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    origin: tokio::time::Instant,
}

impl Clock {
    pub(crate) fn start() -> Clock {
        Clock {
            origin: tokio::time::Instant::now(),
        }
    }

    pub(crate) fn now_ms(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// The instant `ms` after the origin.
    pub(crate) fn at(&self, ms: u64) -> tokio::time::Instant {
        self.origin + std::time::Duration::from_millis(ms)
    }
}
