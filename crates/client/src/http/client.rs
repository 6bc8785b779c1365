//! [`Client`]: one function per route of the `/v1` API ([`muster_core::api`]), typed replies,
//! the server's `{"error": {"code", "message"}}` as [`ClientError::Api`]; [`ClientBuilder`]:
//! how one is made.
//!
//! By default HTTP/1.1 on hyper-util's pooled legacy client (CRATES.md "HTTP"), in plain for
//! `http://` and over rustls for `https://` with the CA (and, for mutual TLS, the client
//! certificate) of [`ClientBuilder::tls`]; [`ClientBuilder::connector`] and
//! [`ClientBuilder::service`] put another transport underneath (see [`transport`](super::transport)).
//! Over built-in TLS, watches have a pool of their own that offers HTTP/2 by ALPN: a server
//! that takes it carries all of the client's watches on one connection (SPEC W3), while
//! unary calls stay on HTTP/1.1 and never wait behind a watch's flow control.
//! Every unary call is bounded by [`REQUEST_TIMEOUT`] (or [`ClientBuilder::timeout`]); a
//! watch is bounded per chunk instead (see [`Watch`]).

use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::Bytes;
use hyper::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::client::legacy::connect::Connect;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tower::ServiceExt;

use muster_core::api::{
    AddMemberRequest, AuditQuery, AuditReply, CheckReportReply, ClusterReply, LeaseReply, PolicyReply, PolicySetReply,
    ServicesReply, SnapshotReply, StatusReply, TokenListReply, TokenRevokeReply, TokenSecretReply, WriteReply,
};
use muster_core::convergence::{ClientId, Cohort, ConvergenceReply, ConvergenceReport, ReportReply};
use muster_core::{Actor, InstanceId, Label, LeaseId, NamespaceKey, Revision, ServiceKey};

use crate::http::error::{ClientError, bad_reply, causes, error_reply, quote};
use crate::http::lines::MAX_LINE_BYTES;
use crate::http::request::{
    CheckReport, Deregistration, Drain, InFlightReport, LeaseGrant, NewToken, Registration, ServingChange,
};
use crate::http::tls::ClientTls;
use crate::http::transport::{self, Body, BoxError, HttpService};
use crate::http::watch::Watch;
use crate::report::{ReportIdentity, Reporter};

/// The server a client talks to when nothing says otherwise: `muster serve`'s default HTTP
/// address.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:7070";

/// How long to wait for a TCP connection: the registry is on loopback or the local network,
/// so a server that has not accepted in 5 s is down for a person at a terminal.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a unary call may take in all: a write waits for a durable (fsynced, quorum)
/// commit, and a Raft election after a leader loss takes a few seconds; 30 s covers both
/// with room, and still ends a hung call.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Pages a snapshot read follows before giving up: at the server's page sizes this is
/// millions of endpoints, far past any one service, so hitting it means a looping server.
const MAX_PAGES: usize = 100_000;

/// The largest unary reply read into memory: the same bound as a watch's snapshot frame
/// ([`MAX_LINE_BYTES`]), since an unpaged snapshot read carries the same set. Without it a
/// broken server (or something posing as one) could fill the caller's memory within the
/// request timeout.
const MAX_REPLY_BYTES: usize = MAX_LINE_BYTES;

/// The header a write uses to say whose authority it speaks with (SPEC L5). Without it the
/// server takes drain as the owner's and everything else as the app's.
pub const ACTOR_HEADER: &str = "x-muster-actor";

/// A client of one server. Cheap to clone (the transport, and its connection pool, is
/// shared).
#[derive(Debug, Clone)]
pub struct Client {
    http: HttpService,
    /// Where watches go: over built-in TLS, a transport of their own offering HTTP/2 (SPEC
    /// W3), so unary calls (renewals among them) never queue behind a watch's flow control;
    /// otherwise `http`.
    watches: HttpService,
    /// `http://host:port`, without a trailing slash.
    base: Arc<str>,
    /// Sent as [`ACTOR_HEADER`] when set; the server's default otherwise.
    actor: Option<Actor>,
    /// The bound on one unary call.
    timeout: Duration,
    /// `Authorization: Bearer <secret>` on every request, when set (SPEC S1).
    authorization: Option<HeaderValue>,
    /// Reports what this client's resolvers applied (SPEC O3); none in the reporter's own
    /// copy of the client, and when reports are off.
    reporter: Option<Arc<Reporter>>,
}

