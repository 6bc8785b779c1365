//! The snapshot chunk frame (SPEC R5, K): round trips, every way a body can be cut or
//! garbled, and its size against the JSON it replaced, for a registry of many endpoints.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use muster_core::{Actor, AddressSpec, EndpointSpec, Incarnation, InstanceId, Principal, ServiceKey};
use muster_registry::{Applied, Command, CommandMeta, LeaseSpec, Register, Registry, RegistryConfig, Target};
use openraft::raft::InstallSnapshotRequest;
use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine};
use openraft::{BasicNode, CommittedLeaderId, EntryPayload, Membership, SnapshotMeta, StoredMembership, Vote};

use crate::node::ApplyObserver;
use crate::snapshot_frame::{FrameError, decode, encode};
use crate::state_machine::StateMachine;
use crate::types::{Batch, Entry, LogId, Proposal, TypeConfig};

/// The chunk a node sends.
const CHUNK: usize = crate::node::SNAPSHOT_CHUNK_BYTES as usize;

fn request(data: Vec<u8>, offset: u64, done: bool) -> InstallSnapshotRequest<TypeConfig> {
    let log_id = LogId::new(CommittedLeaderId::new(4, 2), 1_234);
    let membership = Membership::new(
        vec![BTreeSet::from([1, 2, 3])],
        BTreeMap::from([1, 2, 3].map(|id| (id, BasicNode::new(format!("10.0.0.{id}:7947"))))),
    );
    InstallSnapshotRequest {
        vote: Vote::new_committed(4, 2),
        meta: SnapshotMeta {
            last_log_id: Some(log_id),
            last_membership: StoredMembership::new(Some(log_id), membership),
            snapshot_id: "4-2-1234".into(),
        },
        offset,
        data,
        done,
    }
}

/// Every byte value, so nothing is lost to a text encoding on the way.
fn all_bytes() -> Vec<u8> {
    (0..=255_u8).cycle().take(1_000).collect()
}

#[test]
fn a_chunk_round_trips_whole_head_and_raw_bytes() {
    for original in [
        request(all_bytes(), 3 * CHUNK as u64, false),
        request(Vec::new(), 0, true),
        request(b"{\"last\":true}".to_vec(), 77, true),
    ] {
        assert_eq!(decode(&encode(&original)).unwrap(), original);
    }
}

#[test]
fn a_body_cut_short_anywhere_is_truncated_never_a_shorter_chunk() {
    // Trace: a connection drops (or a proxy caps the body) mid-chunk; without the head's
    // `len` the receiver would write a short chunk at `offset` and, with `done`, install it.
    let frame = encode(&request(all_bytes(), 0, true));
    for cut in 0..frame.len() {
        match decode(&frame[..cut]) {
            Err(FrameError::Truncated { needed, actual }) => {
                assert_eq!(actual, cut as u64);
                assert!(needed > actual, "cut at {cut}: needs {needed}");
            }
            // Cut inside the head: its JSON ends early.
            Err(FrameError::Head(_)) => {}
            other => panic!("cut at {cut} of {}: {other:?}", frame.len()),
        }
    }
}

#[test]
fn bytes_after_the_chunk_are_refused() {
    let mut frame = encode(&request(all_bytes(), 0, false));
    let needed = frame.len() as u64;
    frame.push(0);
    assert_eq!(
        decode(&frame),
        Err(FrameError::TrailingBytes {
            needed,
            actual: needed + 1
        })
    );
}

#[test]
fn the_json_of_the_old_wire_form_is_not_a_frame() {
    let json = serde_json::to_vec(&request(all_bytes(), 0, true)).unwrap();
    assert_eq!(decode(&json), Err(FrameError::NotAFrame));
    assert_eq!(decode(b"MSC2"), Err(FrameError::NotAFrame));
}

#[test]
fn a_garbled_head_is_refused_with_the_reason() {
    let frame = encode(&request(all_bytes(), 0, true));
    let head_len = u32::from_be_bytes(frame[4..8].try_into().unwrap()) as usize;
    // A head that is not JSON, and one that is JSON but not a chunk's head.
    let mut garbled = frame.clone();
    garbled[8] = b'x';
    assert!(matches!(decode(&garbled), Err(FrameError::Head(_))));
    let other = b"{\"offset\":1}";
    let mut wrong = b"MSC1".to_vec();
    wrong.extend_from_slice(&(other.len() as u32).to_be_bytes());
    wrong.extend_from_slice(other);
    assert!(matches!(decode(&wrong), Err(FrameError::Head(message)) if message.contains("missing field")));
    // A head length past the body.
    let mut long = frame.clone();
    long[4..8].copy_from_slice(&(head_len as u32 + 10_000).to_be_bytes());
    assert!(matches!(decode(&long), Err(FrameError::Truncated { .. })));
    // A data length at the top of u64: truncated, never an overflow.
    let text = String::from_utf8(frame[8..8 + head_len].to_vec()).unwrap();
    let huge = text.replacen(
        &format!("\"len\":{}", all_bytes().len()),
        &format!("\"len\":{}", u64::MAX),
        1,
    );
    assert_ne!(huge, text, "the head names the data length");
    let mut over = b"MSC1".to_vec();
    over.extend_from_slice(&(huge.len() as u32).to_be_bytes());
    over.extend_from_slice(huge.as_bytes());
    over.extend_from_slice(&all_bytes());
    assert!(matches!(
        decode(&over),
        Err(FrameError::Truncated { needed: u64::MAX, .. })
    ));
}

