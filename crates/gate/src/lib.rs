//! Muster's front door (SPEC S1–S6, W4): the parts every way in — the native API, watch
//! streams, the Consul API, xDS, the dashboard's live views — shares before it reaches the
//! registry.
//!
//! This crate holds the gate's pure parts; the server wires them. So far:
//! - [`admission`]: one table of budgets, per principal and per tenant, for everything a
//!   caller can hold open (watch streams, live views, xDS streams and their names, parked
//!   blocking queries). Each held thing is a permit that gives its slot back on drop.
//! - [`rate`]: each principal's write rate, a token bucket (with authentication on).
//! - [`audit`]: the audit trail (SPEC S4): mutations from the apply path and denials from
//!   every way in, kept apart so that no volume of denials evicts a mutation.
//!
//! Convergence subscribers are not held open by a caller's connection; the convergence
//! ledger caps them per tenant itself (`[convergence] max_subscribers_per_tenant`).

pub mod admission;
pub mod audit;
pub mod rate;

pub use admission::{Admission, Budget, Budgets, Held, Hold, Holder, NameBudget, Permit, Refusal, Report};
pub use rate::{Rate, Throttled, WriteRates};