/// The optional parts of a snapshot read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SnapshotQuery {
    /// Read the set as it was at this revision (within retention).
    pub revision: Option<Revision>,
    /// Page size.
    pub limit: Option<usize>,
    /// The previous page's `next_page_token`.
    pub page_token: Option<String>,
    /// In a federated region, the service's mirrored sets and failover decision too (on
    /// the first page; SPEC G1, G2).
    pub federation: bool,
}

/// The optional parts of a convergence read (SPEC O3).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConvergenceQuery {
    /// The revision subscribers should have applied (default: the service's last change).
    pub revision: Option<Revision>,
    /// Only this cohort's subscribers.
    pub cohort: Option<Cohort>,
    /// The fraction of live subscribers that must have applied it (default 1).
    pub fraction: Option<f64>,
}

/// Builds a [`Client`]: the server URL is required, everything else has a default. Nothing
/// is checked until [`build`](ClientBuilder::build), which checks everything.
///
/// ```no_run
/// # fn main() -> Result<(), muster_client::ClientError> {
/// use std::time::Duration;
/// use muster_client::{Actor, Client};
///
/// let client = Client::builder("https://muster.internal:7070")
///     .token("s3cret")
///     .timeout(Duration::from_secs(2))
///     .actor(Actor::App)
///     .build()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ClientBuilder {
    url: String,
    timeout: Duration,
    connect_timeout: Duration,
    token: Option<muster_core::Secret>,
    tls: Option<ClientTls>,
    actor: Option<Actor>,
    transport: Option<HttpService>,
    /// Who reports what the resolvers applied.
    report: ReportIdentity,
    /// Whether resolvers report at all.
    report_on: bool,
}

impl std::fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("url", &self.url)
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            // Never the secret itself.
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("tls", &self.tls.is_some())
            .field("actor", &self.actor)
            .field("custom_transport", &self.transport.is_some())
            .field("report", &self.report_on.then_some(&self.report))
            .finish()
    }
}

impl ClientBuilder {
    /// Bounds every unary call (and a watch's opening) by `timeout` instead of
    /// [`REQUEST_TIMEOUT`].
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.timeout = timeout;
        self
    }

    /// Bounds the TCP connection (of the built-in transport) by `timeout` instead of
    /// [`CONNECT_TIMEOUT`].
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.connect_timeout = timeout;
        self
    }

    /// Sends `secret` as the bearer token of every request (the server needs one when
    /// `[auth] enabled = true`). A secret that cannot be a header value (a control
    /// character) is refused by [`build`](ClientBuilder::build), as `invalid_token`.
    #[must_use]
    pub fn token(mut self, secret: impl Into<String>) -> ClientBuilder {
        self.token = Some(muster_core::Secret::new(secret));
        self
    }

    /// Verifies an `https://` server with `tls`'s CA and presents its client certificate, if
    /// it holds one, to a server that asks (mutual TLS). Without it an `https://` server is
    /// refused before anything is sent.
    #[must_use]
    pub fn tls(mut self, tls: &ClientTls) -> ClientBuilder {
        self.tls = Some(tls.clone());
        self
    }

    /// Speaks as `actor` on every request (SPEC L5).
    #[must_use]
    pub fn actor(mut self, actor: Actor) -> ClientBuilder {
        self.actor = Some(actor);
        self
    }

    /// Connects through `connector` (anything hyper-util's legacy client accepts: a
    /// `tower::Service<Uri>` yielding a connection), on the built-in pooled HTTP/1.1 client.
    /// The connector owns TLS and connection timeouts: [`tls`](ClientBuilder::tls) with it
    /// is refused by [`build`](ClientBuilder::build), and `connect_timeout` is not used.
    #[must_use]
    pub fn connector<C>(mut self, connector: C) -> ClientBuilder
    where
        C: Connect + Clone + Send + Sync + 'static,
    {
        self.transport = Some(transport::over(connector));
        self
    }

    /// Sends every request through `service`: a mock, or a middleware stack over a
    /// transport of your own. Requests carry absolute URIs and a boxed [`Body`]; any reply
    /// body of [`Bytes`] is accepted. As with [`connector`](ClientBuilder::connector), TLS is
    /// the service's business.
    #[must_use]
    pub fn service<S, B>(mut self, service: S) -> ClientBuilder
    where
        S: tower::Service<Request<Body>, Response = Response<B>> + Clone + Send + Sync + 'static,
        S::Future: Send + 'static,
        S::Error: Into<BoxError>,
        B: hyper::body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        self.transport = Some(transport::boxed(service));
        self
    }

    /// Reports as `id` what this client's resolvers applied (SPEC O3) instead of
    /// `host:pid` ([`ReportIdentity::for_this_process`]). An id should stay the same across
    /// reconnects and restarts of one instance (a pod name).
    pub fn client_id(mut self, id: ClientId) -> ClientBuilder {
        self.report.client_id = id;
        self
    }

    /// Reports under the cohort `label` (`zone=a`, `version=1.4`).
    pub fn cohort(mut self, label: Cohort) -> ClientBuilder {
        self.report.cohort = Some(label);
        self
    }

    /// Sends at most one report per `interval` (default
    /// [`DEFAULT_REPORT_INTERVAL`](crate::report::DEFAULT_REPORT_INTERVAL)).
    pub fn report_interval(mut self, interval: Duration) -> ClientBuilder {
        self.report.interval = interval;
        self
    }

    /// Whether resolvers report what they applied (default: yes). Off, the server cannot
    /// count this client in a deploy's convergence.
    pub fn report_applied(mut self, on: bool) -> ClientBuilder {
        self.report_on = on;
        self
    }

    /// The client. Fails, with a typed error and a stable code, on a URL that is not
    /// `http(s)://host[:port]` without a query (`invalid_url`), a token that cannot be a
    /// header (`invalid_token`), or TLS settings given with a custom transport
    /// (`invalid_tls`).
    pub fn build(self) -> Result<Client, ClientError> {
        let base = parse_base(&self.url)?;
        let authorization = self.token.as_ref().map(|token| bearer(token.expose())).transpose()?;
        let (http, watches) = match (self.transport, &self.tls) {
            (Some(_), Some(_)) => {
                return Err(ClientError::InvalidTls {
                    reason: "a custom connector or service brings its own TLS; do not also set tls".into(),
                    source: None,
                });
            }
            (Some(custom), None) => (custom.clone(), custom),
            (None, None) => {
                let http = transport::over(muster_tls::Connector::new(None, self.connect_timeout));
                (http.clone(), http)
            }
            (None, Some(tls)) => (
                transport::over(muster_tls::Connector::new(Some(tls.config()), self.connect_timeout)),
                transport::over_for_watches(muster_tls::Connector::new(
                    Some(tls.watch_config()),
                    self.connect_timeout,
                )),
            ),
        };
        let mut client = Client {
            http,
            watches,
            base: base.into(),
            actor: self.actor,
            timeout: self.timeout,
            authorization,
            reporter: None,
        };
        // The reporter speaks through a copy of the client without a reporter of its own.
        if self.report_on {
            client.reporter = Some(Reporter::new(self.report, client.clone()));
        }
        Ok(client)
    }
}

