//! [`RegistrarConfig`]: the lease TTL, the drain grace, the first serving state and what to
//! do when the lease is lost.

use std::time::Duration;

use muster_core::ServingState;

/// The lease TTL asked for by default: 10 s. A crashed process keeps receiving traffic for up
/// to a TTL, so shorter is better for callers; but renewals run every third of it, so 10 s
/// costs one in-memory renewal per instance every ~3.3 s (300/s for a 1,000-instance fleet)
/// and rides out a few seconds of registry unavailability (a Raft election) without loss.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);

/// How long a draining endpoint stays registered by default: 5 s. Watchers exclude it as
/// soon as the update arrives (well under a second on a healthy registry); the rest lets
/// in-flight requests of typical RPC services finish. Services with longer requests set
/// their own.
pub const DEFAULT_DRAIN_GRACE: Duration = Duration::from_secs(5);

/// What a registrar does when the registry says its lease is gone (`lease_not_found`: the
/// lease expired, e.g. after a long pause or partition, or was revoked).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LeaseLossPolicy {
    /// Register again with the next incarnation and a new lease. The registry keeps a
    /// tombstone at the lost incarnation and refuses to register it again (an old process's
    /// delayed call must not revive a removed record), so the same incarnation is not an
    /// option; the next one is, unless a newer process already registered (then the
    /// registrar reports [`Superseded`](crate::RegistrarStatus::Superseded)).
    #[default]
    Reregister,
    /// Stop, reporting [`LeaseLost`](crate::RegistrarStatus::LeaseLost): for
    /// callers that would rather restart the process (and so take a new generation).
    Stop,
}

/// How a registrar behaves.
#[derive(Debug, Clone, PartialEq)]
pub struct RegistrarConfig {
    /// The lease TTL asked for (the registry accepts 1 s to 1 h by default).
    pub ttl: Duration,
    /// How long `draining` is published before the record is deleted at shutdown.
    pub drain_grace: Duration,
    /// The serving state a registration starts in, until the application reports
    /// readiness: `starting` (not eligible), so no traffic arrives before the app is ready.
    pub initial_serving: ServingState,
    /// What to do when the lease is lost.
    pub lease_loss: LeaseLossPolicy,
    /// The reason recorded with the drain.
    pub drain_reason: String,
    /// End the grace as soon as this fraction (in (0, 1]) of the service's live subscribers
    /// has applied the drain (SPEC O3): the grace measured instead of guessed (SPEC L6), with
    /// `drain_grace` its upper bound. A service nobody reports following waits the whole
    /// grace. `None` (the default): always wait the whole grace.
    pub drain_until_converged: Option<f64>,
}

impl Default for RegistrarConfig {
    fn default() -> Self {
        RegistrarConfig {
            ttl: DEFAULT_TTL,
            drain_grace: DEFAULT_DRAIN_GRACE,
            initial_serving: ServingState::Starting,
            lease_loss: LeaseLossPolicy::Reregister,
            drain_reason: "shutdown".into(),
            drain_until_converged: None,
        }
    }
}
