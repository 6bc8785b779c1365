//! Finding what an agent request names: the placement (`?partition=`, `?ns=`), the endpoint
//! of a service ID, the endpoint and check of a check ID.
//!
//! A Consul agent keys services by ID alone; Muster keys endpoints by service and instance.
//! The instance of an ID is a pure function of it ([`instance_of`]), so finding it asks each
//! service of the namespace for that instance: O(services) lookups, no scan of endpoints. A
//! check ID of Consul's default form (`service:<ID>[:<n>]`) is found the same way; a custom
//! `CheckID` is looked for among the namespace's endpoints, O(endpoints).
//!
//! A lookup sees through the caller's rights (SPEC S2, S3, E1): it is given what the caller
//! may act on, finds among those services first, and a reply names no service the caller
//! may not read. What exists only where the caller may not act is a [`Miss::Denied`], whose
//! service goes to the audit trail, never into the reply.

use std::sync::Arc;

use muster_core::{Endpoint, InstanceId, NamespaceKey, ServiceKey};
use muster_registry::Registry;

use super::ConsulView;
use super::agent_map::{Placement, check_ids, instance_of};
use super::error::ConsulError;

/// Where a request lands and whether its query chose it: `(tenant named, namespace named)`.
pub(crate) fn placement(view: &ConsulView, query: &[(String, String)]) -> (Placement, (bool, bool)) {
    let named = |name: &str| {
        query
            .iter()
            .find(|(k, v)| k == name && !v.is_empty())
            .map(|(_, v)| v.clone())
    };
    let tenant = named("partition");
    let namespace = named("ns");
    let chosen = (tenant.is_some(), namespace.is_some());
    (
        Placement {
            tenant: tenant.unwrap_or_else(|| view.tenant.to_string()),
            namespace: namespace.unwrap_or_else(|| view.namespace.to_string()),
        },
        chosen,
    )
}

/// The namespace a placement names; `None` when its names are no Muster names (nothing can
/// be registered there, so nothing is found).
pub(crate) fn namespace_of(place: &Placement) -> Option<NamespaceKey> {
    NamespaceKey::new(&place.tenant, &place.namespace).ok()
}

/// An endpoint an agent request found, with its service.
#[derive(Debug, Clone)]
pub(crate) struct Found {
    /// The service.
    pub(crate) key: ServiceKey,
    /// The record.
    pub(crate) endpoint: Arc<Endpoint>,
}

/// Why a lookup found nothing the caller may act on.
#[derive(Debug)]
pub(crate) enum Miss {
    /// Nothing to act on, or a request that cannot be answered: the reply as it is.
    Error(ConsulError),
    /// Something, but only in services the caller may not act on: the first of them, to
    /// audit the refusal against (the reply is a bare `Permission denied`).
    Denied(ServiceKey),
}

impl From<ConsulError> for Miss {
    fn from(error: ConsulError) -> Miss {
        Miss::Error(error)
    }
}

/// Consul's 404 for a service ID it does not hold.
pub(crate) fn unknown_service(id: &str) -> ConsulError {
    ConsulError::not_found(format!(
        "Unknown service ID {id:?}. Ensure that the service ID is passed, not the service name."
    ))
}

/// Consul's 404 for a check ID it does not hold.
pub(crate) fn unknown_check(id: &str) -> ConsulError {
    ConsulError::not_found(format!(
        "Unknown check ID {id:?}. Ensure that the check ID is passed, not the check name."
    ))
}

/// Every endpoint of `namespace` whose instance is `instance`, by service.
fn with_instance(registry: &Registry, namespace: &NamespaceKey, instance: &InstanceId) -> Vec<Found> {
    registry
        .services(namespace)
        .into_iter()
        .filter_map(|snapshot| {
            snapshot.get(instance).map(|endpoint| Found {
                key: snapshot.key().clone(),
                endpoint: Arc::clone(endpoint),
            })
        })
        .collect()
}

