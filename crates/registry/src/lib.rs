//! The deterministic registry state machine (DESIGN "Crates": `muster-registry`).
//!
//! ```text
//!  Command + CommandMeta ──▶ plan (validate, fence, CAS, quotas; &self) ──▶ Rejection
//!                                   │ Plan
//!                                   ▼
//!                              commit (one new revision; &mut self)
//!                                   │
//!          ┌────────────────────────┼─────────────────────────────┐
//!          ▼                        ▼                             ▼
//!   per-service snapshot     per-service history            lease index
//!   (Arc, persistent map,    (updates + what they replaced:  (lease → endpoints,
//!    digest kept in O(1))     changes_since, past reads)      for expiry)
//! ```
//!
//! The registry is what the Raft log is applied to: it takes time and caller as inputs
//! ([`CommandMeta`]), draws no randomness and iterates no hash map, so every replica that
//! applies the same commands holds the same state, emits the same events and exports the
//! same bytes. Lease deadlines are deliberately absent (DESIGN "Leases off the log").
//!
//! # Correctness
//! - A refused command changes nothing, its revision included: every check runs in
//!   planning, on `&self`; commit cannot fail.
//! - One revision per state-changing command; its events are grouped per service, sorted
//!   by service then instance, each update naming the service's previous revision and the
//!   digest of the resulting set.
//! - A command from an older incarnation than the registry knows for an instance (live, or
//!   removed within the retained history) never changes anything.
//! - `changes_since` returns every update after a revision or `Compacted`, never a subset.

mod applied;
mod command;
mod config;
mod leases;
mod plan;
mod registry;
mod service;
mod state;

pub use applied::{Applied, LeaseGrant, ReadError, Unchanged};
pub use command::{
    Command, CommandMeta, Deregister, Drain, Evict, ExpireLeases, GrantLease, LeaseSpec, Register, RevokeLease,
    SetServing, Target,
};
pub use config::{Quotas, RegistryConfig};
pub use leases::Lease;
pub use registry::{Page, Registry, Scope};
pub use state::{ImportError, RegistryState};
