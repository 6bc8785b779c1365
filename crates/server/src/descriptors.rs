//! The file-descriptor budget (SPEC S6: every listener bounds connections). Every TCP
//! connection costs a descriptor, and so does every file the node opens: a snapshot's
//! temporary file and its directory's fsync, peers' connections. A flood of idle connections
//! that took the last descriptor would make the next snapshot fail — which openraft treats
//! as a fatal storage error — so connections get a budget below the limit, and the rest is
//! kept for storage and peers.
//!
//! ```text
//!  RLIMIT_NOFILE (soft, raised to the hard limit at start)
//!  ├── HTTP connections ........ the rest: served
//!  ├── refusals in flight ...... REFUSALS: answered 503 `too_many_connections`, then closed
//!  ├── cluster connections ..... CLUSTER_CONNECTIONS: peers' Raft traffic
//!  └── reserved ................ RESERVED: the log, snapshots, DNS, outgoing peer connections
//! ```
//!
//! A connection over its listener's budget is answered `503 too_many_connections` (one
//! request, then closed) while at most [`REFUSALS`] such answers are in flight; beyond that it
//! is closed at once, which costs its descriptor only for the moment of the accept.

use std::sync::Arc;

use tokio::sync::Semaphore;

/// Descriptors never given to connections: the log database, a snapshot's temporary file and
/// the directory opened to fsync it, the DNS sockets, the runtime's epoll and event fds, and
/// outgoing connections to at most four peers (a few pooled each). 64 is several times
/// what a node holds open for them at once.
const RESERVED: u64 = 64;

/// Connections from peers at most: four peers of a 5-node group, each with a connection per
/// RPC kind in flight (append, vote, snapshot, propose, renewals); 64 leaves room for
/// reconnects while old connections close.
const CLUSTER_CONNECTIONS: usize = 64;

/// `too_many_connections` answers in flight at most: each holds its descriptor for at most
/// [`REFUSAL_TIME`](crate::accept::REFUSAL_TIME); more at once are closed without an answer.
pub(crate) const REFUSALS: usize = 16;

/// How many connections each listener may hold, from the process's descriptor limit.
#[derive(Debug, Clone)]
pub(crate) struct ConnectionBudget {
    /// Permits for open connections.
    pub(crate) open: Arc<Semaphore>,
    /// Permits for refusals being answered.
    pub(crate) refusing: Arc<Semaphore>,
}

impl ConnectionBudget {
    /// A budget of `connections` open at once.
    pub(crate) fn of(connections: usize) -> ConnectionBudget {
        ConnectionBudget {
            open: Arc::new(Semaphore::new(connections)),
            refusing: Arc::new(Semaphore::new(REFUSALS)),
        }
    }
}

/// The budgets of the HTTP and the cluster listener. Raises the soft descriptor limit to the
/// hard one first (as Go's runtime does): the soft default of 1,024 is far below what a
/// registry with thousands of watchers needs, and the hard limit is the operator's choice.
pub(crate) fn budgets() -> (ConnectionBudget, ConnectionBudget) {
    let limit = raise_soft_limit();
    let http = http_connections(limit);
    tracing::info!(descriptors = limit, http_connections = http, "connection budget");
    (ConnectionBudget::of(http), ConnectionBudget::of(CLUSTER_CONNECTIONS))
}

/// HTTP connections allowed under a descriptor limit of `limit`: what is left after the
/// reserve, the cluster listener and the refusals, but at least a quarter of the limit, so a
/// very low limit still serves a few clients.
fn http_connections(limit: u64) -> usize {
    let kept = RESERVED + (CLUSTER_CONNECTIONS + REFUSALS) as u64;
    let connections = limit.saturating_sub(kept).max(limit / 4).max(1);
    usize::try_from(connections).unwrap_or(usize::MAX)
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (best effort) and returns the soft
/// limit in force.
fn raise_soft_limit() -> u64 {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        let raised = Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        if let Err(error) = setrlimit(Resource::Nofile, raised) {
            tracing::debug!(%error, "cannot raise the descriptor limit");
        }
    }
    // `None` means unlimited; a registry still bounds itself at a million connections.
    getrlimit(Resource::Nofile).current.unwrap_or(1 << 20)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_leave_the_reserve_and_the_cluster_share() {
        assert_eq!(http_connections(1024), 1024 - 64 - 64 - 16);
        assert_eq!(http_connections(256), 256 - 144);
        // A tiny limit still serves a quarter of it.
        assert_eq!(http_connections(100), 25);
        assert_eq!(http_connections(2), 1);
    }
}
