//! The node over a real data directory: proposals are durable, restarts recover exactly,
//! snapshots bound the log, concurrent writers all commit.

use std::sync::{Arc, Mutex};

use muster_consensus::{ApplyObserver, Node, NodeConfig};
use muster_core::{Actor, AddressSpec, EndpointSpec, Incarnation, InstanceId, Principal, Revision, ServiceKey};
use muster_registry::{Applied, Command, CommandMeta, LeaseSpec, Register, Registry, Target};

/// Records the revision of every applied command that changed the state (not, e.g., the
/// adoption of the first policy, which the node commits before the first write) and how
/// often the state was reset.
#[derive(Default)]
struct Recorder {
    revisions: Mutex<Vec<Revision>>,
    resets: Mutex<usize>,
}

impl ApplyObserver for Recorder {
    fn applied(&self, _registry: &Registry, applied: &Applied) {
        if applied.unchanged.is_none() {
            self.revisions.lock().unwrap().push(applied.revision);
        }
    }
    fn reset(&self, _registry: &Registry) {
        *self.resets.lock().unwrap() += 1;
    }
}

fn key() -> ServiceKey {
    ServiceKey::new("acme", "prod", "api").unwrap()
}

fn meta() -> CommandMeta {
    CommandMeta {
        at_ms: 5,
        principal: Principal::new("test").unwrap(),
        actor: Actor::App,
    }
}

fn register(n: u32, incarnation: u64) -> Command {
    Register {
        target: Target {
            key: key(),
            instance: InstanceId::new(&format!("api-{n}")).unwrap(),
            incarnation: Incarnation(incarnation),
        },
        spec: EndpointSpec {
            addresses: vec![AddressSpec {
                ip: format!("10.0.{}.{}", n / 250, n % 250 + 1),
                scope: None,
            }],
            ..EndpointSpec::default()
        },
        lease: LeaseSpec::None,
        expected_revision: None,
    }
    .into()
}

fn state(node: &Node) -> Vec<u8> {
    node.read(|registry| serde_json::to_vec(&registry.export()).unwrap())
}

async fn open(dir: &std::path::Path, snapshot_every: u64, observer: Arc<Recorder>) -> Node {
    let config = NodeConfig {
        snapshot_every,
        ..NodeConfig::new(dir)
    };
    Node::open(config, observer).await.expect("node opens")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proposal_is_applied_reported_and_refusals_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let recorder = Arc::new(Recorder::default());
    let node = open(dir.path(), 10_000, Arc::clone(&recorder)).await;
    let applied = node.propose(register(1, 1), meta()).await.unwrap().unwrap();
    assert_eq!(applied.revision, Revision(1));
    assert_eq!(node.read(|r| r.snapshot(&key()).map(|s| s.len())), Some(1));
    let status = node.status();
    assert_eq!((status.leader, status.revision), (Some(1), Revision(1)));
    assert!(status.applied_index >= 2, "the leader's blank entry, then the proposal");

    let before = state(&node);
    let refused = node.propose(register(1, 0), meta()).await.unwrap().unwrap_err();
    assert_eq!(refused.code(), "stale_incarnation");
    assert_eq!(state(&node), before);
    assert_eq!(
        *recorder.revisions.lock().unwrap(),
        [Revision(1)],
        "only applied commands are reported"
    );
    node.shutdown().await.unwrap();
}

/// A restart recovers exactly the acknowledged state, from the log alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_replays_the_log_to_the_same_state() {
    let dir = tempfile::tempdir().unwrap();
    let node = open(dir.path(), 10_000, Arc::default()).await;
    for n in 0..20 {
        node.propose(register(n, 1), meta()).await.unwrap().unwrap();
    }
    let before = state(&node);
    node.shutdown().await.unwrap();
    drop(node);

    let node = open(dir.path(), 10_000, Arc::default()).await;
    assert_eq!(state(&node), before);
    let next = node.propose(register(99, 1), meta()).await.unwrap().unwrap();
    assert_eq!(
        next.revision,
        Revision(21),
        "the revision keeps increasing after a restart"
    );
    node.shutdown().await.unwrap();
}

/// With snapshots every few entries, a restart loads the snapshot and replays only the log
/// after it, and reaches the same state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_from_snapshot_plus_log_reaches_the_same_state() {
    let dir = tempfile::tempdir().unwrap();
    let node = open(dir.path(), 5, Arc::default()).await;
    for n in 0..23 {
        node.propose(register(n, 1), meta()).await.unwrap().unwrap();
    }
    node.snapshot().await.unwrap();
    node.propose(register(50, 1), meta()).await.unwrap().unwrap();
    let before = state(&node);
    node.shutdown().await.unwrap();
    drop(node);
    assert!(dir.path().join("snapshot.json").exists());

    let recorder = Arc::new(Recorder::default());
    let node = open(dir.path(), 5, Arc::clone(&recorder)).await;
    assert_eq!(state(&node), before);
    assert_eq!(*recorder.resets.lock().unwrap(), 1, "the snapshot was loaded");
    assert!(
        recorder.revisions.lock().unwrap().len() < 23,
        "only the log after the snapshot was replayed"
    );
    node.shutdown().await.unwrap();
}