/// The URL without its trailing slash, if it is one a client can talk to.
fn parse_base(server: &str) -> Result<&str, ClientError> {
    let base = server.trim_end_matches('/');
    let invalid = |reason: &str| ClientError::InvalidUrl {
        url: server.to_owned(),
        reason: reason.to_owned(),
    };
    let uri: hyper::Uri = base
        .parse()
        .map_err(|_| invalid("not a URL; write http://host:port or https://host:port"))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => {
            return Err(invalid(
                "must start with http:// or https://, e.g. http://127.0.0.1:7070",
            ));
        }
    }
    let Some(authority) = uri.authority() else {
        return Err(invalid("names no host; write http://host:port"));
    };
    let root = format!("{}://{authority}", uri.scheme_str().unwrap_or("http"));
    if uri.query().is_some() {
        return Err(ClientError::InvalidUrl {
            url: server.to_owned(),
            reason: format!("must not hold a query; write {root}"),
        });
    }
    // Every call's path starts at `/v1/...` (the client adds it): a base with a path would
    // make every call fail `not_found: no such route` long after the client was built.
    if !matches!(uri.path(), "" | "/") {
        return Err(ClientError::InvalidUrl {
            url: server.to_owned(),
            reason: format!(
                "must not hold a path ('{}'): the client adds /v1/... itself; write {root}",
                uri.path()
            ),
        });
    }
    Ok(base)
}

/// The `Authorization` value of a bearer secret, marked sensitive (kept out of logs).
fn bearer(secret: &str) -> Result<HeaderValue, ClientError> {
    let mut value = HeaderValue::from_str(&format!("Bearer {secret}")).map_err(|_| ClientError::InvalidToken {
        reason: "the token holds characters a header cannot carry (a control character?)".into(),
    })?;
    value.set_sensitive(true);
    Ok(value)
}

