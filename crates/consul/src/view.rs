//! [`ConsulView`]: which part of the registry a Consul listener shows and how it names
//! itself, and the names every route resolves (`ns` / `partition`, service names). The reads
//! themselves are `reads`.

use std::net::IpAddr;
use std::sync::Arc;

use muster_core::{Label, NamespaceKey, ServiceKey};

use super::error::ConsulError;
use super::waiters::Waiters;
use crate::params::Params;

/// What every Consul handler needs besides the [`ConsulApp`](crate::ConsulApp). Handlers take it as
/// `Extension<Arc<ConsulView>>`.
#[derive(Debug)]
pub struct ConsulView {
    /// The tenant requests read and write without `?partition=`.
    pub tenant: Label,
    /// The namespace requests read and write without `?ns=`.
    pub namespace: Label,
    /// The datacenter name.
    pub datacenter: String,
    /// The node name.
    pub node: String,
    /// The node's id, UUID-shaped as Consul's are: the Muster node id in the last group.
    pub node_id: String,
    /// The node's address.
    pub node_address: IpAddr,
    /// The listener's port: the leader's address when this node leads alone.
    pub port: u16,
    /// The waiting blocking queries (fed by the apply path).
    pub waiters: Arc<Waiters>,
    /// The blocking queries' jitter.
    pub jitter: Jitter,
}

impl ConsulView {
    /// A random number for a blocking query's jitter.
    pub(crate) fn random(&self) -> u64 {
        self.jitter.next()
    }

    /// The namespace a request reads: `?partition=` names the tenant, `?ns=` the namespace,
    /// each defaulting to the view's.
    pub(crate) fn namespace(&self, params: &Params) -> Result<NamespaceKey, ConsulError> {
        let pick = |what: &str, param: &str, default: &Label| match params.get(param).filter(|v| !v.is_empty()) {
            None => Ok(default.clone()),
            Some(value) => Label::new(what, value).map_err(|_| {
                ConsulError::bad_request(format!(
                    "Invalid ?{param}: '{}' is not a Muster {what} (a DNS label: a-z, 0-9 and '-')",
                    value.escape_debug()
                ))
            }),
        };
        Ok(NamespaceKey {
            tenant: pick("tenant", "partition", &self.tenant)?,
            namespace: pick("namespace", "ns", &self.namespace)?,
        })
    }

    /// The service a Consul service name names; `None` when the name is no Muster name (no
    /// such service can exist).
    pub(crate) fn service(&self, params: &Params, name: &str) -> Result<Option<ServiceKey>, ConsulError> {
        let namespace = self.namespace(params)?;
        Ok(Label::new("service", name).ok().map(|service| ServiceKey {
            tenant: namespace.tenant,
            namespace: namespace.namespace,
            service,
        }))
    }

    /// Refuses `?filter=`: Muster does not evaluate Consul's filter expressions, and
    /// answering unfiltered would hand the client what it asked to leave out.
    pub(crate) fn refuse_filter(&self, params: &Params) -> Result<(), ConsulError> {
        match params.get("filter") {
            Some(filter) if !filter.is_empty() => Err(ConsulError::bad_request(
                "?filter expressions are not supported by Muster's Consul API; filter on the client, \
                 or use ?tag= and ?passing",
            )),
            _ => Ok(()),
        }
    }

    /// Whether every `?node-meta=key:value` matches the node's meta (it has one key,
    /// `consul-network-segment`, empty): a filter the node fails leaves every answer empty.
    pub(crate) fn node_meta_matches(&self, params: &Params) -> bool {
        params.all("node-meta").all(|pair| {
            let (key, value) = pair.split_once(':').unwrap_or((pair, ""));
            key == NETWORK_SEGMENT && value.is_empty()
        })
    }
}

/// Consul's node meta of every agent (`consul-network-segment`, empty: the default
/// segment), which `node-meta` filters may name.
pub(crate) const NETWORK_SEGMENT: &str = "consul-network-segment";

/// What a view needs to draw jitter: shared by every blocking query of the listener.
pub struct Jitter(std::sync::Mutex<rand_xoshiro::Xoshiro256PlusPlus>);

impl Jitter {
    /// A generator seeded with `seed` (the server's start time: jitter only has to differ
    /// between servers and runs).
    pub fn new(seed: u64) -> Jitter {
        use rand_core::SeedableRng;
        Jitter(std::sync::Mutex::new(rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(
            seed,
        )))
    }

    /// The next random number.
    pub(crate) fn next(&self) -> u64 {
        use rand_core::RngCore;
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .next_u64()
    }
}

impl std::fmt::Debug for Jitter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Jitter")
    }
}
