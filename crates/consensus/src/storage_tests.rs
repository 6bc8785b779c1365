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

#[tokio::test]
async fn a_purge_past_the_snapshot_on_disk_waits_for_it() {
    // Trace (found by muster-sim, seeds 97, 126, 138): a follower installs the leader's
    // snapshot; openraft purges the log at once, before the snapshot is written; a crash
    // in between left the log purged past every snapshot on disk, and the node never opened
    // again. The purge now waits until a snapshot covering it is stored.
    use openraft::storage::RaftLogStorage;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut log = LogStore::open(&dir.path().join("raft-log.redb")).expect("a new log opens");
    let durable = crate::snapshot_store::DurableSnapshot::default();
    log.guard_purges(durable.clone());
    let upto = openraft::LogId::new(openraft::CommittedLeaderId::new(1, 1), 15);
    let mut purging = log.clone();
    let purge = tokio::spawn(async move { purging.purge(upto).await });
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert!(!purge.is_finished(), "the purge waits for the snapshot");
    assert_eq!(log.get_log_state().await.unwrap().last_purged_log_id, None);
    durable.advance(Some(upto));
    purge.await.unwrap().expect("purges once the snapshot is stored");
    assert_eq!(log.get_log_state().await.unwrap().last_purged_log_id, Some(upto));
}

#[tokio::test]
async fn a_purge_waiting_for_a_snapshot_that_fails_to_install_fails_at_once() {
    // The purge above runs inside openraft's core: while it waits, that node's Raft stands
    // still. A snapshot from the leader that cannot be stored (here a damaged transfer) must
    // end the wait at once with an error, not after the 30 s bound.
    use openraft::storage::{RaftLogStorage, RaftStateMachine};
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut machine = StateMachine::open(dir.path(), RegistryConfig::default(), Arc::new(Quiet)).expect("opens");
    let mut log = LogStore::open(&dir.path().join("raft-log.redb")).expect("a new log opens");
    log.guard_purges(machine.durable_snapshot());
    let upto = openraft::LogId::new(openraft::CommittedLeaderId::new(1, 1), 15);
    let purge = tokio::spawn(async move { log.purge(upto).await });
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    assert!(!purge.is_finished(), "the purge waits for the snapshot");

    let meta = openraft::SnapshotMeta {
        last_log_id: Some(upto),
        last_membership: openraft::StoredMembership::default(),
        snapshot_id: "1-15".to_owned(),
    };
    let damaged = Box::new(std::io::Cursor::new(b"{\"checksum\":\"xxh3-64:00".to_vec()));
    machine
        .install_snapshot(&meta, damaged)
        .await
        .expect_err("a damaged snapshot is refused");
    let purged = tokio::time::timeout(std::time::Duration::from_secs(10), purge)
        .await
        .expect("the purge ends once the snapshot it waits for failed")
        .unwrap();
    let error = purged.expect_err("nothing is purged past the snapshot on disk");
    assert!(error.to_string().contains("could not be stored"), "{error}");
}
