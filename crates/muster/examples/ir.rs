//! The instruction-count gate's driver (`docs/performance.md` "Instruction counts"): one hot
//! path of the server, driven in this process, bytes in and bytes out, `N` times.
//!
//! ```text
//!  ir PATH N      PATH: register | renew | read | watch | dns | proxy
//!
//!  register  PUT a new instance of bench/svc          ─▶ server.connect() (in-memory HTTP/1.1)
//!  renew     PUT /v1/leases/default/{id}/renew        ─▶ server.connect()
//!  read      GET a 5-endpoint service's set           ─▶ server.connect()
//!  watch     register into w/svc, then read the update frame off each of WATCHERS streams
//!  dns       one A query of a 5-endpoint service      ─▶ server.answer_dns (the UDP answer)
//!  proxy     GET / through `muster proxy` (HTTP/1.1 keep-alive, loopback) to a tiny backend
//! ```
//!
//! The server and the driver share one current-thread runtime (the log writer and the DNS
//! receivers keep their own threads), so little of a request's count depends on how threads
//! interleave. `.ci/ir.py` runs it under callgrind with `N` and `N / 4` requests, takes the
//! difference over the difference in requests so that start-up and stop cancel out, and
//! compares the result with the committed baseline (`.ci/ir-baseline.json`). Built with
//! `cargo build --release -p muster --example ir`; SPEC K2.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use muster_core::ServiceKey;
use muster_server::{ConsulConfig, ServerConfig};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Watch streams the `watch` path delivers each change to; `.ci/ir.py` divides by it.
const WATCHERS: usize = 100;

/// How long the proxy may take to learn its backend before the driver gives up.
const PROXY_READY: Duration = Duration::from_secs(120);

/// How long the driver waits for the next bytes of a response (under callgrind, everything
/// runs some fifty times slower) before it gives up instead of hanging CI.
const READ_TIMEOUT: Duration = Duration::from_secs(120);

type Failure = Box<dyn std::error::Error>;

/// The allocator of the `muster` binary (its `main.rs`): what a request costs depends on it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // SAFETY: the first statement of `main`: no other thread exists yet.
    #[allow(unsafe_code)]
    unsafe {
        muster_cli::allocator::purge_at_once();
    }
    let args: Vec<String> = std::env::args().collect();
    let (Some(path), Some(Ok(n))) = (args.get(1), args.get(2).map(|n| n.parse::<u64>())) else {
        eprintln!("usage: ir register|renew|read|watch|dns|proxy N");
        return ExitCode::from(2);
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("ir: no runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(drive(path, n)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("ir {path}: {err}");
            ExitCode::FAILURE
        }
    }
}

