//! The pluggable transport under a [`Client`](crate::Client): any
//! `tower::Service<http::Request<Body>>`, boxed so that the client has one concrete type
//! whatever sits underneath (SPEC C7).
//!
//! ```text
//!  Client ──Request<Body>──▶ HttpService ─┬─ built-in: hyper-util's pooled client over muster_tls::Connector
//!                                          ├─ ClientBuilder::connector(C): the same client over your connector
//!                                          └─ ClientBuilder::service(S): your service or middleware stack (a mock)
//! ```
//! Bodies are boxed both ways ([`Body`]), so a mock answers with `Full<Bytes>` and a
//! middleware stack may wrap the body in anything that yields [`Bytes`].

use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::body::Bytes;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::Connect;
use hyper_util::rt::TokioExecutor;
use tower::ServiceExt;
use tower::util::BoxCloneSyncService;

/// The error a transport may fail with.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A request or reply body: any body of [`Bytes`], boxed.
pub type Body = UnsyncBoxBody<Bytes, BoxError>;

/// The transport a [`Client`](crate::Client) sends through: one request in, one reply out.
pub type HttpService = BoxCloneSyncService<hyper::Request<Body>, hyper::Response<Body>, BoxError>;

/// Boxes `service`, its reply bodies and its errors into an [`HttpService`].
pub(crate) fn boxed<S, B>(service: S) -> HttpService
where
    S: tower::Service<hyper::Request<Body>, Response = hyper::Response<B>> + Clone + Send + Sync + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    BoxCloneSyncService::new(
        service
            .map_response(|response: hyper::Response<B>| response.map(|body| body.map_err(Into::into).boxed_unsync()))
            .map_err(Into::into),
    )
}

/// hyper-util's pooled HTTP/1.1 client over `connector`.
pub(crate) fn over<C>(connector: C) -> HttpService
where
    C: Connect + Clone + Send + Sync + 'static,
{
    boxed(HttpClient::builder(TokioExecutor::new()).build::<C, Body>(connector))
}

/// hyper-util's pooled client for watches over `connector`: HTTP/2 where the connection
/// negotiated it, its streams multiplexed on one connection per server. A watch the caller
/// stops reading holds at most its stream's window; the connection's window is many of
/// those, so the other watches keep flowing (the server cuts the stalled one off, SPEC W4).
pub(crate) fn over_for_watches<C>(connector: C) -> HttpService
where
    C: Connect + Clone + Send + Sync + 'static,
{
    boxed(
        HttpClient::builder(TokioExecutor::new())
            .http2_initial_stream_window_size(WATCH_STREAM_WINDOW)
            .http2_initial_connection_window_size(WATCH_CONNECTION_WINDOW)
            .build::<C, Body>(connector),
    )
}

/// A watch stream's HTTP/2 receive window: frames the caller has not read yet.
const WATCH_STREAM_WINDOW: u32 = 256 * 1024;

/// The watch connection's receive window: 64 stalled streams before the others wait.
const WATCH_CONNECTION_WINDOW: u32 = 64 * WATCH_STREAM_WINDOW;

/// A body of `bytes`.
pub(crate) fn full(bytes: Bytes) -> Body {
    http_body_util::Full::new(bytes)
        .map_err(|never| match never {})
        .boxed_unsync()
}
