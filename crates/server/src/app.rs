//! What every handler shares: the node, the hub, the leader engine (lease deadlines, drain
//! ends, brakes, checker decisions: `muster-leader`), and the clock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use muster_auth::{Denial, Request, Scope};
use muster_consensus::Node;
use muster_core::api::{LeaseReply, WriteReply};
use muster_core::{Actor, ErrorCode, Principal, ServiceKey};
use muster_health::checker::CheckerConfig;
use muster_health::preservation::Brakes;
use muster_leader::{LeaderEngine, Now, Reply, ReplyTo};
use muster_registry::{Applied, Command, CommandMeta, LeaseGrant, Registry, RegistryConfig};
use rand_core::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;
use tokio::sync::{oneshot, watch};

use crate::audit::{AuditLog, Denial as AuditDenial};
use crate::auth::{AuthConfig, Caller};
use crate::clock::ServerClock;
use crate::consul::stats::ConsulStats;
use crate::forward::ClusterLink;
use crate::metrics::{Metrics, denial};
use muster_http::error::ApiError;
use muster_http::peer::Peer;
use muster_hub::WatchHub;

/// The engine the server drives: the checker's jitter from a seeded generator.
pub(crate) type Engine = LeaderEngine<Xoshiro256PlusPlus>;

/// The principal of every request while authentication is off (SPEC S1).
pub(crate) const ANONYMOUS: &str = "anonymous";

/// The handlers' shared state.
pub(crate) struct App {
    pub(crate) node: Node,
    pub(crate) hub: Arc<WatchHub>,
    pub(crate) clock: ServerClock,
    pub(crate) progress_interval: Duration,
    /// The leader's duties (locked before the registry is read, never the other way).
    engine: Mutex<Engine>,
    /// Callers waiting for the engine's reply.
    replies: Mutex<HashMap<ReplyTo, oneshot::Sender<Reply>>>,
    next_reply: AtomicU64,
    /// The Raft term the engine last took leadership over in (0: not leading).
    led_term: AtomicU64,
    /// What `/v1/metrics` reports (the checker's counters among them).
    pub(crate) metrics: Arc<Metrics>,
    /// The Consul-compatible API's blocking-query counters (SPEC E1, O1).
    pub(crate) consul_stats: ConsulStats,
    /// The other members, in a cluster.
    pub(crate) cluster: Option<ClusterLink>,
    /// What every caller holds open — watches, live views, xDS streams, parked queries —
    /// against its budgets (SPEC W4, S6; `admit`).
    pub(crate) admission: Arc<muster_gate::Admission>,
    /// Each principal's write rate, with authentication on (SPEC W4, S6; `admit`).
    pub(crate) write_rates: muster_gate::WriteRates,
    ready: AtomicBool,
    /// Turns true when the server starts stopping: blocking queries return at once.
    stopping: watch::Receiver<bool>,
    pub(crate) anonymous: Principal,
    /// Whether requests must authenticate (SPEC S1).
    pub(crate) auth: AuthConfig,
    /// Bumped whenever the token table changes or is replaced: open watch streams re-check
    /// their tokens on it (`TokenWatch`).
    pub(crate) acl_changes: watch::Receiver<u64>,
    /// This node's config file's `[registry]` section: only the initial policy; `status`
    /// reports how the replicated policy differs from it.
    pub(crate) config_policy: RegistryConfig,
    /// The audit trail (SPEC S4): fed by the apply path; denials are recorded with
    /// [`AuditLog::denied`].
    pub(crate) audit: Arc<AuditLog>,
    /// The xDS control plane's streams and resource cache (SPEC D5).
    #[cfg(feature = "xds")]
    pub(crate) xds: Arc<crate::xds::XdsState>,
    /// Which revision every subscriber applied (SPEC O3).
    pub(crate) convergence: Arc<crate::convergence::Convergence>,
    /// Whole-set reads' endpoints, encoded once per service revision.
    pub(crate) read_cache: crate::read_cache::ReadCache,
    /// This region's federation, when configured (SPEC G2).
    pub(crate) federation: Option<Arc<crate::federation::Federation>>,
}

