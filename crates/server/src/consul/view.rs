//! [`ConsulView`]: which part of the registry a Consul listener shows and how it names
//! itself, and the lookups every read route shares (names, `ns` / `partition`, one service
//! read with its rights).

use std::net::IpAddr;
use std::sync::Arc;

use muster_auth::Verb;
use muster_core::{Label, NamespaceKey, ServiceKey, ServiceSnapshot};

use super::blocking::{self, Blocking, Indexed, Jitter, Params};
use super::error::ConsulError;
use super::shape::Instance;
use super::token::ConsulCaller;
use super::waiters::{WaitScope, Waiters};
use crate::app::App;

/// What every Consul handler needs besides the [`App`]. Handlers take it as
/// `Extension<Arc<ConsulView>>`.
#[derive(Debug)]
pub(crate) struct ConsulView {
    /// The tenant requests read and write without `?partition=`.
    pub(crate) tenant: Label,
    /// The namespace requests read and write without `?ns=`.
    pub(crate) namespace: Label,
    /// The datacenter name.
    pub(crate) datacenter: String,
    /// The node name.
    pub(crate) node: String,
    /// The node's id, UUID-shaped as Consul's are: the Muster node id in the last group.
    pub(crate) node_id: String,
    /// The node's address.
    pub(crate) node_address: IpAddr,
    /// The listener's port: the leader's address when this node leads alone.
    pub(crate) port: u16,
    /// The waiting blocking queries (fed by the apply path).
    pub(crate) waiters: Arc<Waiters>,
    /// The blocking queries' jitter.
    pub(crate) jitter: Jitter,
}

/// One service read for a route: its snapshot, unless unknown or not the caller's to read.
pub(crate) struct ServiceRead {
    /// The index of the answer.
    pub(crate) index: u64,
    /// The service's endpoints, when it exists and the caller may read it.
    pub(crate) result: Option<Arc<ServiceSnapshot>>,
    /// Whether the caller's rights left it out.
    pub(crate) filtered: bool,
}

impl ServiceRead {
    /// The service's instances as Consul shows them: every endpoint, or none when the
    /// service is absent or unreadable or the node does not match `node-meta`.
    pub(crate) fn instances<'a>(&'a self, view: &'a ConsulView, params: &Params) -> impl Iterator<Item = Instance<'a>> {
        self.result
            .as_ref()
            .filter(|_| view.node_meta_matches(params))
            .into_iter()
            .flat_map(move |snapshot| {
                snapshot
                    .iter()
                    .map(move |endpoint| Instance::new(view, snapshot.key(), endpoint))
            })
    }
}

/// What [`ConsulView::read_namespace`] found.
pub(crate) struct NamespaceRead {
    /// The index of the answer: the newest revision among the readable services.
    pub(crate) index: u64,
    /// The services of the namespace the caller may read, in key order.
    pub(crate) snapshots: Vec<Arc<ServiceSnapshot>>,
    /// Whether the caller's rights left some out.
    pub(crate) filtered: bool,
}

impl ConsulView {
    /// Reads the request's namespace for `caller`, blocking as asked on any change of its
    /// services (catalog/services, health/state).
    pub(crate) async fn read_namespace(
        &self,
        app: &App,
        caller: &ConsulCaller,
        blocking: &Blocking,
        params: &Params,
    ) -> Result<NamespaceRead, ConsulError> {
        let namespace = self.namespace(params)?;
        let found = blocking::read(
            app,
            self,
            caller,
            blocking,
            WaitScope::Namespace(namespace.clone()),
            |registry| {
                let (visible, hidden): (Vec<_>, Vec<_>) = registry
                    .services(&namespace)
                    .into_iter()
                    .partition(|snapshot| caller.may(snapshot.key(), Verb::Read));
                Indexed {
                    index: newest(&visible),
                    result: (visible, !hidden.is_empty()),
                }
            },
        )
        .await?;
        let (snapshots, filtered) = found.result;
        Ok(NamespaceRead {
            index: found.index,
            snapshots,
            filtered,
        })
    }

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

    /// Reads service `name` for `caller`, blocking as asked: on the service's own changes, or
    /// on nothing when it cannot exist or the caller may not read it (its answer is then
    /// `[]` whatever happens, and waiting on its changes would tell the caller they happen).
    pub(crate) async fn read_service(
        &self,
        app: &App,
        caller: &ConsulCaller,
        blocking: &Blocking,
        params: &Params,
        name: &str,
    ) -> Result<ServiceRead, ConsulError> {
        let key = self.service(params, name)?;
        let readable = key.as_ref().filter(|key| caller.may(key, Verb::Read));
        let filtered = key.is_some() && readable.is_none();
        let Some(key) = readable else {
            let found = blocking::read(app, self, caller, blocking, WaitScope::Nothing, |_| Indexed {
                index: 0,
                result: (),
            })
            .await?;
            return Ok(ServiceRead {
                index: found.index,
                result: None,
                filtered,
            });
        };
        let found = blocking::read(
            app,
            self,
            caller,
            blocking,
            WaitScope::Service(key.clone()),
            |registry| {
                let snapshot = registry.snapshot(key);
                Indexed {
                    index: snapshot.as_ref().map_or(0, |snapshot| snapshot.revision().0),
                    result: snapshot,
                }
            },
        )
        .await?;
        Ok(ServiceRead {
            index: found.index,
            result: found.result,
            filtered: false,
        })
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
            key == super::shape::NETWORK_SEGMENT && value.is_empty()
        })
    }
}

/// The newest revision among `snapshots` (0 for none).
fn newest(snapshots: &[Arc<ServiceSnapshot>]) -> u64 {
    snapshots
        .iter()
        .map(|snapshot| snapshot.revision())
        .max()
        .unwrap_or(muster_core::Revision::ZERO)
        .0
}
