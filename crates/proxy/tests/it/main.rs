//! `muster proxy` end to end (SPEC D3): real backends registered in a real in-process
//! registry, real HTTP/1.1, h2c and TCP clients through the proxy.

mod support;

mod drain;
mod failover;
mod forwarding;
mod outage;
mod retries;
