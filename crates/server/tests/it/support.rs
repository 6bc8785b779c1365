//! A test server and a small HTTP client for it.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use muster_core::api::Frame;
use muster_server::{ServerConfig, WatchStats};
use muster_testkit::server::InProcess;
use serde_json::{Value, json};
use tempfile::TempDir;

/// The longest any single step may take before the test fails: generous for a loaded 2-core
/// machine, and only ever reached when something is broken.
pub(crate) const STEP: Duration = Duration::from_secs(20);

/// Asks `probe` every `every` until it answers `Some`, for at most [`STEP`]; `None` if it
/// never did. Every wait for a state that comes about by itself goes through here.
pub(crate) async fn poll<T, F>(every: Duration, mut probe: impl FnMut() -> F) -> Option<T>
where
    F: Future<Output = Option<T>>,
{
    for _ in 0..STEP.as_millis() / every.as_millis().max(1) {
        if let Some(found) = probe().await {
            return Some(found);
        }
        tokio::time::sleep(every).await;
    }
    None
}

/// A reply: status, headers and JSON body (`Value::Null` when empty).
pub(crate) struct Reply {
    pub(crate) status: StatusCode,
    pub(crate) headers: hyper::HeaderMap,
    pub(crate) body: Value,
}

impl Reply {
    /// The error code of an error reply.
    pub(crate) fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("<no error code>")
    }

    /// The error message of an error reply.
    pub(crate) fn message(&self) -> &str {
        self.body["error"]["message"].as_str().unwrap_or("<no error message>")
    }

    /// The `revision` field of a reply.
    pub(crate) fn revision(&self) -> u64 {
        self.body["revision"]
            .as_u64()
            .unwrap_or_else(|| panic!("no revision in {}", self.body))
    }

    /// Asserts a status, with the body in the failure message.
    #[track_caller]
    pub(crate) fn expect(self, status: StatusCode) -> Reply {
        assert_eq!(self.status, status, "body: {}", self.body);
        self
    }
}

/// A running test server (`muster_testkit::server::InProcess`) with an HTTP/1.1 client for
/// its API.
pub(crate) struct TestServer {
    inner: InProcess,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl std::ops::Deref for TestServer {
    type Target = InProcess;

    fn deref(&self) -> &InProcess {
        &self.inner
    }
}

impl std::ops::DerefMut for TestServer {
    fn deref_mut(&mut self) -> &mut InProcess {
        &mut self.inner
    }
}

/// The server tree's shutdown grace: its drain tests outlast the kit's one second.
const SHUTDOWN_GRACE_MS: u64 = 5_000;

/// A configuration for tests: a temporary data dir, free loopback ports, short progress.
pub(crate) fn test_config(dir: &TempDir) -> ServerConfig {
    ServerConfig {
        shutdown_grace_ms: SHUTDOWN_GRACE_MS,
        ..muster_testkit::server::test_config(dir.path())
    }
}

impl TestServer {
    pub(crate) async fn start() -> TestServer {
        TestServer::start_with(|_| {}).await
    }

    pub(crate) async fn start_with(configure: impl FnOnce(&mut ServerConfig)) -> TestServer {
        TestServer::start_hooked(configure, muster_server::Hooks::default()).await
    }

