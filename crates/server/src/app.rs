//! What the server's own handlers and tasks share: the gate (`muster_gate::Gate`: the
//! registry, the hub, the leader engine, who may do what, admission and audit), the
//! `Wiring` handle, and each adapter's state (the native API's, the xDS server's, the
//! convergence ledger, the federation) with the counters the metrics read.

use std::sync::Arc;
use std::time::Duration;

use muster_consensus::Node;
use muster_consul::stats::ConsulStats;
use muster_gate::{Gate, Wiring};

use crate::join::JoinKey;
use crate::metrics::Metrics;

/// The handlers' shared state.
pub(crate) struct App {
    /// The front door: every path's way to the registry, the hub and the leader.
    pub(crate) gate: Arc<Gate>,
    /// What only this crate's wiring does with the gate (readiness, the leader task).
    pub(crate) wiring: Wiring,
    /// The node itself, for the server's wiring only: cluster membership, start and stop.
    pub(crate) node: Node,
    pub(crate) progress_interval: Duration,
    /// What `/v1/metrics` reports (the checker's counters among them).
    pub(crate) metrics: Arc<Metrics>,
    /// The Consul-compatible API's blocking-query counters (SPEC E1, O1).
    pub(crate) consul_stats: Arc<ConsulStats>,
    /// What this node proves membership with, and checks a join candidate's proof against
    /// (in a cluster).
    pub(crate) join: Option<Arc<JoinKey>>,
    /// The xDS control plane's streams and resource cache (SPEC D5).
    #[cfg(feature = "xds")]
    pub(crate) xds: Arc<muster_xds::server::XdsState>,
    /// Which revision every subscriber applied (SPEC O3).
    pub(crate) convergence: Arc<muster_api::convergence::Convergence>,
    /// The native API's handlers' state (`muster_api`).
    pub(crate) native: Arc<muster_api::Native>,
    /// This region's federation, when configured (SPEC G2).
    pub(crate) federation: Option<Arc<muster_federation::Federation>>,
}
