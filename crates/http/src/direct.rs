//! Watch streams served beneath hyper (SPEC K1, W3): a connection whose first request is a
//! plain `GET /v1/watch/...` has that request read, routed and answered here; every other
//! connection goes to hyper from its first byte, the bytes read so far replayed ([`Rewind`]).
//!
//! ```text
//!  first bytes ──▶ "GET /v1/watch/", one whole HTTP/1.1 head, no body, nothing after it?
//!     │ no: hyper serves the connection, reading the replayed bytes first
//!     ▼ yes
//!  router (the same service and layers hyper calls) ──▶ a sized answer ──▶ written; hyper serves the rest
//!                                                  └─▶ a stream ──▶ one chunk per frame as it comes;
//!                                                      its end, or any byte or EOF from the client ──▶ close
//! ```
//!
//! Why: for as long as a response streams, hyper keeps its 8 KiB read buffer and its whole
//! connection state, and a watch streams for its whole life — 10,000 watchers held 25 KiB of
//! server memory each. Here an open stream holds its socket, its body and a small task
//! (`docs/performance.md` "Fan-out by watchers"). The request is judged by the same router,
//! so every layer of the front door (auth, admission, limits) applies unchanged.
//!
//! A watch takes no further request: a client that sends bytes while its stream is open
//! (a pipelined request) has the stream ended and the connection closed.

use std::future::poll_fn;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::SystemTime;

use axum::body::{Body, HttpBody};
use axum::http::header::{self, HeaderName, HeaderValue};
use axum::http::{Method, Request, Response, StatusCode, Uri, Version};
use bytes::Bytes;
use http_body_util::BodyExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};

/// The requests served here: watches, without a query or with one.
const WATCH: &[u8] = b"GET /v1/watch/";

/// How an HTTP/2 client with prior knowledge opens a connection (RFC 9113 §3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Bytes read at a time while the head is incomplete.
const READ_CHUNK: usize = 1024;

/// hyper's default bound on a request's header count.
const MAX_HEADERS: usize = 100;

/// What a connection opened with.
pub(crate) enum Opening {
    /// The client closed or failed before sending anything.
    Gone,
    /// A watch request, whole, and nothing after it.
    Watch(Box<Request<Body>>),
    /// HTTP/2 with prior knowledge: the bytes read so far, the preface first.
    Http2(Bytes),
    /// Anything else: the bytes read so far, for hyper to read first.
    Other(Bytes),
}

/// Reads a connection's first bytes until they are a whole watch request head, or clearly
/// something else (another request, a malformed or oversized head, more than one request):
/// hyper answers those, errors included, as it answers every other request. `limit` is the
/// largest head read here (hyper's buffer bound: it answers a larger one 431).
pub(crate) async fn read_opening<I: AsyncRead + Unpin>(io: &mut I, limit: usize) -> Opening {
    let mut head = Vec::with_capacity(READ_CHUNK);
    loop {
        if head.len() >= limit {
            return Opening::Other(head.into());
        }
        head.reserve(READ_CHUNK.min(limit - head.len()));
        match io.read_buf(&mut head).await {
            Ok(0) | Err(_) if head.is_empty() => return Opening::Gone,
            Ok(0) | Err(_) => return Opening::Other(head.into()),
            Ok(_) => {}
        }
        if starts_like(&head, PREFACE) {
            if head.len() >= PREFACE.len() {
                return Opening::Http2(head.into());
            }
            continue;
        }
        if !starts_like(&head, WATCH) {
            return Opening::Other(head.into());
        }
        if head.len() < WATCH.len() {
            continue;
        }
        match parse(&head) {
            Parsed::Partial => {}
            Parsed::Watch(request) => return Opening::Watch(request),
            Parsed::Other => return Opening::Other(head.into()),
        }
    }
}

/// Whether `bytes` begin with a whole HTTP/1.1 request head (its request is complete enough
/// for the connection to count as having spoken, `crate::silent`).
pub(crate) fn has_whole_head(bytes: &[u8]) -> bool {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    matches!(
        httparse::Request::new(&mut headers).parse(bytes),
        Ok(httparse::Status::Complete(_))
    )
}

