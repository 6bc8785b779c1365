//! The web dashboard (SPEC U2): its files at `/ui/` and the views it reads besides the API's
//! (`GET /v1/overview`, a service's lease deadlines), each also a live stream
//! (`?stream=true`: the value again whenever it changed; `muster_gate::live`).
//!
//! An adapter: it reaches the registry, the hub and the leader engine only through the gate
//! (`muster_gate::Gate`), whose admission table holds each live stream's slot.
//!
//! # Layout
//! - [`ui`]: the page, its script and style, compiled into the binary.
//! - [`overview`]: every service's counts and serving states, as a caller may see them.
//! - [`lease_deadlines`]: a service's leases and when the leader expires them.

#![forbid(unsafe_code)]

pub mod lease_deadlines;
pub mod overview;
pub mod ui;
