//! The registry policy as replicated state, seen from one node: `GET /v1/policy`,
//! `PUT /v1/policy`, the comparison with this node's config file that `GET /v1/status`
//! reports, and the warning logged when they disagree.
//!
//! ```text
//!  config file [registry] ──(fresh registry only)──▶ initial policy
//!  PUT /v1/policy ──propose SetPolicy──▶ Registry::apply ──▶ policy in force (+ its revision)
//!                                               │ ApplyObserver
//!                                               ▼
//!                 PolicyWatch: differs from the file? ──▶ warn once per policy revision
//! ```
//!
//! The file decides nothing after the registry exists: a restart with a different file
//! replays the log under the replicated policy (SPEC L2), and the node says so instead.

use std::sync::{Arc, Mutex, PoisonError};

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use muster_consensus::ApplyObserver;
use muster_core::api::{PolicyReply, PolicySetReply, PolicyStatus};
use muster_core::{Actor, Revision};
use muster_registry::{Applied, Registry, RegistryConfig, SetPolicy};
use serde_json::Value;

use crate::Native;
use muster_gate::Caller;
use muster_http::error::ApiError;
use muster_http::extract::JsonBody;
use muster_http::peer::Peer;

/// `GET /v1/policy`: the policy in force and the revision it was committed at.
pub async fn get(State(app): State<Arc<Native>>) -> Json<PolicyReply<RegistryConfig>> {
    Json(app.gate.read(|registry| PolicyReply {
        revision: registry.policy_revision(),
        policy: registry.policy().clone(),
    }))
}

/// `PUT /v1/policy`: replaces the whole policy (the `[registry]` section's shape; omitted
/// settings take their defaults). Malformed JSON or an unknown setting is 400 `bad_request`;
/// an unusable policy is 422 `invalid_field`; either way nothing changes. Speaks as the owner.
pub async fn put(
    State(app): State<Arc<Native>>,
    caller: Caller,
    peer: Option<axum::Extension<Peer>>,
    headers: HeaderMap,
    JsonBody(policy): JsonBody<RegistryConfig>,
) -> Result<Json<PolicySetReply>, ApiError> {
    let actor = app.speaking_as(&caller, peer.as_deref(), &headers, Actor::Owner, || {
        "PUT /v1/policy".to_owned()
    })?;
    let applied = app
        .gate
        .propose(
            SetPolicy { policy, initial: false }.into(),
            app.gate.meta(actor, &caller),
        )
        .await?;
    Ok(Json(PolicySetReply {
        revision: applied.revision,
    }))
}

/// The policy in force against this node's config file.
pub fn status(registry: &Registry, file: &RegistryConfig) -> PolicyStatus {
    let differences = differences(registry.policy(), file);
    PolicyStatus {
        revision: registry.policy_revision(),
        matches_config: differences.is_empty(),
        differences,
    }
}

/// The settings in which two policies differ, as sorted dotted paths of the config file's
/// `[registry]` section (`quotas.services_per_tenant`, `network.permitted`). Lists compare
/// whole. Works on the serialised form, so a setting added later is compared too.
pub fn differences(a: &RegistryConfig, b: &RegistryConfig) -> Vec<String> {
    let (Ok(a), Ok(b)) = (serde_json::to_value(a), serde_json::to_value(b)) else {
        return vec!["(unserialisable policy)".to_owned()];
    };
    let mut out = Vec::new();
    diff(&a, &b, "", &mut out);
    out.sort();
    out
}

fn diff(a: &Value, b: &Value, path: &str, out: &mut Vec<String>) {
    let (Value::Object(a), Value::Object(b)) = (a, b) else {
        if a != b {
            out.push(path.to_owned());
        }
        return;
    };
    let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    for key in keys {
        let child = if path.is_empty() {
            key.clone()
        } else {
            format!("{path}.{key}")
        };
        match (a.get(key), b.get(key)) {
            (Some(x), Some(y)) => diff(x, y, &child, out),
            _ => out.push(child),
        }
    }
}

/// Logs a warning whenever the policy in force comes to differ from this node's config file:
/// at start (after the snapshot loads or the log replays a `SetPolicy`) and after a change.
pub struct PolicyWatch {
    file: RegistryConfig,
    /// The policy revision last checked, so each is compared once.
    checked: Mutex<Option<(bool, Revision)>>,
}

impl PolicyWatch {
    /// A watch comparing the policy in force with `file`, this node's `[registry]` section.
    pub fn new(file: RegistryConfig) -> PolicyWatch {
        PolicyWatch {
            file,
            checked: Mutex::new(None),
        }
    }

    fn check(&self, registry: &Registry) {
        let now = (registry.policy_committed(), registry.policy_revision());
        let mut checked = self.checked.lock().unwrap_or_else(PoisonError::into_inner);
        if *checked == Some(now) {
            return;
        }
        *checked = Some(now);
        let differences = differences(registry.policy(), &self.file);
        if !differences.is_empty() {
            tracing::warn!(
                policy_revision = %now.1,
                differences = %differences.join(", "),
                "the replicated registry policy differs from this node's config file [registry]; \
                 the replicated policy is in force (GET /v1/policy; change it with PUT /v1/policy)"
            );
        }
    }
}

impl ApplyObserver for PolicyWatch {
    fn applied(&self, registry: &Registry, _applied: &Applied) {
        self.check(registry);
    }

    fn reset(&self, registry: &Registry) {
        self.check(registry);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_name_each_setting_by_its_config_path() {
        let file = RegistryConfig::default();
        let mut replicated = RegistryConfig::default();
        assert!(differences(&replicated, &file).is_empty());
        replicated.quotas.services_per_tenant = 3;
        replicated.limits.max_labels = 4;
        replicated.network.permitted = vec!["10.0.0.0/8".parse().unwrap()];
        replicated.fence_retention_ms = 1;
        assert_eq!(
            differences(&replicated, &file),
            [
                "fence_retention_ms",
                "limits.max_labels",
                "network.permitted",
                "quotas.services_per_tenant"
            ]
        );
    }
}
