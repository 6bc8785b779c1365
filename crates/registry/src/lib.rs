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
//! same bytes. Lease deadlines are deliberately absent (DESIGN "Leases off the log"): they
//! live in [`LeaseDeadlines`], a pure table the leader engine (`muster-leader`, driven by the
//! server and the lab) keeps beside the registry. Drain deadlines, by contrast, are committed
//! state ([`DrainDeadline`], SPEC L6): a `Drain` with a grace records `at_ms + grace`, every
//! lift of the drain clears it, and snapshots carry it, so any leader ends the drain on time.
//!
//! # Example
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use muster_core::*;
//! use muster_registry::*;
//!
//! let mut registry = Registry::new(RegistryConfig::default());
//! let meta = CommandMeta { at_ms: 0, principal: Principal::new("deployer")?, actor: Actor::Owner };
//! let key = ServiceKey::new("acme", "prod", "api")?;
//! let register = Register {
//!     target: Target { key: key.clone(), instance: InstanceId::new("api-0")?, incarnation: Incarnation(1) },
//!     spec: serde_json::from_str(
//!         r#"{"addresses":[{"ip":"10.0.0.1"}],"ports":[{"name":"http","port":8080,"protocol":"http"}]}"#,
//!     )?,
//!     lease: LeaseSpec::Grant { ttl_ms: 10_000 },
//!     expected_revision: None,
//! };
//! let applied = registry.apply(&register.into(), &meta)?;
//! assert_eq!(applied.revision, Revision(1)); // record and lease in one revision
//! let snapshot = registry.snapshot(&key).expect("known service");
//! assert_eq!(snapshot.len(), 1);
//! let updates = registry.changes_since(&Scope::Service(key), Revision(0))?;
//! assert_eq!(updates[0].digest, snapshot.digest());
//! # Ok(())
//! # }
//! ```
//!
//! # Correctness
//! - A refused command changes nothing, its revision included: every check runs in
//!   planning, on `&self`; commit cannot fail.
//! - One revision per state-changing command; its events are grouped per service, sorted
//!   by service then instance, each update naming the service's previous revision and the
//!   digest of the resulting set.
//! - A command from an older incarnation than the registry knows for an instance (live, or
//!   removed within the policy's `fence_retention_ms`, however many writes came since) never
//!   changes anything.
//! - The policy commands are judged by is replicated state ([`SetPolicy`]), never a replica's
//!   own configuration: replay under a different config file reaches the same state.
//! - `changes_since` returns every update after a revision or `Compacted`, never a subset.

#![forbid(unsafe_code)]

mod acl;
mod applied;
mod command;
mod config;
mod deadlines;
mod drains;
mod fences;
mod leases;
mod mirror;
mod plan;
mod registry;
mod service;
mod state;

pub use applied::{Applied, LeaseGrant, ReadError, Unchanged};
pub use command::{
    AclBootstrap, Command, CommandMeta, CreateToken, Deregister, Drain, Evict, ExpireLeases, GrantLease, LeaseSpec,
    RaiseFormat, Register, RevokeLease, RevokeToken, SetPolicy, SetServing, Target,
};
pub use config::{MIN_FENCE_RETENTION_MS, Quotas, RegistryConfig};
pub use deadlines::{DeadlinePassed, LeaseDeadlines};
pub use drains::{DrainDeadline, MAX_DRAIN_GRACE_MS};
pub use leases::Lease;
pub use mirror::{Mirror, MirrorChange, MirrorImport};
pub use registry::{EMPTY_LISTED_MS, MAX_INCARNATION, Page, Registry, Scope};
pub use state::{ImportError, RegistryState};
