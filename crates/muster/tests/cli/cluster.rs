//! A 3-node cluster of real `muster serve` processes on loopback (SPEC R): SIGKILL the
//! leader during a stream of registrations — writes resume on the new leader and every
//! acknowledged write is on every node; the killed node comes back and catches up; all three
//! restart with their state intact.

use std::collections::BTreeSet;
use std::time::Duration;

use muster_core::api::{ClusterReply, SnapshotReply, StatusReply};

use crate::support::{Server, fixed_tcp_port};

const SECRET: &str = "cluster-test-secret-0123456789";

/// The cluster tests pick free ports before their servers bind them; run one at a time so
/// one's proxies (bound to port 0) cannot take the other's ports in between.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
/// Bound on waits: polls of 100 ms.
const POLLS: usize = 200;

struct Member {
    server: Option<Server>,
    args: Vec<String>,
}

fn members() -> Vec<Member> {
    members_started(Duration::ZERO)
}

/// The three members, each started `gap` after the one before (a cluster started node by
/// node: the first ones ask peers that are not up yet for votes).
fn members_started(gap: Duration) -> Vec<Member> {
    let ports: Vec<u16> = (0..3).map(|_| fixed_tcp_port()).collect();
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
        .map(|args| {
            let member = Member {
                server: Some(Server::start_with(tempfile::tempdir().unwrap(), &args)),
                args,
            };
            std::thread::sleep(gap);
            member
        })
        .collect()
}

/// SPEC O2 (quiet when healthy): a 3-node cluster started node by node elects a leader and
/// takes a write with nothing at WARN or above in any node's log. openraft's election and
/// unreachable-peer chatter (an ERROR per vote request to a peer not up yet) is held; a peer
/// not up yet is one INFO line.
#[test]
fn a_healthy_three_node_start_logs_nothing_at_warn_or_above() {
    let members = members_started(Duration::from_millis(1_500));
    let leader = leader(&members);
    assert!(register(members[leader].server.as_ref().unwrap(), 0));
    for (n, member) in members.iter().enumerate() {
        let log = member.server.as_ref().unwrap().log();
        let loud: Vec<&str> = log
            .lines()
            .filter(|line| line.contains(" WARN ") || line.contains(" ERROR "))
            .collect();
        assert!(
            loud.is_empty(),
            "node {} logged at WARN or above:\n{}",
            n + 1,
            loud.join("\n")
        );
    }
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
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
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

/// A TCP proxy on one directed link (std threads): a cut shuts its open connections and
/// refuses new ones, as a partition would.
struct Link {
    addr: String,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
    open: std::sync::Arc<std::sync::Mutex<Vec<std::net::TcpStream>>>,
}

impl Link {
    fn start(target: String) -> Link {
        use std::net::{TcpListener, TcpStream};
        use std::sync::atomic::Ordering;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let cut = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let open = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (c, o) = (std::sync::Arc::clone(&cut), std::sync::Arc::clone(&open));
        std::thread::spawn(move || {
            for inbound in listener.incoming() {
                let Ok(inbound) = inbound else { return };
                if c.load(Ordering::SeqCst) {
                    continue;
                }
                let Ok(outbound) = TcpStream::connect(&target) else {
                    continue;
                };
                let mut registry = o.lock().unwrap();
                registry.push(inbound.try_clone().unwrap());
                registry.push(outbound.try_clone().unwrap());
                drop(registry);
                for (mut from, mut to) in [
                    (inbound.try_clone().unwrap(), outbound.try_clone().unwrap()),
                    (outbound, inbound),
                ] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        Link { addr, cut, open }
    }

    fn set_cut(&self, cut: bool) {
        self.cut.store(cut, std::sync::atomic::Ordering::SeqCst);
        if cut {
            for stream in self.open.lock().unwrap().drain(..) {
                let _ = stream.shutdown(std::net::Shutdown::Both);
            }
        }
    }
}

/// A plain HTTP/1.1 GET (no client library): status and JSON body.
fn get(server: &Server, path: &str) -> (u16, serde_json::Value) {
    use std::io::{Read, Write};
    let addr = server.http_addr();
    let Ok(mut stream) = std::net::TcpStream::connect(addr) else {
        return (0, serde_json::Value::Null);
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    let _ = stream.write_all(request.as_bytes());
    let mut reply = String::new();
    let _ = stream.read_to_string(&mut reply);
    let status = reply.get(9..12).and_then(|code| code.parse().ok()).unwrap_or(0);
    let body = reply.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    (status, serde_json::from_str(body).unwrap_or_default())
}

/// A real partition of one node between real processes (each node dials the others through
/// its own proxy links): the cut-off leader refuses writes with no_quorum and serves stale
/// reads with their age; the majority goes on; after healing it catches up.
#[test]
fn a_real_partition_of_the_leader_between_processes() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let ports: Vec<u16> = (0..3).map(|_| fixed_tcp_port()).collect();
    let real: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let mut links = std::collections::BTreeMap::new();
    for from in 0..3 {
        for (to, target) in real.iter().enumerate() {
            if from != to {
                links.insert((from, to), Link::start(target.clone()));
            }
        }
    }
    let mut members: Vec<Member> = (0..3)
        .map(|i| {
            let peers = (0..3)
                .map(|j| {
                    let addr = if i == j {
                        real[j].clone()
                    } else {
                        links[&(i, j)].addr.clone()
                    };
                    format!("{}={addr}", j + 1)
                })
                .collect::<Vec<_>>()
                .join(",");
            let args: Vec<String> = [
                "--node-id",
                &(i + 1).to_string(),
                "--cluster-addr",
                &real[i],
                "--peers",
                &peers,
                "--cluster-secret",
                SECRET,
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            Member {
                server: Some(Server::start_with(tempfile::tempdir().unwrap(), &args)),
                args,
            }
        })
        .collect();
    let old = leader(&members);
    assert!(register(members[old].server.as_ref().unwrap(), 0));
    for ((from, to), link) in &links {
        if *from == old || *to == old {
            link.set_cut(true);
        }
    }
    let majority = (old + 1) % 3;
    let mut written = false;
    for n in 1..50 {
        if register(members[majority].server.as_ref().unwrap(), n) {
            written = true;
            break;
        }
    }
    assert!(written, "the majority elects a leader and takes writes");
    let cut_off = members[old].server.as_ref().unwrap();
    let refused = cut_off.run(&[
        "register",
        "prod/api",
        "x-0",
        "--addr",
        "10.0.0.9:80",
        "--incarnation",
        "1",
        "--ttl",
        "5m",
    ]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).starts_with("error: no_quorum: "));
    let (status, body) = get(cut_off, "/v1/registry/default/prod/api?consistency=stale");
    assert_eq!(status, 200);
    assert_eq!(body["total"], 1, "the minority still serves what it had: {body}");

    for link in links.values() {
        link.set_cut(false);
    }
    let expected: BTreeSet<String> = instances(members[majority].server.as_ref().unwrap());
    until_holds(members[old].server.as_ref().unwrap(), &expected);
    assert!(
        !instances(members[old].server.as_ref().unwrap()).contains("x-0"),
        "nothing half-applied"
    );
    for member in &mut members {
        member.server.take();
    }
}