impl Client {
    /// A builder of a client of the server at `server` (`http://host:port`, or
    /// `https://host:port` with [`ClientBuilder::tls`]). A URL the client cannot use is
    /// refused when it is built, saying what to write instead:
    ///
    /// ```
    /// use std::time::Duration;
    /// use muster_client::Client;
    ///
    /// let client = Client::builder("http://127.0.0.1:7070").timeout(Duration::from_secs(2)).build()?;
    /// assert_eq!(client.server(), "http://127.0.0.1:7070");
    ///
    /// let error = Client::builder("http://127.0.0.1:7070/v1").build().unwrap_err();
    /// assert_eq!(error.code().as_str(), "invalid_url");
    /// assert!(error.to_string().contains("http://127.0.0.1:7070"), "{error}");
    /// # Ok::<(), muster_client::ClientError>(())
    /// ```
    pub fn builder(server: impl Into<String>) -> ClientBuilder {
        ClientBuilder {
            url: server.into(),
            timeout: REQUEST_TIMEOUT,
            connect_timeout: CONNECT_TIMEOUT,
            token: None,
            tls: None,
            actor: None,
            transport: None,
            report: ReportIdentity::for_this_process(),
            report_on: true,
        }
    }

    /// A client of `server` with every default: `Client::builder(server).build()`.
    pub fn new(server: &str) -> Result<Client, ClientError> {
        Client::builder(server).build()
    }

    /// The same client with another bound on unary calls: the registrar's renewals must fail
    /// fast enough to be retried before the lease runs out.
    pub(crate) fn with_timeout(mut self, timeout: Duration) -> Client {
        self.timeout = timeout;
        self
    }

    /// The server's URL.
    pub fn server(&self) -> &str {
        &self.base
    }

    /// Who this client's resolvers report as (none: they do not report).
    pub fn report_identity(&self) -> Option<&ReportIdentity> {
        self.reporter.as_deref().map(Reporter::identity)
    }

    /// Tells the server (in this client's next convergence report) that `key`'s view is
    /// current at `revision`, for a consumer that drives a watch itself; resolvers do this on
    /// their own. Nothing happens when reports are off.
    pub fn note_applied(&self, key: &ServiceKey, revision: Revision) {
        if let Some(reporter) = &self.reporter {
            reporter.note(key, revision, crate::resolver::now_ms());
        }
    }

    pub(crate) fn reporter(&self) -> Option<Arc<Reporter>> {
        self.reporter.clone()
    }

    /// `POST /v1/convergence/report`: what this client applied (resolvers send it on their
    /// own; see [`ClientBuilder::report_applied`]).
    pub async fn report_applied(&self, report: &ConvergenceReport) -> Result<ReportReply, ClientError> {
        self.call(Method::POST, "/v1/convergence/report", Some(report)).await
    }

    /// `GET /v1/convergence/{tenant}/{namespace}/{service}`: which revision the service's
    /// subscribers applied, against `query` (`revision=R&cohort=zone=a&fraction=0.99`, or
    /// empty).
    pub async fn convergence(
        &self,
        key: &ServiceKey,
        query: &ConvergenceQuery,
    ) -> Result<ConvergenceReply, ClientError> {
        let mut params = Vec::new();
        if let Some(revision) = query.revision {
            params.push(format!("revision={revision}"));
        }
        if let Some(cohort) = &query.cohort {
            params.push(format!("cohort={}", percent_encode(cohort.as_str())));
        }
        if let Some(fraction) = query.fraction {
            params.push(format!("fraction={fraction}"));
        }
        let mut path = format!("/v1/convergence/{}/{}/{}", key.tenant, key.namespace, key.service);
        if !params.is_empty() {
            path.push('?');
            path.push_str(&params.join("&"));
        }
        self.call(Method::GET, &path, None::<&()>).await
    }

    /// `PUT /v1/registry/{tenant}/{namespace}/{service}/{instance}`. A refusal is a typed
    /// error with the server's stable code, and changes nothing:
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = muster_testkit::server::InProcess::start().await;
    /// # let client = server.client();
    /// use muster_client::{Incarnation, InstanceId, Registration, SnapshotQuery};
    ///
    /// let (key, api_1) = ("prod/api".parse()?, InstanceId::new("api-1")?);
    /// client.register(&key, &api_1, Registration::new(Incarnation(2)).address("10.0.0.7").port("http", 8080)).await?;
    /// // A late write of an older run of the instance is fenced off.
    /// let old = Registration::new(Incarnation(1)).address("10.0.0.9").port("http", 8080);
    /// let error = client.register(&key, &api_1, old).await.unwrap_err();
    /// assert_eq!(error.code().as_str(), "stale_incarnation");
    /// let set = client.snapshot(&key, &SnapshotQuery::default()).await?;
    /// assert_eq!(set.endpoints[0].incarnation, Incarnation(2));
    /// # Ok(()) }
    /// ```
    pub async fn register(
        &self,
        key: &ServiceKey,
        instance: &InstanceId,
        registration: Registration,
    ) -> Result<WriteReply, ClientError> {
        self.call(
            Method::PUT,
            &instance_path(key, instance, ""),
            Some(registration.wire()),
        )
        .await
    }