/// Whether `bytes` and `prefix` agree as far as both go.
fn starts_like(bytes: &[u8], prefix: &[u8]) -> bool {
    let seen = bytes.len().min(prefix.len());
    bytes[..seen] == prefix[..seen]
}

enum Parsed {
    Partial,
    Watch(Box<Request<Body>>),
    Other,
}

/// A whole HTTP/1.1 head with nothing after it, no body and no `Connection: close`, as a
/// request; `Other` for anything hyper should judge.
fn parse(bytes: &[u8]) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut head = httparse::Request::new(&mut headers);
    let length = match head.parse(bytes) {
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Ok(httparse::Status::Complete(length)) => length,
        Err(_) => return Parsed::Other,
    };
    if length != bytes.len() || head.version != Some(1) {
        return Parsed::Other;
    }
    let Some(Ok(uri)) = head.path.map(Uri::try_from) else {
        return Parsed::Other;
    };
    let mut request = Request::new(Body::empty());
    *request.method_mut() = Method::GET;
    *request.uri_mut() = uri;
    *request.version_mut() = Version::HTTP_11;
    let map = request.headers_mut();
    for field in head.headers.iter() {
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(field.name.as_bytes()),
            HeaderValue::from_bytes(field.value),
        ) else {
            return Parsed::Other;
        };
        let bodied = (name == header::CONTENT_LENGTH && value != "0") || name == header::TRANSFER_ENCODING;
        let closing = name == header::CONNECTION && !value.as_bytes().eq_ignore_ascii_case(b"keep-alive");
        if bodied || closing || name == header::UPGRADE || name == header::EXPECT {
            return Parsed::Other;
        }
        map.append(name, value);
    }
    Parsed::Watch(Box::new(request))
}

/// What becomes of the connection after [`answer`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum After {
    /// A sized answer was written: the connection may carry further requests.
    KeepAlive,
    /// A stream ended, or the client went: close the connection.
    Close,
}

/// Writes `response` as hyper would, dated `now`: a sized body with `content-length`, any
/// other as chunks, each frame flushed as it comes.
pub(crate) async fn answer<I: AsyncRead + AsyncWrite + Unpin>(
    io: &mut I,
    response: Response<Body>,
    now: SystemTime,
) -> io::Result<After> {
    let (parts, mut body) = response.into_parts();
    let bodiless = parts.status.is_informational()
        || parts.status == StatusCode::NO_CONTENT
        || parts.status == StatusCode::NOT_MODIFIED;
    let mut head = Vec::with_capacity(256);
    head.extend_from_slice(b"HTTP/1.1 ");
    head.extend_from_slice(parts.status.as_str().as_bytes());
    head.push(b' ');
    head.extend_from_slice(parts.status.canonical_reason().unwrap_or("").as_bytes());
    head.extend_from_slice(b"\r\n");
    for (name, value) in &parts.headers {
        if name == header::CONTENT_LENGTH || name == header::TRANSFER_ENCODING || name == header::CONNECTION {
            continue;
        }
        field(&mut head, name.as_str().as_bytes(), value.as_bytes());
    }
    if !parts.headers.contains_key(header::DATE) {
        field(&mut head, b"date", httpdate::fmt_http_date(now).as_bytes());
    }
    if bodiless {
        head.extend_from_slice(b"\r\n");
        io.write_all(&head).await?;
        io.flush().await?;
        return Ok(After::KeepAlive);
    }
    if body.size_hint().exact().is_some() {
        let bytes = BodyExt::collect(body).await.map_err(io::Error::other)?.to_bytes();
        field(&mut head, b"content-length", bytes.len().to_string().as_bytes());
        head.extend_from_slice(b"\r\n");
        head.extend_from_slice(&bytes);
        io.write_all(&head).await?;
        io.flush().await?;
        return Ok(After::KeepAlive);
    }
    // The connection ends with the stream: said up front, so a pooling client never reuses it.
    field(&mut head, b"connection", b"close");
    field(&mut head, b"transfer-encoding", b"chunked");
    head.extend_from_slice(b"\r\n");
    io.write_all(&head).await?;
    io.flush().await?;
    drop(head);
    let mut pending = None;
    poll_fn(|cx| stream(cx, io, &mut body, &mut pending)).await?;
    io.shutdown().await?;
    Ok(After::Close)
}