/// A write too large for one log entry is refused with its own error before it is queued,
/// and changes nothing: an entry must stay inside the node-to-node limit (SPEC R5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_too_large_for_one_entry_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let recorder = Arc::new(Recorder::default());
    let node = open(dir.path(), 10_000, Arc::clone(&recorder)).await;
    node.propose(register(1, 1), meta()).await.unwrap().unwrap();
    let before = state(&node);
    let Command::Register(mut huge) = register(2, 1) else {
        unreachable!()
    };
    huge.spec.labels = (0..600).map(|i| (format!("label-{i}"), "v".repeat(4096))).collect();
    let refused = node.propose(huge.into(), meta()).await.expect_err("refused");
    assert!(
        matches!(refused, muster_consensus::ConsensusError::TooLarge { bytes, limit }
            if bytes > limit && limit == muster_consensus::MAX_PROPOSAL_BYTES),
        "{refused:?}"
    );
    assert_eq!(state(&node), before, "nothing changed");
    assert_eq!(recorder.revisions.lock().unwrap().len(), 1);
    node.shutdown().await.unwrap();
}

/// Many concurrent writers all commit, each at its own revision, and the observer sees
/// every revision once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_proposals_all_commit_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let recorder = Arc::new(Recorder::default());
    let node = open(dir.path(), 10_000, Arc::clone(&recorder)).await;
    let writers: Vec<_> = (0..200)
        .map(|n| {
            let node = node.clone();
            tokio::spawn(async move { node.propose(register(n, 1), meta()).await.unwrap().unwrap().revision })
        })
        .collect();
    let mut revisions = Vec::new();
    for writer in writers {
        revisions.push(writer.await.unwrap());
    }
    revisions.sort();
    assert_eq!(revisions, (1..=200).map(Revision).collect::<Vec<_>>());
    assert_eq!(*recorder.revisions.lock().unwrap(), revisions);
    node.shutdown().await.unwrap();
}

/// Opens with the given retention behind a snapshot; snapshots only when asked.
async fn open_keeping(
    dir: &std::path::Path,
    keep_after_snapshot: u64,
) -> Result<Node, muster_consensus::ConsensusError> {
    let config = NodeConfig {
        snapshot_every: 1_000_000,
        keep_after_snapshot,
        ..NodeConfig::new(dir)
    };
    Node::open(config, Arc::new(Recorder::default())).await
}

/// Why opening `dir` with that retention is refused (it must be).
async fn refusal(dir: &std::path::Path, keep_after_snapshot: u64) -> String {
    open_keeping(dir, keep_after_snapshot)
        .await
        .err()
        .expect("refuses to open")
        .to_string()
}

