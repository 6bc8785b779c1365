//! One `muster serve` of the scale workload's cluster: node 1, the one-member cluster that
//! is grown, or a node that joins it. Each has its own data dir and fixed loopback ports, so
//! it can be stopped and started again on the same state ([`Member::restart`]).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use hyper::Method;
use muster_core::api::{SnapshotReply, StatusReply};

use super::snapshot_index;
use crate::BenchError;
use crate::client::Http;
use crate::clock::now;
use crate::spawn::{Spawned, Stop, free_tcp_port, start};

/// The cluster's secret: any 16 bytes or more; the cluster lives on loopback for one run.
const SECRET: &str = "muster-bench-scale-cluster-secret";

/// What is read of a snapshot file to find the log index it covers: its metadata (a log id
/// and the membership, a few hundred bytes) comes first.
const SNAPSHOT_HEAD_BYTES: usize = 4_096;

/// How often a member is polled while the bench waits for it: fine enough to time a restart
/// to a few tens of milliseconds, rare enough not to load it.
const POLL: Duration = Duration::from_millis(20);

/// How a member is started, the same each time.
#[derive(Debug, Clone)]
struct Launch {
    bin: PathBuf,
    id: u64,
    http: SocketAddr,
    cluster_addr: SocketAddr,
    /// `--peers`: node 1 and, for a joiner, itself.
    peers: String,
}

impl Launch {
    /// `muster serve` with the data dir and config in `dir`.
    fn command(&self, dir: &Path) -> Command {
        let mut command = Command::new(&self.bin);
        command
            .arg("serve")
            .arg("--data-dir")
            .arg(dir.join("data"))
            .arg("--config")
            .arg(dir.join("scale.toml"))
            .arg("--http")
            .arg(self.http.to_string())
            .arg("--node-id")
            .arg(self.id.to_string())
            .arg("--cluster-addr")
            .arg(self.cluster_addr.to_string())
            .arg("--peers")
            .arg(&self.peers)
            .arg("--cluster-secret")
            .arg(SECRET);
        if std::env::var_os("RUST_LOG").is_none() {
            // Per-request logging would cost the server CPU the benchmark is measuring.
            command.env("RUST_LOG", "warn");
        }
        command
    }
}

/// A running member.
#[derive(Debug)]
pub(crate) struct Member {
    launch: Launch,
    process: Spawned,
}

/// What a member must serve to hold the whole fleet: the registry at `revision` or later, and
/// `service` with `total` endpoints at `service_revision`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FullSet {
    /// The registry's revision after the last write.
    pub(crate) revision: u64,
    /// The last service written (`/v1/registry/...` path).
    pub(crate) path: String,
    /// Its endpoints.
    pub(crate) total: usize,
    /// Its revision.
    pub(crate) service_revision: u64,
}

impl Member {
    /// Starts node `id` with `config` (the file's text): node 1 forms a cluster of one; any
    /// other id joins `leader`'s cluster and waits to be added. Returns at once.
    pub(crate) fn start(bin: &Path, id: u64, leader: Option<&Member>, config: &str) -> Result<Member, BenchError> {
        let fail = |detail: String| BenchError::Spawn { what: "muster", detail };
        let dir = tempfile::Builder::new()
            .prefix("muster-bench-scale-")
            .tempdir()
            .map_err(|err| fail(err.to_string()))?;
        std::fs::write(dir.path().join("scale.toml"), config).map_err(|err| fail(err.to_string()))?;
        let http = SocketAddr::from(([127, 0, 0, 1], free_tcp_port().map_err(fail)?));
        let cluster_addr = SocketAddr::from(([127, 0, 0, 1], free_tcp_port().map_err(fail)?));
        let peers = match leader {
            Some(leader) => format!("{}={},{id}={cluster_addr}", leader.id(), leader.cluster_addr()),
            None => format!("{id}={cluster_addr}"),
        };
        let launch = Launch {
            bin: bin.to_owned(),
            id,
            http,
            cluster_addr,
            peers,
        };
        let process = start("muster", launch.command(dir.path()), dir, format!("http://{http}"))?;
        Ok(Member { launch, process })
    }

    /// Its node id.
    pub(crate) fn id(&self) -> u64 {
        self.launch.id
    }

    /// Its node-to-node address (`--cluster-addr`).
    pub(crate) fn cluster_addr(&self) -> SocketAddr {
        self.launch.cluster_addr
    }