async fn drive(path: &str, n: u64) -> Result<(), Failure> {
    let dir = tempfile::tempdir()?;
    let server = muster_server::start(config(dir.path(), path == "dns")).await?;
    let mut api = Http::new(server.connect());
    match path {
        "register" => {
            for i in 0..n {
                api.call("PUT", &format!("/v1/registry/default/bench/svc/i-{i}"), &endpoint(i))
                    .await?;
            }
        }
        "renew" => {
            let granted = api.call("POST", "/v1/leases/default", br#"{"ttl_ms":600000}"#).await?;
            let lease: serde_json::Value = serde_json::from_slice(&granted)?;
            let id = lease["lease"]["id"].as_u64().ok_or("the grant names no lease id")?;
            let renew = format!("/v1/leases/default/{id}/renew");
            for _ in 0..n {
                api.call("PUT", &renew, b"").await?;
            }
        }
        "read" => {
            fill(&mut api, "read/svc").await?;
            for _ in 0..n {
                api.call("GET", "/v1/registry/default/read/svc", b"").await?;
            }
        }
        "watch" => {
            api.call("PUT", "/v1/registry/default/w/svc/seed", &endpoint(u64::MAX))
                .await?;
            let mut watchers = Vec::with_capacity(WATCHERS);
            for _ in 0..WATCHERS {
                let mut watcher = Http::new(server.connect());
                watcher.send("GET", "/v1/watch/default/w/svc", b"").await?;
                if watcher.head().await?.0 != 200 {
                    return Err("the watch was refused".into());
                }
                watcher.frame("snapshot").await?;
                watchers.push(watcher);
            }
            for i in 0..n {
                api.call("PUT", &format!("/v1/registry/default/w/svc/i-{i}"), &endpoint(i))
                    .await?;
                for watcher in &mut watchers {
                    watcher.frame("update").await?;
                }
            }
        }
        "dns" => {
            fill(&mut api, "dns/svc").await?;
            let query = a_query(0x4d55, "svc.dns.muster");
            for _ in 0..n {
                let answer = server.answer_dns(&query).ok_or("DNS gave no answer")?;
                // NOERROR with five A records.
                if answer.get(3).map(|flags| flags & 0x0f) != Some(0) || answer.get(7) != Some(&5) {
                    return Err(format!("not five addresses: {answer:?}").into());
                }
            }
        }
        "proxy" => proxy(&server, &mut api, n).await?,
        // Not a gated path: what the clock alone costs (timers, ticks), per N ms of idling.
        "idle" => tokio::time::sleep(Duration::from_millis(n)).await,
        other => return Err(format!("no path {other}").into()),
    }
    server.stop().await?;
    Ok(())
}

/// The driver's server: a data directory of its own, no Consul or xDS listener, DNS only for
/// the `dns` path, and no `progress` frames while it runs. What those do comes by the clock,
/// not by the request, and would blur the count (the convergence sweep reads the DNS zone).
fn config(dir: &std::path::Path, dns: bool) -> ServerConfig {
    ServerConfig {
        data_dir: dir.to_path_buf(),
        http: SocketAddr::from(([127, 0, 0, 1], 0)),
        dns: SocketAddr::from(([127, 0, 0, 1], 0)),
        dns_enabled: dns,
        consul: ConsulConfig {
            enabled: false,
            ..ConsulConfig::default()
        },
        progress_interval_ms: 3_600_000,
        ..ServerConfig::default()
    }
}

/// Instance `i`'s registration body: one address, one HTTP port.
fn endpoint(i: u64) -> Vec<u8> {
    let (a, b) = ((i / 250) % 250, i % 250);
    format!(
        r#"{{"incarnation":1,"endpoint":{{"addresses":[{{"ip":"10.1.{a}.{b}"}}],"ports":[{{"name":"http","port":8080,"protocol":"http"}}]}}}}"#
    )
    .into_bytes()
}

/// Registers five instances of `service` (`namespace/service`) in the default tenant.
async fn fill<S: AsyncRead + AsyncWrite + Unpin>(api: &mut Http<S>, service: &str) -> Result<(), Failure> {
    for i in 0..5 {
        api.call("PUT", &format!("/v1/registry/default/{service}/i-{i}"), &endpoint(i))
            .await?;
    }
    Ok(())
}

/// A DNS query for `name`'s A records, recursion desired.
fn a_query(id: u16, name: &str) -> Vec<u8> {
    let mut query = Vec::with_capacity(64);
    query.extend_from_slice(&id.to_be_bytes());
    query.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.split('.') {
        query.push(label.len() as u8);
        query.extend_from_slice(label.as_bytes());
    }
    query.extend_from_slice(&[0, 0, 1, 0, 1]);
    query
}

/// The `proxy` path: a backend answering every request `200 ok`, registered as proxy/svc's
/// one endpoint, and `muster proxy` forwarding to it from a loopback listener.
async fn proxy<S: AsyncRead + AsyncWrite + Unpin>(
    server: &muster_server::RunningServer,
    api: &mut Http<S>,
    n: u64,
) -> Result<(), Failure> {
    let backend = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    let port = backend.local_addr()?.port();
    tokio::spawn(answer_ok(backend));
    let body = format!(
        r#"{{"incarnation":1,"endpoint":{{"addresses":[{{"ip":"127.0.0.1"}}],"ports":[{{"name":"http","port":{port},"protocol":"http"}}]}}}}"#
    );
    api.call("PUT", "/v1/registry/default/proxy/svc/backend", body.as_bytes())
        .await?;
    let client = muster_client::Client::builder(format!("http://{}", server.local_addr())).build()?;
    let mut listener = muster_proxy::config::ListenerConfig::new(
        SocketAddr::from(([127, 0, 0, 1], 0)),
        ServiceKey::new("default", "proxy", "svc").map_err(|err| format!("{err:?}"))?,
    );
    listener.protocol = muster_proxy::config::ListenerProtocol::Http;
    let config = muster_proxy::config::ProxyConfig {
        listeners: vec![listener],
        ..muster_proxy::config::ProxyConfig::default()
    };
    let running = muster_proxy::start(config, client).await?;
    let addr = *running.listeners().first().ok_or("the proxy has no listener")?;
    let mut caller = tokio::time::timeout(PROXY_READY, async {
        loop {
            // Until the proxy's view holds the backend, it refuses the connection or answers 503.
            if let Ok(stream) = TcpStream::connect(addr).await {
                let mut caller = Http::new(stream);
                if caller.send("GET", "/", b"").await.is_ok()
                    && let Ok((200, _)) = caller.response().await
                {
                    return caller;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .map_err(|_| "the proxy did not forward in time")?;
    for _ in 0..n {
        caller.call("GET", "/", b"").await?;
    }
    running.shutdown().await;
    Ok(())
}

/// The backend: every request on every connection gets `200 ok` (requests have no body).
async fn answer_ok(listener: TcpListener) {
    const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
    while let Ok((mut stream, _)) = listener.accept().await {
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            let mut held = 0;
            loop {
                match stream.read(&mut buf[held..]).await {
                    Ok(0) | Err(_) => return,
                    Ok(read) => held += read,
                }
                while let Some(end) = find(&buf[..held], b"\r\n\r\n") {
                    if stream.write_all(OK).await.is_err() {
                        return;
                    }
                    buf.copy_within(end + 4..held, 0);
                    held -= end + 4;
                }
                if held == buf.len() {
                    return;
                }
            }
        });
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|window| window == needle)
}

/// An HTTP/1.1 keep-alive client over any byte stream: requests written as bytes, responses
/// read as bytes (a length or a chunked body), nothing more.
struct Http<S> {
    io: S,
    /// Read and not yet consumed.
    buf: Vec<u8>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Http<S> {
    fn new(io: S) -> Http<S> {
        Http {
            io,
            buf: Vec::with_capacity(16 * 1024),
        }
    }

    async fn send(&mut self, method: &str, path: &str, body: &[u8]) -> Result<(), Failure> {
        let mut request = format!("{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\n");
        if !body.is_empty() {
            request.push_str(&format!(
                "content-type: application/json\r\ncontent-length: {}\r\n",
                body.len()
            ));
        }
        request.push_str("\r\n");
        let mut bytes = request.into_bytes();
        bytes.extend_from_slice(body);
        self.io.write_all(&bytes).await?;
        Ok(())
    }

    /// Sends a request and reads its whole response, which must be a success.
    async fn call(&mut self, method: &str, path: &str, body: &[u8]) -> Result<Vec<u8>, Failure> {
        self.send(method, path, body).await?;
        match self.response().await? {
            (200..=299, body) => Ok(body),
            (status, body) => Err(format!("{method} {path}: {status} {}", String::from_utf8_lossy(&body)).into()),
        }
    }

    /// One whole response with a `content-length`: its status and body.
    async fn response(&mut self) -> Result<(u16, Vec<u8>), Failure> {
        let (status, length) = self.head().await?;
        let length = length.ok_or("a response without content-length")?;
        self.fill_to(length).await?;
        Ok((status, self.buf.drain(..length).collect()))
    }

    /// A response's head: its status and `content-length`, if any.
    async fn head(&mut self) -> Result<(u16, Option<usize>), Failure> {
        let end = loop {
            if let Some(end) = find(&self.buf, b"\r\n\r\n") {
                break end;
            }
            self.more().await?;
        };
        // Read as bytes, cheaply: the driver's own instructions are counted with the server's.
        // Muster and the backend write the header name in lower case.
        let head = &self.buf[..end];
        let status = head
            .get(9..12)
            .and_then(|code| std::str::from_utf8(code).ok()?.parse().ok())
            .ok_or_else(|| format!("not an HTTP response: {}", String::from_utf8_lossy(head)))?;
        const LENGTH: &[u8] = b"\r\ncontent-length: ";
        let length = find(head, LENGTH).map(|at| {
            head[at + LENGTH.len()..]
                .iter()
                .take_while(|byte| byte.is_ascii_digit())
                .fold(0, |n, digit| n * 10 + usize::from(digit - b'0'))
        });
        self.buf.drain(..end + 4);
        Ok((status, length))
    }

    /// Skips a chunked body's frames until one of type `kind`.
    async fn frame(&mut self, kind: &str) -> Result<(), Failure> {
        let wanted = format!(r#"{{"type":"{kind}""#);
        loop {
            let size_end = loop {
                if let Some(end) = find(&self.buf, b"\r\n") {
                    break end;
                }
                self.more().await?;
            };
            let size = usize::from_str_radix(std::str::from_utf8(&self.buf[..size_end])?, 16)?;
            self.buf.drain(..size_end + 2);
            if size == 0 {
                return Err(format!("the stream ended before a {kind} frame").into());
            }
            self.fill_to(size + 2).await?;
            let found = self.buf.starts_with(wanted.as_bytes());
            self.buf.drain(..size + 2);
            if found {
                return Ok(());
            }
        }
    }

    async fn fill_to(&mut self, len: usize) -> Result<(), Failure> {
        while self.buf.len() < len {
            self.more().await?;
        }
        Ok(())
    }

    /// Reads what has arrived into the spare room of `buf` (no copy, no zeroing).
    async fn more(&mut self) -> Result<(), Failure> {
        self.buf.reserve(4096);
        let read = tokio::time::timeout(READ_TIMEOUT, self.io.read_buf(&mut self.buf))
            .await
            .map_err(|_| "no answer in time")?;
        match read? {
            0 => Err("the connection closed".into()),
            _ => Ok(()),
        }
    }
}
