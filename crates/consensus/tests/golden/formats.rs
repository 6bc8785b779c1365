//! Each v1 file decoded on its own by the types that read it today: log entries and the log's
//! metadata (`v1/log`), both snapshot files (`v1/data`), and every node-to-node message
//! (`v1/wire`) with its reply (SPEC R1–R7).

use muster_consensus::{Batch, BatchId, TypeConfig};
use muster_core::{Actor, Incarnation, LeaseId, Revision, ServingState};
use muster_registry::{Command, LeaseSpec, Registry, RegistryConfig, RegistryState};
use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotResponse, VoteRequest, VoteResponse};
use openraft::{BasicNode, EntryPayload, LogId, SnapshotMeta, Vote};
use serde::Deserialize;

use super::{SESSION, T0_MS, endpoints, leases, read};

type Entry = openraft::Entry<TypeConfig>;

/// `term-node-index` of a log id, for short assertions.
fn id(log_id: Option<LogId<u64>>) -> Option<String> {
    log_id.map(|id| format!("{}-{}-{}", id.leader_id.term, id.leader_id.node_id, id.index))
}

fn vote(vote: &Vote<u64>) -> String {
    format!(
        "{}-{} {}",
        vote.leader_id.term,
        vote.leader_id.node_id,
        if vote.committed { "committed" } else { "uncommitted" }
    )
}

/// The one proposal of a batch entry, with its batch id.
fn only_proposal(
    entry: &Entry,
) -> (
    Option<BatchId>,
    &muster_registry::Command,
    &muster_registry::CommandMeta,
) {
    let EntryPayload::Normal(batch) = &entry.payload else {
        panic!("entry {} is not a batch", entry.log_id.index)
    };
    assert_eq!(
        batch.proposals.len(),
        1,
        "one proposal per entry: the generator waits for each"
    );
    (batch.id, &batch.proposals[0].command, &batch.proposals[0].meta)
}

/// Trace: a v1 log on disk is read entry by entry after an upgrade (`log/entries.jsonl` holds
/// the bytes redb stores under each index: 8–12, the purged prefix gone).
#[test]
fn v1_log_entries_decode_to_the_batches_that_were_proposed() {
    let text = read("log/entries.jsonl");
    let entries: Vec<Entry> = text
        .split(|b| *b == b'\n')
        .filter(|line| !line.is_empty())
        .map(|line| serde_json::from_slice(line).expect("a v1 log entry decodes"))
        .collect();
    let ids: Vec<_> = entries.iter().map(|e| id(Some(e.log_id)).unwrap()).collect();
    assert_eq!(ids, ["1-1-8", "1-1-9", "1-1-10", "1-1-11", "1-1-12"]);
    for (entry, seq) in entries.iter().zip(7..) {
        let (batch, _, meta) = only_proposal(entry);
        assert_eq!(
            batch,
            Some(BatchId {
                origin: 1,
                session: SESSION,
                seq
            })
        );
        assert_eq!(meta.principal.as_str(), "golden");
        // Entry 8 + k holds workload step 5 + k.
        assert_eq!(meta.at_ms, T0_MS + (seq - 2) * 1_000);
    }

    let (_, drain, meta) = only_proposal(&entries[0]);
    let Command::Drain(drain) = drain else {
        panic!("{drain:?}")
    };
    assert_eq!(
        (
            drain.target.instance.as_str(),
            drain.target.incarnation,
            drain.reason.as_str(),
            drain.grace_ms
        ),
        ("api-1", Incarnation(1), "rolling restart", Some(120_000))
    );
    assert_eq!(meta.actor, Actor::Owner);

    let (_, set, meta) = only_proposal(&entries[1]);
    let Command::SetServing(set) = set else {
        panic!("{set:?}")
    };
    assert_eq!(
        (set.target.instance.as_str(), set.state, set.reason.as_str()),
        ("api-2", ServingState::NotServing, "warming caches")
    );
    assert_eq!(meta.actor, Actor::App);

    let (_, policy, _) = only_proposal(&entries[2]);
    let Command::SetPolicy(policy) = policy else {
        panic!("{policy:?}")
    };
    assert!(!policy.initial);
    assert_eq!(
        policy.policy,
        RegistryConfig {
            history_revisions: 50_000,
            max_lease_ttl_ms: 7_200_000,
            ..RegistryConfig::default()
        }
    );

    let (_, deregister, _) = only_proposal(&entries[3]);
    let Command::Deregister(deregister) = deregister else {
        panic!("{deregister:?}")
    };
    assert_eq!(
        (deregister.target.instance.as_str(), deregister.target.incarnation),
        ("api-2", Incarnation(1))
    );

    let (_, register, _) = only_proposal(&entries[4]);
    let Command::Register(register) = register else {
        panic!("{register:?}")
    };
    assert_eq!(
        (register.target.instance.as_str(), register.target.incarnation),
        ("api-3", Incarnation(2))
    );
    assert_eq!(register.lease, LeaseSpec::Grant { ttl_ms: 10_000 });
    assert_eq!(register.spec.addresses[0].ip, "10.0.0.4");
    assert_eq!(register.spec.ports[0].port, 8080);
    assert_eq!(register.spec.labels["version"], "1.4.2");
    assert_eq!(register.spec.locality.zone.as_deref(), Some("eu-west-1a"));
}

