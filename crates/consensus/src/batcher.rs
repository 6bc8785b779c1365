//! Group commit: proposals that arrive while a log entry is being made durable ride the next
//! entry together.
//!
//! ```text
//!  propose ─┐
//!  propose ─┼─▶ queue ─▶ batcher: drain what is queued (≤ MAX_BATCH, ≤ MAX_BATCH_BYTES) ─▶ one client_write
//!  propose ─┘                      ◀── one fsync, one apply of the batch ──┘   │
//!                                  reply to each proposer with its own verdict ◀┘
//! ```
//!
//! openraft 0.9 waits for each log append to be flushed before it takes the next, so one
//! entry per write would mean one fsync per write (about 2,500/s on this machine's disk). One
//! batch per entry makes the fsync's cost shared by every write that waited for it: under
//! load, batches grow by themselves, and a lone write still goes out at once.
//!
//! In a cluster a follower's batch is forwarded whole to the leader (`POST /raft/propose`),
//! and the follower answers once it has applied the entry itself. Without a quorum a write
//! fails with `no_quorum` after [`WRITE_TIMEOUT`]; it may still commit later (the usual
//! ambiguity of a timeout).
//!
//! A batch is retried (forwarded again, or proposed again here) while no verdict came back,
//! so it may reach the log more than once. Each batch carries a [`BatchId`] — this node, this
//! process's session, a number counting up — and the state machine applies it once
//! (`applied_batches`), answering a retry with the first application's verdicts. Not every
//! command is idempotent by itself: a `GrantLease` applied twice would mint two leases.

use muster_core::Rejection;
use muster_registry::Applied;
use openraft::Raft;
use openraft::error::{ClientWriteError, Fatal, RaftError};
use tokio::sync::{mpsc, oneshot};

use serde::{Deserialize, Serialize};

use crate::network::{PeerClient, Rpc};
use crate::node::ConsensusError;
use crate::types::{Batch, BatchId, Outcome, Proposal, TypeConfig};

/// Proposals in one entry at most: 1,024 registrations of ~1 KiB keep an entry near 1 MiB,
/// and far more writers than that are already waiting on latency, not throughput.
const MAX_BATCH: usize = 1024;
/// Encoded bytes of the proposals in one entry at most, its first proposal aside: the bound
/// that keeps any entry, and so any AppendEntries of one entry, inside the node-to-node limit
/// (SPEC R5; [`crate::append_pacer`] bounds a request of several).
pub const MAX_BATCH_BYTES: usize = 4 * 1024 * 1024;
/// Encoded bytes of one proposal at most; a larger one is refused before it is queued.
pub const MAX_PROPOSAL_BYTES: usize = 2 * 1024 * 1024;
// The largest entry (a batch just under the bound, then one of the largest proposals) fits
// one AppendEntries with room for its frame.
const _: () = assert!(MAX_BATCH_BYTES + MAX_PROPOSAL_BYTES + 64 * 1024 <= crate::append_pacer::MAX_APPEND_BYTES);
/// How long a write may wait for a quorum before it fails with `no_quorum` (R2: never
/// hangs): ten election timeouts, so a leader change in between still commits.
pub(crate) const WRITE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// How often a write retries while no leader answers: a fraction of an election timeout.
const RETRY: std::time::Duration = std::time::Duration::from_millis(100);
/// Proposals queued before `propose` waits: backpressure instead of unbounded memory, at
/// sixteen full batches.
const QUEUE: usize = 16 * MAX_BATCH;

type Verdict = Result<Result<Applied, Rejection>, ConsensusError>;

struct Pending {
    proposal: Proposal,
    /// Its encoded length.
    bytes: usize,
    reply: oneshot::Sender<Verdict>,
}

/// The sending side: cheap to clone.
#[derive(Clone)]
pub(crate) struct Batcher {
    queue: mpsc::Sender<Pending>,
}

impl Batcher {
    /// Starts the batcher in front of `raft`; with `peers`, a follower forwards its batches
    /// to the leader. Batches are identified as `origin`'s (this node id) in `session`, which
    /// must differ from every earlier start of this node.
    pub(crate) fn spawn(raft: Raft<TypeConfig>, peers: Option<PeerClient>, origin: u64, session: u64) -> Batcher {
        let (queue, pending) = mpsc::channel(QUEUE);
        let ids = (1_u64..).map(move |seq| BatchId { origin, session, seq });
        tokio::spawn(run(raft, peers, pending, ids));
        Batcher { queue }
    }

