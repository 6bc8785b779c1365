//! `GET /v1/health/service/<name>`, `/v1/health/checks/<name>` and `/v1/health/state/<state>`
//! (SPEC E1): endpoints with their checks, states as [`status`](super::status) maps them.
//!
//! - `/v1/health/service/<name>`: one `ServiceEntry` per endpoint (the node, the service, the
//!   node's `serfHealth` and the service's checks); `passing` keeps entries whose every check
//!   passes (a draining endpoint's maintenance check is critical, so it goes; a degraded
//!   one's warning does too, as in Consul); `tag` (repeatable) keeps entries with every tag
//!   named; `near` is accepted and ignored (one node: every entry is as near as another).
//! - `/v1/health/checks/<name>`: the service's checks.
//! - `/v1/health/state/<state>` (`any`, `passing`, `warning`, `critical`): the checks of every
//!   service of the namespace in that state, and the node's `serfHealth`.
//!
//! Indexes and blocking are the catalog's: the service's revision (a query on one service
//! wakes only when it changes), the namespace's newest for `health/state`.

use std::sync::Arc;

use axum::Extension;
use axum::extract::{Path, State};
use axum::response::Response;

use super::ConsulView;
use super::blocking::{self, Blocking};
use super::error::ConsulError;
use super::shape::{self, HealthCheck, Instance};
use super::status::{CheckStatus, StateFilter};
use super::token::ConsulCaller;
use crate::app::ConsulApp;
use crate::params::Params;

/// `GET /v1/health/service/<name>`.
pub(super) async fn service(
    State(app): State<Arc<ConsulApp>>,
    Extension(view): Extension<Arc<ConsulView>>,
    caller: ConsulCaller,
    Path(name): Path<String>,
    params: Params,
) -> Result<Response, ConsulError> {
    view.refuse_filter(&params)?;
    let blocking = Blocking::parse(&params)?;
    let passing = params.flag("passing")?;
    let found = view.read_service(&app, &caller, &blocking, &params, &name).await?;
    let entries: Vec<_> = found
        .instances(&view, &params)
        .filter(|instance| instance.has_tags(params.all("tag")))
        .map(|instance| instance.entry())
        .filter(|entry| !passing || entry.checks.iter().all(|check| check.status == CheckStatus::Passing))
        .collect();
    Ok(blocking::respond(
        &app,
        &blocking,
        found.index,
        &entries,
        found.filtered,
    ))
}

/// `GET /v1/health/checks/<name>`.
pub(super) async fn checks(
    State(app): State<Arc<ConsulApp>>,
    Extension(view): Extension<Arc<ConsulView>>,
    caller: ConsulCaller,
    Path(name): Path<String>,
    params: Params,
) -> Result<Response, ConsulError> {
    view.refuse_filter(&params)?;
    let blocking = Blocking::parse(&params)?;
    let found = view.read_service(&app, &caller, &blocking, &params, &name).await?;
    let checks: Vec<HealthCheck> = found
        .instances(&view, &params)
        .flat_map(|instance| instance.checks())
        .collect();
    Ok(blocking::respond(&app, &blocking, found.index, &checks, found.filtered))
}

/// `GET /v1/health/state/<state>`.
pub(super) async fn state(
    State(app): State<Arc<ConsulApp>>,
    Extension(view): Extension<Arc<ConsulView>>,
    caller: ConsulCaller,
    Path(state): Path<String>,
    params: Params,
) -> Result<Response, ConsulError> {
    view.refuse_filter(&params)?;
    let Some(filter) = StateFilter::parse(&state) else {
        return Err(ConsulError::bad_request(format!(
            "Invalid state '{}': any, passing, warning or critical",
            state.escape_debug()
        )));
    };
    let blocking = Blocking::parse(&params)?;
    let found = view.read_namespace(&app, &caller, &blocking, &params).await?;
    let (snapshots, filtered) = (found.snapshots, found.filtered);
    let mut checks = Vec::new();
    if view.node_meta_matches(&params) {
        checks.push(shape::serf_health(&view));
        for snapshot in &snapshots {
            for endpoint in snapshot.iter() {
                checks.extend(Instance::new(&view, snapshot.key(), endpoint).checks());
            }
        }
    }
    checks.retain(|check| filter.admits(check.status));
    Ok(blocking::respond(&app, &blocking, found.index, &checks, filtered))
}
