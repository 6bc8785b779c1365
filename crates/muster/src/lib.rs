//! `muster`: the server and the command-line client in one binary (DESIGN "Interfaces",
//! SPEC U1). This library is everything but `main`, so that the tests can reach the parsers
//! and the renderers with fixed data.
//!
//! # Layout
//! ```text
//!  main.rs ── parse argv (cli) ── logging, runtime ── commands::run ──▶ exit code (error)
//!                                                         │
//!               serve: serve::serve ── muster_server::run(config, SIGTERM/Ctrl-C)
//!               others: muster_client::Client (one fn per route) ──▶ render
//!                       watch: Client::watch_* ──▶ muster_client::Watch (NDJSON frames)
//! ```
//! - [`cli`]: the command line's shape (clap derive).
//! - [`args`]: the parsers clap cannot do alone: `NAMESPACE/SERVICE`, `IP:PORT`, `k=v`.
//! - [`duration`]: `10s`, `500ms`, `2m` and back.
//! - the HTTP client of the `/v1` API (typed replies and errors, streamed watches) is
//!   [`muster_client`], shared with applications that link the client library.
//! - [`table`]: aligned text tables.
//! - [`render`]: human output for every reply and frame.
//! - [`commands`]: what each subcommand does; [`audit`]: `muster audit` (flags, query, table);
//!   [`convergence`]: `muster convergence` and the deploy gate `muster wait-converged` (SPEC O3).
//! - [`serve`]: `muster serve`: config file, flags, signals; [`lab_hook`]: the dashboard's
//!   lab runs, plugged into the server.
//! - [`logging`]: `--log-level`, `--log-format`, openraft held at warn (SPEC O2); `otel`
//!   (feature `otel`): OTLP span export.
//! - [`error`]: [`CliError`], its stable code and its exit code.
//!
//! # Exit codes
//! | code | meaning |
//! |---|---|
//! | 0 | success (for `serve`: a graceful stop after SIGTERM or Ctrl-C) |
//! | 1 | refused: the server answered with an error code (`stale_incarnation`, `not_found`, a watch's `compacted` ...), `wait-converged` timed out (`not_converged`), or `serve` or `bench` failed at run time |
//! | 2 | usage: bad arguments, an invalid name (nothing was sent), an unusable config |
//! | 3 | unreachable: cannot connect, no answer in time, a reply that is not the API's, a watch cut off or closed by a stopping server |
//! | 4 | a watch fell behind and was told to `resync`: take a fresh snapshot and watch again |
//!
//! Every error prints `error: <code>: <message>` on stderr; with `--json` the same error
//! is also printed on stdout as `{"error":{"code":...,"message":...}}`.

#![deny(unsafe_code)]

pub mod acl;
pub mod allocator;
pub mod args;
pub mod audit;
pub mod cli;
pub mod commands;
pub mod convergence;
pub mod duration;
pub mod error;
pub mod lab_hook;
pub mod logging;
#[cfg(feature = "otel")]
pub mod otel;
pub mod proxy;
pub mod render;
pub mod serve;
pub mod table;

pub use error::CliError;