    /// `PUT .../{instance}/serving`.
    pub async fn set_serving(
        &self,
        key: &ServiceKey,
        instance: &InstanceId,
        change: ServingChange,
    ) -> Result<WriteReply, ClientError> {
        self.call(
            Method::PUT,
            &instance_path(key, instance, "/serving"),
            Some(change.wire()),
        )
        .await
    }

    /// `POST .../{instance}/drain`.
    ///
    /// A drain as the app would on shutdown: `draining` at once, so resolvers stop picking it;
    /// then deregistered when the grace ends (or when it reports nothing in flight):
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = muster_testkit::server::InProcess::start().await;
    /// # let client = server.client();
    /// use std::time::Duration;
    /// use muster_client::{Drain, Incarnation, InstanceId, Registration, ServingState, SnapshotQuery};
    ///
    /// let (key, api_1) = ("prod/api".parse()?, InstanceId::new("api-1")?);
    /// let ready = Registration::new(Incarnation(1)).address("10.0.0.7").port("http", 8080).serving(ServingState::Ready);
    /// client.register(&key, &api_1, ready).await?;
    /// client.drain(&key, &api_1, Drain::new(Incarnation(1)).grace(Duration::from_secs(30)).reason("shutting down")).await?;
    /// let set = client.snapshot(&key, &SnapshotQuery::default()).await?;
    /// assert_eq!(set.endpoints[0].serving, ServingState::Draining);
    /// assert_eq!(set.endpoints[0].observation.reason, "shutting down");
    /// # Ok(()) }
    /// ```
    pub async fn drain(
        &self,
        key: &ServiceKey,
        instance: &InstanceId,
        drain: Drain,
    ) -> Result<WriteReply, ClientError> {
        self.call(
            Method::POST,
            &instance_path(key, instance, "/drain"),
            Some(drain.wire()),
        )
        .await
    }

    /// `PUT .../{instance}/check`: a TTL check's report; answered after any change it caused
    /// has committed.
    pub async fn report_check(
        &self,
        key: &ServiceKey,
        instance: &InstanceId,
        report: CheckReport,
    ) -> Result<CheckReportReply, ClientError> {
        self.call(
            Method::PUT,
            &instance_path(key, instance, "/check"),
            Some(report.wire()),
        )
        .await
    }

    /// `PUT .../{instance}/in-flight`: requests still in flight; zero ends a drain's grace.
    pub async fn report_in_flight(
        &self,
        key: &ServiceKey,
        instance: &InstanceId,
        report: InFlightReport,
    ) -> Result<WriteReply, ClientError> {
        self.call(
            Method::PUT,
            &instance_path(key, instance, "/in-flight"),
            Some(report.wire()),
        )
        .await
    }

    /// `DELETE .../{instance}?incarnation=N[&expected_revision=R]`.
    pub async fn deregister(
        &self,
        key: &ServiceKey,
        instance: &InstanceId,
        deregistration: Deregistration,
    ) -> Result<WriteReply, ClientError> {
        let query = deregistration.wire();
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
        if query.federation {
            params.push("federation=true".into());
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
        let query = SnapshotQuery {
            revision,
            ..SnapshotQuery::default()
        };
        self.snapshot_pages(key, query).await
    }

    /// The whole current set with, in a federated region, the service's sets mirrored from
    /// peer regions and its failover decision (SPEC G1, G2). A service only mirrored here
    /// reads as an empty local set with its mirrors.
    pub async fn snapshot_federated(&self, key: &ServiceKey) -> Result<SnapshotReply, ClientError> {
        let query = SnapshotQuery {
            federation: true,
            ..SnapshotQuery::default()
        };
        self.snapshot_pages(key, query).await
    }

    /// `GET /v1/federation/status`: this region's mirrors of its peers and its failover
    /// decisions (SPEC G2).
    pub async fn federation_status(&self) -> Result<muster_core::federation::FederationStatusReply, ClientError> {
        self.call(Method::GET, "/v1/federation/status", None::<&()>).await
    }

    /// Every page of a read, joined into one reply.
    async fn snapshot_pages(&self, key: &ServiceKey, mut query: SnapshotQuery) -> Result<SnapshotReply, ClientError> {
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
            // The token pins the first page's revision; pages of two revisions joined would be
            // a set the server never had.
            if page.revision != whole.revision {
                return Err(bad_reply(
                    StatusCode::OK,
                    &format!(
                        "a snapshot page at revision {} continued one at revision {}",
                        page.revision, whole.revision
                    ),
                ));
            }
            whole.endpoints.extend(page.endpoints);
            whole.next_page_token = page.next_page_token;
        }
        Err(bad_reply(
            StatusCode::OK,
            &format!("the snapshot did not end after {MAX_PAGES} pages"),
        ))
    }

