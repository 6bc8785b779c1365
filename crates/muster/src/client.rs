//! The HTTP client of the `/v1` API ([`muster_core::api`]): one function per route, typed
//! replies, the server's `{"error": {"code", "message"}}` as [`ClientError::Api`].
//!
//! Plain HTTP/1.1 on hyper-util's pooled legacy client (CRATES.md "HTTP"): no TLS stack to
//! build, and a custom connector can be slotted in later (turmoil, TLS). Every unary call is
//! bounded by [`REQUEST_TIMEOUT`]; a watch is bounded per frame instead (see [`Watch`]).

use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{ACCEPT, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::Serialize;
use serde::de::DeserializeOwned;

use muster_core::api::{
    DeregisterQuery, DrainRequest, ErrorBody, GrantLeaseRequest, LeaseReply, RegisterRequest, ServicesReply,
    SetServingRequest, SnapshotReply, StatusReply, WriteReply,
};
use muster_core::{Actor, InstanceId, Label, LeaseId, NamespaceKey, Revision, ServiceKey};

use crate::watch::Watch;

/// The server a client talks to when neither `--server` nor `MUSTER_SERVER` says otherwise:
/// `muster serve`'s default HTTP address.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:7070";

/// How long to wait for a TCP connection: the registry is on loopback or the local network,
/// so a server that has not accepted in 5 s is down for a person at a terminal.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a unary call may take in all: a write waits for a durable (fsynced, quorum)
/// commit, and a Raft election after a leader loss takes a few seconds; 30 s covers both
/// with room, and still ends a hung call.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How much of a non-API error reply to quote: enough to recognise a proxy's error page.
const QUOTE_BYTES: usize = 200;

/// Pages a snapshot read follows before giving up: at the server's page sizes this is
/// millions of endpoints, far past any one service, so hitting it means a looping server.
const MAX_PAGES: usize = 100_000;

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The server refused, with one of the API's stable codes.
    #[error("{}: {}", .body.error.code, .body.error.message)]
    Api {
        /// The HTTP status.
        status: u16,
        /// The error.
        body: ErrorBody,
    },
    /// `--server` is not a usable `http://host:port` URL.
    #[error("invalid server URL '{url}': {reason}")]
    InvalidUrl {
        /// The URL given.
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// No connection could be made, or it broke before a reply.
    #[error("cannot connect to {server}: {reason}")]
    Connect {
        /// The server.
        server: String,
        /// The cause, innermost last.
        reason: String,
    },
    /// The server did not answer in time.
    #[error("{server} did not answer within {}", crate::duration::format_millis(crate::duration::millis(*.after)))]
    Timeout {
        /// The server.
        server: String,
        /// How long we waited.
        after: Duration,
    },
    /// The reply is not the API's (wrong JSON, wrong status, not JSON at all).
    #[error("unexpected reply from the server (HTTP {status}): {reason}")]
    BadReply {
        /// The HTTP status.
        status: u16,
        /// What was wrong, with a quote of the body.
        reason: String,
    },
    /// A watch stream broke, stalled or ended without a final frame.
    #[error("the watch stream from {server} was cut off: {reason}")]
    StreamLost {
        /// The server.
        server: String,
        /// How.
        reason: String,
    },
}

impl ClientError {
    /// The stable code printed after `error:`.
    pub fn code(&self) -> &str {
        match self {
            ClientError::Api { body, .. } => &body.error.code,
            ClientError::InvalidUrl { .. } => "invalid_url",
            ClientError::Connect { .. } => "cannot_connect",
            ClientError::Timeout { .. } => "timeout",
            ClientError::BadReply { .. } => "bad_reply",
            ClientError::StreamLost { .. } => "stream_lost",
        }
    }
}

/// A client of one server. Cheap to clone (the connection pool is shared).
#[derive(Debug, Clone)]
pub struct Client {
    http: HttpClient<HttpConnector, Full<Bytes>>,
    /// `http://host:port`, without a trailing slash.
    base: String,
    /// Sent as [`ACTOR_HEADER`] when set; the server's default otherwise.
    actor: Option<Actor>,
}

/// The header a write uses to say whose authority it speaks with (SPEC L5). Without it the
/// server takes drain as the owner's and everything else as the app's.
pub const ACTOR_HEADER: &str = "x-muster-actor";

/// The optional parts of a snapshot read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SnapshotQuery {
    /// Read the set as it was at this revision (within retention).
    pub revision: Option<Revision>,
    /// Page size.
    pub limit: Option<usize>,
    /// The previous page's `next_page_token`.
    pub page_token: Option<String>,
}