fn field(head: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    head.extend_from_slice(name);
    head.extend_from_slice(b": ");
    head.extend_from_slice(value);
    head.extend_from_slice(b"\r\n");
}

/// Streams `body` as chunks until it ends (then the last chunk), the client sends anything
/// or closes, or a write fails.
fn stream<I: AsyncRead + AsyncWrite + Unpin>(
    cx: &mut Context<'_>,
    io: &mut I,
    body: &mut Body,
    pending: &mut Option<Chunk>,
) -> Poll<io::Result<()>> {
    loop {
        // The client's side stays silent while it watches: EOF, an error or a byte ends it.
        let mut probe = [0u8; 1];
        let mut probe = ReadBuf::new(&mut probe);
        if let Poll::Ready(read) = Pin::new(&mut *io).poll_read(cx, &mut probe) {
            return Poll::Ready(read);
        }
        if let Some(chunk) = pending {
            ready!(chunk.poll_write(cx, io))?;
            let last = chunk.data.is_empty();
            *pending = None;
            if last {
                return Poll::Ready(Ok(()));
            }
        }
        match ready!(Pin::new(&mut *body).poll_frame(cx)) {
            None => *pending = Some(Chunk::new(Bytes::new())),
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data()
                    && !data.is_empty()
                {
                    *pending = Some(Chunk::new(data));
                }
            }
            Some(Err(error)) => return Poll::Ready(Err(io::Error::other(error))),
        }
    }
}

/// One chunk being written: its size line, its data and the closing CRLF, in one vectored
/// write where the transport takes it; empty data is the last chunk.
pub(crate) struct Chunk {
    size: [u8; 18],
    size_len: usize,
    data: Bytes,
    written: usize,
    flushed: bool,
}

impl Chunk {
    fn new(data: Bytes) -> Self {
        let mut size = [0u8; 18];
        let digits = format_hex(data.len(), &mut size);
        size[digits] = b'\r';
        size[digits + 1] = b'\n';
        Chunk {
            size,
            size_len: digits + 2,
            data,
            written: 0,
            flushed: false,
        }
    }

    fn poll_write<I: AsyncWrite + Unpin>(&mut self, cx: &mut Context<'_>, io: &mut I) -> Poll<io::Result<()>> {
        let total = self.size_len + self.data.len() + 2;
        while self.written < total {
            let pieces = [&self.size[..self.size_len], &self.data[..], b"\r\n"];
            let mut skip = self.written;
            let mut slices = [IoSlice::new(&[]); 3];
            for (slice, piece) in slices.iter_mut().zip(pieces) {
                let from = skip.min(piece.len());
                skip -= from;
                *slice = IoSlice::new(&piece[from..]);
            }
            let n = ready!(Pin::new(&mut *io).poll_write_vectored(cx, &slices))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        if !self.flushed {
            ready!(Pin::new(&mut *io).poll_flush(cx))?;
            self.flushed = true;
        }
        Poll::Ready(Ok(()))
    }
}

/// Writes `n` in lowercase hex at the start of `out`; returns the digits written.
fn format_hex(n: usize, out: &mut [u8; 18]) -> usize {
    let digits = (usize::BITS - n.leading_zeros()).div_ceil(4).max(1) as usize;
    for (i, slot) in out[..digits].iter_mut().enumerate() {
        let shift = 4 * (digits - 1 - i);
        *slot = b"0123456789abcdef"[(n >> shift) & 0xf];
    }
    digits
}

/// A connection's transport with bytes already read from it in front: hyper reads them
/// first, then the transport.
pub(crate) struct Rewind<I> {
    prefix: Bytes,
    io: I,
}

impl<I> Rewind<I> {
    pub(crate) fn new(prefix: Bytes, io: I) -> Self {
        Rewind { prefix, io }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Rewind<I> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if self.prefix.is_empty() {
            return Pin::new(&mut self.io).poll_read(cx, buf);
        }
        let n = self.prefix.len().min(buf.remaining());
        buf.put_slice(&self.prefix.split_to(n));
        Poll::Ready(Ok(()))
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Rewind<I> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use futures_util::stream;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, duplex};