    /// [`TestServer::start_with`] with the binary's hooks (the dashboard's lab runner).
    pub(crate) async fn start_hooked(
        configure: impl FnOnce(&mut ServerConfig),
        hooks: muster_server::Hooks,
    ) -> TestServer {
        let inner = InProcess::start_hooked(
            |config| {
                config.shutdown_grace_ms = SHUTDOWN_GRACE_MS;
                configure(config);
            },
            hooks,
        )
        .await;
        TestServer {
            inner,
            client: Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    /// Where the Consul-compatible API listens, if it is on.
    pub(crate) fn consul_listener(&self) -> Option<std::net::SocketAddr> {
        self.running().consul_addr()
    }

    /// The Consul API's blocking-query counters.
    pub(crate) fn consul_counts(&self) -> muster_server::ConsulCounts {
        self.running().consul_counts()
    }

    pub(crate) fn watch_stats(&self) -> WatchStats {
        self.running().watch_stats()
    }

    /// Stops and starts again on the same data directory (and a new port).
    pub(crate) async fn restart(&mut self) {
        self.restart_with(|_| {}).await;
    }

    /// Stops, changes the configuration, and starts again on the same data directory (and a
    /// new port).
    pub(crate) async fn restart_with(&mut self, configure: impl FnOnce(&mut ServerConfig)) {
        self.inner.stop().await;
        let mut config = self.inner.config().clone();
        configure(&mut config);
        self.inner.reconfigure(config);
        self.start_again().await;
    }

    /// Starts again on the same data directory (and a new port) after the server stopped.
    pub(crate) async fn start_again(&mut self) {
        self.inner.start_again_on_any_port().await;
    }

    /// Sends a request with raw body bytes and extra headers.
    pub(crate) async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        headers: &[(&str, &str)],
    ) -> Reply {
        let mut request = Request::builder().method(method).uri(self.url(path));
        if body.is_some() {
            request = request.header("content-type", "application/json");
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(Full::new(Bytes::from(body.unwrap_or_default()))).unwrap();
        let response = tokio::time::timeout(STEP, self.client.request(request))
            .await
            .expect("a reply in time")
            .expect("a reply");
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = tokio::time::timeout(STEP, response.into_body().collect())
            .await
            .expect("the body in time")
            .expect("the body")
            .to_bytes();
        if status.is_client_error() || status.is_server_error() {
            assert_eq!(
                headers.get("content-type").and_then(|v| v.to_str().ok()),
                Some("application/json"),
                "every error is JSON; got {:?}",
                String::from_utf8_lossy(&bytes)
            );
        }
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", String::from_utf8_lossy(&bytes)))
        };
        Reply { status, headers, body }
    }

    pub(crate) async fn call(&self, method: Method, path: &str, body: Option<Value>) -> Reply {
        self.send(method, path, body.map(|b| serde_json::to_vec(&b).unwrap()), &[])
            .await
    }

    /// A GET whose reply is text (the metrics page): status and body.
    pub(crate) async fn get_text(&self, path: &str) -> (StatusCode, String) {
        self.get_text_with(path, &[]).await
    }

    /// The `Content-Type` of a GET's reply.
    pub(crate) async fn content_type(&self, path: &str) -> Option<String> {
        let request = Request::builder()
            .uri(self.url(path))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let response = tokio::time::timeout(STEP, self.client.request(request))
            .await
            .expect("a reply in time")
            .expect("a reply");
        response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    }

    /// [`TestServer::get_text`] with extra headers (a bearer token).
    pub(crate) async fn get_text_with(&self, path: &str, headers: &[(&str, &str)]) -> (StatusCode, String) {
        let mut request = Request::builder().uri(self.url(path));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(Full::new(Bytes::new())).unwrap();
        let response = tokio::time::timeout(STEP, self.client.request(request))
            .await
            .expect("a reply in time")
            .expect("a reply");
        let status = response.status();
        let bytes = tokio::time::timeout(STEP, response.into_body().collect())
            .await
            .expect("the body in time")
            .expect("the body")
            .to_bytes();
        (status, String::from_utf8(bytes.to_vec()).expect("UTF-8 text"))
    }

    pub(crate) async fn get(&self, path: &str) -> Reply {
        self.call(Method::GET, path, None).await
    }

    /// The server's current revision, from `/v1/status`.
    pub(crate) async fn revision(&self) -> u64 {
        self.get("/v1/status").await.expect(StatusCode::OK).revision()
    }

    /// Registers `instance` of `acme/prod/{service}` at `ip`, incarnation 1, without a lease.
    pub(crate) async fn register(&self, service: &str, instance: &str, ip: &str) -> Reply {
        self.call(
            Method::PUT,
            &instance_path(service, instance),
            Some(json!({"incarnation": 1, "endpoint": endpoint(ip)})),
        )
        .await
    }

    /// Deregisters incarnation 1 of `instance`.
    pub(crate) async fn deregister(&self, service: &str, instance: &str) -> Reply {
        self.call(
            Method::DELETE,
            &format!("{}?incarnation=1", instance_path(service, instance)),
            None,
        )
        .await
    }

    /// Opens a watch.
    pub(crate) async fn watch(&self, path: &str) -> Watch {
        self.watch_with(path, &[]).await
    }

    /// Opens a watch with extra headers (a bearer token).
    pub(crate) async fn watch_with(&self, path: &str, headers: &[(&str, &str)]) -> Watch {
        let mut request = Request::builder().method(Method::GET).uri(self.url(path));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(Full::new(Bytes::new())).unwrap();
        let response = tokio::time::timeout(STEP, self.client.request(request))
            .await
            .expect("the watch answers in time")
            .expect("the watch answers");
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers().get("content-type").unwrap(), "application/x-ndjson");
        Watch {
            body: response.into_body(),
            buffer: Vec::new(),
            _connection: None,
        }
    }
}

/// The receive buffer of a slow watcher's socket: small, so the server's queue, not the
/// kernel, is what fills up when the watcher stops reading.
const SLOW_RECEIVE_BUFFER: u32 = 4096;

/// Opens a watch on its own connection with a small receive buffer, for a watcher that stops
/// reading.
pub(crate) async fn slow_watch(server: &TestServer, path: &str) -> Watch {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(SLOW_RECEIVE_BUFFER).unwrap();
    let stream = tokio::time::timeout(STEP, socket.connect(server.addr()))
        .await
        .expect("connects in time")
        .unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let request = Request::builder()
        .method(Method::GET)
        .uri(path)
        .header("host", server.addr().to_string())
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = tokio::time::timeout(STEP, sender.send_request(request))
        .await
        .expect("the watch answers in time")
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    Watch {
        body: response.into_body(),
        buffer: Vec::new(),
        _connection: Some(sender),
    }
}

/// `/v1/registry/acme/prod/{service}/{instance}`.
pub(crate) fn instance_path(service: &str, instance: &str) -> String {
    format!("/v1/registry/acme/prod/{service}/{instance}")
}

/// A minimal endpoint record.
pub(crate) fn endpoint(ip: &str) -> Value {
    json!({"addresses": [{"ip": ip}], "ports": [{"name": "http", "port": 8080, "protocol": "http"}]})
}

/// An open watch stream.
pub(crate) struct Watch {
    body: Incoming,
    buffer: Vec<u8>,
    /// Keeps a dedicated connection open.
    _connection: Option<hyper::client::conn::http1::SendRequest<Full<Bytes>>>,
}

impl Watch {
    /// The next frame, or `None` when the stream ended. Fails the test after [`STEP`].
    pub(crate) async fn next(&mut self) -> Option<Frame> {
        loop {
            if let Some(end) = self.buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=end).collect();
                return Some(
                    serde_json::from_slice(&line)
                        .unwrap_or_else(|e| panic!("bad frame ({e}): {:?}", String::from_utf8_lossy(&line))),
                );
            }
            let frame = tokio::time::timeout(STEP, self.body.frame())
                .await
                .expect("a frame in time");
            match frame {
                None => {
                    assert!(self.buffer.is_empty(), "the stream ended mid-frame");
                    return None;
                }
                Some(frame) => {
                    if let Ok(data) = frame.expect("the stream is healthy").into_data() {
                        self.buffer.extend_from_slice(&data);
                    }
                }
            }
        }
    }

    /// The next frame that is not `progress`.
    pub(crate) async fn next_event(&mut self) -> Option<Frame> {
        loop {
            match self.next().await? {
                Frame::Progress { .. } => {}
                frame => return Some(frame),
            }
        }
    }

    /// Asserts the stream ends.
    pub(crate) async fn expect_end(&mut self) {
        if let Some(frame) = self.next().await {
            panic!("expected the stream to end, got {frame:?}");
        }
    }
}