    /// `GET /v1/registry/{tenant}/{namespace}`.
    pub async fn services(&self, namespace: &NamespaceKey) -> Result<ServicesReply, ClientError> {
        let path = format!("/v1/registry/{}/{}", namespace.tenant, namespace.namespace);
        self.call(Method::GET, &path, None::<&()>).await
    }

    /// `GET /v1/watch/{tenant}/{namespace}/{service}[?from_revision=R]`.
    ///
    /// The raw stream of frames (a [`Resolver`](crate::Resolver) verifies and applies them for
    /// you): a snapshot of a service that holds endpoints first, then updates, each naming the
    /// revision it follows, and progress frames.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = muster_testkit::server::InProcess::start().await;
    /// # let client = server.client();
    /// use std::time::Duration;
    /// use muster_client::api::Frame;
    /// use muster_client::{Incarnation, InstanceId, Registration};
    ///
    /// let key = "prod/web".parse()?;
    /// client.register(&key, &InstanceId::new("web-1")?, Registration::new(Incarnation(1)).address("10.0.0.7")).await?;
    /// let mut watch = client.watch_service(&key, None, Duration::from_secs(30)).await?;
    /// let Some((_, Frame::Snapshot { snapshot, .. })) = watch.next_frame().await? else { panic!("a snapshot first") };
    /// assert_eq!(snapshot.len(), 1);
    /// client.register(&key, &InstanceId::new("web-2")?, Registration::new(Incarnation(1)).address("10.0.0.8")).await?;
    /// loop {
    ///     match watch.next_frame().await?.expect("the watch stays open") {
    ///         (_, Frame::Update(update)) => {
    ///             assert_eq!(update.events.len(), 1);
    ///             break;
    ///         }
    ///         _ => continue, // progress
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
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
    pub async fn grant_lease(&self, tenant: &Label, grant: LeaseGrant) -> Result<WriteReply, ClientError> {
        self.call(Method::POST, &format!("/v1/leases/{tenant}"), Some(grant.wire()))
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

    /// `GET /v1/policy`: the replicated registry policy, decoded as `P`
    /// (`muster_registry::RegistryConfig`; this crate does not depend on the registry).
    pub async fn policy<P: DeserializeOwned>(&self) -> Result<PolicyReply<P>, ClientError> {
        self.call(Method::GET, "/v1/policy", None::<&()>).await
    }

    /// `PUT /v1/policy`: replaces the registry policy; commands after the reply's revision
    /// are judged by it.
    pub async fn set_policy<P: Serialize>(&self, policy: &P) -> Result<PolicySetReply, ClientError> {
        self.call(Method::PUT, "/v1/policy", Some(policy)).await
    }

    /// `POST /v1/acl/bootstrap`: the first operator token; works once per cluster, and only
    /// with the server's bootstrap secret when it has one (else only from its own host).
    pub async fn acl_bootstrap(&self, bootstrap_secret: Option<&str>) -> Result<TokenSecretReply, ClientError> {
        let header = bootstrap_secret.map(|secret| (muster_core::api::BOOTSTRAP_SECRET_HEADER, secret));
        self.call_with(Method::POST, "/v1/acl/bootstrap", None::<&()>, header)
            .await
    }

    /// `POST /v1/acl/tokens`: a new token; its secret is in the reply only.
    pub async fn create_token(&self, token: NewToken) -> Result<TokenSecretReply, ClientError> {
        self.call(Method::POST, "/v1/acl/tokens", Some(token.wire())).await
    }

    /// `GET /v1/acl/self`: the caller's own token.
    pub async fn acl_self(&self) -> Result<muster_core::api::TokenInfo, ClientError> {
        self.call(Method::GET, "/v1/acl/self", None::<&()>).await
    }

    /// `GET /v1/acl/tokens`.
    pub async fn tokens(&self) -> Result<TokenListReply, ClientError> {
        self.call(Method::GET, "/v1/acl/tokens", None::<&()>).await
    }

    /// `DELETE /v1/acl/tokens/{accessor}`.
    pub async fn revoke_token(&self, accessor: &str) -> Result<TokenRevokeReply, ClientError> {
        self.call(Method::DELETE, &format!("/v1/acl/tokens/{accessor}"), None::<&()>)
            .await
    }

    /// `GET /v1/cluster`.
    pub async fn cluster(&self) -> Result<ClusterReply, ClientError> {
        self.call(Method::GET, "/v1/cluster", None::<&()>).await
    }

    /// `POST /v1/cluster/members` (ask the leader): returns once the node votes.
    pub async fn add_member(&self, request: &AddMemberRequest) -> Result<ClusterReply, ClientError> {
        self.call(Method::POST, "/v1/cluster/members", Some(request)).await
    }

    /// `DELETE /v1/cluster/members/{id}` (ask the leader).
    pub async fn remove_member(&self, id: u64) -> Result<ClusterReply, ClientError> {
        self.call(Method::DELETE, &format!("/v1/cluster/members/{id}"), None::<&()>)
            .await
    }

    /// `GET /v1/audit`: one page of the audit trail, newest first (admin).
    pub async fn audit(&self, query: &AuditQuery) -> Result<AuditReply, ClientError> {
        let text = |name: &str, value: &Option<String>| value.as_ref().map(|v| format!("{name}={}", percent_encode(v)));
        let number = |name: &str, value: Option<u64>| value.map(|v| format!("{name}={v}"));
        let params: Vec<String> = [
            text("tenant", &query.tenant),
            text("principal", &query.principal),
            text("key", &query.key),
            text("outcome", &query.outcome),
            number("since_ms", query.since_ms),
            number("until_ms", query.until_ms),
            number("limit", query.limit.map(|limit| limit as u64)),
            text("cursor", &query.cursor),
        ]
        .into_iter()
        .flatten()
        .collect();
        let mut path = "/v1/audit".to_owned();
        if !params.is_empty() {
            path.push('?');
            path.push_str(&params.join("&"));
        }
        self.call(Method::GET, &path, None::<&()>).await
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
        // The opening and, for a refusal, its error body share the bound: a server that sends
        // headers and then stalls must not hang the caller.
        let opening = async {
            let response = self.send_on(&self.watches, Method::GET, &path, None, None).await?;
            if response.status().is_success() {
                return Ok(response);
            }
            let status = response.status();
            let body = self.read_body(response).await?;
            Err(error_reply(status, &body))
        };
        let response = tokio::time::timeout(self.timeout, opening)
            .await
            .map_err(|_| self.timeout())??;
        Ok(Watch::new(response.into_body(), self.base.to_string(), idle_timeout))
    }

    /// One unary exchange, bounded by the client's timeout, decoded as `T` or an error body.
    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&impl Serialize>,
    ) -> Result<T, ClientError> {
        self.call_with(method, path, body, None).await
    }

