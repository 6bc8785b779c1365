//! The control plane's shared state: the gate it reaches the registry through, the hub on
//! the apply path, the open streams and their counters, and what the wiring serves beside
//! the registry ([`Serving`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use muster_core::xds_view::{ClientsPage, Protocol};
use muster_core::{Label, Revision, ServiceKey, ServiceSnapshot};
use muster_gate::{Caller, Gate};
use muster_registry::Registry;

use super::clients::XdsClients;
use super::hub::XdsHub;
use crate::Kind;

/// The most resource names of one type a stream may subscribe to: each is a watched service
/// (a hub entry) and part of every refresh; a client asking for more is refused
/// (`RESOURCE_EXHAUSTED`) rather than growing the server without bound.
pub(crate) const MAX_NAMES: usize = 10_000;

/// The names a stream holds now, shared by its session (which sets it) and its decoder
/// (which reads it): put in the request's extensions for the session to find.
#[derive(Clone, Default)]
pub(crate) struct OwnNames(pub(crate) Arc<AtomicUsize>);

/// What the node serves beside the registry, given by the wiring: a federated region's
/// failover tiers (SPEC G2) and the convergence ledger (SPEC O3). The xDS adapter knows
/// neither; a node without federation serves the registry's sets.
pub trait Serving: Send + Sync + 'static {
    /// The set served for `key` at `now_ms`: the registry's, or its failover tier.
    fn served(&self, registry: &Registry, key: &ServiceKey, now_ms: u64) -> Option<Arc<ServiceSnapshot>>;

    /// The revision of the registry's set a client that acknowledged `acked` of `key` holds
    /// (a failover tier's revision can run past the registry's); `None` when unknown.
    fn acked_as(&self, key: &ServiceKey, acked: Revision) -> Option<Revision>;

    /// The stream of `node` (in `zone`) acknowledged `services` at `revision`.
    fn converged(&self, node: &str, zone: Option<&str>, services: Vec<ServiceKey>, revision: Revision);
}

/// Responses sent and refused, by kind.
#[derive(Debug, Default)]
pub(crate) struct XdsStats {
    responses: [AtomicU64; 4],
    nacks: [AtomicU64; 4],
}

impl XdsStats {
    pub(crate) fn responded(&self, kind: Kind) {
        self.responses[kind as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn nacked(&self, kind: Kind) {
        self.nacks[kind as usize].fetch_add(1, Ordering::Relaxed);
    }
}

/// The control plane's shared state.
pub struct XdsState {
    pub(crate) gate: Arc<Gate>,
    pub(crate) serving: Arc<dyn Serving>,
    pub(crate) hub: Arc<XdsHub>,
    pub(crate) clients: Arc<XdsClients>,
    pub(crate) stats: XdsStats,
    /// The tenant of a node that names none.
    pub(crate) tenant: Label,
}

impl std::fmt::Debug for XdsState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdsState")
            .field("hub", &self.hub)
            .field("clients", &self.clients)
            .field("stats", &self.stats)
            .field("tenant", &self.tenant)
            .finish_non_exhaustive()
    }
}

/// The latest revision of `key`'s service in `registry`, for convergence.
fn latest(registry: &Registry, key: &ServiceKey) -> Option<Revision> {
    registry.snapshot(key).map(|snapshot| snapshot.revision())
}

impl XdsState {
    /// The state of a node whose streams that name no tenant are `tenant`'s; `hub` is the
    /// observer on the node's apply path (made before the node, and so before the gate).
    pub fn new(gate: Arc<Gate>, serving: Arc<dyn Serving>, hub: Arc<XdsHub>, tenant: Label) -> XdsState {
        XdsState {
            gate,
            serving,
            hub,
            clients: Arc::default(),
            stats: XdsStats::default(),
            tenant,
        }
    }

    /// `GET /v1/xds/clients`: every open stream whose every name `caller` may read, and per
    /// resource what it was sent and acknowledged (SPEC S3, D5).
    pub fn page(&self, caller: &Caller) -> ClientsPage {
        let now = self.gate.clock.now_ms();
        // One read of the registry for the whole page, not one per resource.
        self.gate.read(|registry| {
            self.clients.page(
                registry.revision(),
                now,
                // Only what the token may read (SPEC S3): see `ClientRecord::shown`.
                |tenant| caller.reads_tenant(tenant),
                |key| caller.may(key, muster_auth::Verb::Read),
                |key| latest(registry, key),
            )
        })
    }

    /// Open streams (state of the world, Delta) among those whose every name is readable by
    /// a caller who `reads_tenant` whole tenants and `reads` single services.
    pub fn streams(&self, reads_tenant: impl Fn(&Label) -> bool, reads: impl Fn(&ServiceKey) -> bool) -> [u64; 2] {
        let mut streams = [0_u64; 2];
        for record in self.clients.records() {
            if record.shown(&reads_tenant, &reads) {
                streams[usize::from(record.protocol == Protocol::Delta)] += 1;
            }
        }
        streams
    }

    /// Per service: (subscribers, subscribers at its latest revision), for the metrics.
    pub fn convergence(&self) -> BTreeMap<ServiceKey, (u64, u64)> {
        self.gate
            .read(|registry| self.clients.convergence(|key| latest(registry, key)))
    }

    /// Every stream's node id and the services it follows, for the convergence ledger's
    /// liveness (SPEC O3).
    pub fn followed(&self) -> Vec<(String, Vec<ServiceKey>)> {
        self.clients.followed()
    }

    /// Services some stream watches or lists.
    pub fn watched(&self) -> usize {
        self.hub.watched()
    }

    /// (kind, responses, NACKs) for each kind.
    pub fn counts(&self) -> [(Kind, u64, u64); 4] {
        Kind::ALL.map(|kind| {
            let i = kind as usize;
            (
                kind,
                self.stats.responses[i].load(Ordering::Relaxed),
                self.stats.nacks[i].load(Ordering::Relaxed),
            )
        })
    }
}