/// An open GET: its status, headers and body, read line by line.
pub(crate) struct Lines {
    pub(crate) status: StatusCode,
    pub(crate) headers: hyper::HeaderMap,
    body: hyper::body::Incoming,
    buffer: Vec<u8>,
}

impl Lines {
    pub(crate) async fn open(server: &TestServer, path: &str) -> Lines {
        let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
        let request = Request::builder()
            .uri(server.url(path))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let response = tokio::time::timeout(STEP, client.request(request))
            .await
            .expect("a reply in time")
            .expect("a reply");
        let (parts, body) = response.into_parts();
        Lines {
            status: parts.status,
            headers: parts.headers,
            body,
            buffer: Vec::new(),
        }
    }

    /// The next line (without its newline), or what is left when the body ends.
    pub(crate) async fn next(&mut self) -> String {
        while !self.buffer.contains(&b'\n') {
            match tokio::time::timeout(STEP, self.body.frame())
                .await
                .expect("the body in time")
            {
                Some(frame) => {
                    if let Ok(data) = frame.expect("a body frame").into_data() {
                        self.buffer.extend_from_slice(&data);
                    }
                }
                None => break,
            }
        }
        let end = self
            .buffer
            .iter()
            .position(|b| *b == b'\n')
            .unwrap_or(self.buffer.len());
        let line: Vec<u8> = self.buffer.drain(..end).collect();
        if !self.buffer.is_empty() {
            self.buffer.remove(0);
        }
        String::from_utf8(line).expect("UTF-8")
    }
}

/// Bootstraps the ACL of a server with authentication on; the operator's secret.
pub(crate) async fn bootstrap(server: &TestServer) -> String {
    let reply = server
        .call(Method::POST, "/v1/acl/bootstrap", None)
        .await
        .expect(StatusCode::CREATED);
    reply.body["secret"].as_str().unwrap().to_owned()
}

/// Mints a token from `body` (the `POST /v1/acl/tokens` request) with `operator`'s token;
/// (accessor, secret).
pub(crate) async fn mint_token(server: &TestServer, operator: &str, body: Value) -> (String, String) {
    let reply = as_token(server, operator, Method::POST, "/v1/acl/tokens", Some(body))
        .await
        .expect(StatusCode::CREATED);
    (
        reply.body["accessor"].as_str().unwrap().to_owned(),
        reply.body["secret"].as_str().unwrap().to_owned(),
    )
}

/// A request with `Authorization: Bearer <secret>`.
pub(crate) async fn as_token(
    server: &TestServer,
    secret: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> Reply {
    let auth = format!("Bearer {secret}");
    server
        .send(
            method,
            path,
            body.map(|b| serde_json::to_vec(&b).unwrap()),
            &[("authorization", auth.as_str())],
        )
        .await
}