/// The redb `meta` table's three records, each as stored.
#[test]
fn v1_log_metadata_decodes() {
    let stored_vote: Vote<u64> = serde_json::from_slice(&read("log/meta.vote.json")).unwrap();
    assert_eq!(vote(&stored_vote), "1-1 committed");
    let committed: Option<LogId<u64>> = serde_json::from_slice(&read("log/meta.committed.json")).unwrap();
    assert_eq!(id(committed).as_deref(), Some("1-1-12"));
    let purged: LogId<u64> = serde_json::from_slice(&read("log/meta.last_purged.json")).unwrap();
    assert_eq!(
        id(Some(purged)).as_deref(),
        Some("1-1-7"),
        "purged up to 3 entries behind index 10"
    );
}

/// A snapshot file's parts that have public types: Raft's metadata and the registry state.
/// (The table of applied batches beside them is read by `Node::open`: `data_dir.rs`.)
#[derive(Deserialize)]
struct SnapshotFile {
    meta: SnapshotMeta<u64, BasicNode>,
    state: RegistryState,
    batches: serde_json::Value,
}

fn snapshot(bytes: &[u8]) -> (SnapshotMeta<u64, BasicNode>, Registry, serde_json::Value) {
    let file: SnapshotFile = serde_json::from_slice(bytes).expect("a v1 snapshot decodes");
    let registry = Registry::import(RegistryConfig::default(), file.state).expect("a v1 registry state imports");
    (file.meta, registry, file.batches)
}

fn members(meta: &SnapshotMeta<u64, BasicNode>) -> Vec<(u64, String)> {
    meta.last_membership
        .membership()
        .nodes()
        .map(|(id, node)| (*id, node.addr.clone()))
        .collect()
}

/// Both snapshot files of the data directory, each read on its own.
#[test]
fn v1_snapshot_files_decode_to_the_state_at_their_index() {
    let (meta, registry, batches) = snapshot(&read("data/snapshot.json"));
    assert_eq!(id(meta.last_log_id).as_deref(), Some("1-1-10"));
    assert_eq!(meta.snapshot_id, "T1-N1-10");
    assert_eq!(members(&meta), [(1, String::new())], "a group of one");
    assert_eq!(
        registry.revision(),
        Revision(8),
        "steps 0–7: the new policy is the last"
    );
    assert_eq!(registry.policy().history_revisions, 50_000);
    assert_eq!(endpoints(&registry).len(), 3, "api-0, api-1 and api-2");
    assert_eq!(leases(&registry), ["1 acme 30000 rev=1", "2 acme 60000 rev=4"]);
    assert!(
        batches.is_object() || batches.is_array(),
        "the applied-batch table: {batches}"
    );

    let (meta, registry, _) = snapshot(&read("data/snapshot.prev.json"));
    assert_eq!(id(meta.last_log_id).as_deref(), Some("1-1-9"));
    assert_eq!(registry.revision(), Revision(7));
    assert_eq!(registry.policy().history_revisions, 100_000, "the initial policy still");
    assert_eq!(
        endpoints(&registry)[2],
        "api-2#1 10.0.0.3 http:8080/Http eu-west/eu-west-1a NotServing weight=100 lease=None rev=7 version=1.4.2 by=golden"
    );
}

/// `POST /raft/vote`: node 1's request in its first winning election, and node 2's grant.
#[test]
fn v1_vote_request_and_reply_decode() {
    let request: VoteRequest<u64> = serde_json::from_slice(&read("wire/vote.request.json")).unwrap();
    assert_eq!(vote(&request.vote), "2-1 uncommitted");
    assert_eq!(
        id(request.last_log_id).as_deref(),
        Some("0-0-0"),
        "the initial membership"
    );
    let reply: Result<VoteResponse<u64>, RaftError<u64>> =
        serde_json::from_slice(&read("wire/vote.reply.json")).unwrap();
    let reply = reply.expect("granted");
    assert!(reply.vote_granted);
    assert_eq!(vote(&reply.vote), "2-1 uncommitted");
    assert_eq!(reply.last_log_id, None);
}

