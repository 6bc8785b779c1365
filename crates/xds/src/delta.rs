//! One ADS stream in the incremental (Delta) variant (SPEC D5), as a pure state machine.
//!
//! ```text
//!  request ─▶ on_request: subscribe / unsubscribe names, seed versions (first request), ACK/NACK by nonce
//!  change or subscription ─▶ respond(kind, current resources) ─▶ Some(response): resources whose
//!        version the client lacks, and `removed_resources` for what it has or asked for that is gone
//! ```
//!
//! # Protocol (xDS "Incremental xDS")
//! - A resource's `version` is its revision in decimal; `system_version_info` is the
//!   registry's revision.
//! - The first request of a type may carry `initial_resource_versions` (a reconnecting
//!   client's cache): a resource whose version matches is not sent again.
//! - Subscribing to a name that does not exist gets it in `removed_resources`, once, so the
//!   client knows at once; a subscribed resource that ceases to exist is removed likewise.
//!   Unsubscribing forgets the name: no removal is sent for it.
//! - Several responses may be in flight; each ACK or NACK names its response's nonce. A NACK
//!   is recorded and the refused version is not sent again (the client's version is taken to
//!   be what was sent, as go-control-plane does), only a newer one. An unknown nonce is stale:
//!   its ACK means nothing, but the request's subscription changes still count.
//! - `*` subscribes to every resource of the kind; so does a first request of listeners or
//!   clusters that names none (the legacy wildcard).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use envoy_types::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DeltaDiscoveryResponse, Resource};
use muster_core::Revision;

use crate::kind::Kind;
use crate::ledger::{Heard, Ledger, Nack};
use crate::resources::Versioned;
use crate::subscription::{Subscription, WILDCARD};

#[derive(Debug, Default)]
struct TypeState {
    asked: bool,
    subscription: Subscription,
    /// What the client holds: name → version.
    held: BTreeMap<String, String>,
    /// Names subscribed since the last response: each is sent or said to be removed.
    pending: BTreeSet<String>,
    /// Responses awaiting an answer: nonce → what each held.
    in_flight: BTreeMap<u64, Vec<(String, Revision)>>,
}

/// How many unanswered responses a stream keeps track of per type; a client that never
/// answers cannot make the server hold more.
const MAX_IN_FLIGHT: usize = 64;

/// One incremental stream.
#[derive(Debug, Default)]
pub struct DeltaStream {
    types: BTreeMap<Kind, TypeState>,
    nonces: u64,
    ledger: Ledger,
}

impl DeltaStream {
    /// A stream that has heard nothing yet.
    pub fn new() -> DeltaStream {
        DeltaStream::default()
    }

    /// What was sent and acknowledged, per resource.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// What the stream subscribes to of `kind` (nothing, before it asks).
    pub fn subscription(&self, kind: Kind) -> Option<&Subscription> {
        self.types
            .get(&kind)
            .filter(|state| state.asked)
            .map(|state| &state.subscription)
    }

