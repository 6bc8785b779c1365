//! Federation (SPEC G1, G2): this region mirrors what it imports from its peer regions, and
//! reads carry the mirrored sets and a failover decision beside the local set.
//!
//! ```text
//!  peer region's API ──watch (resume by revision)──▶ mirror task (leader only, `mirror.rs`)
//!        ──Command::Mirror──▶ Raft log ──▶ registry's mirror table (every replica)
//!  read (federation=true) ──▶ local set + mirrored sets (age, state) + failover decision
//! ```
//!
//! The mirror table is replicated state; what only the leader knows (whether a watch is
//! open, the newest peer revision seen) lives in the region's links (`region::Links`).

#![forbid(unsafe_code)]

mod mirror;
mod read;
mod region;
mod tiers;

pub use mirror::lead;
pub use read::{FederationRoutes, federated_parts, status};
pub use region::{Federation, FederationConfig, PeerConfig};
pub use tiers::run_ticker;
