//! The v1 messages played into a node of today's build, through the same entry points the
//! cluster listener and the peer client use (SPEC R1–R7, R3): a fresh node 2 is told what
//! node 1 told the v1 cluster's node 2 (a vote request, the first entries, a batch, a
//! heartbeat) and then given the snapshot v1 sent to node 3; its own forwarded write and
//! consistent read are answered with the v1 leader's replies.
//!
//! ```text
//!  vote ─▶ append-membership ─▶ append ─▶ snapshot ──▶ Node::rpc (node 2, today's build)
//!            └─ append-heartbeat every 50 ms (node 1 stays its leader)
//!  node 2: propose ──▶ PeerClient ──▶ GoldenLeader: propose.reply.json
//!          linearizable ──▶ PeerClient ──▶ GoldenLeader: read_index.reply.json
//! ```

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use muster_consensus::{
    CallError, ClusterConfig, Node, NodeConfig, PeerClient, PeerTransport, Rpc, SimDisk, TransportReply, TypeConfig,
};
use muster_core::{Actor, Incarnation, InstanceId, Principal, Revision};
use muster_registry::{Command, CommandMeta, LeaseSpec, Register, Target};
use openraft::BasicNode;
use openraft::error::{InstallSnapshotError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};

use super::{T0_MS, api, endpoints, quiet, read};

const SECRET: &str = "golden-cluster-secret";

/// Node 2 reaches nobody by Raft: every message it gets is played in by the test.
struct Nobody;

#[derive(Debug, thiserror::Error)]
#[error("the replay has no network")]
struct NoNetwork;

impl RaftNetworkFactory<TypeConfig> for Nobody {
    type Network = Nobody;

    async fn new_client(&mut self, _target: u64, _node: &BasicNode) -> Nobody {
        Nobody
    }
}

impl RaftNetwork<TypeConfig> for Nobody {
    async fn append_entries(
        &mut self,
        _rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        Err(RPCError::Unreachable(Unreachable::new(&NoNetwork)))
    }

    async fn install_snapshot(
        &mut self,
        _rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<InstallSnapshotResponse<u64>, RPCError<u64, BasicNode, RaftError<u64, InstallSnapshotError>>> {
        Err(RPCError::Unreachable(Unreachable::new(&NoNetwork)))
    }

    async fn vote(
        &mut self,
        _rpc: VoteRequest<u64>,
        _option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        Err(RPCError::Unreachable(Unreachable::new(&NoNetwork)))
    }
}

/// The v1 leader, as far as node 2's peer client can tell: it answers a forwarded write and
/// a read-index request with v1's replies, and keeps what node 2 sent.
#[derive(Default)]
struct GoldenLeader {
    sent: Mutex<Vec<(String, String, Vec<u8>)>>,
}

impl PeerTransport for GoldenLeader {
    fn post(&self, addr: &str, path: &str, body: Vec<u8>) -> TransportReply {
        self.sent.lock().unwrap().push((addr.to_owned(), path.to_owned(), body));
        let reply = match path {
            "/raft/propose" => Some(read("wire/propose.reply.json")),
            "/raft/read_index" => Some(read("wire/read_index.reply.json")),
            _ => None,
        };
        Box::pin(async move {
            match reply {
                Some(reply) => Ok((200, reply.into())),
                None => Err(CallError::Unreachable("not a route the replay answers".into())),
            }
        })
    }
}

/// Plays a v1 request into `node` and returns the reply's JSON (an undecodable request is
/// an `Err` naming the decoding error).
async fn play(node: &Node, rpc: Rpc, path: &str) -> serde_json::Value {
    let reply = node
        .rpc(rpc, &read(path))
        .await
        .unwrap_or_else(|e| panic!("{path} was refused: {e}"));
    serde_json::from_slice(&reply).unwrap()
}

/// Trace: during a rolling upgrade, a node of today's build is a follower of a v1 leader; it
/// must take every v1 message and understand the v1 leader's answers to its own requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_of_this_build_follows_a_v1_leader() {
    let members: BTreeMap<u64, String> = (1..=3).map(|id| (id, format!("node-{id}"))).collect();
    let leader = Arc::new(GoldenLeader::default());
    let config = NodeConfig {
        cluster: Some(ClusterConfig {
            node_id: 2,
            members: members.clone(),
            secret: SECRET.into(),
            tls: None,
        }),
        proposal_session: 42,
        ..NodeConfig::new("/nonexistent/golden-replay")
    };
    let forward = PeerClient::with_transport(SECRET.into(), members, Arc::clone(&leader) as Arc<dyn PeerTransport>);
    let disk = SimDisk::new();
    let node = Node::open_simulated(config, quiet(), Nobody, forward, &disk)
        .await
        .unwrap();

