//! This region's federation: its configuration, its peers, and what only the leader knows
//! of each mirror ([`Links`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use muster_core::federation::{FailoverDecision, FailoverPolicy, ImportScope, MirrorState};
use muster_core::{Digest, Label, Revision, ServiceKey};
use serde::{Deserialize, Serialize};

/// The last served set per covered service (`tiers`): (digest, served revision, the
/// registry's revision it was built at).
pub(crate) type ServedMemo = Mutex<HashMap<ServiceKey, (Digest, Revision, Revision)>>;

/// The `[federation]` section: this region's name, its peers and failover policies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FederationConfig {
    /// This region's name, a DNS label. Absent: the node is not federated.
    pub region: Option<String>,
    /// How long a mirrored set stays usable after its mirror last heard from the source
    /// region: 30 s. Past it the set is `unavailable`: kept, reported, never failed over to.
    /// A quiet peer is heard from at its `progress_interval_ms` (5 s by default), so keep the
    /// budget several times that.
    pub stale_budget_ms: u64,
    /// The least time between two commits that only record that a quiet peer was heard from
    /// (each is a log entry on every node of this region): 1 s. A set's age moves at the
    /// slower of this and the peer's `progress_interval_ms`.
    pub heartbeat_ms: u64,
    /// The peer regions, one `[[federation.peer]]` each.
    pub peer: Vec<PeerConfig>,
    /// Failover policies, one `[[federation.policy]]` each; the first that names a service
    /// (by namespace and service, in any tenant) decides for it.
    pub policy: Vec<FailoverPolicy>,
}

impl Default for FederationConfig {
    fn default() -> FederationConfig {
        FederationConfig {
            region: None,
            stale_budget_ms: 30_000,
            heartbeat_ms: 1_000,
            peer: Vec::new(),
            policy: Vec::new(),
        }
    }
}

/// One peer region (`[[federation.peer]]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerConfig {
    /// The peer's region name.
    pub name: String,
    /// Its HTTP API (`http://host:port`).
    pub url: String,
    /// What to mirror: `namespace/*` or `namespace/service`.
    pub import: Vec<String>,
    /// The tenant imported (default `default`).
    #[serde(default = "default_tenant")]
    pub tenant: String,
    /// A token of the peer with `watch` on what is imported, when the peer has auth on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<muster_core::Secret>,
}

fn default_tenant() -> String {
    "default".into()
}

/// A peer with its names checked.
#[derive(Debug, Clone)]
pub(crate) struct Peer {
    pub(crate) name: Label,
    pub(crate) url: String,
    pub(crate) token: Option<muster_core::Secret>,
    pub(crate) imports: Vec<ImportScope>,
}

/// What only the leader's mirror knows about one import.
#[derive(Debug, Clone, Default)]
pub(crate) struct Link {
    pub(crate) connected: bool,
    pub(crate) peer_revision: Revision,
    /// The newest peer revision committed here: the cursor, or an update past it (the
    /// cursor moves only at `progress` frames).
    pub(crate) applied: Revision,
    /// Since when the watch has shown a peer revision not yet committed here (`None`: caught
    /// up): what `lag_ms` reports.
    pub(crate) behind_since: Option<tokio::time::Instant>,
    pub(crate) resnapshots: u64,
    pub(crate) last_error: Option<String>,
}

/// Leader-local link state, by (region, import).
pub(crate) type Links = Mutex<BTreeMap<(Label, ImportScope), Link>>;

/// A federated node's configuration, checked, with its live state.
#[derive(Debug)]
pub struct Federation {
    pub(crate) region: Label,
    pub(crate) stale_budget_ms: u64,
    pub(crate) heartbeat: Duration,
    pub(crate) peers: Vec<Peer>,
    policies: Vec<(ImportScope, FailoverPolicy)>,
    pub(crate) links: Links,
    /// The last decision per service: what hysteresis and stickiness start from.
    decisions: Mutex<HashMap<ServiceKey, FailoverDecision>>,
    /// What DNS and xDS were last served per covered service (`tiers`).
    pub(crate) served: ServedMemo,
}

