//! `DeregisterCriticalServiceAfter`: an endpoint registered through the agent API with it is
//! deregistered once it has been critical that long (SPEC E1; Consul's agent "reaper").
//!
//! ```text
//!  every REAP_EVERY, on the leader only:
//!    registry ──due(now)──▶ endpoints labelled consul.deregister-critical-after-ms whose state is
//!                           starting or not_serving since observation.at_ms + after, in a
//!                           service self-preservation does not protect
//!             ──▶ Deregister { that incarnation, expected_revision: the record's revision }
//! ```
//!
//! The threshold is committed with the record (a label, [`DEREGISTER_AFTER_LABEL`]) and the
//! moment the state was set is the record's committed observation time, so whichever node
//! leads finds the same removals: nothing is kept in memory, and a leader change neither
//! loses nor repeats one (a repeat is refused by its compare-and-swap and changes nothing).
//! The compare-and-swap also means a removal never races a pass: a record that changed since
//! it was read (a TTL pass, a re-registration's new incarnation) is not removed.
//!
//! # What differs from Consul
//! - "Critical since" is since the serving state last changed. A TTL check registered
//!   `starting` that then times out moves to `not_serving`; the clock starts again there, so
//!   the removal can come up to one TTL later than Consul's.
//! - A draining endpoint (Consul's maintenance) is not critical here and is never reaped.
//! - `unknown` is not reaped, though Consul shows it critical: it means the checker could not
//!   probe (SPEC H4: "no route from here" is not "not serving"), and an outage of the
//!   checker's own network must not delete a fleet that Consul clients registered only once.
//! - Nothing is reaped from a service self-preservation protects (SPEC H5): a mass failure
//!   that trips the brakes is the case where the registry keeps records, not removes them.
//! - Consul's reaper runs every 30 s and refuses thresholds under a minute; this one accepts
//!   any threshold and looks every second.

use std::sync::Arc;
use std::time::Duration;

use muster_core::{Actor, Principal, ServiceKey, ServingState};
use muster_registry::{Deregister, Registry, Target};

use super::agent_map::{DEREGISTER_AFTER_LABEL, deregister_after};
use crate::app::ConsulApp;

/// How often the leader looks: 1 s, so a removal is at most a second late; one look reads
/// every record's labels, well under a millisecond per 10,000 endpoints.
pub(crate) const REAP_EVERY: Duration = Duration::from_secs(1);

/// The principal the reaper's deregistrations are recorded under (SPEC S4, H4).
pub(crate) const REAPER_PRINCIPAL: &str = "consul-agent-reaper";

/// The deregistrations due at `now_unix_ms`: endpoints critical for longer than their
/// `DeregisterCriticalServiceAfter`.
pub(crate) fn due(registry: &Registry, now_unix_ms: u64, protected: impl Fn(&ServiceKey) -> bool) -> Vec<Deregister> {
    let mut due = Vec::new();
    for snapshot in registry.all_services() {
        if protected(snapshot.key()) {
            continue;
        }
        for endpoint in snapshot.iter() {
            if !matches!(endpoint.serving, ServingState::Starting | ServingState::NotServing) {
                continue;
            }
            let Some(after) = deregister_after(endpoint) else {
                continue;
            };
            let after_ms = u64::try_from(after.as_millis()).unwrap_or(u64::MAX);
            if endpoint.observation.at_ms.saturating_add(after_ms) > now_unix_ms {
                continue;
            }
            due.push(Deregister {
                target: Target {
                    key: snapshot.key().clone(),
                    instance: endpoint.instance.clone(),
                    incarnation: endpoint.incarnation,
                },
                expected_revision: Some(endpoint.revision),
            });
        }
    }
    due
}

