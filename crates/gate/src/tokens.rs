//! The token table's changes (SPEC S1): what lets a stream already open learn that its token
//! was revoked.

/// Follows the token table: bumps a counter whenever it changes or is replaced (a snapshot
/// installed), so open watch streams re-check their tokens (SPEC S1: a revoked token is
/// refused on streams already open).
pub struct TokenWatch {
    changes: tokio::sync::watch::Sender<u64>,
    seen: std::sync::atomic::AtomicU64,
}

impl TokenWatch {
    /// A watch, and the receiver of its changes (the gate's `acl_changes`).
    #[must_use]
    pub fn new() -> (TokenWatch, tokio::sync::watch::Receiver<u64>) {
        let (changes, receiver) = tokio::sync::watch::channel(0);
        let watch = TokenWatch {
            changes,
            seen: std::sync::atomic::AtomicU64::new(0),
        };
        (watch, receiver)
    }

    fn bump(&self) {
        self.changes.send_modify(|n| *n += 1);
    }
}

impl muster_consensus::ApplyObserver for TokenWatch {
    fn applied(&self, registry: &muster_registry::Registry, _: &muster_registry::Applied) {
        let generation = registry.acl().generation();
        if self.seen.swap(generation, std::sync::atomic::Ordering::Relaxed) != generation {
            self.bump();
        }
    }

    fn reset(&self, registry: &muster_registry::Registry) {
        self.seen
            .store(registry.acl().generation(), std::sync::atomic::Ordering::Relaxed);
        self.bump();
    }
}
