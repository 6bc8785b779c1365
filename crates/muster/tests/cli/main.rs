//! The `muster` command line: its parsers and renderers on fixed data, its exact surface
//! (SPEC D1, U1 item 8), end-to-end runs of the real binary against `muster serve` on a free
//! loopback port, and the client library's registrar against an in-process registry. One
//! test binary (CRATES.md tip 6); each file one concern.

mod audit;
mod cluster;
mod config;
mod config_reference;
mod convergence;
mod discover;
mod durability;
mod e2e;
mod fixtures;
mod flags;
mod inproc;
mod lab;
mod logging;
mod parsers;
mod picker;
mod policy;
mod registrar;
mod render;
mod resolver;
mod resolver_set;
mod support;
mod surface;
mod tls;
mod watch_stream;