/// The reaper for one term of leadership (a leader duty, `muster_leader::duties`): looks
/// every [`REAP_EVERY`] until the runner aborts it when the term ends.
pub async fn reap(app: Arc<ConsulApp>) {
    let principal = Principal::new(REAPER_PRINCIPAL).expect("a valid principal");
    let mut ticks = tokio::time::interval(REAP_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let now = app.gate.clock.unix_now_ms();
        // Asked before the read: the engine's lock is never taken under the registry's (the
        // leader task takes the engine's, then the registry's).
        let protected = app.gate.protected();
        for removal in app
            .gate
            .read(|registry| due(registry, now, |key| protected.binary_search(key).is_ok()))
        {
            let target = removal.target.clone();
            let meta = app.gate.meta_as(Actor::Owner, &principal);
            match app.gate.propose(removal.into(), meta).await {
                Ok(applied) => tracing::info!(
                    tenant = %target.key.tenant,
                    namespace = %target.key.namespace,
                    service = %target.key.service,
                    instance = %target.instance,
                    incarnation = target.incarnation.0,
                    revision = applied.revision.0,
                    label = DEREGISTER_AFTER_LABEL,
                    "critical longer than DeregisterCriticalServiceAfter: deregistered"
                ),
                // Changed since it was read (a pass, a re-registration): not due any more.
                Err(error) => tracing::debug!(
                    service = %target.key,
                    instance = %target.instance,
                    error = %error.message,
                    "reaping skipped"
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use muster_core::{Actor, Incarnation, InstanceId, Principal, ServiceKey, ServingState};
    use muster_registry::{Command, CommandMeta, LeaseSpec, Register, RegistryConfig, SetServing};

    use super::*;

    fn at(at_ms: u64) -> CommandMeta {
        CommandMeta {
            at_ms,
            principal: Principal::new("tester").unwrap(),
            actor: Actor::Owner,
        }
    }

    fn target(name: &str) -> Target {
        Target {
            key: ServiceKey::new("default", "default", "web").unwrap(),
            instance: InstanceId::new(name).unwrap(),
            incarnation: Incarnation(1),
        }
    }

    /// `name` registered at 1,000 ms with `after` ms, then set to `state` at 2,000 ms.
    fn registered(registry: &mut Registry, name: &str, after: Option<u64>, state: ServingState) {
        let mut spec: muster_core::EndpointSpec =
            serde_json::from_value(serde_json::json!({"addresses": [{"ip": "10.0.0.1"}]})).unwrap();
        if let Some(after) = after {
            spec.labels.insert(DEREGISTER_AFTER_LABEL.into(), after.to_string());
        }
        let register = Register {
            target: target(name),
            spec,
            lease: LeaseSpec::None,
            expected_revision: None,
        };
        registry.apply(&Command::Register(register), &at(1_000)).unwrap();
        let set = SetServing {
            target: target(name),
            state,
            reason: "test".into(),
            expected_revision: None,
        };
        registry.apply(&Command::SetServing(set), &at(2_000)).unwrap();
    }

    #[test]
    fn only_endpoints_critical_longer_than_their_threshold_are_due_each_fenced_by_its_revision() {
        let mut registry = Registry::new(RegistryConfig::default());
        registered(&mut registry, "critical", Some(500), ServingState::NotServing);
        registered(&mut registry, "ready", Some(500), ServingState::Ready);
        registered(&mut registry, "draining", Some(500), ServingState::Draining);
        registered(&mut registry, "unlabelled", None, ServingState::NotServing);
        registered(&mut registry, "patient", Some(60_000), ServingState::Starting);
        registered(&mut registry, "unprobed", Some(500), ServingState::Unknown);
        let nothing_protected = |_: &ServiceKey| false;
        assert!(
            due(&registry, 2_499, nothing_protected).is_empty(),
            "critical since 2,000 ms: not yet"
        );
        let removals = due(&registry, 2_500, nothing_protected);
        assert_eq!(removals.len(), 1, "{removals:?}");
        let record = registry
            .snapshot(&target("critical").key)
            .unwrap()
            .get(&target("critical").instance)
            .cloned()
            .unwrap();
        assert_eq!(removals[0].target, target("critical"));
        assert_eq!(removals[0].expected_revision, Some(record.revision));
        let later = due(&registry, 62_000, nothing_protected);
        assert_eq!(
            later.len(),
            2,
            "the patient one's turn comes too, never the unknown one: {later:?}"
        );
        assert!(
            later
                .iter()
                .all(|removal| removal.target.instance.as_str() != "unprobed")
        );
    }

    #[test]
    fn nothing_is_due_in_a_service_self_preservation_protects() {
        let mut registry = Registry::new(RegistryConfig::default());
        registered(&mut registry, "critical", Some(500), ServingState::NotServing);
        assert!(due(&registry, 10_000, |key| *key == target("critical").key).is_empty());
        assert_eq!(due(&registry, 10_000, |_| false).len(), 1);
    }
}
