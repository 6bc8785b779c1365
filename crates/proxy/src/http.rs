//! HTTP forwarding (SPEC D3): HTTP/1.1 and HTTP/2 (h2c, so gRPC) on one port, each request
//! balanced, retried where safe within the budget, its outcome fed to local ejection.
//!
//! ```text
//!  request ──▶ choose (hash header?) ──▶ upstream pool of that endpoint (h1, or h2 for h2)
//!                   ▲                          │
//!                   │ retry: budget, method,   ▼
//!                   └── body replayable ◀── classify: connect failed / reset / 5xx /
//!                                            grpc UNAVAILABLE ──▶ report (ejection)
//!  response ──▶ body tracked: the request counts in flight until its body ends
//! ```
//!
//! Each endpoint has its own upstream pools, dropped when the registry drains or removes the
//! endpoint: idle pooled connections close at once, in-flight requests keep their connection
//! to the end, and hyper closes an HTTP/2 connection with GOAWAY once its streams finish.
//! Requests are sent upstream in the version they arrived in (h2c prior knowledge for
//! HTTP/2), which is what gRPC needs.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::header::{CONNECTION, CONTENT_TYPE, COOKIE, HeaderMap, HeaderName, HeaderValue};
use hyper::{Request, Response, StatusCode, Uri, Version};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use muster_core::Protocol;
use tokio::net::TcpStream;

use crate::answer::{GRPC_INTERNAL, error_response, refused};
use crate::classify::{GRPC_UNAVAILABLE, Outcome};
use crate::replay::{ReplayBody, Replayable};
use crate::target::{EndpointKey, InFlight, Stats, Target, key_of, tier_changed};

/// The body of every response the proxy sends.
pub type ProxyBody = BoxBody<Bytes, BoxError>;
/// Any body error.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

type Upstream = HttpClient<EndpointConnector, ReplayBody<Incoming>>;

/// How long an idle upstream connection is kept in its pool.
const POOL_IDLE: Duration = Duration::from_secs(30);

/// Headers that describe one hop, never forwarded (RFC 9110 section 7.6.1).
const HOP_BY_HOP: [&str; 7] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "transfer-encoding",
    "upgrade",
];

/// An endpoint's upstream pools: HTTP/1.1, and HTTP/2 with prior knowledge.
#[derive(Clone)]
struct Pools {
    h1: Upstream,
    h2: Upstream,
}

/// Dials one endpoint whatever the request's URI says, so that the URI can carry the
/// caller's authority (`Host`, `:authority`) to the backend unchanged.
#[derive(Debug, Clone)]
pub struct EndpointConnector {
    addr: SocketAddr,
    timeout: Duration,
}

impl tower::Service<Uri> for EndpointConnector {
    type Response = TokioIo<TcpStream>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = std::io::Result<TokioIo<TcpStream>>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Self::Future {
        let (addr, timeout) = (self.addr, self.timeout);
        Box::pin(async move {
            let stream = tokio::time::timeout(timeout, TcpStream::connect(addr))
                .await
                .map_err(|_| {
                    std::io::Error::new(std::io::ErrorKind::TimedOut, format!("connecting to {addr} timed out"))
                })??;
            stream.set_nodelay(true)?;
            Ok(TokioIo::new(stream))
        })
    }
}

/// A listener's HTTP forwarding: its target and the upstream pools per endpoint.
pub struct HttpForwarder {
    target: Arc<Target>,
    pools: Mutex<HashMap<(EndpointKey, SocketAddr), Pools>>,
    connect_timeout: Duration,
    response_timeout: Duration,
}