impl FederationConfig {
    /// Checks the section; `None` when the node is not federated.
    pub fn resolve(&self) -> Result<Option<Arc<Federation>>, String> {
        let Some(region) = &self.region else {
            if !self.peer.is_empty() || !self.policy.is_empty() {
                return Err("federation: peers and policies need `region`, this region's name".into());
            }
            return Ok(None);
        };
        let region = Label::new("federation.region", region).map_err(|e| e.to_string())?;
        if self.stale_budget_ms == 0 || self.heartbeat_ms == 0 || self.heartbeat_ms > self.stale_budget_ms {
            return Err(
                "federation: stale_budget_ms and heartbeat_ms must be at least 1, heartbeat_ms at most stale_budget_ms"
                    .into(),
            );
        }
        let mut peers: Vec<Peer> = Vec::new();
        for peer in &self.peer {
            let name = Label::new("federation.peer.name", &peer.name).map_err(|e| e.to_string())?;
            if name == region || peers.iter().any(|p| p.name == name) {
                return Err(format!(
                    "federation.peer '{name}': each peer is another region, named once"
                ));
            }
            if !(peer.url.starts_with("http://") || peer.url.starts_with("https://")) {
                return Err(format!(
                    "federation.peer '{name}': url '{}' is not http://host:port or https://host:port",
                    peer.url
                ));
            }
            let mut imports: Vec<ImportScope> = Vec::new();
            for text in &peer.import {
                let import = ImportScope::parse(&peer.tenant, text)
                    .map_err(|e| format!("federation.peer '{name}': import: {e}"))?;
                if let Some(other) = imports.iter().find(|i| i.overlaps(&import)) {
                    return Err(format!(
                        "federation.peer '{name}': imports '{other}' and '{import}' overlap"
                    ));
                }
                imports.push(import);
            }
            if imports.is_empty() {
                return Err(format!("federation.peer '{name}': import names nothing"));
            }
            peers.push(Peer {
                name,
                url: peer.url.trim_end_matches('/').to_owned(),
                token: peer.token.clone(),
                imports,
            });
        }
        let mut policies = Vec::new();
        for policy in &self.policy {
            let scope = ImportScope::parse("default", &policy.service)
                .map_err(|e| format!("federation.policy '{}': {e}", policy.service))?;
            if policy.failover.is_empty() || policy.min_eligible_percent > 100 || policy.max_spill_percent > 100 {
                return Err(format!(
                    "federation.policy '{}': failover names no region, or a percentage is above 100",
                    policy.service
                ));
            }
            if let Some(unknown) = policy.failover.iter().find(|r| !peers.iter().any(|p| p.name == **r)) {
                return Err(format!(
                    "federation.policy '{}': failover region '{unknown}' is not a peer",
                    policy.service
                ));
            }
            policies.push((scope, policy.clone()));
        }
        Ok(Some(Arc::new(Federation {
            region,
            stale_budget_ms: self.stale_budget_ms,
            heartbeat: Duration::from_millis(self.heartbeat_ms),
            peers,
            policies,
            links: Mutex::default(),
            decisions: Mutex::default(),
            served: Mutex::default(),
        })))
    }
}

impl Federation {
    /// The policy that covers `key`, if any: the first whose namespace and service match, in
    /// any tenant.
    pub(crate) fn policy(&self, key: &ServiceKey) -> Option<&FailoverPolicy> {
        self.policies
            .iter()
            .find(|(scope, _)| {
                scope.namespace.namespace == key.namespace && scope.service.as_ref().is_none_or(|s| *s == key.service)
            })
            .map(|(_, policy)| policy)
    }

    /// Whether a set last heard of at `synced_at_ms` may still be used at `now_ms`.
    pub(crate) fn state(&self, synced_at_ms: u64, now_ms: u64) -> MirrorState {
        if now_ms.saturating_sub(synced_at_ms) <= self.stale_budget_ms {
            MirrorState::Available
        } else {
            MirrorState::Unavailable
        }
    }

