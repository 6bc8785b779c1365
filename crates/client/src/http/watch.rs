//! A streamed watch: the response body read frame by frame, split on newlines into the
//! API's NDJSON [`Frame`]s.
//!
//! ```text
//!  body chunks ──▶ LineSplitter (bytes until '\n', bounded) ──▶ line ──▶ serde ──▶ Frame
//! ```
//! A chunk may hold many lines or a part of one; [`LineSplitter`] is the pure part and is
//! tested on its own. A stream that stays silent longer than the idle timeout is treated as
//! lost: the server sends `progress` every few seconds, so silence means a dead connection.

use std::time::Duration;

use http_body_util::BodyExt;
use hyper::body::Incoming;
use muster_core::api::Frame;

use crate::http::duration::{format_millis, millis};
use crate::http::error::{ClientError, causes};
use crate::http::lines::{LineSplitter, MAX_LINE_BYTES};

/// An open watch.
#[derive(Debug)]
pub struct Watch {
    body: Incoming,
    lines: LineSplitter,
    server: String,
    idle_timeout: Duration,
    ended: bool,
}

impl Watch {
    pub(crate) fn new(body: Incoming, server: String, idle_timeout: Duration) -> Watch {
        Watch {
            body,
            lines: LineSplitter::new(MAX_LINE_BYTES),
            server,
            idle_timeout,
            ended: false,
        }
    }

    /// The next frame with its raw JSON line, or `None` when the server ended the stream.
    pub async fn next_frame(&mut self) -> Result<Option<(String, Frame)>, ClientError> {
        let Some(line) = self.next_line().await? else {
            return Ok(None);
        };
        let text = String::from_utf8(line).map_err(|_| bad_frame("a frame is not UTF-8".into()))?;
        let frame = serde_json::from_str(&text).map_err(|err| bad_frame(format!("{err}: {text:.200}")))?;
        Ok(Some((text, frame)))
    }

    async fn next_line(&mut self) -> Result<Option<Vec<u8>>, ClientError> {
        loop {
            if let Some(line) = self.lines.next_line() {
                return Ok(Some(line));
            }
            if self.ended {
                return Ok(self.lines.finish());
            }
            let frame = tokio::time::timeout(self.idle_timeout, self.body.frame())
                .await
                .map_err(|_| {
                    self.lost(format!(
                        "nothing arrived for {}",
                        format_millis(millis(self.idle_timeout))
                    ))
                })?;
            match frame {
                None => self.ended = true,
                Some(Err(err)) => return Err(self.lost(causes(&err))),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.lines.push(&data).map_err(|reason| self.lost(reason))?;
                    }
                }
            }
        }
    }

    fn lost(&self, reason: String) -> ClientError {
        ClientError::StreamLost {
            server: self.server.clone(),
            reason,
        }
    }
}

fn bad_frame(reason: String) -> ClientError {
    ClientError::BadReply { status: 200, reason }
}
