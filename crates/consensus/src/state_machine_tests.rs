//! The state machine's exactly-once properties (SPEC R6), driven directly as openraft drives
//! it: applies, snapshot builders taken between applies, builds running later, restarts.

use std::sync::Arc;

use muster_core::{Actor, LeaseId, Principal, Revision};
use muster_registry::{Applied, Command, CommandMeta, GrantLease, Registry, RegistryConfig};
use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine};
use openraft::{CommittedLeaderId, EntryPayload};

use crate::node::ApplyObserver;
use crate::state_machine::StateMachine;
use crate::types::{Batch, BatchId, Entry, LogId, Outcome, Proposal};

struct Quiet;

impl ApplyObserver for Quiet {
    fn applied(&self, _registry: &Registry, _applied: &Applied) {}
    fn reset(&self, _registry: &Registry) {}
}

fn grant() -> Proposal {
    Proposal {
        command: Command::GrantLease(GrantLease {
            tenant: muster_core::Label::new("tenant", "acme").unwrap(),
            ttl_ms: 10_000,
            service: None,
        }),
        meta: CommandMeta {
            at_ms: 1,
            principal: Principal::new("test").unwrap(),
            actor: Actor::Owner,
        },
    }
}

fn entry(index: u64, id: Option<BatchId>) -> Entry {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Normal(Batch {
            id,
            proposals: vec![grant()],
        }),
    }
}

fn batch(seq: u64) -> Option<BatchId> {
    Some(BatchId {
        origin: 2,
        session: 7,
        seq,
    })
}

fn open(dir: &std::path::Path) -> StateMachine {
    StateMachine::open(dir, RegistryConfig::default(), Arc::new(Quiet)).unwrap()
}

fn leases(machine: &StateMachine) -> Vec<LeaseId> {
    machine.shared().read().leases().map(|lease| lease.id).collect()
}

fn revision(machine: &StateMachine) -> Revision {
    machine.shared().read().revision()
}

#[tokio::test]
async fn a_snapshot_holds_the_view_its_builder_was_taken_at_not_later_applies() {
    // Trace: openraft takes the builder between applies, then runs build_snapshot in a task
    // of its own while entries 2 and 3 apply. Before the fix the build exported the registry
    // as it was then, with last_log_id 1: a restart replayed 2 and 3 over state that already
    // held them and minted two extra leases.
    let dir = tempfile::tempdir().unwrap();
    let mut machine = open(dir.path());
    machine.apply([entry(1, batch(1))]).await.unwrap();
    let mut builder = machine.get_snapshot_builder().await;
    machine.apply([entry(2, batch(2)), entry(3, batch(3))]).await.unwrap();
    let snapshot = builder.build_snapshot().await.unwrap();
    assert_eq!(snapshot.meta.last_log_id.map(|id| id.index), Some(1));

    drop(machine);
    let mut restarted = open(dir.path());
    assert_eq!(revision(&restarted), Revision(1), "the snapshot holds entry 1 only");
    // openraft replays the log after the snapshot: entries 2 and 3, each once.
    restarted.apply([entry(2, batch(2)), entry(3, batch(3))]).await.unwrap();
    assert_eq!(revision(&restarted), Revision(3));
    assert_eq!(leases(&restarted), [LeaseId(1), LeaseId(2), LeaseId(3)]);
}

#[tokio::test]
async fn a_retried_batch_is_applied_once_and_answers_its_first_verdicts() {
    // Trace: a follower forwards a GrantLease, the leader commits it, the reply is lost, the
    // follower retries and the batch reaches the log a second time.
    let dir = tempfile::tempdir().unwrap();
    let mut machine = open(dir.path());
    let first = machine.apply([entry(1, batch(1))]).await.unwrap();
    let retried = machine.apply([entry(2, batch(1))]).await.unwrap();
    assert_eq!(retried, first);
    assert_eq!(leases(&machine), [LeaseId(1)], "one lease, not two");
    assert_eq!(revision(&machine), Revision(1));
}

#[tokio::test]
async fn a_late_copy_of_an_older_batch_applies_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut machine = open(dir.path());
    machine.apply([entry(1, batch(1)), entry(2, batch(2))]).await.unwrap();
    let late = machine.apply([entry(3, batch(1))]).await.unwrap();
    assert_eq!(late, [Outcome(Vec::new())]);
    assert_eq!(leases(&machine), [LeaseId(1), LeaseId(2)]);
}

#[tokio::test]
async fn the_batch_table_survives_a_snapshot_and_a_restart() {
    // Trace: the batch commits, a snapshot covers it, the node restarts; the retry arrives
    // after the restart (the proposer is another node, still retrying).
    let dir = tempfile::tempdir().unwrap();
    let mut machine = open(dir.path());
    machine.apply([entry(1, batch(1))]).await.unwrap();
    machine.get_snapshot_builder().await.build_snapshot().await.unwrap();
    drop(machine);
    let mut restarted = open(dir.path());
    restarted.apply([entry(2, batch(1))]).await.unwrap();
    assert_eq!(leases(&restarted), [LeaseId(1)]);
}

#[tokio::test]
async fn entries_without_a_batch_id_apply_every_time() {
    // Log entries written before batches had ids carry none: nothing to recognise them by.
    let dir = tempfile::tempdir().unwrap();
    let mut machine = open(dir.path());
    machine.apply([entry(1, None), entry(2, None)]).await.unwrap();
    assert_eq!(leases(&machine), [LeaseId(1), LeaseId(2)]);
}

