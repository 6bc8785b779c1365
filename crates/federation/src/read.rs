//! What reads show of federation: a service's mirrored sets with their age and state, its
//! failover decision (SPEC G1, G2), and `GET /v1/federation/status`.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use muster_client::failover::{Mirrored, SetSummary, decide};
use muster_core::federation::{
    FailoverDecision, FederationStatusReply, ImportStatus, MirroredService, MirroredSet, PeerStatus, ServiceDecision,
};
use muster_core::{Endpoint, ServiceKey, ServiceSnapshot};
use muster_registry::{MirrorImport, Registry};

use crate::region::Federation;
use muster_gate::Gate;
use muster_http::error::ApiError;

/// A service's mirrored sets and failover decision at `now_ms` (unix ms), from the registry
/// as it is. `local` is the local set (absent: not registered here).
pub fn federated_parts(
    federation: &Federation,
    registry: &Registry,
    key: &ServiceKey,
    local: Option<&ServiceSnapshot>,
    now_ms: u64,
) -> (Vec<MirroredSet>, Option<FailoverDecision>) {
    let mirrors: Vec<MirroredSet> = registry
        .mirrored(key)
        .map(|(import, set)| mirrored_set(federation, import, set, now_ms))
        .collect();
    (mirrors, decision(federation, registry, key, local, now_ms))
}

/// `key`'s failover decision at `now_ms`, from the registry's sets as they are (no record is
/// copied): `None` when no policy covers it, or when it is neither registered here nor
/// mirrored (no service, so no decision is kept for it).
pub(crate) fn decision(
    federation: &Federation,
    registry: &Registry,
    key: &ServiceKey,
    local: Option<&ServiceSnapshot>,
    now_ms: u64,
) -> Option<FailoverDecision> {
    let policy = federation.policy(key)?;
    if local.is_none() && registry.mirrored(key).next().is_none() {
        return None;
    }
    let local = local.map_or_else(SetSummary::default, |set| {
        SetSummary::of(set.iter().map(|e| &**e), false)
    });
    let regions: Vec<_> = policy
        .failover
        .iter()
        .map(|region| {
            let mirrored: Mirrored =
                registry
                    .mirrored(key)
                    .find(|(import, _)| import.region == *region)
                    .map(|(import, set)| {
                        (
                            federation.state(import.synced_at_ms, now_ms),
                            SetSummary::of(set.iter().map(|e| &**e), false),
                        )
                    });
            (region.clone(), mirrored)
        })
        .collect();
    Some(federation.remember(key, |previous| decide(policy, previous, local, &regions)))
}

fn millis(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn mirrored_set(federation: &Federation, import: &MirrorImport, set: &ServiceSnapshot, now_ms: u64) -> MirroredSet {
    let endpoints: Vec<Endpoint> = set.iter().map(|e| Endpoint::clone(e)).collect();
    let summary = SetSummary::of(endpoints.iter(), false);
    MirroredSet {
        source_region: import.region.clone(),
        import: import.import.to_string(),
        source_revision: set.revision(),
        digest: set.digest(),
        cursor: import.cursor,
        age_ms: now_ms.saturating_sub(import.synced_at_ms),
        state: federation.state(import.synced_at_ms, now_ms),
        total: set.len(),
        eligible: summary.eligible as usize,
        capacity: summary.eligible_capacity,
        endpoints,
    }
}

/// What the federation's route reads: the gate, and this region's federation (`None`: not
/// federated).
pub struct FederationRoutes {
    /// The front door.
    pub gate: Arc<Gate>,
    /// This region's federation, when configured.
    pub federation: Option<Arc<Federation>>,
}

/// `GET /v1/federation/status`: every peer's imports, their lag, and every policy-covered
/// service's decision. `not_found` on a node that is not federated.
pub async fn status(State(routes): State<Arc<FederationRoutes>>) -> Result<Json<FederationStatusReply>, ApiError> {
    let federation = routes
        .federation
        .as_ref()
        .ok_or_else(|| ApiError::not_found("this node is not federated: no [federation] region is configured"))?;
    let now_ms = routes.gate.clock.unix_now_ms();
    let leader = routes.gate.leading_term().is_some();
    let links = federation
        .links
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    routes.gate.read(|registry| {
        let peers = federation
            .peers
            .iter()
            .map(|peer| PeerStatus {
                name: peer.name.clone(),
                url: peer.url.clone(),
                imports: peer
                    .imports
                    .iter()
                    .map(|import| {
                        let held = registry.mirror(&peer.name, import);
                        let link = links.get(&(peer.name.clone(), import.clone())).filter(|_| leader);
                        let cursor = held.map_or(muster_core::Revision::ZERO, |m| m.cursor);
                        ImportStatus {
                            import: import.to_string(),
                            tenant: import.namespace.tenant.clone(),
                            state: held.map_or(muster_core::federation::MirrorState::Unavailable, |m| {
                                federation.state(m.synced_at_ms, now_ms)
                            }),
                            cursor,
                            age_ms: held.map(|m| now_ms.saturating_sub(m.synced_at_ms)),
                            connected: link.map(|l| l.connected),
                            peer_revision: link.map(|l| l.peer_revision),
                            lag_revisions: link.map(|l| l.peer_revision.0.saturating_sub(l.applied.max(cursor).0)),
                            lag_ms: link.map(|l| l.behind_since.map_or(0, |at| millis(at.elapsed()))),
                            resnapshots: link.map(|l| l.resnapshots),
                            last_error: link.and_then(|l| l.last_error.clone()),
                            services: held.map_or_else(Vec::new, |m| {
                                m.sets
                                    .values()
                                    .map(|set| MirroredService {
                                        service: set.key().clone(),
                                        source_revision: set.revision(),
                                        digest: set.digest(),
                                        endpoints: set.len(),
                                    })
                                    .collect()
                            }),
                        }
                    })
                    .collect(),
            })
            .collect();
        let decisions = federation
            .covered(registry)
            .into_iter()
            .filter_map(|key| {
                let local = registry.snapshot(&key);
                let (_, decision) = federated_parts(federation, registry, &key, local.as_deref(), now_ms);
                decision.map(|decision| ServiceDecision { service: key, decision })
            })
            .collect();
        Ok(Json(FederationStatusReply {
            region: federation.region.clone(),
            stale_budget_ms: federation.stale_budget_ms,
            leader,
            peers,
            decisions,
        }))
    })
}
