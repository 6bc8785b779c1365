//! What the Consul API's handlers share.

use std::sync::Arc;

/// What the Consul API's handlers share: the gate (its only way to the registry, the hub and
/// the leader) and its own counters.
pub struct ConsulApp {
    /// The front door.
    pub gate: Arc<muster_gate::Gate>,
    /// The blocking queries' counters (SPEC E1, O1), read by the server's metrics.
    pub stats: Arc<crate::stats::ConsulStats>,
    /// How the blocking queries ended, reported with `api="consul"`.
    pub blocking: Arc<muster_gate::parked::BlockingStats>,
}