    /// Its HTTP base URL.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.launch.http)
    }

    /// Its PID now.
    pub(crate) fn pid(&self) -> u32 {
        self.process.pid
    }

    /// The size of its current snapshot file and the log index it covers, if it has one.
    pub(crate) fn snapshot(&self) -> Option<(u64, Option<u64>)> {
        use std::io::Read as _;
        let path = self.process.dir().join("data").join("snapshot.json");
        let mut file = std::fs::File::open(path).ok()?;
        let bytes = file.metadata().ok()?.len();
        // The metadata comes first and is a few hundred bytes; the registry follows.
        let mut head = vec![0; SNAPSHOT_HEAD_BYTES];
        let read = file.read(&mut head).ok()?;
        Some((bytes, snapshot_index(&String::from_utf8_lossy(&head[..read]))))
    }

    /// Stops it with `how` and starts it again on the same data dir and ports; returns how
    /// long the stop took. The new process is not waited for.
    pub(crate) async fn restart(&mut self, how: Stop) -> Result<Duration, BenchError> {
        let stopped = self
            .process
            .stop(how)
            .await
            .map_err(|detail| BenchError::Spawn { what: "muster", detail })?;
        let command = self.launch.command(self.process.dir());
        self.process.relaunch("muster", command)?;
        Ok(stopped)
    }

    /// Waits until `ready` holds for its `/v1/status` and, when given, it serves `full` (a
    /// read of the default consistency: this node heard from a leader lately); returns how
    /// long that took. An exit, `timeout` passing, or (with `stall`) its applied index not
    /// moving for that long, is an error with what it last said.
    pub(crate) async fn wait_until(
        &mut self,
        ready: impl Fn(&StatusReply) -> bool,
        full: Option<&FullSet>,
        timeout: Duration,
        stall: Option<Duration>,
    ) -> Result<Duration, String> {
        // A new client each time: the pool of an earlier process holds dead connections.
        let http = Http::new(&self.url(), 1);
        let start = now();
        let (mut applied, mut moved) = (None, start);
        loop {
            if let Some(exited) = self.process.exited() {
                return Err(exited);
            }
            let status = status(&http).await;
            if status.as_ref().is_some_and(&ready) && serves(&http, full).await {
                return Ok(now() - start);
            }
            let index = status.as_ref().map(|s| s.applied_index);
            if index != applied {
                (applied, moved) = (index, now());
            }
            let stalled = stall.filter(|stall| now() - moved > *stall);
            if now() - start > timeout || stalled.is_some() {
                let why = match stalled {
                    Some(stall) => format!("its applied index did not move for {stall:?}"),
                    None => format!("not there after {timeout:?}"),
                };
                let last = status.map_or_else(
                    || "no answer".to_owned(),
                    |s| {
                        format!(
                            "ready {}, leader {:?}, applied index {}, revision {}, last leader contact {:?} ms",
                            s.ready, s.leader, s.applied_index, s.revision.0, s.last_leader_contact_ms
                        )
                    },
                );
                return Err(format!(
                    "node {} at {}: {why} (last status: {last})",
                    self.id(),
                    self.url()
                ));
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

/// Its `/v1/status`, if it answers one.
pub(crate) async fn status(http: &Http) -> Option<StatusReply> {
    let body = http.send_ok(Method::GET, "/v1/status", None).await.ok()?;
    serde_json::from_slice(&body).ok()
}

/// Whether it serves `full` (always, when there is nothing to check).
async fn serves(http: &Http, full: Option<&FullSet>) -> bool {
    let Some(full) = full else { return true };
    let Ok(body) = http.send_ok(Method::GET, &full.path, None).await else {
        return false;
    };
    serde_json::from_slice::<SnapshotReply>(&body).is_ok_and(|reply| {
        reply.revision.0 >= full.revision
            && reply.total == full.total
            && reply.service_revision.0 == full.service_revision
    })
}

/// The last service's read on `http`, as the set later reads must match.
pub(crate) async fn full_set(http: &Http, path: String) -> Result<FullSet, String> {
    let body = http.send_ok(Method::GET, &path, None).await?;
    let reply: SnapshotReply = serde_json::from_slice(&body).map_err(|err| format!("{path}: {err}"))?;
    Ok(FullSet {
        revision: reply.revision.0,
        path,
        total: reply.total,
        service_revision: reply.service_revision.0,
    })
}

impl crate::soak::SoakNode for Member {
    fn id(&self) -> u64 {
        Member::id(self)
    }

    fn url(&self) -> String {
        Member::url(self)
    }

    fn pid(&self) -> u32 {
        Member::pid(self)
    }

    fn restart(
        &mut self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), crate::soak::SoakError>> + Send + '_>> {
        use crate::soak::SoakError;
        Box::pin(async move {
            Member::restart(self, Stop::Term)
                .await
                .map_err(|err| SoakError::Cluster(err.to_string()))?;
            self.wait_until(|s| s.ready && s.leader.is_some(), None, Duration::from_secs(120), None)
                .await
                .map(|_| ())
                .map_err(SoakError::Cluster)
        })
    }
}
