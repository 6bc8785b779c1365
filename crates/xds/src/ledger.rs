//! What each stream was sent and acknowledged, per resource (SPEC D5, O2): the record behind
//! `GET /v1/xds/clients` and the convergence metrics. go-control-plane keeps none of this
//! (its users cannot tell which version a proxy accepted); Muster's versions are revisions,
//! so an ACK says exactly how far a client has converged.

use std::collections::BTreeMap;

use muster_core::Revision;

use crate::kind::Kind;

/// A rejected response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nack {
    /// The revision the client refused.
    pub revision: Revision,
    /// Its reason, as the client wrote it.
    pub message: String,
    /// When, in milliseconds on the server's clock.
    pub at_ms: u64,
}

/// One resource on one stream.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceState {
    /// The revision last sent.
    pub sent: Option<Revision>,
    /// The revision last acknowledged, and when.
    pub acked: Option<(Revision, u64)>,
    /// How many responses holding it were refused.
    pub nacks: u64,
    /// The last refusal.
    pub last_nack: Option<Nack>,
}

/// Every resource of one stream, by kind and name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ledger {
    resources: BTreeMap<(Kind, String), ResourceState>,
}

impl Ledger {
    /// Every resource, in kind and name order.
    pub fn iter(&self) -> impl Iterator<Item = (Kind, &str, &ResourceState)> {
        self.resources
            .iter()
            .map(|((kind, name), state)| (*kind, name.as_str(), state))
    }

    /// One resource's state.
    pub fn get(&self, kind: Kind, name: &str) -> Option<&ResourceState> {
        self.resources.get(&(kind, name.to_owned()))
    }

    pub(crate) fn sent(&mut self, kind: Kind, name: &str, revision: Revision) {
        self.resources.entry((kind, name.to_owned())).or_default().sent = Some(revision);
    }

    pub(crate) fn acked(&mut self, kind: Kind, name: &str, revision: Revision, now_ms: u64) {
        if let Some(state) = self.resources.get_mut(&(kind, name.to_owned())) {
            state.acked = Some((revision, now_ms));
        }
    }

    pub(crate) fn nacked(&mut self, kind: Kind, name: &str, nack: Nack) {
        if let Some(state) = self.resources.get_mut(&(kind, name.to_owned())) {
            state.nacks += 1;
            state.last_nack = Some(nack);
        }
    }

    pub(crate) fn forget(&mut self, kind: Kind, name: &str) {
        self.resources.remove(&(kind, name.to_owned()));
    }
}

/// What a client's request meant, for the server's log and counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Heard {
    /// A type this server does not serve: ignored.
    UnknownType(String),
    /// A nonce that is not the one last sent for that type: ignored, as the protocol says.
    StaleNonce(Kind),
    /// A request (first, or a change of subscription) that needs an answer.
    Subscribed(Kind),
    /// The response with this nonce was accepted.
    Acked(Kind),
    /// The response was refused; the previous state holds.
    Nacked(Kind, Nack),
}
