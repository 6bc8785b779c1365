//! Three servers on loopback forming a static cluster (SPEC R): the status names the leader,
//! writes to any node commit through the leader, reads (consistent ones too, see
//! `cluster_reads`) and renewals work on every node, a leader change keeps renewed leases, a
//! minority refuses writes with `no_quorum`, and the cluster listener refuses requests
//! without the secret.

use std::collections::BTreeMap;
use std::time::Duration;

use hyper::{Method, StatusCode};
use muster_core::api::Frame;
use muster_core::{DeleteReason, Event, Incarnation, ServingState};
use muster_server::{ServerConfig, ServerError};
use muster_testkit::fixed_tcp_port as free_port;
use serde_json::json;
use tempfile::TempDir;

use crate::support::{TestServer, endpoint, instance_path, poll, test_config};

const SECRET: &str = "a-cluster-secret-of-some-length";

pub(crate) struct Cluster {
    nodes: Vec<Option<TestServer>>,
    peers: BTreeMap<u64, String>,
}

impl Cluster {
    pub(crate) async fn start() -> Cluster {
        Cluster::start_with(|_| {}).await
    }

    /// Three voters, each config also changed by `extra`.
    pub(crate) async fn start_with(extra: impl Fn(&mut ServerConfig) + Clone + Send + 'static) -> Cluster {
        let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let peers: BTreeMap<u64, String> = ports
            .iter()
            .enumerate()
            .map(|(i, port)| (i as u64 + 1, format!("127.0.0.1:{port}")))
            .collect();
        let mut nodes = Vec::new();
        for (i, port) in ports.iter().enumerate() {
            let peers = peers.clone();
            let port = *port;
            let extra = extra.clone();
            nodes.push(Some(
                TestServer::start_with(move |config| {
                    config.node_id = i as u64 + 1;
                    config.cluster_addr = Some(format!("127.0.0.1:{port}").parse().unwrap());
                    config.peers = peers;
                    config.cluster_secret = Some(SECRET.into());
                    extra(config);
                })
                .await,
            ));
        }
        Cluster { nodes, peers }
    }

    /// Starts node `id` to join: it knows the members and itself, and waits to be added.
    async fn start_joiner(&mut self, id: u64) -> String {
        let addr = format!("127.0.0.1:{}", free_port());
        let mut peers = self.peers.clone();
        peers.insert(id, addr.clone());
        let listen = addr.parse().unwrap();
        self.nodes.push(Some(
            TestServer::start_with(move |config| {
                config.node_id = id;
                config.cluster_addr = Some(listen);
                config.peers = peers;
                config.cluster_secret = Some(SECRET.into());
            })
            .await,
        ));
        addr
    }

    /// Three voters where every node dials every other through its own proxy link (node i
    /// sees node j at link `(i, j)`), so a test can cut any node off.
    pub(crate) async fn start_linked() -> (Cluster, Links) {
        let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let real: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let mut links = BTreeMap::new();
        for from in 0..3 {
            for (to, target) in real.iter().enumerate() {
                if from != to {
                    links.insert((from, to), Link::start(target.clone()).await);
                }
            }
        }
        let mut nodes = Vec::new();
        for i in 0..3 {
            let peers: BTreeMap<u64, String> = (0..3)
                .map(|j| {
                    let addr = if i == j {
                        real[j].clone()
                    } else {
                        links[&(i, j)].addr.clone()
                    };
                    (j as u64 + 1, addr)
                })
                .collect();
            let listen = real[i].parse().unwrap();
            nodes.push(Some(
                TestServer::start_with(move |config| {
                    config.node_id = i as u64 + 1;
                    config.cluster_addr = Some(listen);
                    config.peers = peers;
                    config.cluster_secret = Some(SECRET.into());
                })
                .await,
            ));
        }
        let cluster = Cluster {
            nodes,
            peers: BTreeMap::new(),
        };
        (cluster, Links(links))
    }

    pub(crate) fn node(&self, i: usize) -> &TestServer {
        self.nodes[i].as_ref().expect("running")
    }

