//! The HTTP client of the whole `/v1` API ([`muster_core::api`]): the CLI's, the registrar's
//! and the view's one way to talk to a server.
//!
//! ```text
//!  Client ──unary call (bounded by a timeout)──▶ typed reply | ClientError (API code or ours)
//!     └──watch_service / watch_namespace ──▶ Watch ──body chunks──▶ LineSplitter ──▶ Frame
//! ```
//! - [`client`]: [`Client`], one async fn per route.
//! - [`error`]: [`ClientError`] and its stable codes.
//! - [`tls`]: [`ClientTls`], the CA and client certificate for `https://` servers.
//! - [`watch`]: [`Watch`], a streamed NDJSON watch with an idle timeout.
//! - [`lines`]: [`LineSplitter`], the pure newline splitter under a watch.
//! - [`duration`]: milliseconds on the wire, and their human form in messages.

pub mod client;
pub mod duration;
pub mod error;
pub mod lines;
pub mod tls;
pub mod watch;

pub use client::{ACTOR_HEADER, Client, DEFAULT_SERVER, REQUEST_TIMEOUT, SnapshotQuery};
pub use duration::{format_millis, millis};
pub use error::ClientError;
pub use lines::{LineSplitter, MAX_LINE_BYTES};
pub use tls::{ClientTls, ClientTlsBuilder};
pub use watch::Watch;