    use super::*;

    async fn opening(bytes: &[u8]) -> Opening {
        let (mut client, mut server) = duplex(64 * 1024);
        client.write_all(bytes).await.unwrap();
        drop(client);
        read_opening(&mut server, 8 * 1024).await
    }

    fn other(opening: Opening) -> Bytes {
        match opening {
            Opening::Other(bytes) => bytes,
            Opening::Watch(request) => panic!("served here: {request:?}"),
            Opening::Http2(bytes) => panic!("HTTP/2: {bytes:?}"),
            Opening::Gone => panic!("gone"),
        }
    }

    #[tokio::test]
    async fn a_whole_watch_head_becomes_the_request_with_its_headers() {
        let head =
            b"GET /v1/watch/acme/prod/api?from_revision=7 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t\r\n\r\n";
        let Opening::Watch(request) = opening(head).await else {
            panic!("not a watch");
        };
        assert_eq!(request.method(), Method::GET);
        assert_eq!(request.uri(), "/v1/watch/acme/prod/api?from_revision=7");
        assert_eq!(request.version(), Version::HTTP_11);
        assert_eq!(request.headers()["authorization"], "Bearer t");
        assert_eq!(request.headers()["host"], "x");
    }

    #[tokio::test]
    async fn anything_but_one_plain_watch_head_goes_to_hyper_with_every_byte_read() {
        let cases: [&[u8]; 9] = [
            b"GET /v1/services/acme HTTP/1.1\r\n\r\n",
            b"GET /v1/watch/acme/prod/api HTTP/1.1\r\ncontent-length: 2\r\n\r\n",
            b"POST /v1/watch/acme/prod/api HTTP/1.1\r\ncontent-length: 2\r\n\r\n{}",
            b"GET /v1/watch/acme/prod/api HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n",
            b"GET /v1/watch/acme/prod/api HTTP/1.1\r\nConnection: close\r\n\r\n",
            b"GET /v1/watch/acme/prod/api HTTP/1.0\r\n\r\n",
            // A second request pipelined behind the first.
            b"GET /v1/watch/acme/prod/api HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n",
            b"GET /v1/watch/acme/prod/api HTTP/1.1\r\nbad header\r\n\r\n",
            // The client went before its head was whole.
            b"GET /v1/watch/acme/pr",
        ];
        for case in cases {
            assert_eq!(other(opening(case).await), case, "{}", String::from_utf8_lossy(case));
        }
        assert!(matches!(opening(b"").await, Opening::Gone));
        assert!(has_whole_head(cases[0]) && !has_whole_head(cases[8]));
        assert_eq!(
            other(opening(b"PRI * HTTP/1.1\r\n\r\n").await),
            &b"PRI * HTTP/1.1\r\n\r\n"[..]
        );
    }

    #[tokio::test]
    async fn the_http2_preface_is_told_apart_even_when_it_comes_in_pieces() {
        let (mut client, mut server) = duplex(1024);
        let reading = tokio::spawn(async move { read_opening(&mut server, 8 * 1024).await });
        for piece in PREFACE.chunks(5) {
            client.write_all(piece).await.unwrap();
            tokio::task::yield_now().await;
        }
        let Opening::Http2(read) = reading.await.unwrap() else {
            panic!("not HTTP/2");
        };
        assert!(read.starts_with(PREFACE));
    }