fn append(path: &str) -> AppendEntriesRequest<TypeConfig> {
    serde_json::from_slice(&read(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn append_succeeded(path: &str) {
    let reply: Result<AppendEntriesResponse<u64>, RaftError<u64>> = serde_json::from_slice(&read(path)).unwrap();
    assert_eq!(reply.expect("accepted"), AppendEntriesResponse::Success, "{path}");
}

/// `POST /raft/append`: the first entries a follower gets (the membership and the leader's
/// blank entry), a batch, and a heartbeat; each accepted.
#[test]
fn v1_append_entries_requests_and_replies_decode() {
    let first = append("wire/append-membership.request.json");
    assert_eq!(vote(&first.vote), "2-1 committed");
    assert_eq!((first.prev_log_id, first.leader_commit), (None, None));
    assert_eq!(first.entries.len(), 2);
    let EntryPayload::Membership(membership) = &first.entries[0].payload else {
        panic!("{:?}", first.entries[0])
    };
    let voters: Vec<u64> = membership.voter_ids().collect();
    assert_eq!(voters, [1, 2, 3]);
    let addr: Vec<_> = membership.nodes().map(|(id, n)| format!("{id}={}", n.addr)).collect();
    assert_eq!(addr, ["1=node-1", "2=node-2", "3=node-3"]);
    assert!(matches!(first.entries[1].payload, EntryPayload::Blank));
    append_succeeded("wire/append-membership.reply.json");

    let batch = append("wire/append.request.json");
    assert_eq!(id(batch.prev_log_id).as_deref(), Some("2-1-1"));
    assert_eq!(id(batch.leader_commit).as_deref(), Some("2-1-1"));
    assert_eq!(id(Some(batch.entries[0].log_id)).as_deref(), Some("2-1-2"));
    let (batch_id, command, meta) = only_proposal(&batch.entries[0]);
    assert_eq!(
        batch_id,
        Some(BatchId {
            origin: 1,
            session: SESSION + 1,
            seq: 1
        })
    );
    let Command::SetPolicy(policy) = command else {
        panic!("{command:?}")
    };
    assert!(policy.initial, "the policy a node commits before its first write");
    assert_eq!(policy.policy, RegistryConfig::default());
    assert_eq!(meta.at_ms, T0_MS);
    append_succeeded("wire/append.reply.json");

    let heartbeat = append("wire/append-heartbeat.request.json");
    assert!(heartbeat.entries.is_empty());
    assert_eq!(id(heartbeat.prev_log_id).as_deref(), Some("2-1-1"));
    append_succeeded("wire/append-heartbeat.reply.json");
}

/// `POST /raft/snapshot`: the whole snapshot in one binary frame (`snapshot_frame`), as the
/// leader sent it to node 3, and node 3's reply.
#[test]
fn v1_snapshot_chunk_frame_and_reply_decode() {
    let chunk = muster_consensus::snapshot_frame::decode(&read("wire/snapshot.request.bin")).expect("a v1 frame");
    assert_eq!(vote(&chunk.vote), "2-1 committed");
    assert_eq!((chunk.offset, chunk.done), (0, true));
    assert_eq!(id(chunk.meta.last_log_id).as_deref(), Some("2-1-4"));
    assert_eq!(chunk.meta.snapshot_id, "T2-N1-4");
    let (meta, registry, _) = snapshot(&chunk.data);
    assert_eq!(meta, chunk.meta, "the data's metadata is the frame's");
    assert_eq!(members(&meta).len(), 3);
    assert_eq!(registry.revision(), Revision(2));
    assert_eq!(
        endpoints(&registry),
        [
            "api-0#1 10.0.0.1 http:8080/Http eu-west/eu-west-1a Ready weight=100 lease=Some(1) rev=1 version=1.4.2 by=golden",
            "api-2#1 10.0.0.3 http:8080/Http eu-west/eu-west-1a Ready weight=100 lease=None rev=2 version=1.4.2 by=golden",
        ]
    );
    assert_eq!(registry.lease(LeaseId(1)).map(|l| l.ttl_ms), Some(30_000));
    let reply: Result<InstallSnapshotResponse<u64>, RaftError<u64, InstallSnapshotError>> =
        serde_json::from_slice(&read("wire/snapshot.reply.json")).unwrap();
    assert_eq!(vote(&reply.unwrap().vote), "2-1 committed");
}

/// `POST /raft/propose` and `POST /raft/read_index`: the requests a follower sends. (Their
/// replies are decoded by the follower's own code in `replay.rs`.)
#[test]
fn v1_forwarded_write_and_read_index_requests_decode() {
    let batch: Batch = serde_json::from_slice(&read("wire/propose.request.json")).unwrap();
    assert_eq!(
        batch.id,
        Some(BatchId {
            origin: 2,
            session: SESSION + 2,
            seq: 1
        })
    );
    assert_eq!(batch.proposals.len(), 1);
    let Command::Register(register) = &batch.proposals[0].command else {
        panic!("{:?}", batch.proposals[0])
    };
    assert_eq!(register.target.instance.as_str(), "api-2");
    assert_eq!(register.lease, LeaseSpec::None);
    assert_eq!(batch.proposals[0].meta.at_ms, T0_MS + 2_000);
    let () = serde_json::from_slice(&read("wire/read_index.request.json")).expect("an empty request: null");
}
