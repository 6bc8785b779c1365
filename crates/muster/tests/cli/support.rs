//! Running the real binary: a `muster serve` child on free loopback ports with a temporary
//! data dir, killed on drop, and client invocations against it. Every wait is bounded by a
//! count of short sleeps (no clock, STYLE.md rule 3).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use tempfile::TempDir;

/// The binary under test.
pub(crate) const MUSTER: &str = env!("CARGO_BIN_EXE_muster");

/// Poll interval of every bounded wait.
const POLL: Duration = Duration::from_millis(50);
/// Polls before a server counts as failed to start: 60 s, for a cold debug build on a busy
/// 2-core machine.
const START_POLLS: u32 = 1_200;
/// Polls before a stopping process counts as hung: 30 s.
const STOP_POLLS: u32 = 600;

/// A `muster` command with the environment cleared of the user's settings.
pub(crate) fn muster() -> Command {
    let mut command = Command::new(MUSTER);
    for var in [
        "MUSTER_SERVER",
        "MUSTER_TENANT",
        "MUSTER_DATA_DIR",
        "MUSTER_HTTP",
        "MUSTER_DNS",
        "MUSTER_CONFIG",
    ] {
        command.env_remove(var);
    }
    command.env("MUSTER_LOG", "info");
    command
}

/// Runs `muster ARGS` to completion.
pub(crate) fn run(args: &[&str]) -> Output {
    muster().args(args).output().expect("run muster")
}

/// A free TCP port on loopback (free when asked; a race with another process is possible
/// but harmless on a test machine).
pub(crate) use muster_testkit::fixed_tcp_port;

pub(crate) fn free_tcp_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A free UDP port on loopback.
pub(crate) fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Waits for `child` to exit, at most [`STOP_POLLS`] polls; kills it and panics otherwise.
pub(crate) fn wait_bounded(child: &mut Child, what: &str) -> ExitStatus {
    for _ in 0..STOP_POLLS {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        std::thread::sleep(POLL);
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("{what} did not exit in time");
}

/// A running `muster serve`.
pub(crate) struct Server {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub(crate) url: String,
    http: String,
    dir: TempDir,
}

impl Server {
    /// Starts a server on a free port (`--http 127.0.0.1:0`, the bound address read from
    /// its first stdout line) and waits until `/v1/status` answers 200.
    pub(crate) fn start() -> Server {
        Server::start_in(tempfile::tempdir().unwrap())
    }

    /// Starts a server whose data dir is `dir/data`: a fresh scratch dir, or the one a
    /// [`Server::kill9`]ed server left behind.
    pub(crate) fn start_in(dir: TempDir) -> Server {
        Server::start_with(dir, &[])
    }

    /// Like [`Server::start_in`], with more `serve` flags (e.g. a cluster member's).
    pub(crate) fn start_with(dir: TempDir, extra: &[String]) -> Server {
        let data = dir.path().join("data");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.path().join("serve.log"))
            .unwrap();
        let mut child = muster()
            .args(["serve", "--json", "--data-dir", data.to_str().unwrap()])
            .args([
                "--http",
                "127.0.0.1:0",
                "--dns",
                "127.0.0.1:0",
                "--consul",
                "127.0.0.1:0",
            ])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("spawn muster serve");
        let lines = read_lines(&mut child);
        let mut server = Server {
            child,
            url: String::new(),
            http: String::new(),
            dir,
        };
        let first = lines.recv_timeout(POLL * START_POLLS);
        let Ok(first) = first else {
            panic!("muster serve printed no address:\n{}", server.log());
        };
        let started: serde_json::Value = serde_json::from_str(&first).unwrap();
        server.http = started["http"].as_str().expect("the bound address").to_owned();
        server.url = format!("http://{}", server.http);
        server.wait_ready();
        server
    }

    fn wait_ready(&mut self) {
        for _ in 0..START_POLLS {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("muster serve exited with {status}:\n{}", self.log());
            }
            if status_ok(&self.http) {
                return;
            }
            std::thread::sleep(POLL);
        }
        panic!("muster serve did not answer /v1/status in time:\n{}", self.log());
    }

    /// The server's stderr so far.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("serve.log")).unwrap_or_default()
    }

    /// The data dir's parent (a scratch dir that lives as long as the server).
    pub(crate) fn scratch(&self) -> &Path {
        self.dir.path()
    }

    /// Runs a client command against this server (`--server` is appended).
    pub(crate) fn run(&self, args: &[&str]) -> Output {
        muster()
            .args(args)
            .args(["--server", &self.url])
            .output()
            .expect("run muster")
    }

    /// Runs a client command that must succeed; returns its stdout.
    pub(crate) fn ok(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert!(
            output.status.success(),
            "muster {args:?} failed with {}:\nstdout: {}\nstderr: {}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    }

    /// A client command started in the background (stdout piped), e.g. a watch.
    pub(crate) fn spawn(&self, args: &[&str]) -> Child {
        muster()
            .args(args)
            .args(["--server", &self.url])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn muster")
    }

    /// Kills the server with SIGKILL (no shutdown code runs, as in a crash) and returns its
    /// scratch dir, data dir inside, for a restart with [`Server::start_in`].
    pub(crate) fn kill9(mut self) -> TempDir {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reaped");
        std::mem::replace(&mut self.dir, tempfile::tempdir().unwrap())
    }

    /// The `host:port` the server listens on.
    pub(crate) fn http_addr(&self) -> &str {
        &self.http
    }

    /// Sends SIGTERM and waits (bounded) for the exit status.
    pub(crate) fn terminate(&mut self) -> ExitStatus {
        let sent = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success(), "kill -TERM failed");
        wait_bounded(&mut self.child, "muster serve after SIGTERM")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The child's stdout, line by line, over a channel (so reads can be bounded).
pub(crate) fn read_lines(child: &mut Child) -> mpsc::Receiver<String> {
    let stdout = child.stdout.take().expect("stdout piped");
    let (send, receive) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if send.send(line).is_err() {
                break;
            }
        }
    });
    receive
}

/// Whether `GET /v1/status` answers 200 with a JSON body naming the revision.
fn status_ok(http: &str) -> bool {
    let Ok(mut stream) = TcpStream::connect(http) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request = format!("GET /v1/status HTTP/1.1\r\nHost: {http}\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut reply = String::new();
    let _ = stream.read_to_string(&mut reply);
    reply.starts_with("HTTP/1.1 200") && reply.contains("\"revision\"")
}
