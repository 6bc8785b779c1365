//! openraft's own storage conformance suite, run against the redb log store and the registry
//! state machine (STYLE.md rule 9).

use std::sync::Arc;

use muster_registry::{Applied, Registry, RegistryConfig};
use openraft::testing::{StoreBuilder, Suite};

use crate::log_store::LogStore;
use crate::node::ApplyObserver;
use crate::state_machine::StateMachine;
use crate::types::{StorageError, TypeConfig};

struct Quiet;

impl ApplyObserver for Quiet {
    fn applied(&self, _registry: &Registry, _applied: &Applied) {}
    fn reset(&self, _registry: &Registry) {}
}

/// A fresh store in its own temporary directory, kept alive by the returned guard.
struct TempStores;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, tempfile::TempDir> for TempStores {
    async fn build(&self) -> Result<(tempfile::TempDir, LogStore, StateMachine), StorageError> {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let log = LogStore::open(&dir.path().join("raft-log.redb")).expect("a new log opens");
        let machine = StateMachine::open(dir.path(), RegistryConfig::default(), Arc::new(Quiet)).expect("opens");
        Ok((dir, log, machine))
    }
}

#[test]
fn the_stores_pass_openrafts_storage_suite() {
    Suite::test_all(TempStores).expect("conformance suite");
}
