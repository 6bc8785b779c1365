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
//! The last three came after seeds had been found and replayed by their traces; they (and
//! their ends) are drawn from a stream of their own ([`draw_deep`]), and `Options::shallow`
//! leaves them out, so that an older trace replays exactly as it was found:
//!
//! | fault | how |
//! | --- | --- |
//! | lost and regained leadership | the leader is isolated until another node leads, then that one is isolated, so the first may lead again in a new term |
//! | slow node | one node's disk (100 ms a write) and every message to or from it (100× the delay) are slow, for 1–6 s |
//! | message size | every node-to-node message over the listener's limit is refused, as the listener does; appends are paced to a small byte bound so the pacing runs |
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
    /// Isolate the leader (it loses leadership), then [`Fault::Regain`].
    Depose,
    /// Heal the deposed node's links and isolate whoever leads now instead, so the deposed
    /// node may win the next election.
    Regain(u64),
    /// Slow a node's disk and network by a factor (1: normal).
    SlowNode(u64, u64),
}

/// How much slower a slow node's network is than the weather's (its disk takes
/// [`SLOW_WRITE_MS`] a write).
pub const SLOW_FACTOR: u64 = 100;
/// A slow node's disk: a write takes this long.
pub const SLOW_WRITE_MS: u64 = 100;

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

/// Draws one of the later faults: a lost and regained leadership, or a slow node.
pub fn draw_deep(rng: &mut SimRng, ids: &[u64]) -> Fault {
    let node = *rng.pick(ids);
    match rng.below(2) {
        0 => Fault::Depose,
        _ => Fault::SlowNode(node, SLOW_FACTOR),
    }
}
