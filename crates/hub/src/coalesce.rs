//! Coalescing a lagging watcher's backlog (SPEC K1): the topic hands a watcher
//! [`COALESCE_BEHIND`](crate::topic::COALESCE_BEHIND) frames behind its backlog's updates, and
//! this turns them into one update per service.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use muster_core::{Event, InstanceId, ServiceKey, ServiceUpdate};

/// Coalesces consecutive updates (oldest first) into one per service, in the order of each
/// service's first update (SPEC K1): from the first one's `prev_revision` to the last one's
/// revision and digest, each instance's last event only. A delete is never lost: an
/// instance's last event is its delete unless a later put superseded it; an instance put and
/// deleted within the run ends as a delete, which a client without it ignores.
pub(crate) fn coalesce(updates: &[Arc<ServiceUpdate>]) -> Vec<ServiceUpdate> {
    let mut merged: Vec<(ServiceUpdate, BTreeMap<InstanceId, Event>)> = Vec::new();
    let mut index: HashMap<&ServiceKey, usize> = HashMap::new();
    for update in updates {
        let at = *index.entry(&update.key).or_insert_with(|| {
            merged.push((
                ServiceUpdate {
                    key: update.key.clone(),
                    revision: update.revision,
                    prev_revision: update.prev_revision,
                    digest: update.digest,
                    events: Vec::new(),
                },
                BTreeMap::new(),
            ));
            merged.len() - 1
        });
        let (into, events) = &mut merged[at];
        into.revision = update.revision;
        into.digest = update.digest;
        for event in &update.events {
            events.insert(event.instance().clone(), event.clone());
        }
    }
    merged
        .into_iter()
        .map(|(mut update, events)| {
            update.events = events.into_values().collect();
            update
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use muster_core::{Digest, Incarnation, Revision};

    use super::*;

    fn api() -> ServiceKey {
        ServiceKey::new("acme", "prod", "api").unwrap()
    }

    /// A put of `instance` at `ip`, its record made by a real registry.
    fn put(instance: &str, ip: &str) -> Event {
        use muster_registry::{CommandMeta, LeaseSpec, Register, Registry, RegistryConfig, Target};
        let mut registry = Registry::new(RegistryConfig::default());
        let instance = InstanceId::new(instance).unwrap();
        let command = Register {
            target: Target {
                key: api(),
                instance: instance.clone(),
                incarnation: Incarnation(1),
            },
            spec: serde_json::from_value(serde_json::json!({"addresses": [{"ip": ip}]})).unwrap(),
            lease: LeaseSpec::None,
            expected_revision: None,
        };
        let meta = CommandMeta {
            at_ms: 0,
            principal: muster_core::Principal::new("test").unwrap(),
            actor: muster_core::Actor::App,
        };
        registry.apply(&command.into(), &meta).unwrap();
        let endpoint = Arc::clone(registry.snapshot(&api()).unwrap().get(&instance).unwrap());
        Event::Put { endpoint }
    }

    fn delete(instance: &str) -> Event {
        Event::Delete {
            instance: InstanceId::new(instance).unwrap(),
            incarnation: Incarnation(1),
            reason: muster_core::DeleteReason::Deregistered,
        }
    }

    fn of(key: &ServiceKey, revision: u64, prev: u64, events: Vec<Event>) -> Arc<ServiceUpdate> {
        Arc::new(ServiceUpdate {
            key: key.clone(),
            revision: Revision(revision),
            prev_revision: Revision(prev),
            digest: Digest(revision * 1_000),
            events,
        })
    }

    #[test]
    fn coalescing_keeps_each_instances_last_event_and_every_delete() {
        let web = ServiceKey::new("acme", "prod", "web").unwrap();
        let updates = [
            of(&api(), 3, 1, vec![put("a", "10.0.0.1"), put("b", "10.0.0.2")]),
            of(&web, 4, 2, vec![put("w", "10.0.1.1")]),
            of(&api(), 5, 3, vec![delete("a"), put("b", "10.0.0.3")]),
            of(&api(), 6, 5, vec![put("c", "10.0.0.4")]),
            of(&api(), 8, 6, vec![delete("c"), delete("old")]),
            of(&web, 9, 4, vec![put("w", "10.0.1.2")]),
        ];
        let merged = coalesce(&updates);
        assert_eq!(merged.len(), 2, "one per service");
        let (api_update, web_update) = (&merged[0], &merged[1]);
        assert_eq!(api_update.key, api(), "in the order of each service's first update");
        assert_eq!(
            (api_update.prev_revision, api_update.revision, api_update.digest),
            (Revision(1), Revision(8), Digest(8_000)),
            "from the first one's predecessor to the last one's revision and digest"
        );
        let shown: Vec<String> = api_update
            .events
            .iter()
            .map(|event| match event {
                Event::Put { endpoint } => format!("put {} {}", endpoint.instance, endpoint.addresses[0].ip),
                Event::Delete { instance, .. } => format!("delete {instance}"),
            })
            .collect();
        assert_eq!(shown, ["delete a", "put b 10.0.0.3", "delete c", "delete old"]);
        assert_eq!(
            (web_update.prev_revision, web_update.revision),
            (Revision(2), Revision(9))
        );
        assert_eq!(web_update.events, vec![put("w", "10.0.1.2")]);
    }
}
