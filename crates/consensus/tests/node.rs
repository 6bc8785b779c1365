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
