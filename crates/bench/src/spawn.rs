//! `--spawn` and `--spawn-etcd`: start the system under test on free loopback ports with a
//! temporary data dir, wait until it answers, and stop it (SIGKILL) when dropped. Its output
//! goes to a log file in the data dir, quoted in the error if it fails to start. The scale
//! workload also stops one ([`Spawned::stop`]) and starts it again on the same data dir
//! ([`Spawned::relaunch`]).

use std::fs::File;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use hyper::Method;
use muster_core::api::StatusReply;
use tempfile::TempDir;

use crate::BenchError;
use crate::client::Http;
use crate::clock::now;

/// How long a spawned system may take to answer: etcd elects itself in about a second and
/// Muster opens its log in well under one; 30 s allows for a cold disk cache.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How often readiness is polled while waiting.
const READY_POLL: Duration = Duration::from_millis(100);
/// How long a SIGTERMed server may take to exit: its shutdown grace (10 s) and a margin.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a stopping process is checked for its exit: fine enough for a stop time.
const STOP_POLL: Duration = Duration::from_millis(5);
/// Lines of the log quoted when a spawned system fails.
const LOG_TAIL_LINES: usize = 20;

/// A system the bench started; killed and its data dir removed on drop.
#[derive(Debug)]
pub(crate) struct Spawned {
    child: Child,
    /// Its HTTP base URL.
    pub(crate) url: String,
    /// Its Consul-compatible listener's base URL (Muster only).
    pub(crate) consul_url: Option<String>,
    /// Its xDS gRPC listener (Muster with `xds` only).
    pub(crate) xds_addr: Option<SocketAddr>,
    /// Its DNS listener (Muster only).
    pub(crate) dns_addr: Option<SocketAddr>,
    /// Its PID.
    pub(crate) pid: u32,
    // Removed after the child is killed (fields drop after `Drop::drop`).
    dir: TempDir,
    /// How it was started, to start it again on the same data dir and ports ([`Spawned::restart`]).
    command_line: CommandLine,
}

/// A spawned system's command line and environment, kept to run it again.
#[derive(Debug)]
struct CommandLine {
    program: std::ffi::OsString,
    args: Vec<std::ffi::OsString>,
    envs: Vec<(std::ffi::OsString, Option<std::ffi::OsString>)>,
}

impl CommandLine {
    fn of(command: &Command) -> CommandLine {
        CommandLine {
            program: command.get_program().to_owned(),
            args: command.get_args().map(ToOwned::to_owned).collect(),
            envs: command
                .get_envs()
                .map(|(key, value)| (key.to_owned(), value.map(ToOwned::to_owned)))
                .collect(),
        }
    }

    fn command(&self) -> Command {
        let mut command = Command::new(&self.program);
        command.args(&self.args);
        for (key, value) in &self.envs {
            match value {
                Some(value) => command.env(key, value),
                None => command.env_remove(key),
            };
        }
        command
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        // Nothing to do if it already exited; the data dir is thrown away either way.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback TCP port free right now (the kernel picks it; the listener is closed at once).
pub(crate) fn free_tcp_port() -> Result<u16, String> {
    let listener = TcpListener::bind(("127.0.0.1", 0)).map_err(|err| format!("finding a free port: {err}"))?;
    listener
        .local_addr()
        .map(|addr| addr.port())
        .map_err(|err| err.to_string())
}

/// A loopback port free for both UDP and TCP (DNS listens on both).
fn free_dns_port() -> Result<u16, String> {
    for _ in 0..20 {
        let udp = UdpSocket::bind(("127.0.0.1", 0)).map_err(|err| format!("finding a free port: {err}"))?;
        let port = udp.local_addr().map_err(|err| err.to_string())?.port();
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Err("no port free for both UDP and TCP".into())
}

/// Runs `command` with its output appended to `dir/log`.
fn launch(what: &'static str, command: &mut Command, dir: &Path) -> Result<Child, BenchError> {
    let fail = |detail: String| BenchError::Spawn { what, detail };
    let log_path = dir.join("log");
    let log = File::options()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|err| fail(format!("opening {}: {err}", log_path.display())))?;
    let log_err = log.try_clone().map_err(|err| fail(err.to_string()))?;
    command
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .spawn()
        .map_err(|err| fail(format!("running {:?}: {err}", command.get_program())))
}

/// Runs `command` with its output to the log file in `dir`; it is not waited for.
pub(crate) fn start(
    what: &'static str,
    mut command: Command,
    dir: TempDir,
    url: String,
) -> Result<Spawned, BenchError> {
    let child = launch(what, &mut command, dir.path())?;
    Ok(Spawned {
        pid: child.id(),
        child,
        url,
        consul_url: None,
        xds_addr: None,
        dns_addr: None,
        dir,
        command_line: CommandLine::of(&command),
    })
}

/// How [`Spawned::stop`] stops a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// SIGTERM: the graceful stop `muster serve` does on it.
    Term,
    /// SIGKILL: a crash, as `kill -9`.
    Kill,
}

impl Spawned {
    /// Kills a plain (no TLS) Muster server with SIGKILL, as a crash would, and starts it
    /// again with the same command line: the same data dir and ports. Returns once it
    /// answers ready again (the reconnect workload, SPEC K1). It is [`Spawned::stop`] with
    /// [`Stop::Kill`], then [`Spawned::relaunch`] of the saved command line.
    pub(crate) async fn restart(mut self) -> Result<Spawned, BenchError> {
        // SIGKILL: no shutdown path runs, no `closing` frame is sent.
        self.stop(Stop::Kill)
            .await
            .map_err(|detail| BenchError::Spawn { what: "muster", detail })?;
        let command = self.command_line.command();
        self.relaunch("muster", command)?;
        self.wait_ready("muster", MusterReady, None).await
    }

