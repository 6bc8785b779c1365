//! Integration tests of the client library: its pure parts against the real registry, and
//! its tower integration against a real in-process registry and real backends.

mod balance;
mod discover;
mod fail_static;
mod failover;
mod grpc;
mod inproc;
mod view;
mod what_is_wrong;
