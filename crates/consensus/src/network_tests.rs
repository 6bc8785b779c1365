//! The HTTP peer's appends stay inside the cluster listener's body limit and shrink for a
//! follower too slow for openraft's timeout ([`crate::append_pacer`], SPEC R5).

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use openraft::error::RPCError;
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse};
use openraft::{BasicNode, CommittedLeaderId, EntryPayload, Vote};

use crate::append_pacer::{MAX_APPEND_BYTES, MAX_APPEND_ENTRIES, MAX_RPC_BYTES};
use crate::network::{
    Heard, HttpPeers, PeerClient, PeerTransport, Reachability, SILENT_WARN_MS, TransportReply, WAITING_WARN_MS,
};
use crate::types::{Batch, Entry, LogId, Proposal};

/// A follower that answers every append with success and records each body's length.
#[derive(Default)]
struct Follower {
    bodies: Mutex<Vec<usize>>,
}

impl PeerTransport for Follower {
    fn post(&self, _addr: &str, path: &str, body: Vec<u8>) -> TransportReply {
        assert_eq!(path, "/raft/append");
        self.bodies.lock().unwrap().push(body.len());
        Box::pin(async { Ok((200, Bytes::from_static(br#"{"Ok":"Success"}"#))) })
    }
}

/// A registration near the record limit (4 KiB of labels and fields): 16 labels of a
/// 63-byte key and a 120-byte value.
fn large_registration(n: usize) -> Proposal {
    let labels: serde_json::Map<String, serde_json::Value> = (0..16)
        .map(|i| (format!("{i:02}-{}", "k".repeat(60)), "v".repeat(120).into()))
        .collect();
    serde_json::from_value(serde_json::json!({
        "command": {"register": {
            "target": {"key": {"tenant": "acme", "namespace": "prod", "service": "api"},
                       "instance": format!("api-{n}"), "incarnation": 1},
            "spec": {"addresses": [{"ip": "10.0.0.4"}],
                     "ports": [{"name": "http", "port": 8080, "protocol": "http"}],
                     "labels": labels},
            "lease": {"grant": {"ttl_ms": 10_000}}}},
        "meta": {"at_ms": 1, "principal": "test", "actor": "owner"}
    }))
    .expect("a registration")
}

fn leader() -> Vote<u64> {
    Vote::new_committed(1, 1)
}

fn entry(index: u64, batch: &Batch) -> Entry {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Normal(batch.clone()),
    }
}

/// Trace (wave-2 notes): 1,024 registrations per entry × up to 300 entries per
/// AppendEntries can exceed the 64 MiB node-to-node limit; the request was then refused
/// by the listener every time it was sent.
#[tokio::test]
async fn appends_of_entries_full_of_large_registrations_never_exceed_the_byte_bound() {
    // A full entry: the batcher's 1,024 proposals.
    let batch = Batch {
        id: None,
        proposals: (0..1024).map(large_registration).collect(),
    };
    let entry_bytes = serde_json::to_vec(&entry(1, &batch)).unwrap().len();
    let entries = (MAX_RPC_BYTES / entry_bytes + 2) as u64;
    assert!(
        entries < MAX_APPEND_ENTRIES,
        "fewer entries than openraft sends at once already exceed the listener's limit"
    );
    let log: Vec<Entry> = (1..=entries).map(|i| entry(i, &batch)).collect();
    let follower = Arc::new(Follower::default());
    let client = PeerClient::with_transport("secret".into(), Default::default(), follower.clone());
    let mut peer = HttpPeers {
        client,
        reach: Default::default(),
    }
    .new_client(2, &BasicNode::new("node-2"))
    .await;
    // As openraft replicates: from the follower's match, as many entries as allowed.
    let (mut matched, mut allowed, mut refusals) = (0_u64, MAX_APPEND_ENTRIES, 0);
    while matched < entries {
        let end = (matched + allowed).min(entries);
        let request = AppendEntriesRequest {
            vote: leader(),
            prev_log_id: (matched > 0).then(|| log[matched as usize - 1].log_id),
            leader_commit: None,
            entries: log[matched as usize..end as usize].to_vec(),
        };
        match peer
            .append_entries(request, RPCOption::new(std::time::Duration::from_secs(5)))
            .await
        {
            Ok(AppendEntriesResponse::Success) => matched = end,
            Err(RPCError::PayloadTooLarge(too_large)) => {
                refusals += 1;
                allowed = too_large.entries_hint();
                assert!(allowed >= 1 && allowed < end - matched, "the hint shrinks: {allowed}");
            }
            other => panic!("unexpected answer: {other:?}"),
        }
        assert!(refusals < 20, "the pacer keeps refusing");
    }
    let bodies = follower.bodies.lock().unwrap().clone();
    assert!(refusals > 0, "a request over the bound was sent whole");
    assert!(
        bodies.iter().all(|b| *b <= MAX_APPEND_BYTES),
        "a request over {MAX_APPEND_BYTES} bytes was sent: {bodies:?}"
    );
    assert!(bodies.len() > 1 && bodies.iter().sum::<usize>() > MAX_RPC_BYTES);
}

/// The largest entry the batcher makes (proposals up to the byte bound, then one of the
/// largest proposals a node accepts) is sent whole, in one request inside the limit.
#[tokio::test]
async fn the_largest_entry_the_batcher_makes_goes_out_in_one_request_inside_the_limit() {
    use crate::batcher::{MAX_BATCH_BYTES, MAX_PROPOSAL_BYTES, encoded_len, gather};
    // Proposals just under the largest accepted, queued deeper than one entry holds.
    let sized = |n: usize| {
        let mut proposal = large_registration(n);
        let muster_registry::Command::Register(register) = &mut proposal.command else {
            unreachable!()
        };
        let filler = MAX_PROPOSAL_BYTES - encoded_len(&large_registration(n)) - 64;
        register.spec.labels.insert("filler".into(), "f".repeat(filler));
        proposal
    };
    let mut queued: std::collections::VecDeque<Proposal> = (1..6).map(sized).collect();
    assert!(queued.iter().all(|p| encoded_len(p) <= MAX_PROPOSAL_BYTES));
    let (proposals, over) = gather(sized(0), || queued.pop_front(), encoded_len);
    assert!(over.is_some(), "the entry was cut at the byte bound");
    let batch = Batch { id: None, proposals };
    let follower = Arc::new(Follower::default());
    let client = PeerClient::with_transport("secret".into(), Default::default(), follower.clone());
    let mut peer = HttpPeers {
        client,
        reach: Default::default(),
    }
    .new_client(2, &BasicNode::new("node-2"))
    .await;
    let request = AppendEntriesRequest {
        vote: leader(),
        prev_log_id: None,
        leader_commit: None,
        entries: vec![entry(1, &batch)],
    };
    let reply = peer
        .append_entries(request, RPCOption::new(std::time::Duration::from_secs(5)))
        .await;
    assert!(matches!(reply, Ok(AppendEntriesResponse::Success)), "{reply:?}");
    let bodies = follower.bodies.lock().unwrap().clone();
    assert_eq!(bodies.len(), 1);
    assert!(bodies[0] > MAX_BATCH_BYTES, "the entry is a large one: {bodies:?}");
    assert!(bodies[0] <= MAX_APPEND_BYTES, "{bodies:?} over {MAX_APPEND_BYTES}");
}

/// A follower that takes longer than openraft's timeout: openraft drops the call, and the
/// next request to it carries half as many entries.
#[tokio::test]
async fn an_append_dropped_by_the_timeout_makes_the_next_one_smaller() {
    struct Slow;
    impl PeerTransport for Slow {
        fn post(&self, _addr: &str, _path: &str, _body: Vec<u8>) -> TransportReply {
            Box::pin(std::future::pending())
        }
    }
    let client = PeerClient::with_transport("secret".into(), Default::default(), Arc::new(Slow));
    let mut peer = HttpPeers {
        client,
        reach: Default::default(),
    }
    .new_client(2, &BasicNode::new("node-2"))
    .await;
    let batch = Batch {
        id: None,
        proposals: vec![large_registration(0)],
    };
    let log: Vec<Entry> = (1..=MAX_APPEND_ENTRIES).map(|i| entry(i, &batch)).collect();
    let request = |n: usize| AppendEntriesRequest {
        vote: leader(),
        prev_log_id: None,
        leader_commit: None,
        entries: log[..n].to_vec(),
    };
    let option = || RPCOption::new(std::time::Duration::from_millis(100));
    // openraft's own timeout around the call, as in its replication loop.
    let dropped = tokio::time::timeout(
        option().hard_ttl(),
        peer.append_entries(request(MAX_APPEND_ENTRIES as usize), option()),
    )
    .await;
    assert!(dropped.is_err(), "the slow follower answered");
    match peer
        .append_entries(request(MAX_APPEND_ENTRIES as usize), option())
        .await
    {
        Err(RPCError::PayloadTooLarge(too_large)) => {
            assert_eq!(too_large.entries_hint(), MAX_APPEND_ENTRIES / 2);
        }
        other => panic!("the same batch was sent again: {other:?}"),
    }
}

/// SPEC O2 (quiet when healthy): a peer not up yet is one INFO, not a line per retry, and a
/// WARN only once it has not answered for `WAITING_WARN_MS`; losing a peer that answered is
/// one WARN after that long; a refusal (a wrong secret) is a WARN at once, once per text;
/// an answer after any of them is one INFO.
#[test]
fn a_peer_s_reachability_is_logged_once_per_change() {
    use tracing::Level;
    let reach = Reachability::default();
    let silent = || Heard::Silence("connection refused");
    let at = |heard: Heard<'_>, ms: u64| reach.observe(3, "127.0.0.1:7303", heard, ms);
    // Starting: the peer is not up yet, then it is.
    assert_eq!(at(silent(), 0), Some(Level::INFO));
    assert_eq!(at(silent(), 500), None);
    assert_eq!(at(Heard::Answer, 1_000), Some(Level::INFO));
    assert_eq!(at(Heard::Answer, 1_100), None);
    // A blip shorter than SILENT_WARN_MS is not worth a line.
    assert_eq!(at(silent(), 2_000), None);
    assert_eq!(at(Heard::Answer, 2_500), None);
    // Lost: one WARN once it has lasted, then quiet, then one INFO when it is back.
    assert_eq!(at(silent(), 10_000), None);
    assert_eq!(at(silent(), 10_000 + SILENT_WARN_MS), Some(Level::WARN));
    assert_eq!(at(silent(), 20_000), None);
    assert_eq!(at(Heard::Answer, 21_000), Some(Level::INFO));
    // A refusal is a WARN at once, once per text.
    assert_eq!(at(Heard::Refusal("HTTP 401"), 22_000), Some(Level::WARN));
    assert_eq!(at(Heard::Refusal("HTTP 401"), 22_500), None);
    assert_eq!(at(Heard::Answer, 23_000), Some(Level::INFO));
    // A peer never reached that stays silent is a WARN after WAITING_WARN_MS, not before.
    assert_eq!(
        reach.observe(2, "127.0.0.1:7302", Heard::Silence("timeout"), 0),
        Some(Level::INFO)
    );
    assert_eq!(
        reach.observe(2, "127.0.0.1:7302", Heard::Silence("timeout"), SILENT_WARN_MS),
        None
    );
    assert_eq!(
        reach.observe(2, "127.0.0.1:7302", Heard::Silence("timeout"), WAITING_WARN_MS),
        Some(Level::WARN)
    );
}
