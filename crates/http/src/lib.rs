//! Muster's HTTP transport (DESIGN "Third wave"): the plumbing the HTTP adapters — the native
//! API, the Consul API, the dashboard — share, and nothing about what they serve.
//!
//! ```text
//!  TcpListener ──accept (within ConnectionBudget)──▶ [TLS] ──▶ hyper HTTP/1.1 or HTTP/2 ──▶ Peer ──▶ router
//!       │ descriptors: the budget behind every listener       │ header read deadline,
//!       │ silent: connections that never spoke, evicted first   keep-alive, pipelining off;
//!       ▼                                                      a first watch: `direct`, same router
//!       ▼
//!  router ──guard (Origin, Host, JSON only, body deadline)──▶ extract (body, query, path) ──▶ handler
//!                                                              errors: ApiError ──▶ {"error": {...}}
//! ```
//!
//! # Layout
//! - [`accept`]: the accept loop, HTTP/1.1 and HTTP/2, plain or TLS, with its per-connection limits.
//! - `direct`: a watch that opens a connection, served beneath hyper (its memory per stream);
//!   the one place this crate knows a route, `/v1/watch/` (SPEC K1).
//! - [`descriptors`]: the connection budget under the process's descriptor limit.
//! - [`silent`]: connections that have not sent a request yet, evicted when the budget is full.
//! - [`listener`]: each listener's TLS and limits (`[tls]`, `[cluster_tls]`, `[limits.*]`).
//! - [`peer`]: who is on the other end of a connection.
//! - [`guard`]: the browser guard (SPEC S6); its refusals go to a [`guard::Refusals`] log.
//! - [`extract`]: body, query, path and header extraction with API errors.
//! - [`error`]: [`error::ApiError`], every error reply's code, status and body.

#![forbid(unsafe_code)]

pub mod accept;
pub mod descriptors;
mod direct;
pub mod error;
pub mod extract;
pub mod guard;
pub mod listener;
pub mod peer;
pub mod silent;
