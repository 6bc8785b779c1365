//! What every handler shares: the node, the hub, the lease deadlines, the checker's handle,
//! the self-preservation brakes, pending drains and the clock.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use muster_consensus::Node;
use muster_core::api::{LeaseReply, WriteReply};
use muster_core::{Actor, Principal, ServiceKey};
use muster_health::preservation::{Brakes, Counts};
use muster_registry::{Applied, Command, CommandMeta, LeaseGrant, RegistryConfig, Unchanged};
use tokio::sync::watch;

use crate::checker::CheckerHandle;
use crate::clock::ServerClock;
use crate::drains::Drains;
use crate::error::ApiError;
use crate::forward::ClusterLink;
use crate::hub::WatchHub;
use crate::lease_deadlines::LeaseDeadlines;
use crate::metrics::CheckerStats;

/// The principal of every request until authentication exists (SPEC S1 is a later issue).
pub(crate) const ANONYMOUS: &str = "anonymous";

/// The handlers' shared state.
pub(crate) struct App {
    pub(crate) node: Node,
    pub(crate) hub: Arc<WatchHub>,
    pub(crate) clock: ServerClock,
    pub(crate) progress_interval: Duration,
    leases: Mutex<LeaseDeadlines>,
    /// Self-preservation, shared by the checker and the lease keeper.
    brakes: Mutex<Brakes>,
    drains: Mutex<Drains>,
    /// Hands TTL reports to the checker task.
    pub(crate) checker: CheckerHandle,
    /// The checker task's counters.
    pub(crate) checker_stats: CheckerStats,
    /// The other members, in a cluster.
    pub(crate) cluster: Option<ClusterLink>,
    ready: AtomicBool,
    /// Turns true when the server starts stopping: blocking queries return at once.
    stopping: watch::Receiver<bool>,
    anonymous: Principal,
    /// This node's config file's `[registry]` section: only the initial policy; `status`
    /// reports how the replicated policy differs from it.
    pub(crate) config_policy: RegistryConfig,
}

/// What the background parts of an [`App`] start from.
pub(crate) struct Background {
    /// The self-preservation brakes.
    pub(crate) brakes: Brakes,
    /// The checker task's handle.
    pub(crate) checker: CheckerHandle,
    /// The other members, in a cluster.
    pub(crate) cluster: Option<ClusterLink>,
}

impl App {
    pub(crate) fn new(
        node: Node,
        hub: Arc<WatchHub>,
        clock: ServerClock,
        progress_interval: Duration,
        stopping: watch::Receiver<bool>,
        background: Background,
        config_policy: RegistryConfig,
    ) -> App {
        let Background {
            brakes,
            checker,
            cluster,
        } = background;
        App {
            node,
            hub,
            clock,
            progress_interval,
            leases: Mutex::new(LeaseDeadlines::new()),
            brakes: Mutex::new(brakes),
            drains: Mutex::new(Drains::default()),
            checker,
            checker_stats: CheckerStats::default(),
            cluster,
            ready: AtomicBool::new(false),
            stopping,
            anonymous: Principal::new(ANONYMOUS).expect("'anonymous' is a valid principal"),
            config_policy,
        }
    }

    /// The lease deadline table.
    pub(crate) fn leases(&self) -> MutexGuard<'_, LeaseDeadlines> {
        self.leases.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The self-preservation brakes.
    pub(crate) fn brakes(&self) -> MutexGuard<'_, Brakes> {
        self.brakes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether self-preservation holds removals from `key` now.
    pub(crate) fn protection_active(&self, key: &ServiceKey) -> bool {
        self.brakes().protection_active(key)
    }

    /// Drains waiting for their grace to end.
    pub(crate) fn drains(&self) -> MutexGuard<'_, Drains> {
        self.drains.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Serving and total endpoints of a service as the registry holds them now.
    pub(crate) fn counts(&self, key: &ServiceKey) -> Counts {
        self.node.read(|registry| {
            registry
                .snapshot(key)
                .map(|snapshot| Counts::of(snapshot.iter().map(|e| e.serving)))
                .unwrap_or_default()
        })
    }

    /// Whether the server serves (false while starting and stopping).
    pub(crate) fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    pub(crate) fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// Follows whether the server is stopping.
    pub(crate) fn stopping(&self) -> watch::Receiver<bool> {
        self.stopping.clone()
    }

    /// The metadata of a command proposed now by the anonymous caller.
    pub(crate) fn meta(&self, actor: Actor) -> CommandMeta {
        self.meta_as(actor, &self.anonymous)
    }

    /// The metadata of a command proposed now by the server itself (the checker, the lease
    /// keeper, the drain timer): the principal names the observer (SPEC H4).
    pub(crate) fn meta_as(&self, actor: Actor, principal: &Principal) -> CommandMeta {
        CommandMeta {
            at_ms: self.clock.unix_now_ms(),
            principal: principal.clone(),
            actor,
        }
    }

    /// Proposes a command; a refusal or a node failure becomes an [`ApiError`].
    pub(crate) async fn propose(&self, command: Command, meta: CommandMeta) -> Result<Applied, ApiError> {
        Ok(self.node.propose(command, meta).await??)
    }

    /// A lease in a reply, with its deadline (a new grant's starts now).
    pub(crate) fn lease_reply(&self, grant: LeaseGrant) -> LeaseReply {
        let now = self.clock.now_ms();
        let deadline = self.leases().ensure(grant.id, grant.ttl_ms, now);
        LeaseReply {
            id: grant.id,
            ttl_ms: grant.ttl_ms,
            deadline_unix_ms: self.clock.unix_ms(deadline),
        }
    }

    /// The reply of a write.
    pub(crate) fn write_reply(&self, applied: &Applied) -> WriteReply {
        WriteReply {
            revision: applied.revision,
            lease: applied.lease.map(|grant| self.lease_reply(grant)),
            unchanged: applied.unchanged.map(|why| unchanged_code(why).to_owned()),
        }
    }
}

fn unchanged_code(why: Unchanged) -> &'static str {
    match why {
        Unchanged::AlreadyCommitted => "already_committed",
        Unchanged::DrainHeld => "drain_held",
        Unchanged::NothingToExpire => "nothing_to_expire",
        Unchanged::PolicyAdopted => "policy_adopted",
    }
}
