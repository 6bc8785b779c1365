//! `GET /v1/status/leader` and `GET /v1/status/peers` (SPEC E1): the Raft group as Consul
//! shows its servers, `"host:port"` strings of their cluster listeners.
//!
//! A single node (no cluster configured) is its own leader and only peer, named by this
//! listener's address. Without a known leader the answer is `""`, as Consul's: clients
//! (consul-template, Nomad) wait on exactly that.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Extension;
use axum::extract::State;
use axum::response::Response;

use super::ConsulView;
use super::blocking::{self, Blocking};
use super::error::ConsulError;
use crate::app::ConsulApp;
use crate::params::Params;

/// The address a member is shown by: its cluster address, or this listener's for a node
/// without one (a single node).
fn shown(view: &ConsulView, addr: &str) -> String {
    if addr.is_empty() {
        SocketAddr::new(view.node_address, view.port).to_string()
    } else {
        addr.to_owned()
    }
}

/// `GET /v1/status/leader`.
pub(super) async fn leader(
    State(app): State<Arc<ConsulApp>>,
    Extension(view): Extension<Arc<ConsulView>>,
    params: Params,
) -> Result<Response, ConsulError> {
    let blocking = Blocking::parse(&params)?;
    let leader = app.gate.status().leader.map_or_else(String::new, |leader| {
        let members = app.gate.members();
        let addr = members.iter().find(|m| m.id == leader).map_or("", |m| m.addr.as_str());
        shown(&view, addr)
    });
    let index = app.gate.revision().0;
    Ok(blocking::respond(&app, &blocking, index, &leader, false))
}

/// `GET /v1/status/peers`: the voters.
pub(super) async fn peers(
    State(app): State<Arc<ConsulApp>>,
    Extension(view): Extension<Arc<ConsulView>>,
    params: Params,
) -> Result<Response, ConsulError> {
    let blocking = Blocking::parse(&params)?;
    let mut peers: Vec<String> = app
        .gate
        .members()
        .iter()
        .filter(|member| member.voter)
        .map(|member| shown(&view, &member.addr))
        .collect();
    if peers.is_empty() && app.gate.is_leader() {
        // A single node knows no member list: it is the one peer.
        peers.push(shown(&view, ""));
    }
    peers.sort();
    let index = app.gate.revision().0;
    Ok(blocking::respond(&app, &blocking, index, &peers, false))
}