#[test]
fn a_batch_stored_in_the_older_shape_still_decodes() {
    let proposal = serde_json::to_value(grant()).unwrap();
    let legacy = serde_json::json!([proposal]);
    let old: Batch = serde_json::from_value(legacy).unwrap();
    assert_eq!(
        old,
        Batch {
            id: None,
            proposals: vec![grant()]
        }
    );
    let current = Batch {
        id: batch(4),
        proposals: vec![grant()],
    };
    let decoded: Batch = serde_json::from_slice(&serde_json::to_vec(&current).unwrap()).unwrap();
    assert_eq!(decoded, current);
}

#[test]
fn a_batch_without_proposals_or_with_a_field_twice_is_refused() {
    for bad in [
        r#"{"id":null}"#,
        r#"{"proposals":[],"proposals":[]}"#,
        r#"{"id":null,"id":null,"proposals":[]}"#,
        r#""a batch""#,
    ] {
        assert!(serde_json::from_str::<Batch>(bad).is_err(), "{bad} decoded");
    }
    let bare: Batch = serde_json::from_str(r#"{"proposals":[],"later":1}"#).unwrap();
    assert_eq!(
        bare,
        Batch {
            id: None,
            proposals: vec![]
        },
        "fields a later version adds are skipped"
    );
}

#[tokio::test]
async fn a_build_that_finishes_after_a_newer_snapshot_does_not_replace_it() {
    // Trace: a follower starts building at index 1; meanwhile a newer snapshot (index 3) is
    // written — by a later build or an install from the leader — and openraft purges the log
    // up to it; then the old build finishes. Before the fix the old build's file replaced the
    // newer one, and a restart found state at 1 with the log after it gone.
    let dir = tempfile::tempdir().unwrap();
    let mut machine = open(dir.path());
    machine.apply([entry(1, batch(1))]).await.unwrap();
    let mut old = machine.get_snapshot_builder().await;
    machine.apply([entry(2, batch(2)), entry(3, batch(3))]).await.unwrap();
    machine.get_snapshot_builder().await.build_snapshot().await.unwrap();
    old.build_snapshot().await.unwrap();
    let current = machine.get_current_snapshot().await.unwrap().unwrap();
    assert_eq!(current.meta.last_log_id.map(|id| id.index), Some(3));
    drop(machine);
    assert_eq!(revision(&open(dir.path())), Revision(3));
}

/// One `judged` report: log index, position, origin, and the revision or the refusal's code.
type Judgement = (u64, usize, Option<u64>, Result<Revision, &'static str>);

/// Remembers what `judged` reported.
#[derive(Default)]
struct Judgements(std::sync::Mutex<Vec<Judgement>>);

impl ApplyObserver for Judgements {
    fn applied(&self, _registry: &Registry, _applied: &Applied) {}
    fn reset(&self, _registry: &Registry) {}
    fn judged(&self, judged: &crate::node::Judged<'_>) {
        let verdict = judged
            .result
            .as_ref()
            .map(|applied| applied.revision)
            .map_err(muster_core::Rejection::code);
        self.0
            .lock()
            .unwrap()
            .push((judged.log_index, judged.position, judged.origin, verdict));
    }
}

#[tokio::test]
async fn every_proposal_is_judged_once_refusals_included_and_a_retry_is_not_judged_again() {
    // The audit trail's source (SPEC S4): a refusal is an outcome too, and a batch that
    // reaches the log twice (a lost reply, a retry) must not be recorded twice.
    let dir = tempfile::tempdir().unwrap();
    let observer = Arc::new(Judgements::default());
    let mut machine = StateMachine::open(dir.path(), RegistryConfig::default(), observer.clone()).unwrap();
    let refused = Proposal {
        command: Command::RevokeLease(muster_registry::RevokeLease {
            tenant: muster_core::Label::new("tenant", "acme").unwrap(),
            lease: LeaseId(99),
            expected_revision: None,
        }),
        meta: grant().meta,
    };
    let two = Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), 2),
        payload: EntryPayload::Normal(Batch {
            id: batch(2),
            proposals: vec![grant(), refused],
        }),
    };
    machine.apply([entry(1, batch(1)), two.clone()]).await.unwrap();
    let retry = Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), 3),
        ..two
    };
    machine.apply([retry, entry(4, batch(1))]).await.unwrap();
    assert_eq!(
        *observer.0.lock().unwrap(),
        [
            (1, 0, Some(2), Ok(Revision(1))),
            (2, 0, Some(2), Ok(Revision(2))),
            (2, 1, Some(2), Err("lease_not_found")),
        ]
    );
}

/// architecture.md "Formats and versions": a log raising the registry format past what this
/// build applies stops the state machine (openraft then stops the node, as on a storage
/// failure) before anything of the entry is applied, instead of going on under the old rules
/// while its peers apply the new ones.
#[tokio::test]
async fn a_format_newer_than_this_build_stops_the_state_machine() {
    let dir = tempfile::tempdir().unwrap();
    let mut machine = open(dir.path());
    machine.apply([entry(1, batch(1))]).await.unwrap();
    let raise = |format| Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), 2),
        payload: EntryPayload::Normal(Batch {
            id: batch(2),
            proposals: vec![
                grant(),
                Proposal {
                    command: Command::RaiseFormat(muster_registry::RaiseFormat { format }),
                    meta: grant().meta,
                },
            ],
        }),
    };
    let error = machine.apply([raise(muster_core::FORMAT + 1)]).await.unwrap_err();
    assert!(error.to_string().contains("newer build"), "{error}");
    assert_eq!(revision(&machine), Revision(1), "nothing of the entry was applied");
    // This build's own format applies.
    machine.apply([raise(muster_core::FORMAT)]).await.unwrap();
    assert_eq!(machine.shared().read().format(), muster_core::FORMAT);
}
