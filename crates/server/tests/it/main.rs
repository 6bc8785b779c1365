//! HTTP integration tests of `muster-server`, each against a real server on `127.0.0.1:0`
//! with a temporary data directory. One test binary (CRATES.md "Testing").
//!
//! Every wait is bounded ([`support::STEP`]) so a failing test fails instead of hanging; no
//! test asserts on timing.

mod admission;
mod audit;
mod auth;
mod cluster;
mod cluster_reads;
mod consul;
mod consul_agent;
mod consul_sd_fixture;
mod convergence;
mod dashboard;
mod dns;
mod errors;
mod faults;
mod federation;
mod health;
mod hostile;
mod in_process;
mod leases;
mod lifecycle;
mod limits;
mod metrics;
mod openapi;
mod policy;
mod prometheus_sd;
mod reads;
mod roles;
mod schema_check;
mod support;
mod tls;
mod watch;
mod writes;
// The xDS control plane (SPEC D5), built only with the `xds` feature.
#[cfg(feature = "xds")]
mod xds;