/// What the background parts of an [`App`] start from.
pub(crate) struct Background {
    /// The self-preservation brakes.
    pub(crate) brakes: Brakes,
    /// The checker's limits.
    pub(crate) checker: CheckerConfig,
    /// The other members, in a cluster.
    pub(crate) cluster: Option<ClusterLink>,
    /// The admission budgets' table.
    pub(crate) admission: Arc<muster_gate::Admission>,
    /// Each principal's write rate.
    pub(crate) write_rates: muster_gate::WriteRates,
    /// The audit trail, already feeding from the node's apply path.
    pub(crate) audit: Arc<AuditLog>,
    /// Whether requests must authenticate.
    pub(crate) auth: AuthConfig,
    /// The token table's changes (from [`crate::auth::TokenWatch`]).
    pub(crate) acl_changes: watch::Receiver<u64>,
    /// The metrics, already counting on the node's apply path.
    pub(crate) metrics: Arc<Metrics>,
    /// The xDS control plane's state, already on the node's apply path when it is enabled.
    #[cfg(feature = "xds")]
    pub(crate) xds: Arc<crate::xds::XdsState>,
    /// The convergence ledger, already on the node's apply path.
    pub(crate) convergence: Arc<crate::convergence::Convergence>,
    /// This region's federation, when configured.
    pub(crate) federation: Option<Arc<crate::federation::Federation>>,
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
            admission,
            write_rates,
            audit,
            auth,
            acl_changes,
            metrics,
            #[cfg(feature = "xds")]
            xds,
            convergence,
            federation,
        } = background;
        App {
            node,
            hub,
            clock,
            progress_interval,
            // Jitter only has to differ between servers and runs.
            engine: Mutex::new(LeaderEngine::new(
                checker,
                brakes,
                Xoshiro256PlusPlus::seed_from_u64(clock.unix_now_ms()),
            )),
            replies: Mutex::new(HashMap::new()),
            next_reply: AtomicU64::new(0),
            led_term: AtomicU64::new(0),
            metrics,
            consul_stats: ConsulStats::default(),
            cluster,
            admission,
            write_rates,
            ready: AtomicBool::new(false),
            stopping,
            anonymous: Principal::new(ANONYMOUS).expect("'anonymous' is a valid principal"),
            auth,
            acl_changes,
            config_policy,
            audit,
            #[cfg(feature = "xds")]
            xds,
            convergence,
            read_cache: crate::read_cache::ReadCache::default(),
            federation,
        }
    }

    fn engine(&self) -> MutexGuard<'_, Engine> {
        self.engine.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The time as the engine takes it.
    pub(crate) fn now(&self) -> Now {
        let monotonic_ms = self.clock.now_ms();
        Now {
            monotonic_ms,
            unix_ms: self.clock.unix_ms(monotonic_ms),
        }
    }

    /// Runs one engine event over the registry as it is now. The engine first learns whether
    /// this node leads: a node that just took over starts from the registry it reads here.
    /// Lock order: engine, then registry (the apply path never takes the engine's lock).
    pub(crate) fn with_engine<T>(&self, event: impl FnOnce(&mut Engine, &Registry, Now) -> T) -> T {
        let mut engine = self.engine();
        let now = self.now();
        let term = self.node.leading_term();
        let leader = term.is_some();
        // The term the engine took over in (0: none), changed only under the engine's lock.
        let taken_over = self.led_term.swap(term.unwrap_or(0), Ordering::Relaxed);
        self.node.read(|registry| {
            if leader && engine.is_leading() && taken_over != term.unwrap_or(0) {
                // Lost and regained leadership between two events: start over, with the
                // election grace, as any new leader does.
                engine.lost_leadership();
                tracing::info!(
                    term,
                    "leading again in a new term: deadlines and checks taken over afresh"
                );
            }
            if leader && !engine.is_leading() {
                engine.became_leader(registry, now);
                let (leases, drains, checked) = (
                    engine.leases().len(),
                    registry.drain_count(),
                    engine.checker().endpoints(),
                );
                let message = "leading: lease deadlines, drains and checks taken over";
                // A leader change is news in a cluster; a single node leads from its start,
                // which prints one line and no more (SPEC O2).
                if self.node.members().len() > 1 {
                    tracing::info!(leases, drains, checked, term, "{message}");
                } else {
                    tracing::debug!(leases, drains, checked, term, "{message}");
                }
            } else if !leader && engine.is_leading() {
                engine.lost_leadership();
                tracing::info!("no longer leading: deadlines and checks handed over");
            }
            event(&mut engine, registry, now)
        })
    }

    /// Sets what the checker may probe from this node (its listeners are known once bound).
    pub(crate) fn set_check_targets(&self, targets: muster_health::target::TargetPolicy) {
        self.engine().set_target_policy(targets);
    }

    /// The set xDS serves for `key`: the registry's, or with its failover tier in a
    /// federated region (`federation::tiers`).
    #[cfg(feature = "xds")]
    pub(crate) fn served(&self, registry: &Registry, key: &ServiceKey) -> Option<Arc<muster_core::ServiceSnapshot>> {
        match &self.federation {
            Some(federation) => federation.served(registry, key, self.clock.unix_now_ms()),
            None => registry.snapshot(key),
        }
    }

    /// Whether self-preservation holds removals from `key` now.
    pub(crate) fn protection_active(&self, key: &ServiceKey) -> bool {
        self.engine().brakes().protection_active(key)
    }

    /// The services self-preservation protects now, sorted.
    pub(crate) fn protected(&self) -> Vec<ServiceKey> {
        self.engine().brakes().protected()
    }

    /// Probes in flight and endpoints with checks, for metrics.
    pub(crate) fn checker_load(&self) -> (usize, usize) {
        let engine = self.engine();
        (engine.checker().in_flight(), engine.checker().endpoints())
    }

    /// A fresh reply slot: the engine answers it with [`App::answer`].
    pub(crate) fn reply_slot(&self) -> (ReplyTo, oneshot::Receiver<Reply>) {
        let to = ReplyTo(self.next_reply.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = oneshot::channel();
        self.replies
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(to, tx);
        (to, rx)
    }

    /// Hands the engine's reply to its caller (gone callers are skipped).
    pub(crate) fn answer(&self, to: ReplyTo, reply: Reply) {
        let waiting = self.replies.lock().unwrap_or_else(PoisonError::into_inner).remove(&to);
        if let Some(waiting) = waiting {
            let _ = waiting.send(reply);
        }
    }

    /// Tells the engine a lease was revoked.
    pub(crate) fn lease_revoked(&self, id: muster_core::LeaseId) {
        self.engine().revoked(id);
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

    /// The metadata of a command proposed now by `caller`.
    pub(crate) fn meta(&self, actor: Actor, caller: &Caller) -> CommandMeta {
        self.meta_as(actor, caller.principal())
    }

    /// A `403 permission_denied` for `request`, recorded in the audit trail (SPEC S4).
    pub(crate) fn denied(
        &self,
        caller: &Caller,
        peer: Option<&Peer>,
        request: &Request<'_>,
        denial: &Denial,
    ) -> ApiError {
        let what = match request.scope {
            Scope::Service { namespace, service } => format!("{namespace}/{service}"),
            Scope::Namespace(namespace) => format!("{namespace}/*"),
            Scope::AnyService => "*/*".to_owned(),
            Scope::Whole => "the whole tenant".to_owned(),
        };
        let tenant = request.tenant.map_or_else(|| "cluster".to_owned(), ToString::to_string);
        tracing::info!(
            principal = %caller.principal(),
            source = ?peer.map(|p| p.addr),
            verb = %request.verb,
            tenant,
            what,
            reason = %denial,
            "permission denied"
        );
        // A token that reached for another tenant is on its own tenant's record, not the
        // other's: the other tenant's admin must not learn who probed it (SPEC S3).
        let (filed_under, key) = match (denial, request.tenant, request.scope) {
            (muster_auth::Denial::OtherTenant { token, .. }, _, _) => (Some(token.clone()), None),
            (_, Some(tenant), Scope::Service { namespace, service }) => (
                Some(tenant.clone()),
                ServiceKey::new(tenant.as_str(), namespace, service).ok(),
            ),
            (_, tenant, _) => (tenant.cloned(), None),
        };
        self.metrics
            .denials
            .add(filed_under.as_ref(), denial::PERMISSION_DENIED, 1);
        let message = format!("{} on {tenant} {what}: {denial}", request.verb);
        self.audit.denied(AuditDenial {
            principal: Some(caller.principal().clone()),
            tenant: filed_under,
            key,
            verb: request.verb.to_string(),
            resource: format!("{tenant} {what}"),
            code: ErrorCode::PermissionDenied,
            reason: denial.to_string(),
            source: peer.map(|p| p.addr),
            at_ms: self.clock.unix_now_ms(),
        });
        ApiError::new(ErrorCode::PermissionDenied, message)
    }

    /// A `401 unauthenticated`, recorded in the audit trail (SPEC S4).
    pub(crate) fn unauthenticated(&self, peer: Option<&Peer>, path: &str, why: &str) -> ApiError {
        tracing::info!(source = ?peer.map(|p| p.addr), path, why, "unauthenticated");
        self.metrics.denials.add(None, denial::UNAUTHENTICATED, 1);
        self.audit.denied(AuditDenial {
            principal: None,
            tenant: None,
            key: None,
            verb: "authenticate".to_owned(),
            resource: path.to_owned(),
            code: ErrorCode::Unauthenticated,
            reason: why.to_owned(),
            source: peer.map(|p| p.addr),
            at_ms: self.clock.unix_now_ms(),
        });
        ApiError::new(ErrorCode::Unauthenticated, why)
    }

    /// The metadata of a command proposed now by the server itself (a duty of the leader
    /// engine): the principal names the observer (SPEC H4).
    pub(crate) fn meta_as(&self, actor: Actor, principal: &Principal) -> CommandMeta {
        CommandMeta {
            at_ms: self.clock.unix_now_ms(),
            principal: principal.clone(),
            actor,
        }
    }

    /// Proposes a command; a refusal or a node failure becomes an [`ApiError`].
    /// A committed write's latency from here to its commit goes into the commit latency
    /// histogram (SPEC O1); refusals and failures do not.
    pub(crate) async fn propose(&self, command: Command, meta: CommandMeta) -> Result<Applied, ApiError> {
        // The failover tier's label is the registry's own (SPEC G1). Refused here, before the
        // log, so that a log written before the rule replays alike on every node.
        if let Command::Register(register) | Command::RegisterNext(register) = &command
            && register.spec.labels.contains_key(muster_core::federation::SPILLED_FROM)
        {
            return Err(muster_core::Rejection::LabelLimit {
                field: format!("labels.{}", muster_core::federation::SPILLED_FROM),
                reason: "the key is the registry's own: it marks a failover tier's endpoints".into(),
            }
            .into());
        }
        // The I/O shell's clock: latency is measured, never decided on.
        let accepted = tokio::time::Instant::now();
        let applied = self.node.propose(command, meta).await??;
        self.metrics.commit_latency.observe(accepted.elapsed().as_secs_f64());
        Ok(applied)
    }

    /// A lease in a reply, with its deadline (a new grant's starts now).
    pub(crate) fn lease_reply(&self, grant: LeaseGrant) -> LeaseReply {
        self.with_engine(|engine, _, now| engine.granted(grant, now))
    }

    /// The reply of a write.
    pub(crate) fn write_reply(&self, applied: &Applied) -> WriteReply {
        WriteReply {
            revision: applied.revision,
            lease: applied.lease.map(|grant| self.lease_reply(grant)),
            unchanged: applied.unchanged.map(|why| why.code().to_owned()),
        }
    }
}
