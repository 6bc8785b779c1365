//! Consistent reads on every node of a three-node cluster (SPEC R3): a follower takes the
//! leader's read index, waits until it has applied up to it, and serves from its own state;
//! cut off from the leader it refuses with a typed code instead of serving what it holds.

use hyper::StatusCode;

use crate::cluster::{Cluster, total, until_total};
use crate::support::{Reply, poll};

/// Writes acknowledged on the leader, each read back at once on a follower: enough rounds
/// that a follower serving its own state without the read index (it applies an entry only
/// after the leader's next append tells it the entry committed) is caught at least once.
const ROUNDS: u64 = 30;

fn index_of(reply: &Reply) -> u64 {
    reply.headers["x-muster-index"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap_or_else(|_| panic!("x-muster-index: {:?}", reply.headers["x-muster-index"]))
}

/// Linearizability: a consistent read that starts after a write was acknowledged reflects
/// it, on whichever node it is served. Trace defended against: the write commits on the
/// leader and a majority, the follower asked has not applied it yet, and answers from the
/// state before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consistent_read_on_a_follower_reflects_every_write_acknowledged_before_it() {
    let mut cluster = Cluster::start().await;
    let leader = cluster.leader().await;
    for round in 0..ROUNDS {
        let follower = (leader + 1 + round as usize % 2) % 3;
        let written = cluster
            .node(leader)
            .register("api", &format!("a-{round}"), "10.0.0.1")
            .await
            .expect(StatusCode::OK)
            .revision();
        let read = cluster
            .node(follower)
            .get("/v1/registry/acme/prod/api?consistency=consistent")
            .await
            .expect(StatusCode::OK);
        assert!(
            index_of(&read) >= written,
            "round {round}: node {} read at {} before the write at {written}",
            follower + 1,
            index_of(&read)
        );
        assert_eq!(read.body["total"], round + 1, "round {round}, node {}", follower + 1);
        let age: u64 = read.headers["x-muster-last-contact"].to_str().unwrap().parse().unwrap();
        assert!(age < 5_000, "a follower that just heard from its leader: {age} ms");
    }
    for i in 0..3 {
        cluster.stop(i).await;
    }
}

/// A follower cut off from the leader (and the rest) while the majority goes on writing:
/// its consistent read fails with a typed, transient code — never a 200 with the state it
/// held before the cut — and succeeds again, with the majority's write, once healed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_cut_off_from_the_leader_refuses_consistent_reads_rather_than_serve_stale_ones() {
    let (mut cluster, links) = Cluster::start_linked().await;
    let leader = cluster.leader().await;
    let follower = (leader + 1) % 3;
    cluster
        .node(leader)
        .register("api", "a-0", "10.0.0.1")
        .await
        .expect(StatusCode::OK);
    until_total(cluster.node(follower), "api", 1).await;

    links.isolate(follower, true);
    cluster
        .node(leader)
        .register("api", "a-1", "10.0.0.2")
        .await
        .expect(StatusCode::OK);
    let refused = cluster
        .node(follower)
        .get("/v1/registry/acme/prod/api?consistency=consistent")
        .await;
    // Right after the cut it still knows the leader and cannot reach it; once its election
    // timeout passes it knows none. Either way: a transient 503 that says which.
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE, "{}", refused.body);
    assert!(
        ["leader_unreachable", "no_quorum"].contains(&refused.code()),
        "{}",
        refused.body
    );
    assert!(
        !refused.message().contains("the write may still commit"),
        "a read's message, not a write's: {}",
        refused.message()
    );
    let stale = cluster
        .node(follower)
        .get("/v1/registry/acme/prod/api?consistency=stale")
        .await
        .expect(StatusCode::OK);
    assert_eq!(stale.body["total"], 1, "what the refused read would have served");

    links.heal();
    let cut_off = cluster.node(follower);
    let fresh = poll(std::time::Duration::from_millis(100), || async move {
        let read = cut_off.get("/v1/registry/acme/prod/api?consistency=consistent").await;
        (read.status == StatusCode::OK).then_some(read)
    })
    .await
    .expect("healed, the follower serves consistent reads again");
    assert_eq!(fresh.body["total"], 2, "with the majority's write");
    assert_eq!(total(cluster.node(follower), "api").await, 2);
    for i in 0..3 {
        cluster.stop(i).await;
    }
}
