//! A request body that can be sent again (SPEC D3 retries): the first attempt streams the
//! client's body and keeps a copy of what it read, up to [`MAX_REPLAY_BYTES`]; a retry sends
//! the copy, then goes on reading the client's body where the first attempt stopped.
//!
//! ```text
//!  client body ──▶ Shared { source, kept frames, done } ◀── attempt 1 (reads, keeps)
//!                                                     ◀── attempt 2 (kept frames, then source)
//! ```
//!
//! A retry is allowed ([`ReplayBody::replayable`]) only while nothing past the bound was
//! read and no earlier attempt still holds the body (a connection may still be sending it).
//! A body never read at all (a connect failure) is always replayable, whatever its size.

use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::HeaderMap;
use hyper::body::{Body, Frame, SizeHint};

/// What is kept for a retry: a unary gRPC call or a JSON request fits; an upload does not
/// and is not retried once it has started.
pub const MAX_REPLAY_BYTES: usize = 64 * 1024;

#[derive(Debug)]
struct Shared<B> {
    source: B,
    kept: Vec<Bytes>,
    kept_bytes: usize,
    trailers: Option<HeaderMap>,
    /// The source ended.
    done: bool,
    /// More than the bound was read: nothing is kept, no retry.
    overflow: bool,
    /// Reading the source failed: what was kept is not the whole body, no retry.
    errored: bool,
}

/// One attempt's view of the request body.
#[derive(Debug)]
pub struct ReplayBody<B> {
    shared: Arc<Mutex<Shared<B>>>,
    /// The next kept frame this attempt sends.
    next: usize,
    trailers_sent: bool,
}

/// The client's body, from which each attempt's [`ReplayBody`] is made.
#[derive(Debug)]
pub struct Replayable<B> {
    shared: Arc<Mutex<Shared<B>>>,
}

fn lock<B>(shared: &Mutex<Shared<B>>) -> MutexGuard<'_, Shared<B>> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<B> Replayable<B> {
    /// Wraps the client's body.
    pub fn new(source: B) -> Replayable<B> {
        Replayable {
            shared: Arc::new(Mutex::new(Shared {
                source,
                kept: Vec::new(),
                kept_bytes: 0,
                trailers: None,
                done: false,
                overflow: false,
                errored: false,
            })),
        }
    }

    /// The body for the next attempt.
    pub fn attempt(&self) -> ReplayBody<B> {
        ReplayBody {
            shared: Arc::clone(&self.shared),
            next: 0,
            trailers_sent: false,
        }
    }
}

impl<B: Body> Replayable<B> {
    /// Whether reading the client's body failed (the client broke off).
    pub fn errored(&self) -> bool {
        lock(&self.shared).errored
    }

    /// Whether another attempt may send the body whole: nothing past the bound was read, and
    /// either the client's body has ended (what was read is all of it) or no earlier attempt
    /// still holds it (a connection may still be sending it).
    pub fn replayable(&self) -> bool {
        let shared = lock(&self.shared);
        !shared.overflow
            && !shared.errored
            && (shared.done || shared.source.is_end_stream() || Arc::strong_count(&self.shared) == 1)
    }
}