#[test]
fn a_full_chunk_of_snapshot_text_is_its_size_on_the_wire_where_json_was_about_four_times() {
    // A snapshot is JSON text (`state_machine`): bytes 32–126, two or three digits and a
    // comma each in a JSON array.
    let data: Vec<u8> = (0..CHUNK).map(|i| b"{\"10.0.1.23\":[\"api-42\"]},"[i % 25]).collect();
    let chunk = request(data, 0, false);
    let framed = encode(&chunk).len();
    let json = serde_json::to_vec(&chunk).unwrap().len();
    assert!(framed < CHUNK + 1_024, "framed {framed} for a chunk of {CHUNK}");
    assert!(json > 3 * CHUNK, "JSON {json} for a chunk of {CHUNK}");
}

struct Quiet;

impl ApplyObserver for Quiet {
    fn applied(&self, _registry: &Registry, _applied: &Applied) {}
    fn reset(&self, _registry: &Registry) {}
}

fn register(n: u32) -> Proposal {
    let command: Command = Register {
        target: Target {
            key: ServiceKey::new("acme", "prod", &format!("svc-{}", n % 100)).unwrap(),
            instance: InstanceId::new(&format!("api-{n}")).unwrap(),
            incarnation: Incarnation(1),
        },
        spec: EndpointSpec {
            addresses: vec![AddressSpec {
                ip: format!("10.{}.{}.{}", n / 62_500, n / 250 % 250, n % 250 + 1),
                scope: None,
            }],
            ..EndpointSpec::default()
        },
        lease: LeaseSpec::None,
        expected_revision: None,
    }
    .into();
    Proposal {
        command,
        meta: CommandMeta {
            at_ms: 1,
            principal: Principal::new("test").unwrap(),
            actor: Actor::App,
        },
    }
}

/// The bytes on the wire for the whole snapshot of `endpoints` endpoints, sent in chunks
/// of [`CHUNK`]: (framed, JSON).
async fn wire_bytes_of_a_snapshot(endpoints: u32) -> (usize, usize, usize) {
    let dir = tempfile::tempdir().unwrap();
    let mut machine = StateMachine::open(dir.path(), RegistryConfig::default(), Arc::new(Quiet)).unwrap();
    let entries = (0..endpoints).collect::<Vec<_>>();
    let entries = entries.chunks(1_000).enumerate().map(|(i, ns)| Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), i as u64 + 1),
        payload: EntryPayload::Normal(Batch {
            id: None,
            proposals: ns.iter().map(|&n| register(n)).collect(),
        }),
    });
    machine.apply(entries).await.unwrap();
    let mut snapshot = machine.get_snapshot_builder().await.build_snapshot().await.unwrap();
    let bytes = std::mem::take(snapshot.snapshot.get_mut());
    let (mut framed, mut json) = (0, 0);
    let mut offset = 0;
    for data in bytes.chunks(CHUNK) {
        let chunk = InstallSnapshotRequest {
            vote: Vote::new_committed(1, 1),
            meta: snapshot.meta.clone(),
            offset,
            data: data.to_vec(),
            done: offset as usize + data.len() == bytes.len(),
        };
        offset += data.len() as u64;
        framed += encode(&chunk).len();
        json += serde_json::to_vec(&chunk).unwrap().len();
    }
    (bytes.len(), framed, json)
}

#[tokio::test]
async fn the_snapshot_of_ten_thousand_endpoints_costs_its_size_on_the_wire() {
    let (size, framed, json) = wire_bytes_of_a_snapshot(10_000).await;
    println!("10000 endpoints: snapshot {size} B, framed {framed} B, JSON {json} B");
    // One chunk's head or a few: well under a KiB each.
    assert!(framed < size + 4 * 1_024, "framed {framed} for a snapshot of {size}");
    assert!(json > 3 * size, "JSON {json} for a snapshot of {size}");
}
