//! A streamed watch: the response body read chunk by chunk, split on newlines into the API's
//! NDJSON [`Frame`]s, as a [`Stream`].
//!
//! ```text
//!  body chunks ──▶ LineSplitter (bytes until '\n', bounded) ──▶ line ──▶ serde ──▶ Frame
//!       └─ each chunk resets the idle Sleep; the Sleep firing first ends the stream (lost)
//! ```
//! A chunk may hold many lines or a part of one; [`LineSplitter`] is the pure part and is
//! tested on its own. A stream that stays silent longer than the idle timeout is treated as
//! lost: the server sends `progress` every few seconds, so silence means a dead connection.
//!
//! # Correctness
//! - The idle timer is one [`Sleep`], armed when the watch opens and reset whenever a chunk
//!   arrives; it is only polled when the body has nothing ready, so a consumer that is slow
//!   to poll is never blamed for the server's silence while data sits buffered.
//! - After an error or the end, the stream is fused: it yields `None` ever after.

use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use futures_core::Stream;
use hyper::body::Body as _;
use muster_core::api::Frame;
use tokio::time::{Instant, Sleep};

use crate::http::duration::{format_millis, millis};
use crate::http::error::{ClientError, causes};
use crate::http::lines::{LineSplitter, MAX_LINE_BYTES};
use crate::http::transport::Body;

/// An open watch: a [`Stream`] of frames (or [`next_frame`](Watch::next_frame), which also
/// gives each frame's raw JSON line).
#[derive(Debug)]
pub struct Watch {
    body: Body,
    lines: LineSplitter,
    server: String,
    idle_timeout: Duration,
    idle: Pin<Box<Sleep>>,
    /// The body ended; what is left in `lines` is the last of it.
    ended: bool,
    /// An error or the end was yielded: nothing more comes.
    finished: bool,
}

impl Watch {
    pub(crate) fn new(body: Body, server: String, idle_timeout: Duration) -> Watch {
        Watch {
            body,
            lines: LineSplitter::new(MAX_LINE_BYTES),
            server,
            idle_timeout,
            idle: Box::pin(tokio::time::sleep(idle_timeout)),
            ended: false,
            finished: false,
        }
    }

    /// The next frame with its raw JSON line (what `muster watch --json` prints), or `None`
    /// when the server ended the stream.
    pub async fn next_frame(&mut self) -> Result<Option<(String, Frame)>, ClientError> {
        std::future::poll_fn(|cx| self.poll_frame(cx)).await
    }

    fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<(String, Frame)>, ClientError>> {
        if self.finished {
            return Poll::Ready(Ok(None));
        }
        let next = ready!(self.poll_line(cx)).and_then(|line| line.map(parse).transpose());
        if !matches!(next, Ok(Some(_))) {
            self.finished = true;
        }
        Poll::Ready(next)
    }

    fn poll_line(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Vec<u8>>, ClientError>> {
        loop {
            if let Some(line) = self.lines.next_line() {
                return Poll::Ready(Ok(Some(line)));
            }
            if self.ended {
                return Poll::Ready(Ok(self.lines.finish()));
            }
            match Pin::new(&mut self.body).poll_frame(cx) {
                Poll::Ready(None) => self.ended = true,
                Poll::Ready(Some(Err(err))) => {
                    let reason = causes(&*err);
                    return Poll::Ready(Err(self.lost(reason, Some(err.into()))));
                }
                Poll::Ready(Some(Ok(frame))) => {
                    let deadline = Instant::now() + self.idle_timeout;
                    self.idle.as_mut().reset(deadline);
                    if let Ok(data) = frame.into_data() {
                        self.lines.push(&data).map_err(|reason| self.lost(reason, None))?;
                    }
                }
                Poll::Pending => {
                    ready!(self.idle.as_mut().poll(cx));
                    let reason = format!("nothing arrived for {}", format_millis(millis(self.idle_timeout)));
                    return Poll::Ready(Err(self.lost(reason, None)));
                }
            }
        }
    }

    fn lost(&self, reason: String, source: Option<crate::http::error::ErrorSource>) -> ClientError {
        ClientError::StreamLost {
            server: self.server.clone(),
            reason,
            source,
        }
    }
}

impl Stream for Watch {
    type Item = Result<Frame, ClientError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        // Every field is Unpin (the Sleep is boxed), so the watch is too.
        let watch = self.get_mut();
        Poll::Ready(
            ready!(watch.poll_frame(cx))
                .transpose()
                .map(|next| next.map(|(_, frame)| frame)),
        )
    }
}

/// A line as a frame, keeping the line.
fn parse(line: Vec<u8>) -> Result<(String, Frame), ClientError> {
    let text = String::from_utf8(line).map_err(|_| bad_frame("a frame is not UTF-8".into()))?;
    let frame = serde_json::from_str(&text).map_err(|err| bad_frame(format!("{err}: {text:.200}")))?;
    Ok((text, frame))
}

fn bad_frame(reason: String) -> ClientError {
    ClientError::BadReply { status: 200, reason }
}
