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
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::listener::LimitsConfig;
use crate::silent::Silent;

/// How long a full budget waits for an evicted silent connection to give its slot back (it
/// closes at once; this only bounds a connection task that is slow to be polled).
const EVICTION_WAIT: Duration = Duration::from_millis(100);

/// Descriptors never given to connections: the log database, a snapshot's temporary file and
/// the directory opened to fsync it, the DNS sockets, the runtime's epoll and event fds, and
/// outgoing connections to at most four peers (a few pooled each). 64 is several times
/// what a node holds open for them at once.
const RESERVED: u64 = 64;

/// Connections from peers at most, unless `limits.cluster.max_connections` says otherwise:
/// four peers of a 5-node group, each with a connection per
/// RPC kind in flight (append, vote, snapshot, propose, renewals); 64 leaves room for
/// reconnects while old connections close.
const CLUSTER_CONNECTIONS: usize = 64;

/// `too_many_connections` answers in flight at most: each holds its descriptor for at most
/// [`REFUSAL_TIME`](crate::accept::REFUSAL_TIME); more at once are closed without an answer.
pub const REFUSALS: usize = 16;

/// How many connections each listener may hold, from the process's descriptor limit.
#[derive(Debug, Clone)]
pub struct ConnectionBudget {
    /// Permits for open connections.
    pub open: Arc<Semaphore>,
    /// Permits for refusals being answered.
    pub refusing: Arc<Semaphore>,
    /// The connections of every listener sharing this budget that have not spoken yet,
    /// oldest first: a slow head on one listener makes room for a caller on another.
    pub silent: Silent,
}

impl ConnectionBudget {
    /// A budget of `connections` open at once.
    pub fn of(connections: usize) -> ConnectionBudget {
        ConnectionBudget {
            open: Arc::new(Semaphore::new(connections)),
            refusing: Arc::new(Semaphore::new(REFUSALS)),
            silent: Silent::default(),
        }
    }

    /// A place for a new connection: a free one, else the place of the oldest connection
    /// that has not spoken yet (`silent`), on whichever listener of this budget; `None` when
    /// every place holds a caller.
    pub async fn take(&self) -> Option<OwnedSemaphorePermit> {
        if let Ok(permit) = Arc::clone(&self.open).try_acquire_owned() {
            return Some(permit);
        }
        if !self.silent.evict_oldest() {
            return None;
        }
        let freed = tokio::time::timeout(EVICTION_WAIT, Arc::clone(&self.open).acquire_owned());
        freed.await.ok().and_then(Result::ok)
    }
}

/// The budgets of the HTTP and the cluster listener, within the configured maximums
/// (`[limits.*] max_connections`). Raises the soft descriptor limit to the hard one first (as
/// Go's runtime does): the soft default of 1,024 is far below what a registry with thousands
/// of watchers needs, and the hard limit is the operator's choice.
pub fn budgets(limits: &LimitsConfig) -> (ConnectionBudget, ConnectionBudget) {
    let limit = raise_soft_limit();
    let (http, cluster) = split(limit, limits.http.max_connections, limits.cluster.max_connections);
    // Debug: `muster serve` prints one line at startup (SPEC O2); a budget too small for the
    // configured maximums is a warning of its own below.
    tracing::debug!(
        descriptors = limit,
        http_connections = http,
        cluster_connections = cluster,
        "connection budget"
    );
    (ConnectionBudget::of(http), ConnectionBudget::of(cluster))
}

/// The HTTP and cluster budgets under a descriptor limit of `limit`. The cluster listener
/// gets its maximum (default [`CLUSTER_CONNECTIONS`]) but at most a quarter of the limit; the
/// HTTP listener what is left after the reserve, the cluster share and the refusals — at
/// least a quarter of the limit, so a very low limit still serves a few clients — and never
/// more than its configured maximum. A maximum above what the descriptors allow is lowered,
/// so no setting can make connections take the descriptors storage needs.
fn split(limit: u64, http_max: Option<usize>, cluster_max: Option<usize>) -> (usize, usize) {
    let quarter = usize::try_from(limit / 4).unwrap_or(usize::MAX).max(1);
    let cluster = cluster_max.unwrap_or(CLUSTER_CONNECTIONS).min(quarter);
    let kept = RESERVED + (cluster + REFUSALS) as u64;
    let allowed = limit.saturating_sub(kept).max(limit / 4).max(1);
    let allowed = usize::try_from(allowed).unwrap_or(usize::MAX);
    let http = http_max.map_or(allowed, |max| max.min(allowed));
    if http_max.is_some_and(|max| max > allowed) {
        tracing::warn!(
            configured = http_max,
            allowed,
            "limits.http.max_connections lowered to the descriptor budget"
        );
    }
    (http, cluster)
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

    fn http_connections(limit: u64) -> usize {
        split(limit, None, None).0
    }

    #[test]
    fn connections_leave_the_reserve_and_the_cluster_share() {
        assert_eq!(http_connections(1024), 1024 - 64 - 64 - 16);
        assert_eq!(http_connections(256), 256 - 144);
        // A tiny limit still serves a quarter of it.
        assert_eq!(http_connections(100), 25);
        assert_eq!(http_connections(2), 1);
    }

    #[test]
    fn configured_maximums_hold_within_the_descriptor_budget() {
        // Below the budget: as configured; the cluster share shrinks the reserve with it.
        assert_eq!(split(1024, Some(100), Some(8)), (100, 8));
        assert_eq!(split(1024, None, Some(8)), (1024 - 64 - 8 - 16, 8));
        // Above it: lowered, never past what the descriptors allow.
        assert_eq!(split(1024, Some(1_000_000), None), (1024 - 64 - 64 - 16, 64));
        assert_eq!(split(1024, None, Some(10_000)), (1024 - 64 - 256 - 16, 256));
    }
}
