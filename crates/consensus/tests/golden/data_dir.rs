//! The v1 data directory (`v1/data`), opened by today's `Node::open` (SPEC R1, R2: every
//! acknowledged write survives a restart — across a format change too).

use muster_consensus::{Node, NodeConfig};
use muster_core::{Actor, Incarnation, InstanceId, LeaseId, Principal, Revision};
use muster_registry::{Command, CommandMeta, Register, Registry, Target};

use super::{SESSION, T0_MS, api, endpoints, golden, leases};

/// A copy of the golden data directory in a temporary one (opening writes to it), without
/// the files `leave_out` names.
fn copy(leave_out: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(golden("data")).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if !leave_out.iter().any(|l| name == *l) {
            std::fs::copy(entry.path(), dir.path().join(&name)).unwrap();
        }
    }
    dir
}

async fn open(dir: &std::path::Path) -> Node {
    let config = NodeConfig {
        // Not the generator's session: this is a later start of the node.
        proposal_session: SESSION + 100,
        ..NodeConfig::new(dir)
    };
    Node::open(config, super::quiet())
        .await
        .expect("the v1 data directory opens")
}

/// Exactly the state the generator's workload left (its steps 0–9, each at its own revision).
fn assert_the_whole_workload(registry: &Registry) {
    assert_eq!(registry.revision(), Revision(10));
    assert_eq!(
        endpoints(registry),
        [
            "api-0#1 10.0.0.1 http:8080/Http eu-west/eu-west-1a Ready weight=100 lease=Some(1) rev=1 version=1.4.2 by=golden",
            "api-1#1 10.0.0.2 http:8080/Http eu-west/eu-west-1a Draining weight=100 lease=Some(1) rev=6 version=1.4.2 by=golden",
            "api-3#2 10.0.0.4 http:8080/Http eu-west/eu-west-1a Ready weight=100 lease=Some(3) rev=10 version=1.4.2 by=golden",
        ],
        "api-2 was deregistered at revision 9"
    );
    assert_eq!(
        leases(registry),
        ["1 acme 30000 rev=1", "2 acme 60000 rev=4", "3 acme 10000 rev=10"]
    );
    let on_lease_1: Vec<_> = registry
        .lease_endpoints(LeaseId(1))
        .into_iter()
        .map(|(_, instance)| instance.as_str().to_owned())
        .collect();
    assert_eq!(on_lease_1, ["api-0", "api-1"]);
    let drain = registry
        .drain_deadline(&api(), &InstanceId::new("api-1").unwrap())
        .expect("api-1's drain has a deadline");
    assert_eq!(
        (drain.incarnation, drain.deadline_ms),
        (Incarnation(1), T0_MS + 5_000 + 120_000),
        "drained at step 5 with a 120 s grace"
    );
    assert_eq!(registry.drain_count(), 1);
    // The policy set at step 7 (revision 8), over the initial one the node committed first.
    assert!(registry.policy_committed());
    assert_eq!(registry.policy_revision(), Revision(8));
    assert_eq!(registry.policy().history_revisions, 50_000);
    assert_eq!(registry.policy().max_lease_ttl_ms, 7_200_000);
    assert_eq!(registry.policy().min_lease_ttl_ms, 1_000, "defaults fill the rest");
    assert_eq!(registry.clock_ms(), T0_MS + 9_000, "the last command's time");
    // The operator token of step 4: its secret still authenticates.
    let secret = "0000000000000000000000000000000000000000000000000000000000000001";
    let token = registry.acl().authenticate(secret).expect("the bootstrap token");
    assert_eq!(token.accessor().as_str(), "0123456789abcdef0123456789abcdef");
    assert_eq!(token.created_at_ms, T0_MS + 4_000);
    assert!(registry.acl().bootstrapped());
}

/// The fence api-2's deregistration left: its incarnation 1 can never come back.
async fn assert_api_2_is_fenced(node: &Node) {
    let again = Command::Register(Register {
        target: Target {
            key: api(),
            instance: InstanceId::new("api-2").unwrap(),
            incarnation: Incarnation(1),
        },
        spec: serde_json::from_str(r#"{"addresses":[{"ip":"10.0.0.3"}]}"#).unwrap(),
        lease: muster_registry::LeaseSpec::None,
        expected_revision: None,
    });
    let meta = CommandMeta {
        at_ms: T0_MS + 10_000,
        principal: Principal::new("golden").unwrap(),
        actor: Actor::Owner,
    };
    let refused = node.propose(again, meta).await.unwrap().unwrap_err();
    assert_eq!(refused.code(), "stale_incarnation");
}

/// Trace: a node of the v1 build is stopped and started again on the new build, with its
/// data directory as v1 left it (current and previous snapshot, a purged log prefix, the
/// log after the snapshot holding the last two writes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v1_data_directory_opens_with_every_acknowledged_write() {
    let dir = copy(&[]);
    let node = open(dir.path()).await;
    node.read(assert_the_whole_workload);
    assert!(
        node.status().applied_index >= 12,
        "the log's last entry, index 12, is applied"
    );
    assert_api_2_is_fenced(&node).await;
    node.shutdown().await.unwrap();
}

/// Trace: v1's current snapshot file is lost; the previous one (index 9) and the log after it
/// (v1 kept 3 entries behind each snapshot, so 8–12 are on disk) rebuild the same state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v1_data_directory_opens_from_its_previous_snapshot() {
    let dir = copy(&["snapshot.json"]);
    let node = open(dir.path()).await;
    node.read(assert_the_whole_workload);
    node.shutdown().await.unwrap();
}