    /// Queues a proposal and waits for its verdict.
    pub(crate) async fn propose(&self, proposal: Proposal) -> Verdict {
        let bytes = encoded_len(&proposal);
        if bytes > MAX_PROPOSAL_BYTES {
            return Err(ConsensusError::TooLarge {
                bytes,
                limit: MAX_PROPOSAL_BYTES,
            });
        }
        let (reply, verdict) = oneshot::channel();
        self.queue
            .send(Pending { proposal, bytes, reply })
            .await
            .map_err(|_| ConsensusError::ShuttingDown)?;
        verdict.await.map_err(|_| ConsensusError::ShuttingDown)?
    }
}

async fn run(
    raft: Raft<TypeConfig>,
    peers: Option<PeerClient>,
    mut pending: mpsc::Receiver<Pending>,
    mut ids: impl Iterator<Item = BatchId>,
) {
    let mut carried = None;
    loop {
        let first = match carried.take() {
            Some(first) => first,
            None => match pending.recv().await {
                Some(first) => first,
                None => return,
            },
        };
        let (batch, over) = gather(first, || pending.try_recv().ok(), |p| p.bytes);
        carried = over;
        let (proposals, replies): (Vec<_>, Vec<_>) = batch.into_iter().map(|p| (p.proposal, p.reply)).unzip();
        let batch = Batch {
            id: ids.next(),
            proposals,
        };
        let verdicts = commit(&raft, peers.as_ref(), batch).await;
        match verdicts {
            Ok(outcome) => {
                let mut results = outcome.0.into_iter();
                for reply in replies {
                    let verdict = results.next().ok_or_else(|| {
                        ConsensusError::Storage("a batch entry applied fewer proposals than it held".into())
                    });
                    let _ = reply.send(verdict);
                }
            }
            Err(error) => {
                for reply in replies {
                    let _ = reply.send(Err(error.clone()));
                }
            }
        }
    }
}

/// One entry's proposals: `first`, then what `next` has queued, while the entry holds fewer
/// than [`MAX_BATCH`] and at most [`MAX_BATCH_BYTES`] beyond its first. The one taken that
/// did not fit comes back, to start the next entry.
pub(crate) fn gather<T>(
    first: T,
    mut next: impl FnMut() -> Option<T>,
    bytes: impl Fn(&T) -> usize,
) -> (Vec<T>, Option<T>) {
    let mut batch = vec![first];
    let mut held = 0;
    while batch.len() < MAX_BATCH {
        let Some(more) = next() else { break };
        held += bytes(&more);
        if held > MAX_BATCH_BYTES {
            return (batch, Some(more));
        }
        batch.push(more);
    }
    (batch, None)
}

/// The length of a proposal as the log encodes it (JSON), counted without keeping the bytes.
pub(crate) fn encoded_len(proposal: &Proposal) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing to a counter cannot fail, and a proposal always serialises (as the log does).
    let _ = serde_json::to_writer(&mut count, proposal);
    count.0
}

/// Commits a batch: here when this node leads, else forwarded to the leader, then waits until
/// this node has applied it too (so a reader of this node sees its own write). While no
/// leader answers (an election), it tries again every [`RETRY`] until [`WRITE_TIMEOUT`]: a
/// batch forwarded to a leader that died after committing it may so reach the log twice; its
/// id makes the second a no-op that answers the first's verdicts.
async fn commit(raft: &Raft<TypeConfig>, peers: Option<&PeerClient>, batch: Batch) -> Result<Outcome, ConsensusError> {
    let deadline = tokio::time::Instant::now() + WRITE_TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return Err(ConsensusError::NoQuorum);
        }
        let addr = match write_here(raft, batch.clone(), left).await {
            Ok(result) => return result,
            Err(Forward { leader }) => leader.and_then(|(id, addr)| peers.map(|peers| peers.address_of(id, &addr))),
        };
        if let (Some(addr), Some(peers)) = (addr, peers) {
            match peers
                .call::<_, Result<Forwarded, String>>(&addr, Rpc::Propose, &batch, left)
                .await
            {
                Ok(Ok(forwarded)) => {
                    raft.wait(Some(left))
                        .applied_index_at_least(Some(forwarded.log_index), "a forwarded write applied here")
                        .await
                        .map_err(|_| ConsensusError::NoQuorum)?;
                    return Ok(forwarded.outcome);
                }
                Ok(Err(message)) if message != NO_QUORUM => return Err(ConsensusError::Storage(message)),
                // The leader lost its quorum, or is gone: wait for the next one.
                Ok(Err(_)) | Err(_) => {}
            }
        }
        tokio::time::sleep(RETRY.min(left)).await;
    }
}

