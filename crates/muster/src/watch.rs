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

use crate::client::{ClientError, causes};

/// The longest line accepted: a snapshot frame of a service at the registry's endpoint
/// quota is a few MiB; 64 MiB bounds memory if a server (or something posing as one)
/// never sends a newline.
pub const MAX_LINE_BYTES: usize = 64 * 1024 * 1024;

/// Splits a byte stream into newline-terminated lines, skipping blank ones.
#[derive(Debug)]
pub struct LineSplitter {
    buf: Vec<u8>,
    /// Bytes of `buf` already searched for a newline, so a long line is scanned once.
    scanned: usize,
    /// Length of the unfinished line at the end of `buf`.
    tail: usize,
    max_line: usize,
}

impl LineSplitter {
    /// A splitter refusing lines longer than `max_line` bytes.
    pub fn new(max_line: usize) -> LineSplitter {
        LineSplitter {
            buf: Vec::new(),
            scanned: 0,
            tail: 0,
            max_line,
        }
    }

    /// Appends a chunk. Fails when an unfinished line grows past the limit.
    pub fn push(&mut self, chunk: &[u8]) -> Result<(), String> {
        self.tail = match chunk.iter().rposition(|b| *b == b'\n') {
            Some(last) => chunk.len() - last - 1,
            None => self.tail + chunk.len(),
        };
        if self.tail > self.max_line {
            return Err(format!("a frame is longer than {} bytes", self.max_line));
        }
        self.buf.extend_from_slice(chunk);
        Ok(())
    }

    /// The next complete, non-blank line, without its newline (and `\r`).
    pub fn next_line(&mut self) -> Option<Vec<u8>> {
        loop {
            let Some(at) = self.buf[self.scanned..].iter().position(|b| *b == b'\n') else {
                self.scanned = self.buf.len();
                return None;
            };
            let mut line: Vec<u8> = self.buf.drain(..=self.scanned + at).collect();
            self.scanned = 0;
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            if !line.iter().all(u8::is_ascii_whitespace) {
                return Some(line);
            }
        }
    }

    /// What is left after the stream ended: a last line without a newline, if any.
    pub fn finish(&mut self) -> Option<Vec<u8>> {
        self.scanned = 0;
        self.tail = 0;
        let rest = std::mem::take(&mut self.buf);
        (!rest.iter().all(u8::is_ascii_whitespace)).then_some(rest)
    }
}

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
                        crate::duration::format_millis(crate::duration::millis(self.idle_timeout))
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
