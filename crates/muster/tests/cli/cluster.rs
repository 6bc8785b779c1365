//! A 3-node cluster of real `muster serve` processes on loopback (issue 7): SIGKILL the
//! leader during a stream of registrations — writes resume on the new leader and every
//! acknowledged write is on every node; the killed node comes back and catches up; all three
//! restart with their state intact.

use std::collections::BTreeSet;
use std::time::Duration;

use muster_core::api::{ClusterReply, SnapshotReply, StatusReply};

use crate::support::{Server, free_tcp_port};

const SECRET: &str = "cluster-test-secret-0123456789";
/// Bound on waits: polls of 100 ms.
const POLLS: usize = 200;

struct Member {
    server: Option<Server>,
    args: Vec<String>,
}

fn members() -> Vec<Member> {
    let ports: Vec<u16> = (0..3).map(|_| free_tcp_port()).collect();
    let peers = ports
        .iter()
        .enumerate()
        .map(|(i, port)| format!("{}=127.0.0.1:{port}", i + 1))
        .collect::<Vec<_>>()
        .join(",");
    let args: Vec<Vec<String>> = ports
        .iter()
        .enumerate()
        .map(|(i, port)| {
            [
                "--node-id",
                &(i + 1).to_string(),
                "--cluster-addr",
                &format!("127.0.0.1:{port}"),
                "--peers",
                &peers,
                "--cluster-secret",
                SECRET,
            ]
            .iter()
            .map(|s| s.to_string())
            .collect()
        })
        .collect();
    args.into_iter()
        .map(|args| Member {
            server: Some(Server::start_with(tempfile::tempdir().unwrap(), &args)),
            args,
        })
        .collect()
}

fn status(server: &Server) -> Option<StatusReply> {
    let output = server.run(&["status", "--json"]);
    output
        .status
        .success()
        .then(|| serde_json::from_slice(&output.stdout).ok())
        .flatten()
}

/// The index of the leader all running members name.
fn leader(members: &[Member]) -> usize {
    for _ in 0..POLLS {
        let named: Vec<Option<u64>> = members
            .iter()
            .filter_map(|m| m.server.as_ref())
            .map(|s| status(s).and_then(|s| s.leader))
            .collect();
        if let Some(Some(id)) = named.first()
            && named.iter().all(|n| *n == Some(*id))
            && members[*id as usize - 1].server.is_some()
        {
            return *id as usize - 1;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("no agreed leader");
}

fn register(server: &Server, n: usize) -> bool {
    server
        .run(&[
            "register",
            "prod/api",
            &format!("i-{n}"),
            "--addr",
            "10.0.0.1:80",
            "--incarnation",
            "1",
            "--ttl",
            "5m",
        ])
        .status
        .success()
}

fn instances(server: &Server) -> BTreeSet<String> {
    let output = server.run(&["resolve", "prod/api", "--all", "--json"]);
    if !output.status.success() {
        return BTreeSet::new();
    }
    let reply: SnapshotReply = serde_json::from_slice(&output.stdout).unwrap();
    reply.endpoints.iter().map(|e| e.instance.to_string()).collect()
}

fn until_holds(server: &Server, acknowledged: &BTreeSet<String>) {
    for _ in 0..POLLS {
        if instances(server).is_superset(acknowledged) {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!(
        "missing acknowledged writes: {:?}",
        acknowledged.difference(&instances(server)).collect::<Vec<_>>()
    );
}

#[test]
fn sigkill_of_the_leader_during_registrations_loses_no_acknowledged_write() {
    let mut members = members();
    let first = leader(&members);
    let writer = (first + 1) % 3;
    let mut acknowledged = BTreeSet::new();
    let mut dir = None;
    for n in 0..30 {
        if n == 10 {
            dir = Some(members[first].server.take().unwrap().kill9());
        }
        // During the election a write waits for the new leader (up to 5 s, then no_quorum);
        // a client retries. What was acknowledged must survive.
        if (0..3).any(|_| register(members[writer].server.as_ref().unwrap(), n)) {
            acknowledged.insert(format!("i-{n}"));
        }
    }
    assert_eq!(
        acknowledged.len(),
        30,
        "writes resumed on the new leader: {acknowledged:?}"
    );
    let next = leader(&members);
    assert_ne!(next, first);
    for member in members.iter().filter_map(|m| m.server.as_ref()) {
        until_holds(member, &acknowledged);
    }

    // The killed node restarts on its data and catches up.
    let args = members[first].args.clone();
    members[first].server = Some(Server::start_with(dir.take().unwrap(), &args));
    until_holds(members[first].server.as_ref().unwrap(), &acknowledged);

    // All three restart: state intact.
    let dirs: Vec<_> = members.iter_mut().map(|m| m.server.take().unwrap().kill9()).collect();
    for (member, dir) in members.iter_mut().zip(dirs) {
        member.server = Some(Server::start_with(dir, &member.args));
    }
    let leader = leader(&members);
    for member in members.iter().filter_map(|m| m.server.as_ref()) {
        until_holds(member, &acknowledged);
    }
    let status: ClusterReply = serde_json::from_str(
        &members[leader]
            .server
            .as_ref()
            .unwrap()
            .ok(&["cluster", "status", "--json"]),
    )
    .unwrap();
    assert_eq!(status.leader, Some(leader as u64 + 1));
    assert_eq!(status.members.iter().filter(|m| m.voter).count(), 3);
    let table = members[leader].server.as_ref().unwrap().ok(&["cluster", "status"]);
    assert!(table.starts_with("NODE ") && table.contains("voter"), "{table}");
}
