//! `GET /v1/catalog/services` and `GET /v1/catalog/service/<name>` (SPEC E1): the view's
//! namespace as Consul's catalog.
//!
//! - `/v1/catalog/services`: every service with at least one endpoint, name → its tags
//!   (the union over its endpoints, sorted). The index is the newest revision among the
//!   namespace's services the caller may read (an emptied service counts: its going is a
//!   change of the result); a blocking query wakes on any change in the namespace.
//! - `/v1/catalog/service/<name>`: one `CatalogService` per endpoint, in instance order;
//!   `tag` (repeatable) keeps endpoints carrying every tag named. The index is the service's
//!   revision; a blocking query wakes only when this service changes.
//!
//! A service the caller may not read is left out (and `X-Consul-Results-Filtered-By-ACL`
//! says so), as Consul's ACL filtering leaves it out; a name that is no Muster name is an
//! unknown service: `[]` with index 1.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use axum::Extension;
use axum::extract::{Path, State};
use axum::response::Response;

use super::ConsulView;
use super::blocking::{self, Blocking};
use super::error::ConsulError;
use super::token::ConsulCaller;
use crate::app::ConsulApp;
use crate::params::Params;

/// `GET /v1/catalog/services`.
pub(super) async fn services(
    State(app): State<Arc<ConsulApp>>,
    Extension(view): Extension<Arc<ConsulView>>,
    caller: ConsulCaller,
    params: Params,
) -> Result<Response, ConsulError> {
    view.refuse_filter(&params)?;
    let blocking = Blocking::parse(&params)?;
    let found = view.read_namespace(&app, &caller, &blocking, &params).await?;
    let (snapshots, filtered) = (found.snapshots, found.filtered);
    let listing: BTreeMap<&str, BTreeSet<String>> = snapshots
        .iter()
        .filter(|snapshot| !snapshot.is_empty() && view.node_meta_matches(&params))
        .map(|snapshot| {
            let tags = snapshot
                .iter()
                .flat_map(|endpoint| super::agent_map::tags(endpoint))
                .collect();
            (snapshot.key().service.as_str(), tags)
        })
        .collect();
    Ok(blocking::respond(&app, &blocking, found.index, &listing, filtered))
}

/// `GET /v1/catalog/service/<name>`.
pub(super) async fn service(
    State(app): State<Arc<ConsulApp>>,
    Extension(view): Extension<Arc<ConsulView>>,
    caller: ConsulCaller,
    Path(name): Path<String>,
    params: Params,
) -> Result<Response, ConsulError> {
    view.refuse_filter(&params)?;
    let blocking = Blocking::parse(&params)?;
    let found = view.read_service(&app, &caller, &blocking, &params, &name).await?;
    let entries: Vec<_> = found
        .instances(&view, &params)
        .filter(|instance| instance.has_tags(params.all("tag")))
        .map(|instance| instance.catalog())
        .collect();
    let filtered = found.filtered;
    Ok(blocking::respond(&app, &blocking, found.index, &entries, filtered))
}