    pub(crate) fn with_link<T>(&self, region: &Label, import: &ImportScope, f: impl FnOnce(&mut Link) -> T) -> T {
        let mut links = self.links.lock().unwrap_or_else(PoisonError::into_inner);
        f(links.entry((region.clone(), import.clone())).or_default())
    }

    /// Drops the last decision of every service `gone` says is no longer covered.
    pub(crate) fn forget_decisions(&self, gone: impl Fn(&ServiceKey) -> bool) {
        self.decisions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|key, _| !gone(key));
    }

    /// The last decision made for `key`, if one is remembered.
    #[cfg(test)]
    pub(crate) fn remembered(&self, key: &ServiceKey) -> Option<FailoverDecision> {
        self.decisions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .cloned()
    }

    /// Decides from the previous decision (hysteresis starts from it) and records the new one.
    pub(crate) fn remember(
        &self,
        key: &ServiceKey,
        decide: impl FnOnce(Option<&FailoverDecision>) -> FailoverDecision,
    ) -> FailoverDecision {
        let mut decisions = self.decisions.lock().unwrap_or_else(PoisonError::into_inner);
        let previous = decisions.get(key);
        let decision = decide(previous);
        // A change of where traffic goes is news (SPEC O2, C8): the service, the new
        // decision and its reason, once per change.
        let moved = previous
            .is_none_or(|p| (p.spill, &p.region, p.reason) != (decision.spill, &decision.region, decision.reason));
        if moved && (decision.spill || previous.is_some_and(|p| p.spill)) {
            tracing::info!(
                service = %key,
                spill = decision.spill,
                region = decision.region.as_ref().map(Label::as_str),
                share_percent = decision.share_percent,
                reason = ?decision.reason,
                local_eligible = decision.local_eligible,
                required = decision.required,
                "failover decision changed"
            );
        }
        decisions.insert(key.clone(), decision.clone());
        decision
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn config(value: serde_json::Value) -> FederationConfig {
        serde_json::from_value(value).unwrap()
    }

    fn peer(name: &str, url: &str, import: &[&str]) -> serde_json::Value {
        json!({"name": name, "url": url, "import": import})
    }

    #[test]
    fn the_documented_section_resolves() {
        let federation = config(json!({"region": "b", "peer": [peer("a", "http://127.0.0.1:7070", &["prod/*"])]}))
            .resolve()
            .unwrap()
            .unwrap();
        assert_eq!(federation.region.as_str(), "b");
        assert_eq!(federation.peers[0].imports[0].to_string(), "prod/*");
        assert!(config(json!({})).resolve().unwrap().is_none(), "off without a region");
    }

    #[test]
    fn bad_sections_are_refused_with_the_field_named() {
        let policy = json!({"service": "prod/api", "failover": ["z"]});
        for (value, expect) in [
            (json!({"peer": [peer("a", "http://x", &["prod/*"])]}), "need `region`"),
            (
                json!({"region": "b", "peer": [peer("b", "http://x", &["prod/*"])]}),
                "another region",
            ),
            (json!({"region": "b", "peer": [peer("a", "x:1", &["prod/*"])]}), "url"),
            (
                json!({"region": "b", "peer": [peer("a", "http://x", &["prod/*", "prod/api"])]}),
                "overlap",
            ),
            (
                json!({"region": "b", "peer": [peer("a", "http://x", &["prod"])]}),
                "import",
            ),
            (
                json!({"region": "b", "peer": [peer("a", "http://x", &[])]}),
                "names nothing",
            ),
            (json!({"region": "b", "policy": [policy]}), "not a peer"),
            (json!({"region": "B!"}), "federation.region"),
            (json!({"region": "b", "stale_budget_ms": 0}), "stale_budget_ms"),
        ] {
            let err = config(value.clone()).resolve().unwrap_err();
            assert!(err.contains(expect), "{value}: {err}");
        }
    }
}
