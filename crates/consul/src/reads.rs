//! The reads every Consul read route shares: one service, or a namespace's services, read
//! for a caller with its rights, blocking as asked.

use std::sync::Arc;

use muster_auth::Verb;
use muster_core::ServiceSnapshot;

use crate::app::ConsulApp;
use crate::blocking::{self, Blocking, Indexed};
use crate::error::ConsulError;
use crate::params::Params;
use crate::shape::Instance;
use crate::token::ConsulCaller;
use crate::view::ConsulView;
use crate::waiters::WaitScope;

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
        app: &ConsulApp,
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
                let (readable, hidden): (Vec<_>, Vec<_>) = registry
                    .services(&namespace)
                    .into_iter()
                    .partition(|snapshot| caller.may(snapshot.key(), Verb::Read));
                // The index counts services emptied long ago too, so that leaving the list
                // (with time, no command) never takes it backwards.
                let index = newest(&readable);
                let listed = registry.listed_services(&namespace, app.gate.clock.unix_now_ms());
                let visible = listed.into_iter().filter(|s| caller.may(s.key(), Verb::Read)).collect();
                Indexed {
                    index,
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

    /// Reads service `name` for `caller`, blocking as asked: on the service's own changes, or
    /// on nothing when it cannot exist or the caller may not read it (its answer is then
    /// `[]` whatever happens, and waiting on its changes would tell the caller they happen).
    pub(crate) async fn read_service(
        &self,
        app: &ConsulApp,
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
