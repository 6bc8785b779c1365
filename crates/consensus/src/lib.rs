//! Durability and replication (DESIGN "Crates": `muster-consensus`): the registry state
//! machine behind a log.
//!
//! ```text
//!  propose(Command, CommandMeta) ──▶ log append (fsync) ──▶ Registry::apply ──▶ reply
//!                                                              │
//!                                                              └──▶ ApplyObserver (hub: watches, DNS)
//! ```
//!
//! A [`Node`] owns the registry. Writes go through [`Node::propose`] and are acknowledged
//! only once durable and applied; reads borrow the registry through [`Node::read`] and clone
//! what they need (snapshots are `Arc`s, so that is O(1)). Every applied command is reported,
//! in log order, to the [`ApplyObserver`] given at open.

#![forbid(unsafe_code)]

pub mod append_pacer;
mod applied_batches;
mod batcher;
#[cfg(any(test, feature = "fault-injection"))]
pub mod fault_injection;
mod log_store;
mod log_tail;
mod network;
#[cfg(test)]
mod network_tests;
mod node;
mod read_index;
mod runtime;
mod sim_disk;
mod sim_log_store;
mod snapshot_files;
pub mod snapshot_frame;
#[cfg(test)]
mod snapshot_frame_tests;
mod snapshot_seal;
mod snapshot_store;
mod state_machine;
#[cfg(test)]
mod state_machine_tests;
#[cfg(test)]
mod storage_tests;
mod types;

pub use batcher::{MAX_BATCH_BYTES, MAX_PROPOSAL_BYTES};
pub use network::{
    CallError, PeerClient, PeerTransport, Rpc, SECRET_HEADER, TransportReply, WIRE_HEADER, WIRE_VERSION, WireError,
    readable_wire, shrink,
};
pub use node::{
    ApplyObserver, ClusterConfig, ConsensusError, Judged, Member, Node, NodeConfig, NodeStatus, SNAPSHOT_CHUNK_BYTES,
};
pub use read_index::ReadIndexError;
pub use runtime::{ElectionRng, MusterRuntime, seed_election_rng};
pub use sim_disk::SimDisk;
pub use types::{Batch, BatchId, Outcome, Proposal, TypeConfig};