impl std::fmt::Debug for HttpForwarder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpForwarder").field("target", &self.target).finish()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl HttpForwarder {
    /// A forwarder for `target`; [`HttpForwarder::prune`] must follow the view.
    pub fn new(target: Arc<Target>, connect_timeout: Duration, response_timeout: Duration) -> Arc<HttpForwarder> {
        Arc::new(HttpForwarder {
            target,
            pools: Mutex::new(HashMap::new()),
            connect_timeout,
            response_timeout,
        })
    }

    fn pools(&self, key: EndpointKey, addr: SocketAddr) -> Pools {
        let make = || {
            let connector = EndpointConnector {
                addr,
                timeout: self.connect_timeout,
            };
            let builder = || {
                let mut builder = HttpClient::builder(TokioExecutor::new());
                // Without a timer hyper-util never closes an idle pooled connection.
                builder.pool_timer(TokioTimer::new()).pool_idle_timeout(POOL_IDLE);
                builder
            };
            Pools {
                h1: builder().build(connector.clone()),
                h2: builder().http2_only(true).build(connector),
            }
        };
        // An endpoint the registry no longer routes to (a request chose it just before its
        // drain was seen) gets a pool of its own for this request only: kept, it would hold
        // an idle connection to a draining endpoint until the next view change.
        if !self.target.routes(&self.target.resolver().view(), &key) {
            return make();
        }
        lock(&self.pools).entry((key, addr)).or_insert_with(make).clone()
    }

    /// Follows the view: the pools of endpoints the registry drained or removed are dropped,
    /// which closes their idle connections (SPEC L6). Runs until the resolver stops.
    pub async fn prune(self: Arc<Self>) {
        let mut views = self.target.resolver().subscribe();
        let mut tier = self.target.tier();
        loop {
            {
                let view = views.borrow_and_update();
                let mut pools = lock(&self.pools);
                let before = pools.len();
                pools.retain(|(key, _), _| self.target.routes(&view, key));
                if pools.len() != before {
                    tracing::debug!(listener = %self.target.config.listen, closed = before - pools.len(), "upstream pools of departed endpoints closed");
                }
            }
            // A failover tier letting an endpoint go is a departure too.
            tokio::select! {
                changed = views.changed() => if changed.is_err() {
                    return;
                },
                () = tier_changed(tier.as_mut()) => {}
            }
        }
    }

    /// Forwards one request.
    pub async fn forward(self: Arc<Self>, request: Request<Incoming>) -> Result<Response<ProxyBody>, Infallible> {
        let target = &self.target;
        target.deposit();
        let grpc = is_grpc(request.headers());
        let (parts, body) = request.into_parts();
        let affinity = target
            .config
            .hash_header
            .as_ref()
            .and_then(|name| parts.headers.get(name))
            .map(|value| xxhash_rust::xxh3::xxh3_64(value.as_bytes()));
        let body = Replayable::new(body);
        let mut attempt = 1;
        let mut tried = Vec::new();
        // The last failed attempt's answer, passed on if a retry finds no endpoint.
        let mut last: Option<Response<ProxyBody>> = None;
        loop {
            let chosen = match target.choose(affinity, &tried) {
                Ok(chosen) => chosen,
                Err(refusal) => {
                    return Ok(match last {
                        Some(answer) => {
                            Stats::bump(&target.stats.failed);
                            answer
                        }
                        None => {
                            Stats::bump(&target.stats.refused);
                            refused(&refusal, grpc)
                        }
                    });
                }
            };
            tried.push(key_of(&chosen.endpoint));
            let in_flight = target.start(&chosen.endpoint);
            let pools = self.pools(key_of(&chosen.endpoint), chosen.addr);
            // The port's registered protocol decides (an HTTP/1 backend behind an h2c
            // caller gets HTTP/1.1); a port registered as plain TCP gets the caller's version.
            let version = match chosen.protocol {
                Protocol::Http2 | Protocol::Grpc => Version::HTTP_2,
                Protocol::Http => Version::HTTP_11,
                Protocol::Tcp | Protocol::Udp if parts.version == Version::HTTP_2 => Version::HTTP_2,
                Protocol::Tcp | Protocol::Udp => Version::HTTP_11,
            };
            let upstream = if version == Version::HTTP_2 {
                &pools.h2
            } else {
                &pools.h1
            };
            let outbound = match outbound_request(&parts, chosen.addr, version, body.attempt()) {
                Ok(outbound) => outbound,
                Err(message) => {
                    Stats::bump(&target.stats.failed);
                    return Ok(error_response(
                        StatusCode::BAD_REQUEST,
                        "bad_request",
                        &message,
                        grpc.then_some(GRPC_INTERNAL),
                    ));
                }
            };
            let result = tokio::time::timeout(self.response_timeout, upstream.request(outbound)).await;
            let outcome = match &result {
                Ok(Ok(response)) => Outcome::of_response(response),
                Ok(Err(err)) if err.is_connect() => Outcome::ConnectFailed,
                // The caller's own body broke: not the endpoint's fault, and nothing to retry.
                Ok(Err(_)) if body.errored() => {
                    Stats::bump(&target.stats.failed);
                    return Ok(error_response(
                        StatusCode::BAD_REQUEST,
                        "request_body_failed",
                        "the request body broke off before it was sent whole",
                        grpc.then_some(GRPC_INTERNAL),
                    ));
                }
                Ok(Err(_)) | Err(_) => Outcome::Reset,
            };
            target.report(&chosen.endpoint, outcome.is_failure());
            let answer = match result {
                Ok(Ok(response)) => inbound_response(response, in_flight),
                Ok(Err(err)) => {
                    tracing::debug!(listener = %target.config.listen, addr = %chosen.addr, error = %err, "upstream failed");
                    error_response(
                        StatusCode::BAD_GATEWAY,
                        "upstream_failed",
                        &format!("{} ({}): {}", chosen.endpoint.instance, chosen.addr, causes(&err)),
                        grpc.then_some(GRPC_UNAVAILABLE),
                    )
                }
                Err(_) => error_response(
                    StatusCode::GATEWAY_TIMEOUT,
                    "upstream_timeout",
                    &format!(
                        "{} ({}) sent no response within {} ms",
                        chosen.endpoint.instance,
                        chosen.addr,
                        self.response_timeout.as_millis()
                    ),
                    grpc.then_some(GRPC_UNAVAILABLE),
                ),
            };
            let retry = outcome.is_failure()
                && attempt < target.config.max_attempts
                && outcome.is_retryable(&parts.method, body.replayable())
                && target.try_retry();
            if retry {
                tracing::debug!(listener = %target.config.listen, addr = %chosen.addr, ?outcome, attempt, "retrying on another endpoint");
                attempt += 1;
                last = Some(answer);
                continue;
            }
            Stats::bump(if outcome.is_failure() {
                &target.stats.failed
            } else {
                &target.stats.ok
            });
            return Ok(answer);
        }
    }
}

