//! One ADS stream in the state-of-the-world variant (SPEC D5), as a pure state machine: the
//! server feeds it each request and, when resources change, the current resources of the
//! stream's subscriptions; it says what to send.
//!
//! ```text
//!  request ─▶ on_request ─▶ Heard (stale nonce: ignored · ACK · NACK · subscription change)
//!  change or subscription ─▶ respond(kind, current resources) ─▶ Some(response) when what the
//!                                                                 client holds would differ
//! ```
//!
//! # Protocol (xDS "ACK/NACK and resource type instance version")
//! - Each response gets a fresh nonce; `version_info` is the largest revision it holds (the
//!   registry's current revision for an empty one).
//! - A request whose `response_nonce` is not the last one sent for its type is stale and
//!   ignored whole. The first request with the last nonce answers that response: without
//!   `error_detail` it acknowledges it, with one it refuses it (later requests with the same
//!   nonce, such as gRPC's subscription changes, are current and answer nothing): the ledger records the refusal, the server keeps
//!   what it had, and the refused revision is not sent again — only a newer one is.
//! - Listener and cluster responses are full state: they hold every subscribed resource that
//!   exists, so one left out does not exist. An empty name list subscribes to every resource
//!   of those two types (the wildcard) until the client first names one; `*` always does. Route and endpoint responses hold the
//!   subscribed resources that exist; an empty list subscribes to nothing.
//! - A response is sent when the client first asks for a type, when its subscription changes,
//!   and when a subscribed resource's revision changes or it appears or disappears — never
//!   in answer to a plain ACK.

use std::collections::BTreeMap;
use std::sync::Arc;

use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use muster_core::Revision;

use crate::heard::{Answer, Heard, UnknownType};
use crate::kind::Kind;
use crate::ledger::{Ledger, Nack};
use crate::resources::Versioned;
use crate::subscription::Subscription;

#[derive(Debug, Default)]
struct TypeState {
    asked: bool,
    subscription: Subscription,
    must_respond: bool,
    /// The nonce of the last response and what it held.
    nonce: Option<String>,
    /// Whether the client ever named a resource of this type: from then on an empty list
    /// is no longer the wildcard.
    named: bool,
    /// Whether the client has answered that response (later requests may carry its nonce
    /// again, with a new subscription: they are current, not a second answer).
    answered: bool,
    sent: BTreeMap<String, Revision>,
}

/// One state-of-the-world stream.
#[derive(Debug, Default)]
pub struct SotwStream {
    types: BTreeMap<Kind, TypeState>,
    nonces: u64,
    ledger: Ledger,
}

impl SotwStream {
    /// A stream that has heard nothing yet.
    pub fn new() -> SotwStream {
        SotwStream::default()
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
    pub fn on_request(&mut self, request: &DiscoveryRequest, now_ms: u64) -> Result<Heard, UnknownType> {
        let kind = Kind::from_type_url(&request.type_url).ok_or_else(|| UnknownType(request.type_url.clone()))?;
        let state = self.types.entry(kind).or_default();
        let first = !state.asked;
        // Before the first response of a type there is nothing to answer: a nonce then (a
        // client resuming with one from another server) is ignored, not stale.
        let nonce = if state.nonce.is_none() {
            ""
        } else {
            request.response_nonce.as_str()
        };
        if !nonce.is_empty() && state.nonce.as_deref() != Some(nonce) {
            return Ok(Heard {
                kind,
                answer: Answer::Stale,
                subscribed: false,
            });
        }
        state.asked = true;
        let mut answer = Answer::None;
        if !nonce.is_empty() && !state.answered {
            state.answered = true;
            if let Some(error) = &request.error_detail {
                let nack = Nack {
                    revision: state.sent.values().copied().max().unwrap_or_default(),
                    message: error.message.clone(),
                    at_ms: now_ms,
                };
                for name in state.sent.keys() {
                    self.ledger.nacked(kind, name, nack.clone());
                }
                answer = Answer::Nacked(nack);
            } else {
                for (name, revision) in &state.sent {
                    self.ledger.acked(kind, name, *revision, now_ms);
                }
                answer = Answer::Acked;
            }
        }
        let subscription = Subscription::sotw(kind, &request.resource_names, state.named);
        // `*` counts as naming: only a client that never named anything keeps the legacy
        // wildcard on an empty list.
        state.named |= !request.resource_names.is_empty();
        let subscribed = first || subscription != state.subscription;
        if subscribed {
            for name in state.subscription.names() {
                if !subscription.covers(name) {
                    self.ledger.forget(kind, name);
                }
            }
            state.subscription = subscription;
            state.must_respond = true;
        }
        Ok(Heard {
            kind,
            answer,
            subscribed,
        })
    }

    /// The response to send for `kind`, given the current resources of its subscription
    /// (those that exist) and the registry's revision, if the client's view would change.
    pub fn respond(
        &mut self,
        kind: Kind,
        resources: &[Arc<Versioned>],
        registry_revision: Revision,
    ) -> Option<DiscoveryResponse> {
        let state = self.types.get_mut(&kind).filter(|state| state.asked)?;
        let current: BTreeMap<String, Revision> = resources
            .iter()
            .filter(|resource| state.subscription.covers(&resource.name))
            .map(|resource| (resource.name.clone(), resource.revision))
            .collect();
        if current == state.sent && !state.must_respond {
            return None;
        }
        self.nonces += 1;
        let nonce = self.nonces.to_string();
        let version = current.values().copied().max().unwrap_or(registry_revision);
        for (name, revision) in &current {
            self.ledger.sent(kind, name, *revision);
        }
        for name in state.sent.keys() {
            if !current.contains_key(name) {
                self.ledger.forget(kind, name);
            }
        }
        state.nonce = Some(nonce.clone());
        state.answered = false;
        state.must_respond = false;
        state.sent = current;
        Some(DiscoveryResponse {
            version_info: version.0.to_string(),
            resources: resources
                .iter()
                .filter(|resource| state.sent.contains_key(&resource.name))
                .map(|resource| resource.any.clone())
                .collect(),
            type_url: kind.type_url().to_owned(),
            nonce,
            ..DiscoveryResponse::default()
        })
    }
}

#[cfg(test)]
#[path = "sotw_tests.rs"]
mod tests;