impl<B> Body for ReplayBody<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        let mut shared = lock(&this.shared);
        if !shared.overflow && this.next < shared.kept.len() {
            let data = shared.kept[this.next].clone();
            this.next += 1;
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        if shared.done {
            if !this.trailers_sent {
                this.trailers_sent = true;
                if let Some(trailers) = shared.trailers.clone() {
                    return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
                }
            }
            return Poll::Ready(None);
        }
        match Pin::new(&mut shared.source).poll_frame(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(None) => {
                shared.done = true;
                this.trailers_sent = true;
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(err))) => {
                shared.errored = true;
                Poll::Ready(Some(Err(err)))
            }
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    if !shared.overflow {
                        shared.kept_bytes += data.len();
                        if shared.kept_bytes > MAX_REPLAY_BYTES {
                            shared.overflow = true;
                            shared.kept = Vec::new();
                        } else {
                            shared.kept.push(data.clone());
                            this.next = shared.kept.len();
                        }
                    }
                } else if let Some(trailers) = frame.trailers_ref() {
                    // Trailers end a body: a replay sends the kept data, then these.
                    shared.trailers = Some(trailers.clone());
                    shared.done = true;
                    this.trailers_sent = true;
                }
                Poll::Ready(Some(Ok(frame)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        let shared = lock(&self.shared);
        shared.done
            && (shared.overflow || self.next >= shared.kept.len())
            && (self.trailers_sent || shared.trailers.is_none())
    }

    fn size_hint(&self) -> SizeHint {
        let shared = lock(&self.shared);
        let pending: usize = if shared.overflow {
            0
        } else {
            shared.kept[self.next.min(shared.kept.len())..]
                .iter()
                .map(Bytes::len)
                .sum()
        };
        if shared.done {
            return SizeHint::with_exact(pending as u64);
        }
        let source = shared.source.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(source.lower() + pending as u64);
        if let Some(upper) = source.upper() {
            hint.set_upper(upper + pending as u64);
        }
        hint
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::{BodyExt, Full, StreamBody};

    use super::*;

    fn chunks(parts: &[&'static [u8]]) -> impl Body<Data = Bytes, Error = std::convert::Infallible> + Unpin + use<> {
        let frames: Vec<Result<Frame<Bytes>, std::convert::Infallible>> = parts
            .iter()
            .map(|part| Ok(Frame::data(Bytes::from_static(part))))
            .collect();
        StreamBody::new(futures_util::stream::iter(frames))
    }

    async fn read_all<B: Body<Data = Bytes> + Unpin>(body: B) -> Vec<u8>
    where
        B::Error: std::fmt::Debug,
    {
        body.collect().await.expect("reads").to_bytes().to_vec()
    }

    #[tokio::test]
    async fn a_retry_sends_what_the_first_attempt_read_then_the_rest() {
        let body = Replayable::new(chunks(&[b"ab", b"cd", b"ef"]));
        let mut first = body.attempt();
        // The first attempt reads one frame, then its connection breaks.
        let frame = first.frame().await.expect("a frame").expect("data");
        assert_eq!(frame.into_data().expect("data"), Bytes::from_static(b"ab"));
        assert!(
            !body.replayable(),
            "the first attempt still holds a body that has not ended"
        );
        drop(first);
        assert!(body.replayable());
        assert_eq!(read_all(body.attempt()).await, b"abcdef");
        // And a third attempt, after the source ended, sends the whole kept copy.
        assert_eq!(read_all(body.attempt()).await, b"abcdef");
    }

    #[tokio::test]
    async fn a_replay_sends_the_trailers_too() {
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", hyper::header::HeaderValue::from_static("0"));
        let frames: Vec<Result<Frame<Bytes>, std::convert::Infallible>> = vec![
            Ok(Frame::data(Bytes::from_static(b"ab"))),
            Ok(Frame::trailers(trailers)),
        ];
        let body = Replayable::new(StreamBody::new(futures_util::stream::iter(frames)));
        for attempt in 0..2 {
            let collected = body.attempt().collect().await.expect("reads");
            assert_eq!(
                collected
                    .trailers()
                    .and_then(|t| t.get("grpc-status"))
                    .map(|v| v.as_bytes()),
                Some(&b"0"[..]),
                "attempt {attempt}"
            );
            assert_eq!(collected.to_bytes(), Bytes::from_static(b"ab"));
        }
    }

    #[tokio::test]
    async fn a_body_that_broke_off_is_never_replayed() {
        let frames: Vec<Result<Frame<Bytes>, &'static str>> =
            vec![Ok(Frame::data(Bytes::from_static(b"ab"))), Err("reset")];
        let body = Replayable::new(StreamBody::new(futures_util::stream::iter(frames)));
        assert!(body.attempt().collect().await.is_err());
        assert!(body.errored());
        assert!(!body.replayable());
    }

    #[tokio::test]
    async fn a_body_past_the_bound_is_not_replayable_but_still_flows() {
        let big: &'static [u8] = Box::leak(vec![7u8; MAX_REPLAY_BYTES].into_boxed_slice());
        let body = Replayable::new(chunks(&[big, b"x"]));
        let sent = read_all(body.attempt()).await;
        assert_eq!(sent.len(), MAX_REPLAY_BYTES + 1);
        assert!(!body.replayable());
    }

    #[tokio::test]
    async fn an_unread_body_is_replayable_whatever_its_size_and_keeps_its_length() {
        let body = Replayable::new(Full::new(Bytes::from(vec![1u8; MAX_REPLAY_BYTES * 2])));
        let first = body.attempt();
        assert_eq!(first.size_hint().exact(), Some((MAX_REPLAY_BYTES * 2) as u64));
        drop(first);
        assert!(body.replayable(), "nothing was read: a connect failure may be retried");
        assert_eq!(read_all(body.attempt()).await.len(), MAX_REPLAY_BYTES * 2);
    }
}
