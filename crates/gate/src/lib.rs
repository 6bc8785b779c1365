//! Muster's front door (SPEC S1–S6, W4; DESIGN "Third wave"): the one gate every way in — the
//! native API, watch streams, the Consul API, xDS, the dashboard's live views — goes through
//! to reach the registry, the hub and the leader.
//!
//! ```text
//!   adapters (native API · Consul · xDS · dashboard · federation)
//!        │ each calls only ▼
//!   Gate: propose · read(consistency) · subscribe · on_leader · renew · ttl_report · in_flight
//!         + identify · require (before any lookup) · admit · throttle · audit the denial
//!        │
//!   below: WatchHub (muster-hub) · Node (muster-consensus) · LeaderEngine (muster-leader)
//! ```
//!
//! # Layout
//! - [`Gate`] (`gate`): the facade, and the only holder of the node; [`Wiring`]: what only
//!   the server's wiring does with it (readiness, driving the leader engine, the hub's
//!   ticker and close).
//! - [`caller`]: who a caller is ([`Caller`]) and what it may do; `[auth]`.
//! - [`admission`]: one table of budgets, per principal and per tenant, for everything a
//!   caller can hold open (watch streams, live views, xDS streams and their names, parked
//!   blocking queries). Each held thing is a permit that gives its slot back on drop. Pure.
//! - [`rate`]: each principal's write rate, a token bucket (with authentication on). Pure.
//! - [`role`]: the authority a caller speaks with, capped at its token's role (SPEC L5),
//!   and the registry format the cluster runs.
//! - [`audit`]: the audit trail (SPEC S4): mutations from the apply path and denials from
//!   every way in, kept apart so that no volume of denials evicts a mutation. Pure.
//! - [`consistency`]: how fresh a read may be (SPEC R3).
//! - [`leader`]: the leader engine and the callers waiting on it; [`forward`]: the way to
//!   the leader from a follower.
//! - [`tokens`]: the token table's changes, for streams already open.
//! - [`parked`]: how blocking queries ended, for the metrics.
//! - [`live`]: the live views' change streams (the dashboard's, the cluster's, convergence
//!   summaries), each admitted here and ended when its token is revoked.
//! - [`clock`]: the server's clock, the one place the daemon reads time.
//!
//! Convergence subscribers are not held open by a caller's connection; the convergence
//! ledger caps them per tenant itself (`[convergence] max_subscribers_per_tenant`).

#![forbid(unsafe_code)]

pub mod admission;
pub mod audit;
pub mod caller;
pub mod clock;
pub mod consistency;
pub mod forward;
mod gate;
pub mod leader;
pub mod live;
pub mod parked;
pub mod rate;
pub mod role;
pub mod tokens;

pub use admission::{Admission, Budget, Budgets, Held, Hold, Holder, NameBudget, Permit, Refusal, Report};
pub use caller::{AuthConfig, Caller};
pub use gate::{Gate, Meter, Parts, REVOKED, RateLimited, Wiring, holder, is_write, revoked_recorded};
pub use rate::{Rate, Throttled, WriteRates};
pub use tokens::TokenWatch;