/// The upstream request: the same method, path, headers (hop-by-hop ones removed) and body,
/// with the caller's authority, sent to `addr` (the pool's connector dials it).
fn outbound_request(
    parts: &hyper::http::request::Parts,
    addr: SocketAddr,
    version: Version,
    body: ReplayBody<Incoming>,
) -> Result<Request<ReplayBody<Incoming>>, String> {
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let host = parts.headers.get(hyper::header::HOST).and_then(|h| h.to_str().ok());
    let authority = parts
        .uri
        .authority()
        .map(|a| a.as_str().to_owned())
        .or_else(|| host.map(str::to_owned))
        .unwrap_or_else(|| addr.to_string());
    let uri: Uri = format!("http://{authority}{path}")
        .parse()
        .map_err(|err| format!("the request's authority and path do not make a URI: {err}"))?;
    let mut request = Request::builder()
        .method(parts.method.clone())
        .uri(uri)
        .version(version)
        .body(body)
        .map_err(|err| err.to_string())?;
    let headers = request.headers_mut();
    *headers = parts.headers.clone();
    strip_hop_by_hop(headers);
    if version == Version::HTTP_2 {
        // The authority travels in the URI (`:authority`); a Host header next to it would be
        // a second, conflicting one.
        headers.remove(hyper::header::HOST);
    } else {
        if !headers.contains_key(hyper::header::HOST)
            && let Ok(value) = HeaderValue::from_str(&authority)
        {
            // An HTTP/2 caller's `:authority` becomes the HTTP/1.1 Host.
            headers.insert(hyper::header::HOST, value);
        }
        join_cookies(headers);
    }
    Ok(request)
}

/// HTTP/2 splits cookies into one field each (RFC 9113 section 8.2.3); HTTP/1.1 wants one
/// `Cookie` header, joined with "; ".
fn join_cookies(headers: &mut HeaderMap) {
    if headers.get_all(COOKIE).iter().count() < 2 {
        return;
    }
    let joined: Vec<&str> = headers.get_all(COOKIE).iter().filter_map(|v| v.to_str().ok()).collect();
    if let Ok(value) = HeaderValue::from_str(&joined.join("; ")) {
        headers.insert(COOKIE, value);
    }
}

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
    // `te: trailers` is end-to-end for gRPC; any other TE value is this hop's.
    if headers.get("te").is_some_and(|te| te != "trailers") {
        headers.remove("te");
    }
}

fn inbound_response(response: Response<Incoming>, in_flight: InFlight) -> Response<ProxyBody> {
    let (mut parts, body) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    let body = Tracked {
        inner: body,
        _in_flight: in_flight,
    };
    Response::from_parts(parts, body.map_err(BoxError::from).boxed())
}

/// A response body that keeps its request counted in flight until it ends.
struct Tracked {
    inner: Incoming,
    _in_flight: InFlight,
}

impl Body for Tracked {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/grpc"))
}

/// An error and its sources, joined (hyper's top-level message alone says little).
fn causes(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_are_dropped_and_grpc_trailers_kept() {
        let mut headers = HeaderMap::new();
        headers.insert(CONNECTION, HeaderValue::from_static("keep-alive, x-hop"));
        headers.insert("x-hop", HeaderValue::from_static("1"));
        headers.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        headers.insert("x-end", HeaderValue::from_static("2"));
        headers.insert("te", HeaderValue::from_static("trailers"));
        strip_hop_by_hop(&mut headers);
        assert!(headers.get("x-hop").is_none());
        assert!(headers.get("keep-alive").is_none());
        assert!(headers.get(CONNECTION).is_none());
        assert_eq!(headers.get("x-end").map(|v| v.as_bytes()), Some(&b"2"[..]));
        assert_eq!(headers.get("te").map(|v| v.as_bytes()), Some(&b"trailers"[..]));
        headers.insert("te", HeaderValue::from_static("gzip"));
        strip_hop_by_hop(&mut headers);
        assert!(headers.get("te").is_none());
    }
}