impl Client {
    /// A client of the server at `server` (`http://host:port`).
    pub fn new(server: &str) -> Result<Client, ClientError> {
        let base = server.trim_end_matches('/');
        let invalid = |reason: &str| ClientError::InvalidUrl {
            url: server.to_owned(),
            reason: reason.to_owned(),
        };
        let uri: hyper::Uri = base.parse().map_err(|_| invalid("not a URL"))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some("https") => return Err(invalid("https is not supported yet: use http://")),
            _ => return Err(invalid("must start with http://")),
        }
        if uri.authority().is_none() {
            return Err(invalid("names no host"));
        }
        if uri.query().is_some() {
            return Err(invalid("must not hold a query"));
        }
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
        connector.set_nodelay(true);
        let http = HttpClient::builder(TokioExecutor::new()).build(connector);
        Ok(Client {
            http,
            base: base.to_owned(),
            actor: None,
        })
    }

    /// The same client, speaking as `actor` on every request.
    #[must_use]
    pub fn with_actor(mut self, actor: Option<Actor>) -> Client {
        self.actor = actor;
        self
    }

    /// The server's URL.
    pub fn server(&self) -> &str {
        &self.base
    }

    /// `PUT /v1/registry/{tenant}/{namespace}/{service}/{instance}`.
    pub async fn register(
        &self,
        key: &ServiceKey,
        instance: &InstanceId,
        request: &RegisterRequest,
    ) -> Result<WriteReply, ClientError> {
        self.call(Method::PUT, &instance_path(key, instance, ""), Some(request))
            .await
    }

    /// `PUT .../{instance}/serving`.
    pub async fn set_serving(
        &self,
        key: &ServiceKey,
        instance: &InstanceId,
        request: &SetServingRequest,
    ) -> Result<WriteReply, ClientError> {
        self.call(Method::PUT, &instance_path(key, instance, "/serving"), Some(request))
            .await
    }

    /// `POST .../{instance}/drain`.
    pub async fn drain(
        &self,
        key: &ServiceKey,
        instance: &InstanceId,
        request: &DrainRequest,
    ) -> Result<WriteReply, ClientError> {
        self.call(Method::POST, &instance_path(key, instance, "/drain"), Some(request))
            .await
    }

    /// `DELETE .../{instance}?incarnation=N[&expected_revision=R]`.
    pub async fn deregister(
        &self,
        key: &ServiceKey,
        instance: &InstanceId,
        query: &DeregisterQuery,
    ) -> Result<WriteReply, ClientError> {
        let mut path = format!("{}?incarnation={}", instance_path(key, instance, ""), query.incarnation);
        if let Some(expected) = query.expected_revision {
            path.push_str(&format!("&expected_revision={expected}"));
        }
        self.call(Method::DELETE, &path, None::<&()>).await
    }

    /// `GET /v1/registry/{tenant}/{namespace}/{service}`: one page.
    pub async fn snapshot(&self, key: &ServiceKey, query: &SnapshotQuery) -> Result<SnapshotReply, ClientError> {
        let mut params = Vec::new();
        if let Some(revision) = query.revision {
            params.push(format!("revision={revision}"));
        }
        if let Some(limit) = query.limit {
            params.push(format!("limit={limit}"));
        }
        if let Some(token) = &query.page_token {
            params.push(format!("page_token={}", percent_encode(token)));
        }
        let mut path = format!("/v1/registry/{}/{}/{}", key.tenant, key.namespace, key.service);
        if !params.is_empty() {
            path.push('?');
            path.push_str(&params.join("&"));
        }
        self.call(Method::GET, &path, None::<&()>).await
    }

    /// The whole set: every page of [`Client::snapshot`], joined into one reply.
    pub async fn snapshot_all(
        &self,
        key: &ServiceKey,
        revision: Option<Revision>,
    ) -> Result<SnapshotReply, ClientError> {
        let mut query = SnapshotQuery {
            revision,
            ..SnapshotQuery::default()
        };
        let mut whole = self.snapshot(key, &query).await?;
        for _ in 0..MAX_PAGES {
            let Some(token) = whole.next_page_token.take() else {
                return Ok(whole);
            };
            if query.page_token.as_ref() == Some(&token) {
                return Err(bad_reply(StatusCode::OK, "the server repeated a page token"));
            }
            query.page_token = Some(token);
            let page = self.snapshot(key, &query).await?;
            whole.endpoints.extend(page.endpoints);
            whole.next_page_token = page.next_page_token;
        }
        Err(bad_reply(
            StatusCode::OK,
            "the snapshot did not end after 100,000 pages",
        ))
    }

    /// `GET /v1/registry/{tenant}/{namespace}`.
    pub async fn services(&self, namespace: &NamespaceKey) -> Result<ServicesReply, ClientError> {
        let path = format!("/v1/registry/{}/{}", namespace.tenant, namespace.namespace);
        self.call(Method::GET, &path, None::<&()>).await
    }

    /// `GET /v1/watch/{tenant}/{namespace}/{service}[?from_revision=R]`.
    pub async fn watch_service(
        &self,
        key: &ServiceKey,
        from: Option<Revision>,
        idle_timeout: Duration,
    ) -> Result<Watch, ClientError> {
        let path = format!("/v1/watch/{}/{}/{}", key.tenant, key.namespace, key.service);
        self.watch(path, from, idle_timeout).await
    }

    /// `GET /v1/watch/{tenant}/{namespace}[?from_revision=R]`.
    pub async fn watch_namespace(
        &self,
        namespace: &NamespaceKey,
        from: Option<Revision>,
        idle_timeout: Duration,
    ) -> Result<Watch, ClientError> {
        let path = format!("/v1/watch/{}/{}", namespace.tenant, namespace.namespace);
        self.watch(path, from, idle_timeout).await
    }

    /// `POST /v1/leases/{tenant}`.
    pub async fn grant_lease(&self, tenant: &Label, request: &GrantLeaseRequest) -> Result<WriteReply, ClientError> {
        self.call(Method::POST, &format!("/v1/leases/{tenant}"), Some(request))
            .await
    }

    /// `PUT /v1/leases/{tenant}/{id}/renew`.
    pub async fn renew_lease(&self, tenant: &Label, lease: LeaseId) -> Result<LeaseReply, ClientError> {
        self.call(Method::PUT, &format!("/v1/leases/{tenant}/{lease}/renew"), None::<&()>)
            .await
    }

    /// `DELETE /v1/leases/{tenant}/{id}`.
    pub async fn revoke_lease(&self, tenant: &Label, lease: LeaseId) -> Result<WriteReply, ClientError> {
        self.call(Method::DELETE, &format!("/v1/leases/{tenant}/{lease}"), None::<&()>)
            .await
    }

    /// `GET /v1/status`.
    pub async fn status(&self) -> Result<StatusReply, ClientError> {
        self.call(Method::GET, "/v1/status", None::<&()>).await
    }

    async fn watch(
        &self,
        mut path: String,
        from: Option<Revision>,
        idle_timeout: Duration,
    ) -> Result<Watch, ClientError> {
        if let Some(from) = from {
            path.push_str(&format!("?from_revision={from}"));
        }
        let exchange = self.send(Method::GET, &path, None);
        let response = tokio::time::timeout(REQUEST_TIMEOUT, exchange)
            .await
            .map_err(|_| self.timeout())??;
        if !response.status().is_success() {
            let status = response.status();
            let body = self.read_body(response).await?;
            return Err(error_reply(status, &body));
        }
        Ok(Watch::new(response.into_body(), self.base.clone(), idle_timeout))
    }

    /// One unary exchange, bounded by [`REQUEST_TIMEOUT`], decoded as `T` or an error body.
    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&impl Serialize>,
    ) -> Result<T, ClientError> {
        let body = body
            .map(|body| serde_json::to_vec(body).map(Bytes::from))
            .transpose()
            .map_err(|err| bad_reply(StatusCode::OK, &format!("cannot encode the request: {err}")))?;
        let exchange = async {
            let response = self.send(method, path, body).await?;
            let status = response.status();
            let bytes = self.read_body(response).await?;
            Ok::<_, ClientError>((status, bytes))
        };
        let (status, bytes) = tokio::time::timeout(REQUEST_TIMEOUT, exchange)
            .await
            .map_err(|_| self.timeout())??;
        if !status.is_success() {
            return Err(error_reply(status, &bytes));
        }
        serde_json::from_slice(&bytes).map_err(|err| bad_reply(status, &format!("{err} in {}", quote(&bytes))))
    }

    async fn send(&self, method: Method, path: &str, body: Option<Bytes>) -> Result<Response<Incoming>, ClientError> {
        let mut request = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header(ACCEPT, "application/json");
        if body.is_some() {
            request = request.header(CONTENT_TYPE, "application/json");
        }
        if let Some(actor) = self.actor {
            request = request.header(ACTOR_HEADER, crate::render::wire_name(&actor));
        }
        let request = request
            .body(Full::new(body.unwrap_or_default()))
            .map_err(|err| ClientError::InvalidUrl {
                url: format!("{}{path}", self.base),
                reason: err.to_string(),
            })?;
        self.http.request(request).await.map_err(|err| ClientError::Connect {
            server: self.base.clone(),
            reason: causes(&err),
        })
    }

    async fn read_body(&self, response: Response<Incoming>) -> Result<Bytes, ClientError> {
        let status = response.status();
        response
            .into_body()
            .collect()
            .await
            .map(|collected| collected.to_bytes())
            .map_err(|err| bad_reply(status, &format!("the reply broke off: {}", causes(&err))))
    }

    fn timeout(&self) -> ClientError {
        ClientError::Timeout {
            server: self.base.clone(),
            after: REQUEST_TIMEOUT,
        }
    }
}