    /// Takes in one request at `now_ms`.
    pub fn on_request(&mut self, request: &DeltaDiscoveryRequest, now_ms: u64) -> Heard {
        let Some(kind) = Kind::from_type_url(&request.type_url) else {
            return Heard::UnknownType(request.type_url.clone());
        };
        let state = self.types.entry(kind).or_default();
        let first = !state.asked;
        state.asked = true;
        let mut heard = Heard::Subscribed(kind);
        if !request.response_nonce.is_empty() {
            match request
                .response_nonce
                .parse()
                .ok()
                .and_then(|nonce: u64| state.in_flight.remove(&nonce))
            {
                None => heard = Heard::StaleNonce(kind),
                Some(held) => match &request.error_detail {
                    Some(error) => {
                        let nack = Nack {
                            revision: held.iter().map(|(_, revision)| *revision).max().unwrap_or_default(),
                            message: error.message.clone(),
                            at_ms: now_ms,
                        };
                        for (name, _) in &held {
                            self.ledger.nacked(kind, name, nack.clone());
                        }
                        heard = Heard::Nacked(kind, nack);
                    }
                    None => {
                        for (name, revision) in &held {
                            self.ledger.acked(kind, name, *revision, now_ms);
                        }
                        heard = Heard::Acked(kind);
                    }
                },
            }
        }
        if first {
            state.held = request.initial_resource_versions.clone().into_iter().collect();
            if request.resource_names_subscribe.is_empty() && kind.is_full_state() {
                state.subscription = Subscription::Wildcard(BTreeSet::new());
            }
        }
        let mut changed = first;
        for name in &request.resource_names_subscribe {
            if name == WILDCARD {
                changed |= !state.subscription.is_wildcard();
                state.subscription = Subscription::Wildcard(state.subscription.names().clone());
            } else if state.subscription.names_mut().insert(name.clone()) {
                state.pending.insert(name.clone());
                changed = true;
            }
        }
        for name in &request.resource_names_unsubscribe {
            if name == WILDCARD {
                changed |= state.subscription.is_wildcard();
                state.subscription = Subscription::Names(state.subscription.names().clone());
            } else if state.subscription.names_mut().remove(name) {
                changed = true;
            }
            if !state.subscription.covers(name) {
                state.held.remove(name);
                state.pending.remove(name);
                self.ledger.forget(kind, name);
            }
        }
        if changed {
            heard = Heard::Subscribed(kind);
        }
        heard
    }

    /// The response to send for `kind`, given the current resources of its subscription
    /// (those that exist) and the registry's revision, if the client's view would change.
    pub fn respond(
        &mut self,
        kind: Kind,
        resources: &[Arc<Versioned>],
        registry_revision: Revision,
    ) -> Option<DeltaDiscoveryResponse> {
        let state = self.types.get_mut(&kind).filter(|state| state.asked)?;
        let current: BTreeSet<&str> = resources
            .iter()
            .filter(|resource| state.subscription.covers(&resource.name))
            .map(|resource| resource.name.as_str())
            .collect();
        let mut sent = Vec::new();
        let mut out = Vec::new();
        for resource in resources
            .iter()
            .filter(|resource| current.contains(resource.name.as_str()))
        {
            let version = resource.revision.0.to_string();
            if state.held.get(&resource.name) != Some(&version) {
                out.push(Resource {
                    name: resource.name.clone(),
                    version: version.clone(),
                    resource: Some(resource.any.clone()),
                    ..Resource::default()
                });
                sent.push((resource.name.clone(), resource.revision));
                state.held.insert(resource.name.clone(), version);
            }
        }
        let mut removed: BTreeSet<String> = state
            .held
            .keys()
            .filter(|name| !current.contains(name.as_str()))
            .cloned()
            .collect();
        removed.extend(
            state
                .pending
                .iter()
                .filter(|name| !current.contains(name.as_str()))
                .cloned(),
        );
        state.pending.clear();
        for name in &removed {
            state.held.remove(name);
        }
        if out.is_empty() && removed.is_empty() {
            return None;
        }
        self.nonces += 1;
        let nonce = self.nonces;
        for (name, revision) in &sent {
            self.ledger.sent(kind, name, *revision);
        }
        for name in &removed {
            self.ledger.forget(kind, name);
        }
        if state.in_flight.len() >= MAX_IN_FLIGHT {
            state.in_flight.pop_first();
        }
        state.in_flight.insert(nonce, sent);
        Some(DeltaDiscoveryResponse {
            system_version_info: registry_revision.0.to_string(),
            resources: out,
            type_url: kind.type_url().to_owned(),
            removed_resources: removed.into_iter().collect(),
            nonce: nonce.to_string(),
            ..DeltaDiscoveryResponse::default()
        })
    }
}

#[cfg(test)]
#[path = "delta_tests.rs"]
mod tests;