    /// Its temporary directory (the data dir is `data` inside it).
    pub(crate) fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Why it is no longer running, if it is not: its exit status and the end of its log.
    pub(crate) fn exited(&mut self) -> Option<String> {
        let status = self.child.try_wait().ok()??;
        Some(format!("it exited with {status}; its log ends:\n{}", self.log_tail()))
    }

    /// Sends `how` and waits until the process has exited; returns how long that took. A
    /// process still running [`STOP_TIMEOUT`] after SIGTERM is killed, and that is an error.
    pub(crate) async fn stop(&mut self, how: Stop) -> Result<Duration, String> {
        let start = now();
        match how {
            Stop::Kill => self.child.kill().map_err(|err| format!("SIGKILL: {err}"))?,
            Stop::Term => {
                let pid = rustix::process::Pid::from_child(&self.child);
                rustix::process::kill_process(pid, rustix::process::Signal::TERM)
                    .map_err(|err| format!("SIGTERM: {err}"))?;
            }
        }
        loop {
            if self.child.try_wait().map_err(|err| err.to_string())?.is_some() {
                return Ok(now() - start);
            }
            if now() - start > STOP_TIMEOUT {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return Err(format!("still running {STOP_TIMEOUT:?} after SIGTERM; killed"));
            }
            tokio::time::sleep(STOP_POLL).await;
        }
    }

    /// Starts `command` in place of the process, which must have exited (see
    /// [`Spawned::stop`]), its output appended to the same log.
    pub(crate) fn relaunch(&mut self, what: &'static str, mut command: Command) -> Result<(), BenchError> {
        self.child = launch(what, &mut command, self.dir.path())?;
        self.pid = self.child.id();
        self.command_line = CommandLine::of(&command);
        Ok(())
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
    }

    /// Waits until `probe` says ready, or the process exits, or the timeout.
    async fn wait_ready(
        mut self,
        what: &'static str,
        probe: impl AsyncProbe,
        tls: Option<std::sync::Arc<muster_tls::ClientConfig>>,
    ) -> Result<Spawned, BenchError> {
        let http = Http::with_tls(&self.url, 1, tls);
        let start = now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(BenchError::Spawn {
                    what,
                    detail: format!("it exited with {status}; its log ends:\n{}", self.log_tail()),
                });
            }
            if probe.ready(&http).await {
                return Ok(self);
            }
            if now() - start > READY_TIMEOUT {
                return Err(BenchError::Spawn {
                    what,
                    detail: format!(
                        "not ready at {} after {READY_TIMEOUT:?}; its log ends:\n{}",
                        self.url,
                        self.log_tail()
                    ),
                });
            }
            tokio::time::sleep(READY_POLL).await;
        }
    }
}

/// A readiness check.
trait AsyncProbe {
    async fn ready(&self, http: &Http) -> bool;
}

struct MusterReady;

impl AsyncProbe for MusterReady {
    async fn ready(&self, http: &Http) -> bool {
        let Ok(body) = http.send_ok(Method::GET, "/v1/status", None).await else {
            return false;
        };
        serde_json::from_slice::<StatusReply>(&body).is_ok_and(|status| status.ready)
    }
}

struct EtcdReady;

impl AsyncProbe for EtcdReady {
    async fn ready(&self, http: &Http) -> bool {
        // etcd 3.4 answers {"health":"true"} once it has a leader.
        http.send_ok(Method::GET, "/health", None)
            .await
            .is_ok_and(|body| String::from_utf8_lossy(&body).contains("\"true\""))
    }
}