/// This node is not the leader; the leader's cluster address, if one is known.
struct Forward {
    /// The leader's id and membership address.
    leader: Option<(u64, String)>,
}

/// A batch committed by the leader on a follower's behalf: where, and the verdicts.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Forwarded {
    /// The log index of the entry holding the batch.
    pub(crate) log_index: u64,
    /// The registry's verdicts.
    pub(crate) outcome: Outcome,
}

/// The message of a forwarded write that found no quorum on the leader either.
pub(crate) const NO_QUORUM: &str = "no_quorum";

/// Writes on this node if it leads: `Err(Forward)` if another node does (or none is known).
async fn write_here(
    raft: &Raft<TypeConfig>,
    batch: Batch,
    timeout: std::time::Duration,
) -> Result<Result<Outcome, ConsensusError>, Forward> {
    match tokio::time::timeout(timeout, raft.client_write(batch)).await {
        Err(_) => Ok(Err(ConsensusError::NoQuorum)),
        Ok(Ok(response)) => Ok(Ok(response.data)),
        Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(forward)))) => Err(Forward {
            leader: forward.leader_id.zip(forward.leader_node.map(|node| node.addr)),
        }),
        Ok(Err(error)) => Ok(Err(classify(error))),
    }
}

/// The leader's side of a forwarded batch: commit it here, within the write timeout.
pub(crate) async fn commit_forwarded(raft: &Raft<TypeConfig>, batch: Batch) -> Result<Forwarded, String> {
    match tokio::time::timeout(WRITE_TIMEOUT, raft.client_write(batch)).await {
        Err(_) => Err(NO_QUORUM.to_owned()),
        Ok(Ok(response)) => Ok(Forwarded {
            log_index: response.log_id.index,
            outcome: response.data,
        }),
        Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_)))) => Err(NO_QUORUM.to_owned()),
        Ok(Err(error)) => Err(classify(error).to_string()),
    }
}

fn classify(error: RaftError<u64, ClientWriteError<u64, openraft::BasicNode>>) -> ConsensusError {
    match error {
        RaftError::APIError(ClientWriteError::ForwardToLeader(_)) => ConsensusError::NoLeader,
        RaftError::APIError(e) => ConsensusError::Storage(e.to_string()),
        RaftError::Fatal(Fatal::Stopped) => ConsensusError::ShuttingDown,
        RaftError::Fatal(e) => ConsensusError::Storage(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Trace (wave-2 notes): 1,024 registrations per entry of any size made an entry bounded
    /// only by the request limits; 1,024 bodies of 64 KiB are a 64 MiB entry, past the
    /// node-to-node limit, refused on every resend.
    #[test]
    fn an_entry_holds_at_most_the_byte_bound_beyond_its_first_proposal() {
        let size = 64 * 1024;
        let mut queued = (1..MAX_BATCH).collect::<std::collections::VecDeque<_>>();
        let (batch, over) = gather(0, || queued.pop_front(), |_| size);
        assert_eq!(batch.len(), MAX_BATCH_BYTES / size + 1);
        assert_eq!(batch.last(), Some(&(MAX_BATCH_BYTES / size)));
        assert_eq!(
            over,
            Some(MAX_BATCH_BYTES / size + 1),
            "the one that did not fit starts the next"
        );
        assert_eq!(queued.front(), Some(&(MAX_BATCH_BYTES / size + 2)), "nothing was lost");
    }

    #[test]
    fn small_proposals_fill_an_entry_to_the_count_and_a_large_first_one_goes_alone() {
        let mut queued = (1..2 * MAX_BATCH).collect::<std::collections::VecDeque<_>>();
        let (batch, over) = gather(0, || queued.pop_front(), |_| 100);
        assert_eq!((batch.len(), over), (MAX_BATCH, None));

        let mut queued = std::collections::VecDeque::from([1, 2]);
        let (batch, over) = gather(
            0,
            || queued.pop_front(),
            |n| if *n == 1 { MAX_BATCH_BYTES + 1 } else { 1 },
        );
        assert_eq!((batch, over), (vec![0], Some(1)));
        let mut queued = std::collections::VecDeque::from([2]);
        let (batch, over) = gather(
            1,
            || queued.pop_front(),
            |n| if *n == 1 { MAX_BATCH_BYTES + 1 } else { 1 },
        );
        assert_eq!(
            (batch, over),
            (vec![1, 2], None),
            "the first is not counted against the bound"
        );
    }
}
