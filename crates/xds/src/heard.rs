//! What a client's request meant, for the server's log, counters and next step.

use crate::kind::Kind;
use crate::ledger::Nack;

/// How a request answered the last response of its type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// It answered nothing (a first request, or one repeating a nonce already answered).
    None,
    /// Its nonce is not the current one: ignored, as the protocol says.
    Stale,
    /// The response was accepted.
    Acked,
    /// The response was refused; the client keeps its previous state.
    Nacked(Nack),
}

/// One request, understood.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heard {
    /// Its resource type.
    pub kind: Kind,
    /// What it said of the last response.
    pub answer: Answer,
    /// Whether it changed the subscription (or was the type's first): the server must
    /// look again at what the client should hold.
    pub subscribed: bool,
}

/// A request for a type this server does not serve: ignored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("xDS type {0} is not served")]
pub struct UnknownType(pub String);