/// Another service of `key`'s namespace that holds `instance` already: a Consul agent keys
/// services by ID alone, so an ID registered again under a new name replaces the old one
/// there; Muster keys instances per service and would keep both, leaving one the agent API
/// cannot address. Such a registration is refused instead (deregister the old one first).
pub(crate) fn held_elsewhere(registry: &Registry, key: &ServiceKey, instance: &InstanceId) -> Option<ServiceKey> {
    with_instance(registry, &key.namespace_key(), instance)
        .into_iter()
        .map(|found| found.key)
        .find(|other| other != key)
}

/// The endpoint of service ID `id` in `place`, among the services the caller may act on
/// (`may`); an ID that several of those hold is refused, naming only those it may read
/// (`reads`).
pub(crate) fn service(
    registry: &Registry,
    place: &Placement,
    id: &str,
    may: impl Fn(&ServiceKey) -> bool,
    reads: impl Fn(&ServiceKey) -> bool,
) -> Result<Found, Miss> {
    let namespace = namespace_of(place).ok_or_else(|| unknown_service(id))?;
    let (instance, _) = instance_of(id).map_err(|_| unknown_service(id))?;
    let (mut found, barred): (Vec<Found>, Vec<Found>) = with_instance(registry, &namespace, &instance)
        .into_iter()
        .partition(|found| may(&found.key));
    match found.len() {
        0 => Err(barred
            .into_iter()
            .next()
            .map_or_else(|| Miss::Error(unknown_service(id)), |found| Miss::Denied(found.key))),
        1 => Ok(found.remove(0)),
        _ => {
            let named: Vec<&str> = found
                .iter()
                .filter(|f| reads(&f.key))
                .map(|f| f.key.service.as_str())
                .collect();
            let named = if named.is_empty() {
                String::new()
            } else {
                format!(" ({})", named.join(", "))
            };
            Err(Miss::Error(ConsulError::bad_request(format!(
                "Service ID {id:?} names instances of several services{named}: Muster keys instances per \
                 service, a Consul agent per ID; use the native API, or give each instance an ID of its own"
            ))))
        }
    }
}

/// The endpoint holding check `check_id` in `place`, and the check's index, among the
/// services the caller may act on (`may`).
pub(crate) fn check(
    registry: &Registry,
    place: &Placement,
    check_id: &str,
    may: impl Fn(&ServiceKey) -> bool,
) -> Result<(Found, usize), Miss> {
    let namespace = namespace_of(place).ok_or_else(|| unknown_check(check_id))?;
    if let Some(found) = find_check(registry, &namespace, check_id, &may) {
        return Ok(found);
    }
    match find_check(registry, &namespace, check_id, |key| !may(key)) {
        Some((found, _)) => Err(Miss::Denied(found.key)),
        None => Err(Miss::Error(unknown_check(check_id))),
    }
}

/// The first endpoint of a service `among` lets through holding check `check_id`, and the
/// check's index.
fn find_check(
    registry: &Registry,
    namespace: &NamespaceKey,
    check_id: &str,
    among: impl Fn(&ServiceKey) -> bool,
) -> Option<(Found, usize)> {
    let index_of = |found: &Found| check_ids(&found.endpoint).iter().position(|id| id == check_id);
    // The default form first: the instance follows from the ID.
    if let Some(rest) = check_id.strip_prefix("service:") {
        let ids = [Some(rest), rest.rsplit_once(':').map(|(id, _)| id)];
        for id in ids.into_iter().flatten() {
            let Ok((instance, _)) = instance_of(id) else {
                continue;
            };
            for found in with_instance(registry, namespace, &instance) {
                if let Some(index) = index_of(&found).filter(|_| among(&found.key)) {
                    return Some((found, index));
                }
            }
        }
    }
    for snapshot in registry.services(namespace) {
        if !among(snapshot.key()) {
            continue;
        }
        for endpoint in snapshot.iter().filter(|e| !e.checks.is_empty()) {
            let found = Found {
                key: snapshot.key().clone(),
                endpoint: Arc::clone(endpoint),
            };
            if let Some(index) = index_of(&found) {
                return Some((found, index));
            }
        }
    }
    None
}
