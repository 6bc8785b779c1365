//! The web dashboard (SPEC U2): its files at `/ui/`, the views it reads besides the API's
//! (`GET /v1/overview`, a service's lease deadlines) and the live streams every dashboard
//! view uses (`?stream=true`: the value again whenever it changed).
//!
//! An adapter: it reaches the registry, the hub and the leader engine only through the gate
//! (`muster_gate::Gate`), whose admission table holds each live stream's slot.
//!
//! # Layout
//! - [`ui`]: the page, its script and style, compiled into the binary.
//! - [`overview`]: every service's counts and serving states, as a caller may see them.
//! - [`lease_deadlines`]: a service's leases and when the leader expires them.
//! - [`live`]: a value's change stream (NDJSON), for these views and the API's other
//!   summaries (the cluster, convergence).

#![forbid(unsafe_code)]

pub mod lease_deadlines;
pub mod live;
pub mod overview;
pub mod ui;
