//! What a stream subscribes to of one kind: named resources, or every one (the wildcard).

use std::collections::BTreeSet;

use crate::kind::Kind;

/// The wildcard's explicit name.
pub const WILDCARD: &str = "*";

/// A stream's subscription to one kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subscription {
    /// These names.
    Names(BTreeSet<String>),
    /// Every resource of the kind the stream's tenant has (listeners: none, see
    /// [`Subscription::covers`]'s callers), plus these names.
    Wildcard(BTreeSet<String>),
}

impl Default for Subscription {
    fn default() -> Subscription {
        Subscription::Names(BTreeSet::new())
    }
}

impl Subscription {
    /// A state-of-the-world request's names: `*`, or no name at all for a full-state kind
    /// (listeners, clusters), is the wildcard.
    pub fn sotw(kind: Kind, names: &[String]) -> Subscription {
        let named: BTreeSet<String> = names.iter().filter(|name| *name != WILDCARD).cloned().collect();
        if names.iter().any(|name| name == WILDCARD) || (names.is_empty() && kind.is_full_state()) {
            Subscription::Wildcard(named)
        } else {
            Subscription::Names(named)
        }
    }

    /// Whether this subscription asks for every resource.
    pub fn is_wildcard(&self) -> bool {
        matches!(self, Subscription::Wildcard(_))
    }

    /// The names subscribed explicitly.
    pub fn names(&self) -> &BTreeSet<String> {
        match self {
            Subscription::Names(names) | Subscription::Wildcard(names) => names,
        }
    }

    /// Whether a resource named `name` belongs in the stream's view.
    pub fn covers(&self, name: &str) -> bool {
        self.is_wildcard() || self.names().contains(name)
    }

    pub(crate) fn names_mut(&mut self) -> &mut BTreeSet<String> {
        match self {
            Subscription::Names(names) | Subscription::Wildcard(names) => names,
        }
    }
}