    fn running(&self) -> impl Iterator<Item = (usize, &TestServer)> {
        self.nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| n.as_ref().map(|n| (i, n)))
    }

    /// The index of the leader every running node agrees on.
    pub(crate) async fn leader(&self) -> usize {
        let this = self;
        poll(Duration::from_millis(50), || async move {
            let mut named = Vec::new();
            for (_, node) in this.running() {
                named.push(node.get("/v1/status").await.body["leader"].as_u64());
            }
            let leader = (*named.first()?)? as usize - 1;
            (named.iter().all(|n| *n == Some(leader as u64 + 1)) && this.nodes[leader].is_some()).then_some(leader)
        })
        .await
        .expect("the running nodes agree on a running leader")
    }

    pub(crate) async fn stop(&mut self, i: usize) {
        let mut node = self.nodes[i].take().expect("running");
        node.stop().await;
    }
}

pub(crate) async fn total(node: &TestServer, service: &str) -> u64 {
    let reply = node.get(&format!("/v1/registry/acme/prod/{service}")).await;
    reply.body["total"].as_u64().unwrap_or(0)
}

pub(crate) async fn until_total(node: &TestServer, service: &str, want: u64) {
    let reached = poll(Duration::from_millis(25), || async move {
        (total(node, service).await == want).then_some(())
    })
    .await;
    assert!(
        reached.is_some(),
        "{service}: never {want} endpoints, still {}",
        total(node, service).await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_to_any_node_commits_through_the_leader_and_every_node_serves_it() {
    let mut cluster = Cluster::start().await;
    let leader = cluster.leader().await;
    let status = cluster.node(leader).get("/v1/status").await.expect(StatusCode::OK);
    assert_eq!(status.body["node_id"].as_u64(), Some(leader as u64 + 1));
    for i in 0..3 {
        cluster
            .node(i)
            .register("api", &format!("a-{i}"), "10.0.0.1")
            .await
            .expect(StatusCode::OK);
        // Acknowledged after commit and applied on the node that answered: read your write.
        assert_eq!(total(cluster.node(i), "api").await, i as u64 + 1);
    }
    for i in 0..3 {
        until_total(cluster.node(i), "api", 3).await;
    }
    for i in 0..3 {
        cluster.stop(i).await;
    }
}

/// architecture.md "Formats and versions": the leader asks every member which format its
/// build applies (`POST /raft/format`) and, once all know this build's, raises the
/// registry's; every node then reports it in `/v1/status`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_raises_the_format_once_every_member_knows_it() {
    let mut cluster = Cluster::start().await;
    for i in 0..3 {
        let node = cluster.node(i);
        let raised = poll(Duration::from_millis(50), || async {
            let status = node.get("/v1/status").await.expect(StatusCode::OK);
            (status.body["format"]["cluster"] == muster_core::FORMAT).then_some(())
        })
        .await;
        assert!(raised.is_some(), "node {i} never saw the format raised");
        let status = node.get("/v1/status").await.expect(StatusCode::OK);
        assert_eq!(status.body["format"]["node"], muster_core::FORMAT);
    }
    // The raise is on the audit trail, once.
    let audit = cluster.node(0).get("/v1/audit").await.expect(StatusCode::OK);
    let records = audit.body["records"].as_array().unwrap();
    let raises = records.iter().filter(|r| r["verb"] == "raise_format").count();
    assert_eq!(raises, 1, "{records:?}");
    for i in 0..3 {
        cluster.stop(i).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_renewed_through_a_follower_survives_a_leader_change() {
    let mut cluster = Cluster::start().await;
    let leader = cluster.leader().await;
    let follower = (leader + 1) % 3;
    let body = json!({"incarnation": 1, "endpoint": endpoint("10.0.0.1"), "lease": {"ttl_ms": 1500}});
    let reply = cluster
        .node(follower)
        .call(Method::PUT, &instance_path("kept", "k-0"), Some(body))
        .await
        .expect(StatusCode::OK);
    let lease = reply.body["lease"]["id"].as_u64().unwrap();
    let renew = format!("/v1/leases/acme/{lease}/renew");
    // Renew every 300 ms through the follower while the leader stops and another takes over;
    // 6 s in all, well past the new leader's first deadline (TTL + 1 s after it took over)
    // had the renewals not reached it.
    for round in 0..20 {
        if round == 3 {
            cluster.stop(leader).await;
        }
        let renewed = cluster.node(follower).call(Method::PUT, &renew, None).await;
        // During the election a renewal may find no leader (503 no_quorum): retried next round.
        assert!(
            renewed.status == StatusCode::OK || renewed.code() == "no_quorum",
            "{}",
            renewed.body
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let new_leader = cluster.leader().await;
    assert_ne!(new_leader, leader);
    assert_eq!(
        total(cluster.node(follower), "kept").await,
        1,
        "the renewed lease did not expire"
    );
    for i in 0..3 {
        if cluster.nodes[i].is_some() {
            cluster.stop(i).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_relays_the_leaders_refusal_with_its_own_code() {
    // Trace: a TTL report sent to a follower is handed to the leader's checker, which refuses
    // it (an older incarnation). The follower used to pass on only a few codes and answer
    // `unavailable` for the rest, which clients take as transient and retry forever.
    let cluster = Cluster::start().await;
    let leader = cluster.leader().await;
    let follower = (leader + 1) % 3;
    let mut spec = endpoint("10.0.0.1");
    spec["checks"] = json!([{"ttl_ms": 5000}]);
    cluster
        .node(leader)
        .call(
            Method::PUT,
            &instance_path("batch", "b-0"),
            Some(json!({"incarnation": 2, "endpoint": spec})),
        )
        .await
        .expect(StatusCode::OK);
    let check = format!("{}/check", instance_path("batch", "b-0"));
    let (this, check) = (&cluster, &check);
    let refused = poll(Duration::from_millis(50), || async move {
        let reply = this
            .node(follower)
            .call(Method::PUT, check, Some(json!({"incarnation": 1, "status": "pass"})))
            .await;
        // Until the follower has applied the registration, it may not know a leader's answer.
        (reply.code() != "no_quorum").then_some(reply)
    })
    .await
    .expect("the follower answers");
    assert_eq!(
        (refused.status, refused.code()),
        (StatusCode::CONFLICT, "stale_incarnation"),
        "{}",
        refused.body
    );
    let mut cluster = cluster;
    for i in 0..3 {
        cluster.stop(i).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minority_refuses_writes_with_no_quorum_and_still_serves_reads() {
    let mut cluster = Cluster::start().await;
    cluster.leader().await;
    cluster
        .node(0)
        .register("api", "a-0", "10.0.0.1")
        .await
        .expect(StatusCode::OK);
    until_total(cluster.node(2), "api", 1).await;
    cluster.stop(0).await;
    cluster.stop(1).await;
    let refused = cluster.node(2).register("api", "a-1", "10.0.0.2").await;
    assert_eq!(
        (refused.status, refused.code()),
        (StatusCode::SERVICE_UNAVAILABLE, "no_quorum")
    );
    let stale = cluster
        .node(2)
        .get("/v1/registry/acme/prod/api?consistency=stale")
        .await
        .expect(StatusCode::OK);
    assert_eq!(
        stale.body["total"], 1,
        "a stale read is still served, nothing half-applied"
    );
    cluster.stop(2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_listener_refuses_requests_without_the_secret() {
    let mut cluster = Cluster::start().await;
    cluster.leader().await;
    let ports: Vec<String> = (0..3).map(|i| cluster.node(i).cluster_url()).collect();
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    // A read index too: it would tell an outsider the log's position and cost a quorum round.
    for (secret, rpc) in [
        ("", "vote"),
        ("wrong", "vote"),
        ("", "read_index"),
        ("wrong", "read_index"),
    ] {
        let request = hyper::Request::post(format!("{}/raft/{rpc}", ports[0]))
            .header("x-muster-cluster-secret", secret)
            .body(http_body_util::Full::new(bytes::Bytes::from_static(b"{}")))
            .unwrap();
        let response = client.request(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{rpc} with {secret:?}");
    }
    for i in 0..3 {
        cluster.stop(i).await;
    }
}

#[tokio::test]
async fn bad_cluster_settings_are_refused_naming_the_setting() {
    let dir = TempDir::new().unwrap();
    let peers: BTreeMap<u64, String> = (1..=3).map(|i| (i, format!("127.0.0.1:{}", 7100 + i))).collect();
    type Spoil = fn(&mut ServerConfig);
    let cases: [(Spoil, &str); 5] = [
        (|c| c.cluster_secret = None, "cluster_secret"),
        (|c| c.cluster_secret = Some("short".into()), "cluster_secret"),
        (|c| c.cluster_addr = None, "cluster_addr"),
        (|c| c.node_id = 9, "node_id"),
        (|c| c.cluster_addr = Some("127.0.0.1:7999".parse().unwrap()), "peers"),
    ];
    for (spoil, setting) in cases {
        let mut config = test_config(&dir);
        config.node_id = 1;
        config.peers = peers.clone();
        config.cluster_addr = Some("127.0.0.1:7101".parse().unwrap());
        config.cluster_secret = Some(SECRET.into());
        spoil(&mut config);
        let Err(ServerError::Config(message)) = muster_server::start(config).await else {
            panic!("{setting}: must be refused");
        };
        assert!(message.starts_with(setting), "{message}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_say_how_fresh_they_are_and_consistent_reads_are_served_by_every_node() {
    let mut cluster = Cluster::start().await;
    let leader = cluster.leader().await;
    let follower = (leader + 1) % 3;
    cluster
        .node(leader)
        .register("api", "a-0", "10.0.0.1")
        .await
        .expect(StatusCode::OK);
    until_total(cluster.node(follower), "api", 1).await;

    // SPEC R3: a follower serves a consistent read too (it takes the leader's read index).
    for node in [leader, follower] {
        let consistent = cluster
            .node(node)
            .get("/v1/registry/acme/prod/api?consistency=consistent")
            .await
            .expect(StatusCode::OK);
        assert_eq!(consistent.body["total"], 1, "node {}", node + 1);
        assert!(consistent.headers.contains_key("x-muster-index"));
        assert!(consistent.headers.contains_key("x-muster-last-contact"));
    }
    let bad = cluster
        .node(follower)
        .get("/v1/registry/acme/prod/api?consistency=eventual")
        .await;
    assert_eq!((bad.status, bad.code()), (StatusCode::BAD_REQUEST, "bad_request"));

    let fresh = cluster
        .node(follower)
        .get("/v1/registry/acme/prod/api")
        .await
        .expect(StatusCode::OK);
    let age: u64 = fresh.headers["x-muster-last-contact"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(age < 5_000, "a follower in touch with its leader: {age} ms");
    let status = cluster.node(follower).get("/v1/status").await.expect(StatusCode::OK);
    assert!(status.body["last_leader_contact_ms"].as_u64().is_some());

    // Cut the follower off: stale reads go on (saying how stale), default reads refuse
    // once the silence passes 5 s.
    let others: Vec<usize> = (0..3).filter(|i| *i != follower).collect();
    for i in others {
        cluster.stop(i).await;
    }
    let cut_off = cluster.node(follower);
    let refused_default = poll(Duration::from_millis(100), || async move {
        let read = cut_off.get("/v1/registry/acme/prod/api").await;
        (read.status != StatusCode::OK).then_some(read)
    })
    .await;
    let refused_default = refused_default.expect("default reads refuse after 5 s without a leader");
    assert_eq!(refused_default.code(), "stale");
    let stale = cluster
        .node(follower)
        .get("/v1/registry/acme/prod/api?consistency=stale")
        .await
        .expect(StatusCode::OK);
    assert_eq!(stale.body["total"], 1);
    let age: u64 = stale.headers["x-muster-last-contact"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(age >= 5_000, "{age}");
    cluster.stop(follower).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_is_added_as_learner_then_voter_and_removed_again() {
    let mut cluster = Cluster::start().await;
    let leader = cluster.leader().await;
    let follower = (leader + 1) % 3;
    cluster
        .node(leader)
        .register("api", "a-0", "10.0.0.1")
        .await
        .expect(StatusCode::OK);
    let addr = cluster.start_joiner(4).await;
    let refused = cluster
        .node(follower)
        .call(
            Method::POST,
            "/v1/cluster/members",
            Some(json!({"id": 4, "addr": addr})),
        )
        .await;
    assert_eq!(
        (refused.status, refused.code()),
        (StatusCode::SERVICE_UNAVAILABLE, "not_leader")
    );
    let bad = cluster
        .node(leader)
        .call(
            Method::POST,
            "/v1/cluster/members",
            Some(json!({"id": 4, "addr": "nowhere"})),
        )
        .await;
    assert_eq!((bad.status, bad.code()), (StatusCode::BAD_REQUEST, "bad_request"));

    let added = cluster
        .node(leader)
        .call(
            Method::POST,
            "/v1/cluster/members",
            Some(json!({"id": 4, "addr": addr})),
        )
        .await
        .expect(StatusCode::OK);
    let members = added.body["members"].as_array().unwrap();
    assert_eq!(members.len(), 4);
    assert!(members.iter().all(|m| m["voter"] == true), "{}", added.body);
    // The new voter caught up from the log (or a snapshot) and serves the data.
    until_total(cluster.node(3), "api", 1).await;
    let seen = cluster.node(3).get("/v1/cluster").await.expect(StatusCode::OK);
    assert_eq!(seen.body["leader"].as_u64(), Some(leader as u64 + 1));

    let removed = cluster
        .node(leader)
        .call(Method::DELETE, "/v1/cluster/members/4", None)
        .await
        .expect(StatusCode::OK);
    assert_eq!(removed.body["members"].as_array().unwrap().len(), 3);
    for i in 0..4 {
        cluster.stop(i).await;
    }
}

/// Revisions are the same on every node (one log, applied deterministically), so a watcher
/// cut off from one node resumes on another from the revision it had.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_resumes_on_another_node_from_the_same_revision() {
    let mut cluster = Cluster::start().await;
    let leader = cluster.leader().await;
    let (a, b) = ((leader + 1) % 3, (leader + 2) % 3);
    let first = cluster
        .node(leader)
        .register("api", "a-0", "10.0.0.1")
        .await
        .expect(StatusCode::OK)
        .revision();
    for n in 1..4 {
        cluster
            .node(leader)
            .register("api", &format!("a-{n}"), "10.0.0.1")
            .await
            .expect(StatusCode::OK);
    }
    until_total(cluster.node(a), "api", 4).await;
    until_total(cluster.node(b), "api", 4).await;
    let mut updates = Vec::new();
    for node in [a, b] {
        let mut watch = cluster
            .node(node)
            .watch(&format!("/v1/watch/acme/prod/api?from_revision={first}"))
            .await;
        let mut seen = Vec::new();
        for _ in 0..3 {
            match watch.next_event().await {
                Some(muster_core::api::Frame::Update(update)) => seen.push(update),
                other => panic!("expected an update, got {other:?}"),
            }
        }
        updates.push(seen);
    }
    assert_eq!(
        updates[0], updates[1],
        "the same history, revisions and digests on both nodes"
    );
    assert_eq!(updates[0][0].prev_revision.0, first);
    for i in 0..3 {
        cluster.stop(i).await;
    }
}

/// A TCP proxy on one directed link between two nodes, which the test can cut: a cut closes
/// the link's open connections and refuses new ones, as a partition would.
/// Every link of a [`Cluster::start_linked`] cluster, by `(from, to)` node index.
pub(crate) struct Links(BTreeMap<(usize, usize), Link>);

impl Links {
    /// Cuts (or heals) every link to and from node `i`.
    pub(crate) fn isolate(&self, i: usize, cut: bool) {
        for ((from, to), link) in &self.0 {
            if *from == i || *to == i {
                link.set_cut(cut);
            }
        }
    }

    /// Heals every link.
    pub(crate) fn heal(&self) {
        for link in self.0.values() {
            link.set_cut(false);
        }
    }
}

pub(crate) struct Link {
    pub(crate) addr: String,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
    connections: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl Link {
    pub(crate) async fn start(target: String) -> Link {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let cut = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let connections = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (c, conns) = (std::sync::Arc::clone(&cut), std::sync::Arc::clone(&connections));
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if c.load(std::sync::atomic::Ordering::SeqCst) {
                    continue;
                }
                let target = target.clone();
                let task = tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                conns.lock().unwrap().push(task.abort_handle());
            }
        });
        Link { addr, cut, connections }
    }

    pub(crate) fn set_cut(&self, cut: bool) {
        self.cut.store(cut, std::sync::atomic::Ordering::SeqCst);
        if cut {
            for connection in self.connections.lock().unwrap().drain(..) {
                connection.abort();
            }
        }
    }
}

/// reference/registry-walkthrough.txt 5.2 (partitions): the leader is cut off from both
/// followers. Its side is a minority: writes there fail with `no_quorum`, reads are served
/// stale with their age; the majority elects a leader and goes on; after healing the old
/// leader follows and catches up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_leader_is_a_minority_and_catches_up_after_healing() {
    let (mut cluster, links) = Cluster::start_linked().await;
    let old = cluster.leader().await;
    cluster
        .node(old)
        .register("api", "a-0", "10.0.0.1")
        .await
        .expect(StatusCode::OK);
    let grant = cluster
        .node(old)
        .call(Method::POST, "/v1/leases/acme", Some(json!({"ttl_ms": 60000})))
        .await
        .expect(StatusCode::OK);
    let lease = grant.body["lease"]["id"].as_u64().unwrap();
    cluster
        .node(old)
        .call(Method::PUT, &format!("/v1/leases/acme/{lease}/renew"), None)
        .await
        .expect(StatusCode::OK);
    for i in 0..3 {
        until_total(cluster.node(i), "api", 1).await;
    }

    links.isolate(old, true);
    // The majority elects another leader and takes writes.
    let majority: Vec<usize> = (0..3).filter(|i| *i != old).collect();
    let asked = cluster.node(majority[0]);
    let new_leader = poll(Duration::from_millis(50), || async move {
        let leader = asked.get("/v1/status").await.body["leader"].as_u64()? as usize - 1;
        (leader != old).then_some(leader)
    })
    .await;
    let new_leader = new_leader.expect("the majority elects a new leader");
    cluster
        .node(new_leader)
        .register("api", "a-1", "10.0.0.2")
        .await
        .expect(StatusCode::OK);

    // The minority: writes fail with no_quorum (bounded), renewals too (a minority never
    // extends a lease), stale reads are served with an age.
    // (Within a second of its last quorum contact it may still extend: the new leader's
    // takeover grace covers that; after it, never.)
    let renew = format!("/v1/leases/acme/{lease}/renew");
    let (minority, renew) = (cluster.node(old), &renew);
    let not_extended = poll(Duration::from_millis(100), || async move {
        let reply = minority.call(Method::PUT, renew, None).await;
        (reply.status != StatusCode::OK).then_some(reply)
    })
    .await;
    let not_extended = not_extended.expect("the minority stops extending leases");
    assert_eq!(
        (not_extended.status, not_extended.code()),
        (StatusCode::SERVICE_UNAVAILABLE, "no_quorum")
    );
    let refused = cluster.node(old).register("api", "a-2", "10.0.0.3").await;
    assert_eq!(
        (refused.status, refused.code()),
        (StatusCode::SERVICE_UNAVAILABLE, "no_quorum")
    );
    let stale = cluster
        .node(old)
        .get("/v1/registry/acme/prod/api?consistency=stale")
        .await
        .expect(StatusCode::OK);
    assert_eq!(stale.body["total"], 1, "the minority has not seen the majority's write");
    let age: u64 = stale.headers["x-muster-last-contact"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(age >= 1_000, "its last quorum contact is old: {age} ms");

    links.heal();
    // Healed: the old leader follows the new one and catches up; its refused write never
    // appears (nothing half-applied).
    until_total(cluster.node(old), "api", 2).await;
    let status = cluster.node(old).get("/v1/status").await.expect(StatusCode::OK);
    assert_eq!(status.body["leader"].as_u64(), Some(new_leader as u64 + 1));
    for i in 0..3 {
        let names: Vec<String> = cluster
            .node(i)
            .get("/v1/registry/acme/prod/api?consistency=stale")
            .await
            .body["endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["instance"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(names, ["a-0", "a-1"], "node {}", i + 1);
    }
    for i in 0..3 {
        cluster.stop(i).await;
    }
}

/// The checker runs on the leader only; when the leader goes, the new one takes the checks
/// over from the registry and acts on them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_new_leader_takes_over_the_health_checks() {
    use crate::health::{HttpTarget, UNAVAILABLE, fast_check, loopback_endpoint};
    let mut cluster = Cluster::start().await;
    let leader = cluster.leader().await;
    let target = HttpTarget::start().await;
    let mut spec = loopback_endpoint();
    spec["checks"] = json!([fast_check(&target.url())]);
    // Six: a service of fewer than `brake_min_endpoints` (5) has no brake to take over.
    let instances = ["w-0", "w-1", "w-2", "w-3", "w-4", "w-5"];
    for instance in instances {
        cluster
            .node(leader)
            .call(
                Method::PUT,
                &instance_path("web", instance),
                Some(json!({"incarnation": 1, "endpoint": spec})),
            )
            .await
            .expect(StatusCode::OK);
    }
    let follower = (leader + 1) % 3;
    let watcher = cluster.node(follower);
    poll(Duration::from_millis(50), || async move {
        // Every one ready: a check that fails before it ever passed goes `not_serving`
        // without the brake (SPEC H2), so only endpoints once ready test the brake.
        let reply = watcher.get("/v1/registry/acme/prod/web").await.body;
        let endpoints = reply["endpoints"].as_array().cloned().unwrap_or_default();
        (endpoints.len() == instances.len() && endpoints.iter().all(|e| e["serving"] == "ready")).then_some(())
    })
    .await
    .expect("the checks passed once");
    cluster.stop(leader).await;
    let new_leader = cluster.leader().await;
    target.set(UNAVAILABLE);
    // All six fail (503: an answering failure, no direct evidence); self-preservation lets
    // one of them leave (30% of 6).
    let not_serving = |reply: &serde_json::Value| {
        reply["endpoints"]
            .as_array()
            .map_or(0, |e| e.iter().filter(|e| e["serving"] == "not_serving").count())
    };
    let taker = cluster.node(new_leader);
    let last = poll(Duration::from_millis(50), || async move {
        let reply = taker.get("/v1/registry/acme/prod/web?consistency=stale").await.body;
        Some(not_serving(&reply)).filter(|n| *n > 0)
    })
    .await;
    assert_eq!(
        last,
        Some(1),
        "the new leader's checker acted (and its brake held the rest)"
    );
    for i in 0..3 {
        if cluster.nodes[i].is_some() {
            cluster.stop(i).await;
        }
    }
}

fn drain_path(service: &str, instance: &str) -> String {
    format!("{}/drain", instance_path(service, instance))
}

/// SPEC L5, L6: the grace of a drain taken by a follower used to live in that follower's
/// memory, where no leader ever ended it. The deadline is committed with the drain now: the
/// endpoint is `draining` through the grace (a read on the follower while it runs, and the
/// follower's watch: the draining record comes before the removal) and is deregistered after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_with_a_grace_sent_to_a_follower_drains_through_the_grace_then_deregisters() {
    let mut cluster = Cluster::start().await;
    let leader = cluster.leader().await;
    let follower = (leader + 1) % 3;
    let node = cluster.node(follower);
    let registered = node.register("api", "a", "10.0.0.1").await.expect(StatusCode::OK);
    let mut watch = node
        .watch(&format!(
            "/v1/watch/acme/prod/api?from_revision={}",
            registered.revision()
        ))
        .await;
    // Two seconds: long beside one local read right after the acknowledgement, so that read
    // lands inside the grace; the watch below proves the order whatever the timing.
    node.call(
        Method::POST,
        &drain_path("api", "a"),
        Some(json!({"incarnation": 1, "grace_ms": 2_000})),
    )
    .await
    .expect(StatusCode::OK);
    // Acknowledged after commit on the node that answered: read there, during the grace.
    let during = node.get("/v1/registry/acme/prod/api").await.expect(StatusCode::OK);
    assert_eq!(
        during.body["total"], 1,
        "still registered during the grace: {}",
        during.body
    );
    assert_eq!(during.body["endpoints"][0]["serving"], "draining");

    // The follower's watch: the drain's record (draining), then the removal, nothing between.
    let Some(Frame::Update(drained)) = watch.next_event().await else {
        panic!("the drain's update first");
    };
    assert!(
        matches!(&drained.events[..], [Event::Put { endpoint }]
            if endpoint.instance.as_str() == "a" && endpoint.serving == ServingState::Draining),
        "{drained:?}"
    );
    let Some(Frame::Update(removed)) = watch.next_event().await else {
        panic!("the removal after the grace");
    };
    assert!(removed.revision > drained.revision);
    assert!(
        matches!(&removed.events[..], [Event::Delete { instance, incarnation, reason: DeleteReason::Deregistered }]
            if instance.as_str() == "a" && *incarnation == Incarnation(1)),
        "{removed:?}"
    );
    until_total(cluster.node(leader), "api", 0).await;
    until_total(cluster.node(follower), "api", 0).await;
    for i in 0..3 {
        cluster.stop(i).await;
    }
}

/// SPEC L6: a leader change used to forget every pending grace; the new leader ends the drain
/// at the deadline the log holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_survives_a_leader_change_and_ends_after_its_grace() {
    let mut cluster = Cluster::start().await;
    let leader = cluster.leader().await;
    let node = cluster.node(leader);
    node.register("api", "a", "10.0.0.1").await.expect(StatusCode::OK);
    // Long enough that the old leader stops and another is elected before it ends.
    node.call(
        Method::POST,
        &drain_path("api", "a"),
        Some(json!({"incarnation": 1, "grace_ms": 4_000})),
    )
    .await
    .expect(StatusCode::OK);
    let survivor = (leader + 1) % 3;
    until_total(cluster.node(survivor), "api", 1).await;
    cluster.stop(leader).await;
    let new_leader = cluster.leader().await;
    assert_ne!(new_leader, leader);
    assert_eq!(
        total(cluster.node(new_leader), "api").await,
        1,
        "still draining when the new leader takes over"
    );
    until_total(cluster.node(new_leader), "api", 0).await;
    for i in 0..3 {
        if cluster.nodes[i].is_some() {
            cluster.stop(i).await;
        }
    }
}

/// Every leader-only request goes through the one forwarder: an in-flight report of 0 sent
/// to a follower ends the drain on the leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_in_flight_reported_to_a_follower_ends_the_drain_at_once() {
    let mut cluster = Cluster::start().await;
    let leader = cluster.leader().await;
    let follower = (leader + 2) % 3;
    let node = cluster.node(follower);
    node.register("api", "a", "10.0.0.1").await.expect(StatusCode::OK);
    node.call(
        Method::POST,
        &drain_path("api", "a"),
        Some(json!({"incarnation": 1, "grace_ms": 3_600_000})),
    )
    .await
    .expect(StatusCode::OK);
    let in_flight = format!("{}/in-flight", instance_path("api", "a"));
    let busy = node
        .call(Method::PUT, &in_flight, Some(json!({"incarnation": 1, "in_flight": 2})))
        .await
        .expect(StatusCode::OK);
    assert_eq!(busy.body["unchanged"], "no_drain_ended");
    let done = node
        .call(Method::PUT, &in_flight, Some(json!({"incarnation": 1, "in_flight": 0})))
        .await
        .expect(StatusCode::OK);
    assert!(done.body.get("unchanged").is_none(), "{}", done.body);
    // Acknowledged after commit; the follower that answered has applied it, or will shortly.
    until_total(node, "api", 0).await;
    for i in 0..3 {
        cluster.stop(i).await;
    }
}

/// Tokens are replicated state (SPEC S1): a token made through one node is honoured by
/// every node, and once its revocation commits every node refuses it.
#[tokio::test]
async fn a_token_made_on_one_node_is_honoured_and_its_revocation_refused_on_every_node() {
    let cluster = Cluster::start_with(|config| config.auth.enabled = true).await;
    let leader = cluster.leader().await;
    let follower = (leader + 1) % 3;
    let bootstrap = cluster
        .node(follower)
        .call(Method::POST, "/v1/acl/bootstrap", None)
        .await
        .expect(StatusCode::CREATED);
    let operator = format!("Bearer {}", bootstrap.body["secret"].as_str().unwrap());
    let created = cluster
        .node(leader)
        .send(
            Method::POST,
            "/v1/acl/tokens",
            Some(serde_json::to_vec(&json!({"tenant": "acme", "allow": ["prod/*=read"]})).unwrap()),
            &[("authorization", operator.as_str())],
        )
        .await
        .expect(StatusCode::CREATED);
    let accessor = created.body["accessor"].as_str().unwrap().to_owned();
    let reader = format!("Bearer {}", created.body["secret"].as_str().unwrap());
    let read_code = |i: usize| {
        let reader = reader.clone();
        let node = cluster.node(i);
        async move {
            node.send(
                Method::GET,
                "/v1/registry/acme/prod/api",
                None,
                &[("authorization", reader.as_str())],
            )
            .await
            .code()
            .to_owned()
        }
    };
    for i in 0..3 {
        let code = poll(Duration::from_millis(50), || {
            let read = read_code(i);
            async move { (read.await == "not_found").then_some(()) }
        })
        .await;
        assert!(code.is_some(), "node {i} honours the token");
    }
    cluster
        .node(follower)
        .send(
            Method::DELETE,
            &format!("/v1/acl/tokens/{accessor}"),
            None,
            &[("authorization", operator.as_str())],
        )
        .await
        .expect(StatusCode::OK);
    for i in 0..3 {
        let refused = poll(Duration::from_millis(50), || {
            let read = read_code(i);
            async move { (read.await == "unauthenticated").then_some(()) }
        })
        .await;
        assert!(refused.is_some(), "node {i} refuses the revoked token");
    }
    let again = cluster
        .node(leader)
        .call(Method::POST, "/v1/acl/bootstrap", None)
        .await
        .expect(StatusCode::CONFLICT);
    assert_eq!(again.code(), "already_bootstrapped", "bootstrap works once per cluster");
}