/// Writes 10 registrations and a snapshot, twice, then 5 more; returns the state and the
/// previous snapshot's bytes, with the node shut down.
async fn two_snapshots_and_a_tail(dir: &std::path::Path, keep_after_snapshot: u64) -> (Vec<u8>, Vec<u8>) {
    let node = open_keeping(dir, keep_after_snapshot).await.expect("node opens");
    for round in 0..2 {
        for n in 0..10 {
            node.propose(register(round * 10 + n, 1), meta())
                .await
                .unwrap()
                .unwrap();
        }
        node.snapshot().await.unwrap();
    }
    for n in 20..25 {
        node.propose(register(n, 1), meta()).await.unwrap().unwrap();
    }
    // Bounded poll: the purge behind the second snapshot has happened when one is due.
    let snapshot_index = node.status().applied_index - 5;
    let due = snapshot_index.saturating_sub(keep_after_snapshot);
    for _ in 0..200 {
        if node.purged_index() >= due {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(node.purged_index() >= due, "the log was purged behind the snapshot");
    let state = state(&node);
    node.shutdown().await.unwrap();
    drop(node);
    (state, std::fs::read(dir.join("snapshot.prev.json")).unwrap())
}

/// Corrupts `snapshot.json` the way a flipped bit would, leaving it valid JSON that the
/// registry's own digests do not cover: a digit of the state's revision. Returns the bytes.
fn flip_a_digit(dir: &std::path::Path) -> Vec<u8> {
    let path = dir.join("snapshot.json");
    let mut bytes = std::fs::read(&path).unwrap();
    let field = b"\"state\":{\"revision\":";
    let at = bytes
        .windows(field.len())
        .position(|w| w == field)
        .expect("the state's revision")
        + field.len();
    bytes[at] = if bytes[at] == b'9' { b'8' } else { b'9' };
    std::fs::write(&path, &bytes).unwrap();
    bytes
}

/// SPEC R6: a current snapshot whose bytes changed on disk (still valid JSON) is detected by
/// its checksum; the node opens on the previous one and the log after it, losing nothing,
/// and its next snapshot sets the bad file aside instead of rotating it over the good one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_current_snapshot_falls_back_to_the_previous_one_and_the_log_without_losing_a_write() {
    let dir = tempfile::tempdir().unwrap();
    let (before, previous) = two_snapshots_and_a_tail(dir.path(), 1_000).await;
    let corrupt = flip_a_digit(dir.path());

    let node = open_keeping(dir.path(), 1_000)
        .await
        .expect("opens on the previous snapshot");
    assert!(
        state(&node) == before,
        "exactly the acknowledged state, not the corrupt one"
    );
    node.propose(register(30, 1), meta()).await.unwrap().unwrap();
    node.snapshot().await.unwrap();
    node.shutdown().await.unwrap();
    let kept = std::fs::read(dir.path().join("snapshot.prev.json")).unwrap();
    assert!(kept == previous, "the good previous snapshot is kept");
    let set_aside = std::fs::read(dir.path().join("snapshot.json.corrupt")).unwrap();
    assert!(set_aside == corrupt, "the corrupt file is kept aside to look at");
}

/// SPEC R6: a node whose log is purged past every snapshot it can load refuses to open, and
/// says which files and why, rather than start behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_cannot_open_without_losing_writes_refuses_naming_the_files() {
    let dir = tempfile::tempdir().unwrap();
    two_snapshots_and_a_tail(dir.path(), 0).await;
    flip_a_digit(dir.path());
    let refused = refusal(dir.path(), 0).await;
    for named in [
        "cannot open without losing acknowledged writes",
        "raft-log.redb is purged up to index",
        "snapshot.prev.json, ends at index",
        "snapshot.json: its checksum does not hold",
    ] {
        assert!(refused.contains(named), "{named:?} missing from: {refused}");
    }
    // With neither snapshot there at all, the same.
    std::fs::remove_file(dir.path().join("snapshot.json")).unwrap();
    std::fs::remove_file(dir.path().join("snapshot.prev.json")).unwrap();
    let refused = refusal(dir.path(), 0).await;
    assert!(refused.contains("no snapshot loads"), "{refused}");
}

/// SPEC R6: a log file cut short (a torn copy, a full disk at restore) is refused by name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_log_file_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    two_snapshots_and_a_tail(dir.path(), 1_000).await;
    let log = dir.path().join("raft-log.redb");
    let len = std::fs::metadata(&log).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&log)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let refused = refusal(dir.path(), 1_000).await;
    assert!(refused.contains("raft-log.redb"), "{refused}");
}

/// SPEC R6: a flipped bit in a stored log entry (the JSON still parses) is found by the log's
/// page checksums at open and refused by name, never replayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flipped_bit_in_the_log_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    two_snapshots_and_a_tail(dir.path(), 1_000).await;
    let log = dir.path().join("raft-log.redb");
    let mut bytes = std::fs::read(&log).unwrap();
    // Every copy: redb writes pages copy-on-write, so older copies may sit in freed pages.
    let address = b"10.0.0.23";
    let copies: Vec<usize> = (0..bytes.len() - address.len())
        .filter(|&at| &bytes[at..at + address.len()] == address)
        .collect();
    assert!(!copies.is_empty(), "the last entry's address is in the log");
    for at in copies {
        bytes[at + 8] = b'4';
    }
    std::fs::write(&log, bytes).unwrap();
    let refused = refusal(dir.path(), 1_000).await;
    assert!(
        refused.contains("raft-log.redb") && refused.contains("integrity"),
        "{refused}"
    );
}

/// SPEC R6: a log file that is gone beside a snapshot (deleted, or left out of a restore)
/// takes the node's vote and every entry after the snapshot with it: refused by name, not
/// recreated empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_log_beside_a_snapshot_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    two_snapshots_and_a_tail(dir.path(), 1_000).await;
    std::fs::remove_file(dir.path().join("raft-log.redb")).unwrap();
    let refused = refusal(dir.path(), 1_000).await;
    assert!(
        refused.contains("raft-log.redb is missing beside snapshot.json"),
        "{refused}"
    );
}