/// Starts `bin serve` on free loopback ports with a temporary data dir; with `tls`, its API
/// serves TLS with a certificate of a throwaway CA ([`crate::tls::Pki`]), and the
/// returned client config trusts that CA; with `xds`, it also serves xDS on a free port.
pub(crate) async fn spawn_muster(
    bin: &Path,
    tls: bool,
    xds: bool,
) -> Result<(Spawned, Option<std::sync::Arc<muster_tls::ClientConfig>>), BenchError> {
    spawn_muster_with(bin, tls, xds, "").await
}

/// [`spawn_muster`] with `config` (TOML) as its `--config` file, e.g. a `[federation]`.
pub(crate) async fn spawn_muster_with(
    bin: &Path,
    tls: bool,
    xds: bool,
    config: &str,
) -> Result<(Spawned, Option<std::sync::Arc<muster_tls::ClientConfig>>), BenchError> {
    let fail = |detail: String| BenchError::Spawn { what: "muster", detail };
    let dir = tempfile::Builder::new()
        .prefix("muster-bench-")
        .tempdir()
        .map_err(|err| fail(err.to_string()))?;
    let http = SocketAddr::from(([127, 0, 0, 1], free_tcp_port().map_err(fail)?));
    let dns = SocketAddr::from(([127, 0, 0, 1], free_dns_port().map_err(fail)?));
    // A free port for the Consul-compatible API too: its default, 8500, would collide with
    // a local Consul agent or another bench run.
    let consul = SocketAddr::from(([127, 0, 0, 1], free_tcp_port().map_err(fail)?));
    let mut command = Command::new(bin);
    command
        .arg("serve")
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .arg("--http")
        .arg(http.to_string())
        .arg("--dns")
        .arg(dns.to_string())
        .arg("--consul")
        .arg(consul.to_string());
    // Only when asked: a binary built without the `xds` feature has no `--xds` flag.
    let xds = if xds {
        let addr = SocketAddr::from(([127, 0, 0, 1], free_tcp_port().map_err(fail)?));
        command.arg("--xds").arg(addr.to_string());
        Some(addr)
    } else {
        None
    };
    if std::env::var_os("RUST_LOG").is_none() {
        // Per-request logging would cost the server CPU the benchmark is measuring.
        command.env("RUST_LOG", "warn");
    }
    let mut client_tls = None;
    if tls {
        // The secured server: TLS and authentication together, as a deployment runs it
        // (SPEC S1); the bench bootstraps its token once the server is ready.
        let pki = crate::tls::Pki::new().map_err(fail)?;
        let (cert, key) = pki.write(dir.path()).map_err(fail)?;
        command.arg("--tls-cert").arg(cert).arg("--tls-key").arg(key);
        client_tls = Some(pki.client_config().map_err(fail)?);
    }
    let config = match (tls, config) {
        // One bootstrapped token drives every request, past the default write rate of one
        // principal (`write_rate_per_principal`): raised, so the bench measures the server,
        // not the rate.
        (true, extra) => format!(
            "write_rate_per_principal = 1000000000\nwrite_burst_per_principal = 1000000000\n{extra}\n[auth]\nenabled = true\n"
        ),
        (false, "") => String::new(),
        (false, extra) => extra.to_owned(),
    };
    if !config.is_empty() {
        let path = dir.path().join("bench.toml");
        std::fs::write(&path, config).map_err(|err| fail(err.to_string()))?;
        command.arg("--config").arg(path);
    }
    let scheme = if tls { "https" } else { "http" };
    let mut spawned = start("muster", command, dir, format!("{scheme}://{http}"))?;
    spawned.consul_url = Some(format!("http://{consul}"));
    spawned.xds_addr = xds;
    spawned.dns_addr = Some(dns);
    let spawned = spawned.wait_ready("muster", MusterReady, client_tls.clone()).await?;
    Ok((spawned, client_tls))
}

/// Starts etcd as a single member on free loopback ports with a temporary data dir.
pub(crate) async fn spawn_etcd(bin: &Path) -> Result<Spawned, BenchError> {
    let fail = |detail: String| BenchError::Spawn { what: "etcd", detail };
    let dir = tempfile::Builder::new()
        .prefix("etcd-bench-")
        .tempdir()
        .map_err(|err| fail(err.to_string()))?;
    let client = format!("http://127.0.0.1:{}", free_tcp_port().map_err(fail)?);
    let peer = format!("http://127.0.0.1:{}", free_tcp_port().map_err(fail)?);
    let mut command = Command::new(bin);
    command
        .arg("--name")
        .arg("bench")
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
        .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
        .arg("--initial-cluster")
        .arg(format!("bench={peer}"))
        .args(["--logger", "zap", "--log-level", "warn"]);
    let spawned = start("etcd", command, dir, client)?;
    spawned.wait_ready("etcd", EtcdReady, None).await
}
