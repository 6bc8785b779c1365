//! Three nodes on loopback, each with its own data directory and cluster listener (a minimal
//! HTTP server in front of `Node::rpc`, checking the secret as the daemon does): forming,
//! forwarding, leader loss, a minority without quorum, a wrong secret.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use muster_consensus::{
    ApplyObserver, ClusterConfig, ConsensusError, Node, NodeConfig, ReadIndexError, Rpc, SECRET_HEADER,
};
use muster_core::{Actor, AddressSpec, EndpointSpec, Incarnation, InstanceId, Principal, ServiceKey};
use muster_registry::{Applied, Command, CommandMeta, LeaseSpec, Register, Registry, Target};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

const SECRET: &str = "s3cret";
/// Bound on every wait: elections take a few hundred ms; a broken cluster fails here.
const STEP: Duration = Duration::from_secs(20);

struct Quiet;

impl ApplyObserver for Quiet {
    fn applied(&self, _registry: &Registry, _applied: &Applied) {}
    fn reset(&self, _registry: &Registry) {}
}

fn key() -> ServiceKey {
    ServiceKey::new("acme", "prod", "api").unwrap()
}

fn register(n: u32) -> (Command, CommandMeta) {
    let command = Register {
        target: Target {
            key: key(),
            instance: InstanceId::new(&format!("api-{n}")).unwrap(),
            incarnation: Incarnation(1),
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
    .into();
    let meta = CommandMeta {
        at_ms: 1,
        principal: Principal::new("test").unwrap(),
        actor: Actor::App,
    };
    (command, meta)
}

struct Member {
    node: Node,
    server: JoinHandle<()>,
    addr: SocketAddr,
    /// How long its listener holds each append before handing it to Raft, in ms: a follower
    /// that learns of commits late (0: at once).
    append_delay: Arc<AtomicU64>,
}

impl Member {
    async fn stop(self) {
        self.server.abort();
        let _ = self.node.shutdown().await;
    }
}

/// The cluster listener: `POST /raft/{rpc}` with the secret, else 401 and nothing done; an
/// append waits `append_delay` ms first. Its connections belong to its task: aborting it
/// closes them (as a stopped process would).
fn serve(listener: TcpListener, node: Node, append_delay: Arc<AtomicU64>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut connections = tokio::task::JoinSet::new();
        while let Ok((tcp, _)) = listener.accept().await {
            let node = node.clone();
            let append_delay = Arc::clone(&append_delay);
            connections.spawn(async move {
                let service = service_fn(move |request: Request<hyper::body::Incoming>| {
                    let node = node.clone();
                    let append_delay = Arc::clone(&append_delay);
                    async move {
                        let secret = request
                            .headers()
                            .get(SECRET_HEADER)
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default()
                            .to_owned();
                        let rpc = request.uri().path().strip_prefix("/raft/").and_then(Rpc::from_segment);
                        let body = request
                            .into_body()
                            .collect()
                            .await
                            .map(|b| b.to_bytes())
                            .unwrap_or_default();
                        let delay = append_delay.load(Ordering::Relaxed);
                        if rpc == Some(Rpc::Append) && delay > 0 && node.accepts_secret(&secret) {
                            tokio::time::sleep(Duration::from_millis(delay)).await;
                        }
                        let (status, reply) = match rpc {
                            _ if !node.accepts_secret(&secret) => (StatusCode::UNAUTHORIZED, Bytes::new()),
                            None => (StatusCode::NOT_FOUND, Bytes::new()),
                            Some(rpc) => match node.rpc(rpc, &body).await {
                                Ok(reply) => (StatusCode::OK, Bytes::from(reply)),
                                Err(message) => (StatusCode::BAD_REQUEST, Bytes::from(message)),
                            },
                        };
                        Ok::<_, Infallible>(Response::builder().status(status).body(Full::new(reply)).unwrap())
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), service)
                    .await;
            });
        }
    })
}

/// Opens a member of `members` on its bound `listener`.
async fn open_member(dir: &std::path::Path, id: u64, members: &BTreeMap<u64, String>, listener: TcpListener) -> Member {
    let addr = listener.local_addr().unwrap();
    let config = NodeConfig {
        cluster: Some(ClusterConfig {
            node_id: id,
            members: members.clone(),
            secret: SECRET.into(),
            tls: None,
        }),
        ..NodeConfig::new(dir.join(format!("node-{id}")))
    };
    let node = Node::open(config, Arc::new(Quiet)).await.expect("the node opens");
    let append_delay = Arc::new(AtomicU64::new(0));
    let server = serve(listener, node.clone(), Arc::clone(&append_delay));
    Member {
        node,
        server,
        addr,
        append_delay,
    }
}

async fn cluster(dir: &std::path::Path) -> Vec<Member> {
    let mut listeners = Vec::new();
    let mut members = BTreeMap::new();
    for id in 1..=3_u64 {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        members.insert(id, listener.local_addr().unwrap().to_string());
        listeners.push((id, listener));
    }
    let mut opened = Vec::new();
    for (id, listener) in listeners {
        opened.push(open_member(dir, id, &members, listener).await);
    }
    opened
}

/// Waits until some member reports a leader that is one of `alive`; returns its index.
async fn leader(members: &[Member]) -> usize {
    let polls = STEP.as_millis() / 20;
    for _ in 0..polls {
        let ids: Vec<u64> = members.iter().map(|m| m.node.status().node_id).collect();
        for member in members {
            if let Some(leader) = member.node.status().leader
                && let Some(index) = ids.iter().position(|id| *id == leader)
                && members[index].node.is_leader()
            {
                return index;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no leader elected");
}

fn endpoints(node: &Node) -> usize {
    node.read(|r| r.snapshot(&key()).map_or(0, |s| s.len()))
}

/// Waits until every member holds `n` endpoints.
async fn converged(members: &[Member], n: usize) {
    for _ in 0..STEP.as_millis() / 20 {
        if members.iter().all(|m| endpoints(&m.node) == n) {
            let digests: Vec<_> = members
                .iter()
                .map(|m| m.node.read(|r| r.snapshot(&key()).map(|s| s.digest())))
                .collect();
            assert!(digests.windows(2).all(|w| w[0] == w[1]), "{digests:?}");
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let counts: Vec<usize> = members.iter().map(|m| endpoints(&m.node)).collect();
    panic!("not converged on {n}: {counts:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_on_a_follower_is_forwarded_acknowledged_after_commit_and_seen_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let members = cluster(dir.path()).await;
    let leader = leader(&members).await;
    let follower = (leader + 1) % 3;
    let (command, meta) = register(1);
    let applied = members[follower].node.propose(command, meta).await.unwrap().unwrap();
    assert!(applied.revision.0 >= 1);
    assert_eq!(
        endpoints(&members[follower].node),
        1,
        "the follower answers after applying it"
    );
    converged(&members, 1).await;
    for member in members {
        member.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_leader_stops_the_others_elect_a_new_one_and_keep_every_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let mut members = cluster(dir.path()).await;
    let first = leader(&members).await;
    for n in 0..20 {
        let (command, meta) = register(n);
        members[(first + 1) % 3]
            .node
            .propose(command, meta)
            .await
            .unwrap()
            .unwrap();
    }
    members.remove(first).stop().await;
    let next = leader(&members).await;
    let (command, meta) = register(100);
    members[next].node.propose(command, meta).await.unwrap().unwrap();
    let (command, meta) = register(101);
    members[1 - next].node.propose(command, meta).await.unwrap().unwrap();
    converged(&members, 22).await;
    for member in members {
        member.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minority_refuses_writes_with_no_quorum_in_bounded_time() {
    let dir = tempfile::tempdir().unwrap();
    let mut members = cluster(dir.path()).await;
    leader(&members).await;
    let (command, meta) = register(1);
    members[0].node.propose(command, meta).await.unwrap().unwrap();
    let alone = members.remove(0);
    for member in members {
        member.stop().await;
    }
    let (command, meta) = register(2);
    let refused = tokio::time::timeout(STEP, alone.node.propose(command, meta))
        .await
        .expect("a write without quorum fails in bounded time");
    assert!(matches!(refused, Err(ConsensusError::NoQuorum)), "{refused:?}");
    assert_eq!(endpoints(&alone.node), 1, "nothing half-applied");
    alone.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_without_the_cluster_secret_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let members = cluster(dir.path()).await;
    leader(&members).await;
    let client =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http::<Full<Bytes>>();
    let batch = serde_json::json!([{"command": {"register": {}}, "meta": {}}]);
    for secret in ["", "wrong"] {
        let request = Request::post(format!("http://{}/raft/propose", members[0].addr))
            .header(SECRET_HEADER, secret)
            .body(Full::new(Bytes::from(batch.to_string())))
            .unwrap();
        let response = client.request(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    }
    assert!(members.iter().all(|m| m.node.status().revision.0 == 0));
    for member in members {
        member.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_or_json_snapshot_chunk_is_refused_with_the_frame_error_and_changes_nothing() {
    // Trace: a connection drops mid-chunk, or a peer sends the old JSON form; a chunk cut
    // short must not be written at its offset (and, being `done`, installed).
    let dir = tempfile::tempdir().unwrap();
    let members = cluster(dir.path()).await;
    let leader_index = leader(&members).await;
    let leader_id = members[leader_index].node.status().node_id;
    for n in 0..3 {
        let (command, meta) = register(n);
        members[leader_index]
            .node
            .propose(command, meta)
            .await
            .unwrap()
            .unwrap();
    }
    converged(&members, 3).await;
    let follower = &members[(leader_index + 1) % 3];
    let before = follower.node.status().revision;

    // A newer term and an empty snapshot: installed, it would wipe the follower.
    let log_id = openraft::LogId::new(openraft::CommittedLeaderId::new(99, leader_id), 1);
    let chunk = openraft::raft::InstallSnapshotRequest::<muster_consensus::TypeConfig> {
        vote: openraft::Vote::new_committed(99, leader_id),
        meta: openraft::SnapshotMeta {
            last_log_id: Some(log_id),
            last_membership: openraft::StoredMembership::default(),
            snapshot_id: "99-1".into(),
        },
        offset: 0,
        data: b"{\"state\":{}}".to_vec(),
        done: true,
    };
    let frame = muster_consensus::snapshot_frame::encode(&chunk);
    let cut = frame[..frame.len() - 3].to_vec();
    let json = serde_json::to_vec(&chunk).unwrap();
    let client =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http::<Full<Bytes>>();
    for (body, reason) in [(cut, "truncated snapshot chunk"), (json, "not a snapshot chunk frame")] {
        let request = Request::post(format!("http://{}/raft/snapshot", follower.addr))
            .header(SECRET_HEADER, SECRET)
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let response = client.request(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        let message = response.into_body().collect().await.unwrap().to_bytes();
        let message = String::from_utf8_lossy(&message);
        assert!(message.contains(reason), "{message}");
    }
    assert_eq!(follower.node.status().revision, before);
    assert_eq!(endpoints(&follower.node), 3);
    assert_eq!(follower.node.status().leader, Some(leader_id));
    for member in members {
        member.stop().await;
    }
}

/// How late a slow follower learns of each append: well past the few ms a read takes to ask
/// the leader, and inside the 100 ms the leader waits for an append's reply (openraft times
/// an append out after one heartbeat interval; a reply later than that is lost, and the
/// follower would never catch up).
const SLOW_APPENDS_MS: u64 = 50;

/// SPEC R3, linearizable reads on a follower. Trace defended against: a write is
/// acknowledged (committed by the leader and the other follower), the follower asked next
/// learns of it only with a later append, and serves its state from before the write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consistent_read_on_a_lagging_follower_waits_for_the_leaders_read_index() {
    let dir = tempfile::tempdir().unwrap();
    let members = cluster(dir.path()).await;
    let leader = leader(&members).await;
    let slow = &members[(leader + 1) % 3];
    slow.append_delay.store(SLOW_APPENDS_MS, Ordering::Relaxed);
    for n in 0..5 {
        let (command, meta) = register(n);
        members[leader].node.propose(command, meta).await.unwrap().unwrap();
        let written = members[leader].node.status().applied_index;
        let index = tokio::time::timeout(STEP, slow.node.linearizable())
            .await
            .expect("bounded")
            .expect("the follower confirms a consistent read");
        assert!(
            index >= written,
            "round {n}: read index {index} before the write at {written}"
        );
        assert!(slow.node.status().applied_index >= index);
        assert_eq!(endpoints(&slow.node), n as usize + 1, "round {n}: the write is visible");
    }
    for member in members {
        member.stop().await;
    }
}

/// A follower that cannot catch up (its appends held) or loses the leader refuses the read
/// with a typed error in bounded time, and nothing it holds is vouched for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_that_cannot_catch_up_refuses_a_consistent_read_in_bounded_time() {
    let dir = tempfile::tempdir().unwrap();
    let mut members = cluster(dir.path()).await;
    let leader = leader(&members).await;
    let cut = (leader + 1) % 3;
    // An hour: it never sees another append in this test.
    members[cut].append_delay.store(3_600_000, Ordering::Relaxed);
    let (command, meta) = register(1);
    members[leader].node.propose(command, meta).await.unwrap().unwrap();
    let refused = tokio::time::timeout(STEP, members[cut].node.linearizable())
        .await
        .expect("bounded");
    assert!(
        matches!(
            refused,
            Err(ReadIndexError::Behind { .. } | ReadIndexError::NoLeader | ReadIndexError::NoQuorum { .. })
        ),
        "{refused:?}"
    );
    assert_eq!(endpoints(&members[cut].node), 0, "it never had the write");

    // With the others gone it knows the leader it cannot reach, or none.
    let alone = members.remove(cut);
    for member in members {
        member.stop().await;
    }
    let refused = tokio::time::timeout(STEP, alone.node.linearizable())
        .await
        .expect("bounded");
    assert!(
        matches!(
            refused,
            Err(ReadIndexError::LeaderUnreachable { .. } | ReadIndexError::NoLeader)
        ),
        "{refused:?}"
    );
    alone.stop().await;
}

/// Counts resets: a node that installs a snapshot from the leader resets its state.
#[derive(Default)]
struct Resets(std::sync::atomic::AtomicUsize);

impl ApplyObserver for Resets {
    fn applied(&self, _registry: &Registry, _applied: &Applied) {}
    fn reset(&self, _registry: &Registry) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarted_after_missing_many_writes_catches_up_from_a_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let mut listeners = Vec::new();
    let mut members = BTreeMap::new();
    for id in 1..=3_u64 {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        members.insert(id, listener.local_addr().unwrap().to_string());
        listeners.push(listener);
    }
    let open = |id: u64, observer: Arc<dyn ApplyObserver>| {
        let config = NodeConfig {
            cluster: Some(ClusterConfig {
                node_id: id,
                members: members.clone(),
                secret: SECRET.into(),
                tls: None,
            }),
            // Snapshot often and keep no log behind it: a lagging node needs the snapshot.
            snapshot_every: 10,
            keep_after_snapshot: 0,
            ..NodeConfig::new(dir.path().join(format!("node-{id}")))
        };
        async move { Node::open(config, observer).await.expect("the node opens") }
    };
    let mut nodes = Vec::new();
    let mut servers = Vec::new();
    for (id, listener) in (1..=3_u64).zip(listeners) {
        let node = open(id, Arc::new(Quiet)).await;
        servers.push(serve(listener, node.clone(), Arc::default()));
        nodes.push(node);
    }
    let members_now: Vec<Member> = nodes
        .iter()
        .zip(servers)
        .map(|(node, server)| Member {
            node: node.clone(),
            server,
            addr: "127.0.0.1:0".parse().unwrap(),
            append_delay: Arc::default(),
        })
        .collect();
    let leader = leader(&members_now).await;
    let lagging = (leader + 1) % 3;
    let lagging_addr = members[&(lagging as u64 + 1)].clone();
    let mut members_now = members_now;
    members_now.remove(lagging).stop().await;
    let writer = members_now.iter().position(|m| m.node.is_leader()).unwrap();
    for n in 0..60 {
        let (command, meta) = register(n);
        members_now[writer].node.propose(command, meta).await.unwrap().unwrap();
    }
    members_now[writer].node.snapshot().await.unwrap();

    let resets = Arc::new(Resets::default());
    let node = open(lagging as u64 + 1, Arc::clone(&resets) as Arc<dyn ApplyObserver>).await;
    let listener = TcpListener::bind(&lagging_addr).await.unwrap();
    members_now.push(Member {
        server: serve(listener, node.clone(), Arc::default()),
        node,
        addr: lagging_addr.parse().unwrap(),
        append_delay: Arc::default(),
    });
    converged(&members_now, 60).await;
    assert!(
        resets.0.load(std::sync::atomic::Ordering::Relaxed) >= 2,
        "opened, then installed the leader's snapshot"
    );
    for member in members_now {
        member.stop().await;
    }
}
