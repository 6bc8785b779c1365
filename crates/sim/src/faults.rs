//! The faults the schedule injects, and what undoes them later.
//!
//! | fault | how |
//! | --- | --- |
//! | crash, restart from disk | power cut ([`muster_consensus::SimDisk::power_cut`]), restart 0.2–3 s later |
//! | partition, symmetric | every link of one node cut both ways, healed 0.5–4 s later |
//! | partition, one-way | one directed link cut |
//! | loss, duplication, reordering, delay | the network's weather ([`crate::net::Weather`]) |
//! | slow disk | every write of one node takes 5–80 ms, for a while |
//! | failing disk | the next write fails; Raft stops on it, and the node is restarted (as its supervisor would once the process exits) |
//! | leader change during lease expiry | while the leader's expiry is in flight, the leader is isolated or crashed |
//!
//! Snapshots built while entries apply, and snapshot installs during a build, come from the
//! configuration: a snapshot every few entries and a short log tail behind it, so a node
//! that lagged catches up by snapshot while it builds its own.

use crate::net::Weather;
use crate::rng::SimRng;

/// One fault, or the end of one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Crash a node.
    Crash(u64),
    /// Start a crashed node again.
    Restart(u64),
    /// Cut every link of a node, both ways.
    Isolate(u64),
    /// Cut one directed link.
    CutOneWay(u64, u64),
    /// Restore every link.
    Heal,
    /// Change the weather.
    Weather(Weather),
    /// Slow a node's disk (ms per write; 0: normal).
    SlowDisk(u64, u64),
    /// Fail a node's next writes.
    FailDisk(u64, u32),
    /// Isolate or crash the leader now if its lease expiry is in flight.
    LeaderChangeDuringExpiry,
}

/// Draws a fault for a cluster whose members are `ids`.
pub fn draw(rng: &mut SimRng, ids: &[u64]) -> Fault {
    let node = *rng.pick(ids);
    match rng.below(100) {
        0..14 => Fault::Crash(node),
        14..28 => Fault::Isolate(node),
        28..38 => {
            let other = *rng.pick(ids);
            if other == node {
                Fault::Heal
            } else {
                Fault::CutOneWay(node, other)
            }
        }
        38..48 => Fault::Heal,
        48..66 => Fault::Weather(match rng.below(3) {
            0 => Weather::CALM,
            1 => Weather {
                loss: rng.between(30, 250),
                duplicate: rng.between(20, 150),
                delay_ms: (1, rng.between(5, 40)),
            },
            _ => Weather {
                loss: rng.between(0, 40),
                duplicate: rng.between(0, 60),
                delay_ms: (rng.between(5, 30), rng.between(40, 250)),
            },
        }),
        66..78 => Fault::SlowDisk(node, rng.between(5, 80)),
        78..84 => Fault::FailDisk(node, 1),
        _ => Fault::LeaderChangeDuringExpiry,
    }
}
