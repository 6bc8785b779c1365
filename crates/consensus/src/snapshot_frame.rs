//! The wire form of one `InstallSnapshot` chunk (SPEC R5, K): the chunk's bytes raw, after a
//! small JSON head — not the whole request as JSON, where `data: Vec<u8>` becomes an array
//! of numbers about four times its size (a snapshot is JSON text: `123,` per byte) and
//! costs a number parse per byte on the receiver.
//!
//! ```text
//!  0        4              8                  8+H                     8+H+L
//!  │ "MSC1" │ H: u32 BE    │ head: JSON, H B  │ data: the chunk, L B   │  (nothing after)
//!           head = {"vote":…, "meta":…, "offset":…, "done":…, "len":L}
//! ```
//!
//! It is the body of `POST /raft/snapshot` (`application/octet-stream`) over HTTP and the
//! message the simulation's network carries: [`encode`] on the sender, [`decode`] in
//! `Node::rpc`, the same two functions on both carriers.
//!
//! # Correctness
//! - `decode(encode(r)) == r` for every request.
//! - [`decode`] accepts a body only if it is exactly one frame: the magic, a head that
//!   parses, and exactly `len` bytes after it. A body cut short anywhere (a dropped
//!   connection, a proxy's limit) is [`FrameError::Truncated`], never a shorter chunk that
//!   openraft would write at `offset` and install; a JSON body from a peer that speaks the
//!   old form is [`FrameError::NotAFrame`]. Either is refused before Raft sees anything.
//! - Bytes flipped inside `data` are not detected here (there is no checksum): TCP, and TLS
//!   between members (SPEC S1), carry the body intact, and the assembled snapshot is parsed
//!   as a whole before it is installed (`state_machine`), so garbage there fails the
//!   install rather than going in.

use openraft::raft::InstallSnapshotRequest;
use openraft::{BasicNode, SnapshotMeta, Vote};
use serde::{Deserialize, Serialize};

use crate::types::TypeConfig;

/// The frame's first four bytes: names the format and its version ("Muster Snapshot Chunk,
/// 1"), so a JSON body (which starts with `{`) or a future form is told apart at once.
const MAGIC: [u8; 4] = *b"MSC1";
/// The magic and the head's length.
const PREFIX_LEN: usize = MAGIC.len() + 4;

/// The content type of a frame on HTTP.
pub(crate) const CONTENT_TYPE: &str = "application/octet-stream";

/// Why a body is not one snapshot chunk frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The body does not start with the frame's magic (e.g. the JSON of an older peer).
    #[error("not a snapshot chunk frame (it does not start with {:?})", String::from_utf8_lossy(&MAGIC))]
    NotAFrame,
    /// The body ends before the frame does.
    #[error("truncated snapshot chunk: the frame needs {needed} bytes, the body has {actual}")]
    Truncated {
        /// The bytes the frame needs (as far as could be read).
        needed: u64,
        /// The bytes the body has.
        actual: u64,
    },
    /// The body goes on after the chunk's `len` bytes.
    #[error("snapshot chunk with trailing bytes: the frame is {needed} bytes, the body {actual}")]
    TrailingBytes {
        /// The frame's length.
        needed: u64,
        /// The body's length.
        actual: u64,
    },
    /// The head is not the JSON of a chunk's head.
    #[error("snapshot chunk with an unreadable head: {0}")]
    Head(String),
}

/// The head, as written.
#[derive(Serialize)]
struct HeadRef<'a> {
    vote: &'a Vote<u64>,
    meta: &'a SnapshotMeta<u64, BasicNode>,
    offset: u64,
    done: bool,
    len: u64,
}

/// The head, as read.
#[derive(Deserialize)]
struct Head {
    vote: Vote<u64>,
    meta: SnapshotMeta<u64, BasicNode>,
    offset: u64,
    done: bool,
    len: u64,
}

/// The frame of `request`: its size is the chunk's plus a head of a few hundred bytes.
pub fn encode(request: &InstallSnapshotRequest<TypeConfig>) -> Vec<u8> {
    let head = HeadRef {
        vote: &request.vote,
        meta: &request.meta,
        offset: request.offset,
        done: request.done,
        len: request.data.len() as u64,
    };
    // Infallible: plain structs of numbers, strings and maps with string keys.
    let head = serde_json::to_vec(&head).expect("a snapshot chunk's head serialises");
    let head_len = u32::try_from(head.len()).expect("a head of a few hundred bytes");
    let mut frame = Vec::with_capacity(PREFIX_LEN + head.len() + request.data.len());
    frame.extend_from_slice(&MAGIC);
    frame.extend_from_slice(&head_len.to_be_bytes());
    frame.extend_from_slice(&head);
    frame.extend_from_slice(&request.data);
    frame
}

/// The request `body` frames, if it is exactly one frame.
pub fn decode(body: &[u8]) -> Result<InstallSnapshotRequest<TypeConfig>, FrameError> {
    let actual = body.len() as u64;
    let truncated = |needed: u64| FrameError::Truncated { needed, actual };
    // A body shorter than the magic is a prefix of it or not a frame at all.
    if !body.starts_with(&MAGIC[..body.len().min(MAGIC.len())]) {
        return Err(FrameError::NotAFrame);
    }
    let Some((prefix, rest)) = body.split_first_chunk::<PREFIX_LEN>() else {
        return Err(truncated(PREFIX_LEN as u64));
    };
    let head_len = u32::from_be_bytes([prefix[4], prefix[5], prefix[6], prefix[7]]) as usize;
    let Some((head, data)) = rest.split_at_checked(head_len) else {
        return Err(truncated((PREFIX_LEN + head_len) as u64));
    };
    let head: Head = serde_json::from_slice(head).map_err(|e| FrameError::Head(e.to_string()))?;
    // `len` comes off the wire: saturate, so a huge one is a truncated body, not an overflow.
    let needed = ((PREFIX_LEN + head_len) as u64).saturating_add(head.len);
    match (data.len() as u64).cmp(&head.len) {
        std::cmp::Ordering::Less => Err(truncated(needed)),
        std::cmp::Ordering::Greater => Err(FrameError::TrailingBytes { needed, actual }),
        std::cmp::Ordering::Equal => Ok(InstallSnapshotRequest {
            vote: head.vote,
            meta: head.meta,
            offset: head.offset,
            data: data.to_vec(),
            done: head.done,
        }),
    }
}
