//! The request/response HTTP client: hyper-util's legacy `Client` (CRATES.md "HTTP"),
//! HTTP/1.1 with keep-alive, its pool sized to the worker count so each worker keeps one
//! connection, and `TCP_NODELAY` so small requests are not held back by Nagle; over TLS for
//! an `https://` base with [`Http::with_tls`].

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{HeaderMap, Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// A request that takes this long is counted as an error: far above any healthy latency
/// (milliseconds), short enough that a stalled server cannot hold a run hostage.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a TCP connection may take: the systems under test are on loopback.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Why [`Http::stream_lines`] ended before its stream did.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StreamError {
    /// The server answered another status than `200`.
    #[error("HTTP {0}")]
    Refused(StatusCode),
    /// The connection failed or broke.
    #[error("{0}")]
    Transport(String),
}

/// A client of one base URL.
#[derive(Debug, Clone)]
pub(crate) struct Http {
    client: Client<muster_tls::Connector, Full<Bytes>>,
    base: String,
    /// `Authorization: Bearer <secret>`, for a server with authentication on.
    authorization: Option<hyper::header::HeaderValue>,
}

impl Http {
    /// A client of `base` (`http://host:port`) keeping up to `pool` idle connections.
    pub(crate) fn new(base: &str, pool: usize) -> Http {
        Http::with_tls(base, pool, None)
    }

    /// Like [`Http::new`], verifying an `https://` base with `tls`.
    pub(crate) fn with_tls(base: &str, pool: usize, tls: Option<std::sync::Arc<muster_tls::ClientConfig>>) -> Http {
        let connector = muster_tls::Connector::new(tls, CONNECT_TIMEOUT);
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(pool)
            .build(connector);
        Http {
            client,
            base: base.trim_end_matches('/').to_owned(),
            authorization: None,
        }
    }

    /// The same client, sending `secret` as a bearer token on every request (a server with
    /// `[auth] enabled = true`).
    pub(crate) fn with_token(mut self, secret: &str) -> Http {
        self.authorization = hyper::header::HeaderValue::from_str(&format!("Bearer {secret}")).ok();
        self
    }

    /// The base URL.
    pub(crate) fn base(&self) -> &str {
        &self.base
    }

    /// Sends one request and reads the whole reply. `Err` for transport errors and timeouts.
    pub(crate) async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
    ) -> Result<(StatusCode, Bytes), String> {
        let (status, _, body) = self.send_full(method, path, body, REQUEST_TIMEOUT).await?;
        Ok((status, body))
    }

    /// Like [`Http::send`], with the reply's headers and a timeout of the caller's (a
    /// blocking query is meant to take its whole wait).
    pub(crate) async fn send_full(
        &self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
        timeout: Duration,
    ) -> Result<(StatusCode, HeaderMap, Bytes), String> {
        let mut request = Request::builder().method(method).uri(format!("{}{path}", self.base));
        if body.is_some() {
            request = request.header(hyper::header::CONTENT_TYPE, "application/json");
        }
        if let Some(authorization) = &self.authorization {
            request = request.header(hyper::header::AUTHORIZATION, authorization.clone());
        }
        let request = request
            .body(Full::new(body.unwrap_or_default()))
            .map_err(|err| format!("bad request: {err}"))?;
        let exchange = async {
            let response = self.client.request(request).await.map_err(|err| format!("{err:?}"))?;
            let status = response.status();
            let headers = response.headers().clone();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|err| format!("reading the reply: {err}"))?
                .to_bytes();
            Ok((status, headers, body))
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| format!("no reply within {timeout:?}"))?
    }

    /// Sends `GET path` and hands every line of a `200` reply's body to `on_line` as it
    /// arrives (a watch stream), until the body ends. `Err` for another status or a transport
    /// error; no timeout (the caller bounds it).
    pub(crate) async fn stream_lines(&self, path: &str, mut on_line: impl FnMut(&[u8])) -> Result<(), StreamError> {
        let request = Request::builder()
            .method(Method::GET)
            .uri(format!("{}{path}", self.base))
            .body(Full::new(Bytes::new()))
            .map_err(|err| StreamError::Transport(format!("bad request: {err}")))?;
        let response = self
            .client
            .request(request)
            .await
            .map_err(|err| StreamError::Transport(format!("{err:?}")))?;
        if response.status() != StatusCode::OK {
            return Err(StreamError::Refused(response.status()));
        }
        let mut body = response.into_body();
        let mut lines = crate::codec::Lines::default();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|err| StreamError::Transport(format!("reading the stream: {err}")))?;
            if let Ok(data) = frame.into_data() {
                lines.push(&data, |line| {
                    on_line(line);
                    Ok::<(), StreamError>(())
                })?;
            }
        }
        Ok(())
    }

    /// Like [`Http::send`], but a non-2xx status is an error too (with the reply's text).
    pub(crate) async fn send_ok(&self, method: Method, path: &str, body: Option<Bytes>) -> Result<Bytes, String> {
        let (status, body) = self.send(method, path, body).await?;
        if status.is_success() {
            Ok(body)
        } else {
            Err(format!("HTTP {status}: {}", String::from_utf8_lossy(&body)))
        }
    }
}
