//! Group commit: proposals that arrive while a log entry is being made durable ride the next
//! entry together.
//!
//! ```text
//!  propose ─┐
//!  propose ─┼─▶ queue ─▶ batcher: drain everything queued (≤ MAX_BATCH) ─▶ one client_write
//!  propose ─┘                      ◀── one fsync, one apply of the batch ──┘   │
//!                                  reply to each proposer with its own verdict ◀┘
//! ```
//!
//! openraft 0.9 waits for each log append to be flushed before it takes the next, so one
//! entry per write would mean one fsync per write (about 2,500/s on this machine's disk). One
//! batch per entry makes the fsync's cost shared by every write that waited for it: under
//! load, batches grow by themselves, and a lone write still goes out at once.

use muster_core::Rejection;
use muster_registry::Applied;
use openraft::Raft;
use openraft::error::{ClientWriteError, Fatal, RaftError};
use tokio::sync::{mpsc, oneshot};

use crate::node::ConsensusError;
use crate::types::{Batch, Proposal, TypeConfig};

/// Proposals in one entry at most: 1,024 registrations of ~1 KiB keep an entry near 1 MiB,
/// and far more writers than that are already waiting on latency, not throughput.
const MAX_BATCH: usize = 1024;
/// Proposals queued before `propose` waits: backpressure instead of unbounded memory, at
/// sixteen full batches.
const QUEUE: usize = 16 * MAX_BATCH;

type Verdict = Result<Result<Applied, Rejection>, ConsensusError>;

struct Pending {
    proposal: Proposal,
    reply: oneshot::Sender<Verdict>,
}

/// The sending side: cheap to clone.
#[derive(Clone)]
pub(crate) struct Batcher {
    queue: mpsc::Sender<Pending>,
}

impl Batcher {
    /// Starts the batcher in front of `raft`.
    pub(crate) fn spawn(raft: Raft<TypeConfig>) -> Batcher {
        let (queue, pending) = mpsc::channel(QUEUE);
        tokio::spawn(run(raft, pending));
        Batcher { queue }
    }

    /// Queues a proposal and waits for its verdict.
    pub(crate) async fn propose(&self, proposal: Proposal) -> Verdict {
        let (reply, verdict) = oneshot::channel();
        self.queue
            .send(Pending { proposal, reply })
            .await
            .map_err(|_| ConsensusError::ShuttingDown)?;
        verdict.await.map_err(|_| ConsensusError::ShuttingDown)?
    }
}

async fn run(raft: Raft<TypeConfig>, mut pending: mpsc::Receiver<Pending>) {
    while let Some(first) = pending.recv().await {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match pending.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        let (proposals, replies): (Vec<_>, Vec<_>) = batch.into_iter().map(|p| (p.proposal, p.reply)).unzip();
        match raft.client_write(Batch(proposals)).await {
            Ok(response) => {
                let mut results = response.data.0.into_iter();
                for reply in replies {
                    let verdict = results.next().ok_or_else(|| {
                        ConsensusError::Storage("a batch entry applied fewer proposals than it held".into())
                    });
                    let _ = reply.send(verdict);
                }
            }
            Err(error) => {
                let error = classify(error);
                for reply in replies {
                    let _ = reply.send(Err(error.clone()));
                }
            }
        }
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