    #[tokio::test]
    async fn a_head_past_the_limit_goes_to_hyper_which_answers_it_431() {
        let mut head = b"GET /v1/watch/acme/prod/api HTTP/1.1\r\nx-pad: ".to_vec();
        head.resize(9000, b'a');
        let (mut client, mut server) = duplex(64 * 1024);
        client.write_all(&head).await.unwrap();
        let read = other(read_opening(&mut server, 8 * 1024).await);
        assert_eq!(read.len(), 8 * 1024);
        assert_eq!(read[..], head[..8 * 1024]);
    }

    fn day() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_800_000_000)
    }

    async fn answered(response: Response<Body>) -> (After, String) {
        let (mut client, mut server) = duplex(64 * 1024);
        let after = answer(&mut server, response, day()).await.unwrap();
        drop(server);
        let mut written = String::new();
        client.read_to_string(&mut written).await.unwrap();
        (after, written)
    }

    #[tokio::test]
    async fn a_stream_is_written_as_one_chunk_per_frame_then_the_last_chunk_and_closes() {
        let frames = stream::iter(
            ["{\"a\":1}\n", "", "{\"progress\":12345678901}\n"].map(|f| Ok::<_, io::Error>(Bytes::from(f))),
        );
        let mut response = Response::new(Body::from_stream(frames));
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/x-ndjson"));
        let (after, written) = answered(response).await;
        assert_eq!(after, After::Close);
        assert_eq!(
            written,
            "HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\ndate: Fri, 15 Jan 2027 08:00:00 GMT\r\n\
             connection: close\r\ntransfer-encoding: chunked\r\n\r\n8\r\n{\"a\":1}\n\r\n19\r\n{\"progress\":12345678901}\n\r\n0\r\n\r\n"
        );
    }

    #[tokio::test]
    async fn a_sized_answer_is_written_with_its_length_and_keeps_the_connection() {
        let mut response = Response::new(Body::from("{\"error\":{}}"));
        *response.status_mut() = StatusCode::NOT_FOUND;
        response
            .headers_mut()
            .insert(header::CONTENT_LENGTH, HeaderValue::from_static("999"));
        let (after, written) = answered(response).await;
        assert_eq!(after, After::KeepAlive);
        assert_eq!(
            written,
            "HTTP/1.1 404 Not Found\r\ndate: Fri, 15 Jan 2027 08:00:00 GMT\r\ncontent-length: 12\r\n\r\n{\"error\":{}}"
        );
    }

    #[tokio::test]
    async fn a_byte_from_the_client_or_its_close_ends_an_open_stream() {
        for close in [false, true] {
            let (mut client, mut server) = duplex(64 * 1024);
            let forever = stream::pending::<Result<Bytes, io::Error>>();
            let streaming =
                tokio::spawn(
                    async move { answer(&mut server, Response::new(Body::from_stream(forever)), day()).await },
                );
            let mut head = [0u8; 16];
            client.read_exact(&mut head).await.unwrap();
            if close {
                drop(client);
            } else {
                client.write_all(b"G").await.unwrap();
            }
            assert_eq!(streaming.await.unwrap().unwrap(), After::Close);
        }
    }

    #[tokio::test]
    async fn rewind_reads_the_prefix_first_then_the_transport() {
        let (mut client, server) = duplex(1024);
        client.write_all(b" world").await.unwrap();
        drop(client);
        let mut rewound = Rewind::new(Bytes::from_static(b"hello"), server);
        let mut read = String::new();
        rewound.read_to_string(&mut read).await.unwrap();
        assert_eq!(read, "hello world");
    }

    #[test]
    fn chunk_sizes_are_lowercase_hex() {
        let hex = |n| {
            let mut out = [0u8; 18];
            let digits = format_hex(n, &mut out);
            String::from_utf8(out[..digits].to_vec()).unwrap()
        };
        assert_eq!(
            [hex(0), hex(9), hex(255), hex(4096), hex(usize::MAX)],
            ["0", "9", "ff", "1000", "ffffffffffffffff"]
        );
    }
}
