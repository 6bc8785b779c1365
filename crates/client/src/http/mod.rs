//! The HTTP client of the whole `/v1` API ([`muster_core::api`]): the CLI's, the registrar's
//! and the view's one way to talk to a server. Everything public here is re-exported at the
//! crate root; this module is private.
//!
//! ```text
//!  ClientBuilder ──build──▶ Client ──unary call (bounded by a timeout)──▶ typed reply | ClientError
//!     (url, token, tls,        │            (Registration, Drain, ... → the wire bodies)
//!      actor, transport)       └──watch_service / watch_namespace ──▶ Watch: Stream<Item = Result<Frame, _>>
//! ```
//! - [`client`]: [`Client`], one async fn per route, and [`ClientBuilder`].
//! - [`request`]: the request types of the writes ([`Registration`], [`Drain`], ...).
//! - [`transport`]: the pluggable `tower::Service` underneath ([`HttpService`], [`Body`]).
//! - [`error`]: [`ClientError`] and its typed, stable [`ClientErrorCode`].
//! - [`tls`]: [`ClientTls`], the CA and client certificate for `https://` servers.
//! - [`watch`]: [`Watch`], a streamed NDJSON watch with an idle timeout.
//! - [`lines`]: the pure newline splitter under a watch.
//! - [`duration`]: milliseconds on the wire, and their human form in messages.

pub(crate) mod client;
pub mod duration;
pub(crate) mod error;
pub(crate) mod lines;
pub(crate) mod request;
pub(crate) mod tls;
pub(crate) mod transport;
pub(crate) mod watch;

pub use client::{
    ACTOR_HEADER, CONNECT_TIMEOUT, Client, ClientBuilder, ConvergenceQuery, DEFAULT_SERVER, REQUEST_TIMEOUT,
    SnapshotQuery,
};
pub use error::{ClientError, ClientErrorCode, ErrorSource};
pub use request::{
    CheckReport, Deregistration, Drain, InFlightReport, LeaseGrant, NewToken, Registration, ServingChange,
};
pub use tls::{ClientTls, ClientTlsBuilder};
pub use transport::{Body, BoxError, HttpService};
pub use watch::Watch;

pub(crate) use duration::millis;
