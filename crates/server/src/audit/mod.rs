//! The audit trail's HTTP side (SPEC S4): `GET /v1/audit` and the browser guard's refusals.
//! The trail itself — two rings, mutations from the apply path, denials aggregated per
//! source — is `muster_gate::audit`.
//!
//! - `route`: `GET /v1/audit`, and what a caller's rules let it read there.
//! - `guard`: the browser guard's refusals as denials.

mod guard;
mod route;

pub(crate) use guard::GuardRefusals;
pub(crate) use muster_gate::audit::{AuditLog, Denial};
pub(crate) use route::list;