    let granted = play(&node, Rpc::Vote, "wire/vote.request.json").await;
    assert_eq!(granted["Ok"]["vote_granted"], true, "{granted}");
    let first = play(&node, Rpc::Append, "wire/append-membership.request.json").await;
    assert_eq!(first, serde_json::json!({"Ok": "Success"}));
    // From here node 2 is a member and would stand for election after 300–600 ms of silence:
    // v1's heartbeat keeps node 1 its leader.
    let heartbeats = {
        let node = node.clone();
        tokio::spawn(async move {
            loop {
                play(&node, Rpc::Append, "wire/append-heartbeat.request.json").await;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let batch = play(&node, Rpc::Append, "wire/append.request.json").await;
    assert_eq!(batch, serde_json::json!({"Ok": "Success"}));
    let installed = play(&node, Rpc::Snapshot, "wire/snapshot.request.bin").await;
    assert_eq!(installed["Ok"]["vote"]["leader_id"]["term"], 2, "{installed}");

    // The snapshot's state, installed by today's code.
    assert_eq!(node.status().applied_index, 4);
    assert_eq!(node.status().leader, Some(1));
    node.read(|registry| {
        assert_eq!(registry.revision(), Revision(2));
        assert_eq!(
            endpoints(registry),
            [
                "api-0#1 10.0.0.1 http:8080/Http eu-west/eu-west-1a Ready weight=100 lease=Some(1) rev=1 version=1.4.2 by=golden",
                "api-2#1 10.0.0.3 http:8080/Http eu-west/eu-west-1a Ready weight=100 lease=None rev=2 version=1.4.2 by=golden",
            ]
        );
    });

    // A consistent read: the v1 leader's read index is 4, which node 2 has applied.
    assert_eq!(node.linearizable().await.unwrap(), 4);
    // A write: forwarded; the v1 leader's reply says it committed at index 4, revision 2.
    let write = Command::Register(Register {
        target: Target {
            key: api(),
            instance: InstanceId::new("api-2").unwrap(),
            incarnation: Incarnation(1),
        },
        spec: serde_json::from_str(r#"{"addresses":[{"ip":"10.0.0.3"}]}"#).unwrap(),
        lease: LeaseSpec::None,
        expected_revision: None,
    });
    let meta = CommandMeta {
        at_ms: T0_MS + 2_000,
        principal: Principal::new("golden").unwrap(),
        actor: Actor::Owner,
    };
    let applied = node.propose(write, meta).await.unwrap().expect("v1's verdict: applied");
    heartbeats.abort();
    assert_eq!(applied.revision, Revision(2));
    assert_eq!(applied.updates.len(), 1);
    assert_eq!(applied.updates[0].prev_revision, Revision(1));
    assert_eq!(applied.lease, None);

    let sent = leader.sent.lock().unwrap().clone();
    let routes: Vec<_> = sent.iter().map(|(addr, path, _)| format!("{addr}{path}")).collect();
    assert_eq!(routes, ["node-1/raft/read_index", "node-1/raft/propose"]);
    let forwarded: muster_consensus::Batch = serde_json::from_slice(&sent[1].2).unwrap();
    assert_eq!(forwarded.id.map(|id| (id.origin, id.session, id.seq)), Some((2, 42, 1)));
    node.shutdown().await.unwrap();
}