fn instance_path(key: &ServiceKey, instance: &InstanceId, suffix: &str) -> String {
    // Labels hold only a-z, 0-9 and '-', so the segments need no escaping.
    format!(
        "/v1/registry/{}/{}/{}/{instance}{suffix}",
        key.tenant, key.namespace, key.service
    )
}

/// The error of a non-success reply: the API's error body, or a [`ClientError::BadReply`].
fn error_reply(status: StatusCode, bytes: &[u8]) -> ClientError {
    match serde_json::from_slice::<ErrorBody>(bytes) {
        Ok(body) => ClientError::Api {
            status: status.as_u16(),
            body,
        },
        Err(_) => bad_reply(status, &format!("not an API error: {}", quote(bytes))),
    }
}

fn bad_reply(status: StatusCode, reason: &str) -> ClientError {
    ClientError::BadReply {
        status: status.as_u16(),
        reason: reason.to_owned(),
    }
}

/// The start of a body, for error messages.
fn quote(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(QUOTE_BYTES)]);
    let ellipsis = if bytes.len() > QUOTE_BYTES { "..." } else { "" };
    format!("'{}{ellipsis}'", text.trim().escape_debug())
}

/// An error and its sources, joined: hyper's top-level messages alone ("client error
/// (Connect)") do not say what happened.
pub(crate) fn causes(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}