    /// [`Client::call`] with one more header.
    async fn call_with<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&impl Serialize>,
        header: Option<(&'static str, &str)>,
    ) -> Result<T, ClientError> {
        let body = body
            .map(|body| serde_json::to_vec(body).map(Bytes::from))
            .transpose()
            .map_err(|err| bad_reply(StatusCode::OK, &format!("cannot encode the request: {err}")))?;
        let exchange = async {
            let response = self.send(method, path, body, header).await?;
            let status = response.status();
            let bytes = self.read_body(response).await?;
            Ok::<_, ClientError>((status, bytes))
        };
        let (status, bytes) = tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| self.timeout())??;
        if !status.is_success() {
            return Err(error_reply(status, &bytes));
        }
        serde_json::from_slice(&bytes).map_err(|err| bad_reply(status, &format!("{err} in {}", quote(&bytes))))
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
        header: Option<(&'static str, &str)>,
    ) -> Result<Response<Body>, ClientError> {
        self.send_on(&self.http, method, path, body, header).await
    }

    /// [`Client::send`] through `http`.
    async fn send_on(
        &self,
        http: &HttpService,
        method: Method,
        path: &str,
        body: Option<Bytes>,
        header: Option<(&'static str, &str)>,
    ) -> Result<Response<Body>, ClientError> {
        let mut request = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header(ACCEPT, "application/json");
        if body.is_some() {
            request = request.header(CONTENT_TYPE, "application/json");
        }
        if let Some(actor) = self.actor {
            request = request.header(ACTOR_HEADER, actor_header(actor));
        }
        if let Some(authorization) = &self.authorization {
            request = request.header(AUTHORIZATION, authorization.clone());
        }
        if let Some((name, value)) = header {
            request = request.header(name, value);
        }
        let request =
            request
                .body(transport::full(body.unwrap_or_default()))
                .map_err(|err| ClientError::InvalidUrl {
                    url: format!("{}{path}", self.base),
                    reason: err.to_string(),
                })?;
        dispatch(http.clone(), request)
            .await
            .map_err(|err| ClientError::Connect {
                server: self.base.to_string(),
                reason: causes(&*err),
                source: Arc::from(err),
            })
    }

    async fn read_body(&self, response: Response<Body>) -> Result<Bytes, ClientError> {
        let status = response.status();
        collect(Limited::new(response.into_body(), MAX_REPLY_BYTES))
            .await
            .map(|collected| collected.to_bytes())
            .map_err(|err| {
                if err.is::<LengthLimitError>() {
                    bad_reply(status, &format!("the reply is longer than {MAX_REPLY_BYTES} bytes"))
                } else {
                    bad_reply(status, &format!("the reply broke off: {}", causes(&*err)))
                }
            })
    }

    fn timeout(&self) -> ClientError {
        ClientError::Timeout {
            server: self.base.to_string(),
            after: self.timeout,
        }
    }
}

/// A boxed, `Send` future.
type BoxFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;

/// One exchange with the transport, boxed outside the `async fn`s: rustc cannot prove
/// `Send` for an `async fn` holding the transport's future across an await (the
/// `dyn Error + 'static` in its types loses its lifetime inside the coroutine, a known
/// limitation of rustc's auto-trait inference for coroutines), so the callers would not be
/// `Send`. A boxed `dyn Future + Send` is.
fn dispatch(http: HttpService, request: Request<Body>) -> BoxFuture<Result<Response<Body>, BoxError>> {
    Box::pin(http.oneshot(request))
}

/// A body read whole, boxed for the same reason as [`dispatch`].
fn collect(body: Limited<Body>) -> BoxFuture<Result<http_body_util::Collected<Bytes>, BoxError>> {
    Box::pin(body.collect())
}

fn instance_path(key: &ServiceKey, instance: &InstanceId, suffix: &str) -> String {
    // Labels hold only a-z, 0-9 and '-', so the segments need no escaping.
    format!(
        "/v1/registry/{}/{}/{}/{instance}{suffix}",
        key.tenant, key.namespace, key.service
    )
}

/// The [`ACTOR_HEADER`] value of an actor: its wire name, as the server parses it.
fn actor_header(actor: Actor) -> &'static str {
    match actor {
        Actor::Owner => "owner",
        Actor::App => "app",
        Actor::Checker => "checker",
    }
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

#[cfg(test)]
#[path = "client_tests.rs"]
mod builder_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_http_and_https_urls_without_a_query_are_accepted() {
        let client = Client::new("http://127.0.0.1:7070/").unwrap();
        assert_eq!(client.server(), "http://127.0.0.1:7070");
        assert_eq!(Client::new("https://a:1").unwrap().server(), "https://a:1");
        for (url, reason) in [
            ("ftp://a:1", "must start with http:// or https://"),
            ("127.0.0.1:7070", "must start with http://"),
            ("http://a:1/?x=1", "must not hold a query"),
        ] {
            let err = Client::new(url).unwrap_err();
            assert_eq!(err.code(), "invalid_url");
            assert!(err.to_string().contains(reason), "{url}: {err}");
        }
    }

    #[test]
    fn the_actor_header_speaks_the_servers_names() {
        for actor in [Actor::Owner, Actor::App, Actor::Checker] {
            let wire = serde_json::to_value(actor).unwrap();
            assert_eq!(wire.as_str(), Some(actor_header(actor)));
        }
    }

    #[test]
    fn page_tokens_are_percent_encoded() {
        assert_eq!(percent_encode("a+b/c=~"), "a%2Bb%2Fc%3D~");
    }

    #[test]
    fn instance_paths_name_every_part_of_the_key() {
        let key = ServiceKey::new("acme", "prod", "api").unwrap();
        let instance = InstanceId::new("api-1").unwrap();
        assert_eq!(
            instance_path(&key, &instance, "/serving"),
            "/v1/registry/acme/prod/api/api-1/serving"
        );
    }
}
