//! Who waits on what: the wake-up side of the Consul API's blocking queries (SPEC E1).
//!
//! ```text
//!  Node (registry write lock) ──applied──▶ Waiters ──▶ services[key].notify_waiters()
//!                                              └────▶ namespaces[ns].notify_waiters()
//!  blocking query on web ──▶ Waiter(web): Notified enabled ─▶ read ─▶ unchanged? wait
//! ```
//!
//! Consul wakes every blocking query of a datacenter on any write and lets each re-run; here
//! a write wakes only the queries on the services it touched (and on their namespace, for
//! namespace-wide queries such as `/v1/catalog/services`). A change of `api` never wakes a
//! query on `web`: the bench's wake-ups per change measure exactly that.
//!
//! # Correctness
//! - No lost wake-up: a query enables its `Notified` before it reads the registry, and the
//!   apply path notifies under the registry's write lock. A write is therefore either applied
//!   before the read (the read sees it) or notified after the `Notified` was enabled (the
//!   wait ends at once).
//! - A snapshot installed from the leader replaces everything: every waiter is woken and
//!   re-reads.
//! - Entries live as long as a waiter holds them: the map's lock is taken to add and to drop
//!   a [`Waiter`], so the last one out removes its entry, and an idle server holds none.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use muster_consensus::ApplyObserver;
use muster_core::{NamespaceKey, ServiceKey};
use muster_registry::{Applied, Registry};
use tokio::sync::Notify;

/// What a blocking query waits on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WaitScope {
    /// One service: woken by its own changes only.
    Service(ServiceKey),
    /// A namespace: woken by a change of any of its services.
    Namespace(NamespaceKey),
    /// Nothing that can change (an empty key/value store, a name that is no Muster name):
    /// the query waits out its time.
    Nothing,
}

#[derive(Default)]
struct Maps {
    services: HashMap<ServiceKey, Arc<Notify>>,
    namespaces: HashMap<NamespaceKey, Arc<Notify>>,
}

/// The waiting blocking queries, by what they wait on; an [`ApplyObserver`] of the node.
#[derive(Default)]
pub struct Waiters {
    maps: Mutex<Maps>,
}

impl std::fmt::Debug for Waiters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (services, namespaces) = {
            let maps = self.lock();
            (maps.services.len(), maps.namespaces.len())
        };
        f.debug_struct("Waiters")
            .field("services", &services)
            .field("namespaces", &namespaces)
            .finish()
    }
}

/// One blocking query's place; dropping it leaves.
pub(crate) struct Waiter {
    waiters: Arc<Waiters>,
    scope: WaitScope,
    notify: Arc<Notify>,
}

impl Waiter {
    /// What the query waits on to be notified.
    pub(crate) fn notify(&self) -> &Notify {
        &self.notify
    }
}

impl Waiters {
    fn lock(&self) -> MutexGuard<'_, Maps> {
        self.maps.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place to wait on `scope`.
    pub(crate) fn join(self: &Arc<Self>, scope: WaitScope) -> Waiter {
        let mut maps = self.lock();
        let notify = match &scope {
            WaitScope::Service(key) => Arc::clone(maps.services.entry(key.clone()).or_default()),
            WaitScope::Namespace(namespace) => Arc::clone(maps.namespaces.entry(namespace.clone()).or_default()),
            // Nothing ever notifies it: a private one.
            WaitScope::Nothing => Arc::new(Notify::new()),
        };
        drop(maps);
        Waiter {
            waiters: Arc::clone(self),
            scope,
            notify,
        }
    }

    /// How many services and namespaces have waiters now.
    #[cfg(test)]
    pub fn watched(&self) -> (usize, usize) {
        let maps = self.lock();
        (maps.services.len(), maps.namespaces.len())
    }
}

/// Removes `key`'s entry when the leaving waiter holds the last reference besides the map.
fn leave<K: Eq + Hash>(map: &mut HashMap<K, Arc<Notify>>, key: &K, notify: &Arc<Notify>) {
    if let Some(current) = map.get(key)
        && Arc::ptr_eq(current, notify)
        && Arc::strong_count(current) == 2
    {
        map.remove(key);
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let mut maps = self.waiters.lock();
        match &self.scope {
            WaitScope::Service(key) => leave(&mut maps.services, key, &self.notify),
            WaitScope::Namespace(namespace) => leave(&mut maps.namespaces, namespace, &self.notify),
            WaitScope::Nothing => {}
        }
    }
}

impl ApplyObserver for Waiters {
    fn applied(&self, _registry: &Registry, applied: &Applied) {
        let maps = self.lock();
        if maps.services.is_empty() && maps.namespaces.is_empty() {
            return;
        }
        let touched = applied
            .updates
            .iter()
            .map(|update| &update.key)
            .chain(&applied.released);
        for key in touched {
            if let Some(notify) = maps.services.get(key) {
                notify.notify_waiters();
            }
            if !maps.namespaces.is_empty()
                && let Some(notify) = maps.namespaces.get(&key.namespace_key())
            {
                notify.notify_waiters();
            }
        }
    }

    fn reset(&self, _registry: &Registry) {
        let maps = self.lock();
        for notify in maps.services.values().chain(maps.namespaces.values()) {
            notify.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::pin::pin;

    use super::*;

    fn key(service: &str) -> ServiceKey {
        ServiceKey::new("acme", "prod", service).unwrap()
    }

    /// Whether `waiter` has been notified since `enable`d (polled once, without waiting).
    fn fired(notified: std::pin::Pin<&mut tokio::sync::futures::Notified<'_>>) -> bool {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        std::future::Future::poll(notified, &mut cx).is_ready()
    }

    #[test]
    fn a_change_of_one_service_wakes_its_waiters_and_its_namespace_s_not_another_service_s() {
        let waiters = Arc::new(Waiters::default());
        let web = waiters.join(WaitScope::Service(key("web")));
        let api = waiters.join(WaitScope::Service(key("api")));
        let namespace = waiters.join(WaitScope::Namespace(key("web").namespace_key()));
        let mut on_web = pin!(web.notify().notified());
        let mut on_api = pin!(api.notify().notified());
        let mut on_namespace = pin!(namespace.notify().notified());
        on_web.as_mut().enable();
        on_api.as_mut().enable();
        on_namespace.as_mut().enable();

        let registry = Registry::new(muster_registry::RegistryConfig::default());
        let applied = Applied {
            revision: muster_core::Revision(7),
            updates: Vec::new(),
            lease: None,
            unchanged: None,
            released: vec![key("web")],
            mirrored: Vec::new(),
        };
        waiters.applied(&registry, &applied);

        assert!(fired(on_web.as_mut()), "web changed");
        assert!(fired(on_namespace.as_mut()), "its namespace changed");
        assert!(!fired(on_api.as_mut()), "api did not change");
    }

    #[test]
    fn the_last_waiter_out_removes_the_entry() {
        let waiters = Arc::new(Waiters::default());
        let first = waiters.join(WaitScope::Service(key("web")));
        let second = waiters.join(WaitScope::Service(key("web")));
        let nothing = waiters.join(WaitScope::Nothing);
        assert_eq!(waiters.watched(), (1, 0));
        drop(first);
        assert_eq!(waiters.watched(), (1, 0), "one is still waiting");
        drop(second);
        drop(nothing);
        assert_eq!(waiters.watched(), (0, 0));
    }
}
