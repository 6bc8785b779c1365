//! The one front door (SPEC S1–S6, W4; DESIGN "Third wave"): what every way in — the native
//! API, watch streams, the Consul API, xDS, the dashboard's live views — calls to reach the
//! registry, the hub and the leader, and where, for every path alike, a caller is
//! authenticated, authorised, admitted and its refusals audited.
//!
//! ```text
//!  adapter ──identify(headers, peer)──▶ Caller ──require(caller, request)──▶ ok | 403 (audited)
//!          ──admit(caller, hold)──▶ Permit | 429 (audited)      ──throttle(caller)──▶ ok | 429
//!          ──propose(command, meta)──▶ Node ──▶ Raft log ──▶ Registry::apply
//!          ──read(f) / ready(consistency)──▶ the applied registry
//!          ──subscribe(scope), inside read──▶ WatchHub
//!          ──on_leader(call, here)──▶ here (leading) | the leader's cluster listener
//!          ──renew · ttl_report · in_flight──▶ the leader engine
//! ```
//!
//! The node itself stays private: cluster membership, start and stop are the server's
//! wiring, not an adapter's.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::http::{HeaderMap, header};
use axum::response::Response;
use muster_auth::{Denial, Request, Scope, Token, Verb};
use muster_consensus::{ConsensusError, Member, Node, NodeStatus};
use muster_core::api::{
    AdmissionStatus, CheckReportReply, CheckReportRequest, InFlightRequest, LeaseReply, WriteReply,
};
use muster_core::{Actor, ErrorCode, InstanceId, Label, LeaseId, Principal, Rejection, Revision, Secret, ServiceKey};
use muster_health::checker::TtlReport;
use muster_health::target::TargetPolicy;
use muster_http::error::ApiError;
use muster_http::peer::Peer;
use muster_hub::{Subscription, WatchHub, WatchStats};
use muster_leader::{InFlightReply, Now, Output, RenewRefused, Reply, ReplyTo};
use muster_registry::{Applied, Command, CommandMeta, LeaseGrant, Registry, Scope as WatchScope, Target};
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, watch};

use crate::admission::{Admission, Budget, Hold, Holder, NameBudget, Permit, Refusal, Report};
use crate::audit::{AuditLog, AuditView, Denial as AuditDenial};
use crate::caller::{AuthConfig, Caller, bearer_secret};
use crate::clock::ServerClock;
use crate::consistency::{self, Consistency};
use crate::forward::{ClusterLink, LeaderCall};
use crate::leader::{Engine, LeaderLink};
use crate::rate::WriteRates;

/// What the gate counts for the metrics (the server's `/v1/metrics` implements it).
pub trait Meter: Send + Sync {
    /// A request refused as `unauthenticated` or `permission_denied`, filed under `tenant`
    /// (`None`: no tenant, or the caller's own for a reach into another).
    fn denied(&self, tenant: Option<&Label>, code: ErrorCode);
    /// A write committed `seconds` after this node proposed it.
    fn committed(&self, seconds: f64);
}

/// What a gate is built from.
pub struct Parts {
    /// The registry's node.
    pub node: Node,
    /// The watch fan-out, on the node's apply path.
    pub hub: Arc<WatchHub>,
    /// The server's clock.
    pub clock: ServerClock,
    /// The leader engine and its waiting callers.
    pub leader: LeaderLink,
    /// The other members, in a cluster.
    pub cluster: Option<ClusterLink>,
    /// The admission budgets' table.
    pub admission: Arc<Admission>,
    /// Each principal's write rate.
    pub write_rates: WriteRates,
    /// The audit trail, already on the node's apply path.
    pub audit: Arc<AuditLog>,
    /// Whether requests must authenticate.
    pub auth: AuthConfig,
    /// The secret `POST /v1/acl/bootstrap` requires, read at start-up (`[auth]
    /// bootstrap_secret_file` or `MUSTER_BOOTSTRAP_SECRET`); `None`: loopback only.
    pub bootstrap_secret: Option<Secret>,
    /// The token table's changes (from [`crate::TokenWatch`]).
    pub acl_changes: watch::Receiver<u64>,
    /// Turns true when the server starts stopping.
    pub stopping: watch::Receiver<bool>,
    /// The metrics' counters of what the gate decides.
    pub meter: Arc<dyn Meter>,
    /// Where the engine's outputs other than replies go: the leader task carries them out
    /// (proposals, probes, notes).
    pub outputs: mpsc::UnboundedSender<Vec<Output>>,
}

/// The front door: see the module's documentation.
pub struct Gate {
    pub(crate) node: Node,
    hub: Arc<WatchHub>,
    /// The server's clock: the one place the daemon reads time.
    pub clock: ServerClock,
    leader: LeaderLink,
    cluster: Option<ClusterLink>,
    admission: Arc<Admission>,
    write_rates: WriteRates,
    pub(crate) audit: Arc<AuditLog>,
    /// Whether requests must authenticate (SPEC S1).
    pub auth: AuthConfig,
    bootstrap_secret: Option<Secret>,
    /// Bumped whenever the token table changes or is replaced: open streams re-check their
    /// tokens on it.
    pub acl_changes: watch::Receiver<u64>,
    /// The principal of every request while authentication is off.
    pub anonymous: Principal,
    ready: AtomicBool,
    stopping: watch::Receiver<bool>,
    pub(crate) meter: Arc<dyn Meter>,
    outputs: mpsc::UnboundedSender<Vec<Output>>,
}

impl Gate {
    /// A gate over `parts`, and the handle only the server's wiring keeps; not ready until
    /// [`Wiring::set_ready`].
    #[must_use]
    pub fn new(parts: Parts) -> (Arc<Gate>, Wiring) {
        let Parts {
            node,
            hub,
            clock,
            leader,
            cluster,
            admission,
            write_rates,
            audit,
            auth,
            bootstrap_secret,
            acl_changes,
            stopping,
            meter,
            outputs,
        } = parts;
        let gate = Arc::new(Gate {
            node,
            hub,
            clock,
            leader,
            cluster,
            admission,
            write_rates,
            audit,
            auth,
            bootstrap_secret,
            acl_changes,
            anonymous: Principal::new(crate::caller::ANONYMOUS).expect("'anonymous' is a valid principal"),
            ready: AtomicBool::new(false),
            stopping,
            meter,
            outputs,
        });
        let wiring = Wiring {
            gate: Arc::clone(&gate),
        };
        (gate, wiring)
    }

    // --- the registry: read, propose, subscribe -------------------------------------------

    /// Reads this node's applied registry (no waiting: see [`Gate::ready_for`]).
    pub fn read<R>(&self, f: impl FnOnce(&Registry) -> R) -> R {
        self.node.read(f)
    }

    /// Waits until a read of `consistency` may be served here, or says why not (SPEC R3).
    pub async fn ready_for(&self, consistency: Consistency) -> Result<(), ApiError> {
        consistency::ready(&self.node, consistency).await
    }

    /// Adds this node's freshness header to a read's reply.
    pub fn annotate(&self, response: &mut Response) {
        consistency::annotate(&self.node, response);
    }

    /// Subscribes to `scope`'s live updates; `None` once the hub is closed. Call it inside
    /// [`Gate::read`], together with the read that starts the watch: the hub is told of
    /// applies under the registry's write lock, so the watch's first frames and its live
    /// updates have no gap and no duplicate between them.
    pub fn subscribe(&self, scope: WatchScope) -> Option<Subscription> {
        self.hub.subscribe(scope)
    }

    /// Proposes a command; a refusal or a node failure becomes an [`ApiError`]. A committed
    /// write's latency from here to its commit is metered (SPEC O1); refusals and failures
    /// are not.
    pub async fn propose(&self, command: Command, meta: CommandMeta) -> Result<Applied, ApiError> {
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
        let revoked = match &command {
            Command::RevokeLease(revoke) => Some(revoke.lease),
            _ => None,
        };
        let accepted = tokio::time::Instant::now();
        let applied = self.node.propose(command, meta).await??;
        self.meter.committed(accepted.elapsed().as_secs_f64());
        if let Some(lease) = revoked {
            // Its deadline goes with it (the engine would find it gone at expiry anyway).
            self.leader.engine().revoked(lease);
        }
        Ok(applied)
    }

    /// Proposes `command` only while this node leads (a leader duty's write): a deposed
    /// leader's proposal cannot commit. The node's own outcome, for duties that tell a
    /// rejection from a lost leadership.
    pub async fn propose_as_leader(
        &self,
        command: Command,
        meta: CommandMeta,
    ) -> Result<Result<Applied, Rejection>, ConsensusError> {
        self.node.propose_as_leader(command, meta).await
    }

    /// The metadata of a command proposed now by `caller`.
    #[must_use]
    pub fn meta(&self, actor: Actor, caller: &Caller) -> CommandMeta {
        self.meta_as(actor, caller.principal())
    }

    /// The metadata of a command proposed now by `principal` (the server itself, for a duty
    /// of the leader: the principal names the observer, SPEC H4).
    #[must_use]
    pub fn meta_as(&self, actor: Actor, principal: &Principal) -> CommandMeta {
        CommandMeta {
            at_ms: self.clock.unix_now_ms(),
            principal: principal.clone(),
            actor,
        }
    }

    /// The reply of a write.
    pub fn write_reply(&self, applied: &Applied) -> WriteReply {
        WriteReply {
            revision: applied.revision,
            lease: applied.lease.map(|grant| self.lease_reply(grant)),
            unchanged: applied.unchanged.map(|why| why.code().to_owned()),
        }
    }

    /// A lease in a reply, with its deadline (a new grant's starts now).
    fn lease_reply(&self, grant: LeaseGrant) -> LeaseReply {
        self.with_engine(|engine, _, now| engine.granted(grant, now))
    }

    // --- the node's standing --------------------------------------------------------------

    /// The node's view of the cluster.
    #[must_use]
    pub fn status(&self) -> NodeStatus {
        self.node.status()
    }

    /// The cluster's members as this node knows them.
    #[must_use]
    pub fn members(&self) -> Vec<Member> {
        self.node.members()
    }

    /// Why this node stopped after a storage failure, if it did: it then serves nothing that
    /// needs its state.
    #[must_use]
    pub fn fatal(&self) -> Option<String> {
        self.node.fatal()
    }

    /// Whether this node leads.
    #[must_use]
    pub fn is_leader(&self) -> bool {
        self.node.is_leader()
    }

    /// The term this node leads in, if it leads.
    #[must_use]
    pub fn leading_term(&self) -> Option<u64> {
        self.node.leading_term()
    }

    /// Milliseconds since this node last heard from a leader (for the leader: since a quorum
    /// acknowledged it); `None` when it never has.
    #[must_use]
    pub fn leader_contact_age_ms(&self) -> Option<u64> {
        self.node.leader_contact_age_ms()
    }

    /// Whether this node is one of a cluster's members (not a single node).
    #[must_use]
    pub fn in_cluster(&self) -> bool {
        self.cluster.is_some()
    }

    /// The last applied revision.
    #[must_use]
    pub fn revision(&self) -> Revision {
        self.hub.revision()
    }

    /// Follows the last applied revision (blocking queries).
    #[must_use]
    pub fn revisions(&self) -> watch::Receiver<Revision> {
        self.hub.revisions()
    }

    /// What the watch hub holds, for the metrics and status.
    #[must_use]
    pub fn watch_stats(&self) -> WatchStats {
        self.hub.stats()
    }

    /// How many watchers follow `scope` (the dashboard's overview).
    #[must_use]
    pub fn watchers(&self, scope: &WatchScope) -> usize {
        self.hub.watchers(scope)
    }

    /// The admission table's holds and refusals, for the metrics.
    #[must_use]
    pub fn admission_report(&self) -> Report {
        self.admission.report()
    }

    /// The audit trail as a way in sees it: its pages, and denials recorded by a way in the
    /// gate does not judge (the cluster listener's secret, a caller asking for more of the
    /// trail than it may read). Mutations come only from the apply path (the wiring's
    /// [`Wiring::audit`]).
    #[must_use]
    pub fn audit(&self) -> AuditView<'_> {
        AuditView::new(&self.audit)
    }

    /// Whether the server serves (false while starting and stopping).
    #[must_use]
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// Follows whether the server is stopping.
    #[must_use]
    pub fn stopping(&self) -> watch::Receiver<bool> {
        self.stopping.clone()
    }

    // --- the leader -------------------------------------------------------------------------

    /// Answers `call` here when this node leads (or is alone), else on the leader (SPEC R4):
    /// what only the leader's engine answers (renewals, TTL reports, in-flight reports).
    pub async fn on_leader<R: DeserializeOwned>(
        &self,
        call: LeaderCall,
        here: impl Future<Output = Result<R, ApiError>>,
    ) -> Result<R, ApiError> {
        match &self.cluster {
            Some(link) if !self.node.is_leader() => {
                let mut call = call;
                // A leader on a build before format 3 refuses a report with a note.
                if let LeaderCall::Report { request, .. } = &mut call
                    && self.format() < 3
                {
                    request.note = None;
                }
                link.to_leader(self.node.status().leader, &call).await
            }
            _ => here.await,
        }
    }

    /// Hands an event that answers a caller to the engine and waits for the answer (which
    /// may come only once a proposal it caused has settled). Replies are handed over here;
    /// every other output goes to the leader task, which carries it out.
    async fn ask(
        &self,
        event: impl FnOnce(&mut Engine, &Registry, Now, ReplyTo) -> Vec<Output>,
    ) -> Result<Reply, ApiError> {
        let stopped = || ApiError::unavailable("the leader's duties are not running (the server is stopping)");
        let (to, answer) = self.leader.reply_slot();
        let outputs = self.with_engine(|engine, registry, now| event(engine, registry, now, to));
        let mut rest = Vec::new();
        for output in outputs {
            match output {
                Output::Reply { to, reply } => self.leader.answer(to, reply),
                other => rest.push(other),
            }
        }
        let mut answer = answer;
        if !rest.is_empty() && self.outputs.send(rest).is_err() {
            // Nobody carries out the rest (the server is gone): the answer counts only if it
            // came already.
            self.leader.forget(to);
            return answer.try_recv().map_err(|_| stopped());
        }
        answer.await.map_err(|_| stopped())
    }

    /// A TTL check's report on this node, which leads: the engine's checker holds the TTL
    /// deadlines. Answered after any change it caused.
    pub async fn ttl_report(
        &self,
        key: ServiceKey,
        instance: InstanceId,
        request: CheckReportRequest,
    ) -> Result<CheckReportReply, ApiError> {
        let report = TtlReport {
            key,
            instance,
            incarnation: request.incarnation,
            status: request.status,
            note: request.note,
        };
        match self
            .ask(|engine, registry, now, to| engine.ttl_report(registry, &report, to, now))
            .await?
        {
            Reply::Report(Ok(reply)) => Ok(reply),
            Reply::Report(Err(refused)) => Err(ApiError::new(refused.error_code(), refused.to_string())),
            other => Err(not_answered(other)),
        }
    }

    /// An in-flight report on this node, which leads: zero requests in flight ends a pending
    /// drain's grace now, with a deregistration fenced by the record's revision, so a lifted
    /// drain stays lifted.
    pub async fn in_flight(
        &self,
        key: ServiceKey,
        instance: InstanceId,
        request: InFlightRequest,
    ) -> Result<WriteReply, ApiError> {
        let target = Target {
            key,
            instance,
            incarnation: request.incarnation,
        };
        let reply = self
            .ask(|engine, registry, _, to| engine.in_flight(registry, target, request.in_flight, to))
            .await?;
        match reply {
            Reply::InFlight(InFlightReply::Ended { revision }) => Ok(WriteReply {
                revision,
                lease: None,
                unchanged: None,
            }),
            Reply::InFlight(InFlightReply::NothingEnded { revision }) => Ok(WriteReply {
                revision,
                lease: None,
                unchanged: Some("no_drain_ended".into()),
            }),
            other => Err(not_answered(other)),
        }
    }

    /// The time as the engine takes it.
    #[must_use]
    pub fn now(&self) -> Now {
        crate::leader::now(&self.clock)
    }

    /// Runs one leader-engine event over the registry as it is now ([`LeaderLink::with_engine`]).
    fn with_engine<T>(&self, event: impl FnOnce(&mut Engine, &Registry, Now) -> T) -> T {
        self.leader.with_engine(&self.node, &self.clock, event)
    }

    /// Looks at the leader engine as it is now (the dashboard's lease deadlines): read only.
    pub fn inspect_engine<T>(&self, look: impl FnOnce(&Engine, &Registry, Now) -> T) -> T {
        self.with_engine(|engine, registry, now| look(engine, registry, now))
    }

    /// Renews lease `id` of `tenant` on this node's engine (this node leads: see
    /// [`Gate::on_leader`]); a renewal touches the leader's memory, not the log (SPEC R4).
    pub fn renew(&self, tenant: &Label, id: LeaseId) -> Result<LeaseReply, RenewRefused> {
        self.with_engine(|engine, registry, now| engine.renew(registry, tenant, id, now))
    }

    /// Whether self-preservation holds removals from `key` now.
    #[must_use]
    pub fn protection_active(&self, key: &ServiceKey) -> bool {
        self.leader.engine().brakes().protection_active(key)
    }

    /// The services self-preservation protects now, sorted.
    #[must_use]
    pub fn protected(&self) -> Vec<ServiceKey> {
        self.leader.engine().brakes().protected()
    }

    /// Probes in flight and endpoints with checks, for metrics.
    #[must_use]
    pub fn checker_load(&self) -> (usize, usize) {
        let engine = self.leader.engine();
        (engine.checker().in_flight(), engine.checker().endpoints())
    }

    // --- who: authentication ----------------------------------------------------------------

    /// Who sent a request with `headers` over `peer`: a bearer token, else a certificate
    /// bound to a token, else nobody (authentication on) or the unrestricted anonymous caller
    /// (off). A token that is not (or no longer) known is refused at once, on any route;
    /// `path` names the request in the refusal's audit record.
    pub fn identify(&self, headers: &HeaderMap, peer: Option<&Peer>, path: &str) -> Result<Caller, ApiError> {
        if !self.auth.enabled {
            return Ok(Caller::unrestricted(self.anonymous.clone()));
        }
        if let Some(value) = headers.get(header::AUTHORIZATION) {
            let secret = value.to_str().ok().and_then(bearer_secret);
            let Some(secret) = secret else {
                return Err(self.unauthenticated(peer, path, "Authorization: expected 'Bearer <secret>'"));
            };
            return match self.node.read(|registry| registry.acl().authenticate(secret)) {
                Some(token) => Ok(Caller::token(token)),
                None => Err(self.unauthenticated(peer, path, "unknown or revoked token")),
            };
        }
        Ok(match self.certificate_token(peer) {
            Some(token) => Caller::token(token),
            None => Caller::nobody(self.anonymous.clone()),
        })
    }

    /// The token of a bearer secret, if it is known.
    #[must_use]
    pub fn token_of(&self, secret: &str) -> Option<Arc<Token>> {
        self.node.read(|registry| registry.acl().authenticate(secret))
    }

    /// The token the connection's verified client certificate is bound to (by one of its
    /// SANs), if any: the one rule of every listener that takes certificates (HTTP API,
    /// Consul, xDS).
    #[must_use]
    pub fn certificate_token(&self, peer: Option<&Peer>) -> Option<Arc<Token>> {
        let certificate = peer?.certificate.as_ref()?;
        let sans = certificate
            .uris
            .iter()
            .chain(&certificate.dns_names)
            .map(String::as_str);
        self.node.read(|registry| registry.acl().by_certificate(sans))
    }

    /// Whether `POST /v1/acl/bootstrap` from `peer`, presenting `presented` (its
    /// `X-Muster-Bootstrap-Secret`), may make the first operator token (SPEC S1): see
    /// [`crate::caller::bootstrap_verdict`]. A refusal is audited as `unauthenticated`.
    pub fn admit_bootstrap(&self, peer: Option<&Peer>, presented: Option<&str>) -> Result<(), ApiError> {
        // An IPv4 client of a dual-stack listener arrives as `::ffff:a.b.c.d`.
        let source = peer.map(|peer| peer.addr.ip().to_canonical());
        crate::caller::bootstrap_verdict(self.bootstrap_secret.as_ref(), source, presented)
            .map_err(|why| self.unauthenticated(peer, "/v1/acl/bootstrap", why))
    }

    /// A `401 unauthenticated`, recorded in the audit trail (SPEC S4).
    pub fn unauthenticated(&self, peer: Option<&Peer>, path: &str, why: &str) -> ApiError {
        tracing::info!(source = ?peer.map(|p| p.addr), path, why, "unauthenticated");
        self.meter.denied(None, ErrorCode::Unauthenticated);
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

    // --- may they: authorisation ------------------------------------------------------------

    /// Refuses with `permission_denied` unless `caller` may make `request`; the refusal is
    /// audited. Ask before any lookup that could reveal a name.
    pub fn require(&self, caller: &Caller, peer: Option<&Peer>, request: &Request<'_>) -> Result<(), ApiError> {
        caller
            .check(request)
            .map_err(|denial| self.denied(caller, peer, request, &denial))
    }

    /// A `403 permission_denied` for `request`, recorded in the audit trail (SPEC S4).
    pub fn denied(&self, caller: &Caller, peer: Option<&Peer>, request: &Request<'_>, denial: &Denial) -> ApiError {
        let what = match request.scope {
            Scope::Service { namespace, service } => format!("{namespace}/{service}"),
            Scope::Namespace(namespace) => format!("{namespace}/*"),
            Scope::AnyService => "*/*".to_owned(),
            Scope::Whole => "the whole tenant".to_owned(),
            Scope::EveryService => "every service".to_owned(),
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
            (Denial::OtherTenant { token, .. }, _, _) => (Some(token.clone()), None),
            (_, Some(tenant), Scope::Service { namespace, service }) => (
                Some(tenant.clone()),
                ServiceKey::new(tenant.as_str(), namespace, service).ok(),
            ),
            (_, tenant, _) => (tenant.cloned(), None),
        };
        self.meter.denied(filed_under.as_ref(), ErrorCode::PermissionDenied);
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

    // --- how much: admission and rates ------------------------------------------------------

    /// One more `hold` for `caller` in `tenant`, or 429 `too_many_watches` naming the spent
    /// budget; the refusal is on the audit trail under the tenant asked for. `resource`
    /// names what was asked for (`GET /v1/watch/acme/prod/api`).
    pub fn admit(
        &self,
        caller: &Caller,
        tenant: Option<&Label>,
        hold: Hold,
        source: Option<SocketAddr>,
        resource: impl FnOnce() -> String,
    ) -> Result<Permit, ApiError> {
        self.admission
            .acquire(&holder(caller, tenant), hold)
            .map_err(|refusal| self.refused(&refusal, hold, source, resource()))
    }

    /// The names `holder` may subscribe to over xDS, held for as long as the stream lives
    /// (`[xds] max_names_per_principal`).
    #[must_use]
    pub fn name_budget(&self, holder: &Holder) -> NameBudget {
        self.admission.names(holder)
    }

    /// Makes the stream holding `budget` hold `names` names from now on; a refusal keeps what
    /// was held and is audited (`resource` names the subscription).
    pub fn hold_names(
        &self,
        budget: &mut NameBudget,
        names: usize,
        source: Option<SocketAddr>,
        resource: &str,
    ) -> Result<(), ApiError> {
        budget
            .resize(names)
            .map_err(|refusal| self.refused(&refusal, Hold::Xds, source, resource.to_owned()))
    }

    /// Whether `holder` has room for `names` more xDS names, counting `own` (what the asking
    /// stream holds already) as its own; a refusal is audited (`resource` names the stream).
    pub fn room_for_names(&self, holder: &Holder, own: usize, names: usize, resource: &str) -> Result<(), ApiError> {
        self.admission
            .room_for_names(holder, own, names)
            .map_err(|refusal| self.refused(&refusal, Hold::Xds, None, resource.to_owned()))
    }

    /// Records an admission `refusal` and turns it into the error reply.
    fn refused(&self, refusal: &Refusal, hold: Hold, source: Option<SocketAddr>, resource: String) -> ApiError {
        let message = refusal.to_string();
        tracing::info!(
            principal = %refusal.holder.principal,
            ?source,
            budget = refusal.budget.as_str(),
            "admission refused"
        );
        self.audit.denied(AuditDenial {
            principal: Some(refusal.holder.principal.clone()),
            tenant: refusal.holder.tenant.clone(),
            key: None,
            verb: match hold {
                Hold::Parked => Verb::Read,
                Hold::Watch | Hold::Live | Hold::Xds => Verb::Watch,
            }
            .to_string(),
            resource,
            code: ErrorCode::TooManyWatches,
            reason: message.clone(),
            source,
            at_ms: self.clock.unix_now_ms(),
        });
        ApiError::new(ErrorCode::TooManyWatches, message)
    }

    /// Takes one write from `caller`'s rate (SPEC W4, S6), or refuses it; the refusal is on
    /// the audit trail (aggregated per source, as every denial is). Without authentication
    /// there is no rate: every caller is the one anonymous principal.
    pub fn throttle(
        &self,
        caller: &Caller,
        tenant: Option<&Label>,
        source: Option<SocketAddr>,
        resource: impl FnOnce() -> String,
    ) -> Result<(), RateLimited> {
        if !self.auth.enabled {
            return Ok(());
        }
        let Err(throttled) = self.write_rates.take(caller.principal(), self.clock.now_ms()) else {
            return Ok(());
        };
        let message = throttled.to_string();
        self.audit.denied(AuditDenial {
            principal: Some(throttled.principal.clone()),
            tenant: tenant.cloned(),
            key: None,
            verb: "write".to_owned(),
            resource: resource(),
            code: ErrorCode::RateLimited,
            reason: message.clone(),
            source,
            at_ms: self.clock.unix_now_ms(),
        });
        Err(RateLimited {
            error: ApiError::new(ErrorCode::RateLimited, message),
            retry_after_s: throttled.retry_after_ms.div_ceil(1_000).max(1),
        })
    }

    /// Writes refused for their principal's rate since the server started.
    #[must_use]
    pub fn writes_rate_limited(&self) -> u64 {
        self.write_rates.refused()
    }

    /// The admission table for `/v1/status`: totals only, no tenant or principal names.
    #[must_use]
    pub fn admission_status(&self) -> AdmissionStatus {
        let report = self.admission.report();
        let budgets = self.admission.budgets();
        let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        AdmissionStatus {
            held: Hold::ALL
                .into_iter()
                .map(|hold| (hold.as_str().to_owned(), count(report.held.of(hold))))
                .collect(),
            xds_names: count(report.held.names),
            principals: count(report.principals),
            tenants: count(report.tenants.len()),
            budgets: Budget::ALL
                .into_iter()
                .map(|budget| (budget.as_str().to_owned(), count(budgets.of(budget))))
                .collect(),
            refused: Budget::ALL
                .into_iter()
                .zip(report.refused)
                .map(|(budget, refused)| (budget.as_str().to_owned(), refused))
                .collect(),
        }
    }

    // --- revocation -------------------------------------------------------------------------

    /// Resolves once `token` is no longer in force on this node (revoked, or gone with a
    /// snapshot that does not hold it).
    pub async fn revoked(&self, token: &Token) {
        let mut changes = self.acl_changes.clone();
        loop {
            changes.borrow_and_update();
            let present = self
                .node
                .read(|registry| registry.acl().get(token.accessor()).is_some());
            if !present {
                return;
            }
            if changes.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Runs `parked` (a blocking query's wait) unless `caller`'s token is revoked first (SPEC
    /// S1, W4): then the query ends at once with `403 permission_denied`, recorded as a
    /// revocation under `resource`, as an open watch ends. A caller without a token waits
    /// as it is.
    pub async fn unless_revoked<T>(
        &self,
        caller: &Caller,
        verb: Verb,
        source: Option<SocketAddr>,
        resource: impl FnOnce() -> String,
        parked: impl Future<Output = T>,
    ) -> Result<T, ApiError> {
        let Some(token) = caller.token_ref() else {
            return Ok(parked.await);
        };
        tokio::select! {
            found = parked => Ok(found),
            () = self.revoked(token) => {
                self.record_revoked(token, verb, source, resource());
                Err(ApiError::new(
                    ErrorCode::Unauthenticated,
                    "the token was revoked while the query waited",
                ))
            }
        }
    }

    /// Records a stream ended, or refused, because its token was revoked (SPEC S1, S4): a
    /// denial `unauthenticated`, [`REVOKED`], under the token's principal and tenant.
    /// `resource` names the stream (`GET /v1/watch/acme/prod/api`); every kind of stream
    /// (watch, dashboard live view, xDS) makes this one call where the revocation ends it.
    pub fn record_revoked(&self, token: &Token, verb: Verb, source: Option<SocketAddr>, resource: String) {
        self.audit.denied(AuditDenial {
            principal: Some(token.principal()),
            tenant: token.tenant().cloned(),
            key: None,
            verb: verb.to_string(),
            resource,
            code: ErrorCode::Unauthenticated,
            reason: REVOKED.to_owned(),
            source,
            at_ms: self.clock.unix_now_ms(),
        });
    }
}

/// What only the server's wiring does with the gate (`Gate::new` hands it out once): mark the
/// server serving, drive the leader engine, hand its replies over, set what the checker may
/// probe, and reach the hub, the audit trail and the cluster link it wires up. Adapters get
/// the [`Gate`], never this.
pub struct Wiring {
    gate: Arc<Gate>,
}

impl Wiring {
    /// Marks the server serving, or not.
    pub fn set_ready(&self, ready: bool) {
        self.gate.ready.store(ready, Ordering::Relaxed);
    }

    /// Runs one leader-engine event over the registry as it is now (the leader task).
    pub fn with_engine<T>(&self, event: impl FnOnce(&mut Engine, &Registry, Now) -> T) -> T {
        self.gate.with_engine(event)
    }

    /// Hands the engine's reply to its caller (gone callers are skipped).
    pub fn answer(&self, to: ReplyTo, reply: Reply) {
        self.gate.leader.answer(to, reply);
    }

    /// Sets what the checker may probe from this node (its listeners are known once bound).
    pub fn set_check_targets(&self, targets: TargetPolicy) {
        self.gate.leader.engine().set_target_policy(targets);
    }

    /// The watch hub: its progress ticker, and closing it when the server stops.
    #[must_use]
    pub fn hub(&self) -> &Arc<WatchHub> {
        &self.gate.hub
    }

    /// The audit trail, shared with the browser guard's refusals.
    #[must_use]
    pub fn audit(&self) -> &Arc<AuditLog> {
        &self.gate.audit
    }

    /// The link to the other members, in a cluster (membership changes use its TLS).
    #[must_use]
    pub fn cluster(&self) -> Option<&ClusterLink> {
        self.gate.cluster.as_ref()
    }
}

/// A reply that is no answer: this node stopped leading, or the change did not commit.
fn not_answered(reply: Reply) -> ApiError {
    match reply {
        Reply::NotLeading => ApiError::no_quorum("this node no longer leads; retry"),
        _ => ApiError::no_quorum("the change this report caused did not commit; retry"),
    }
}

/// Why a stream ended by its token's revocation was refused: what its last frame says and
/// what the audit trail records.
pub const REVOKED: &str = "the token was revoked";

/// [`Gate::revoked`], then the stream it ends recorded as a denial ([`Gate::record_revoked`]).
pub async fn revoked_recorded(
    gate: Arc<Gate>,
    token: Arc<Token>,
    verb: Verb,
    source: Option<SocketAddr>,
    resource: String,
) {
    gate.revoked(&token).await;
    gate.record_revoked(&token, verb, source, resource);
}

/// The holder for `caller` addressing `tenant` (`None`: cluster-wide).
#[must_use]
pub fn holder(caller: &Caller, tenant: Option<&Label>) -> Holder {
    Holder::new(tenant.cloned(), caller.principal().clone())
}

/// A write refused for its principal's rate: `429 rate_limited`, with `Retry-After` in whole
/// seconds (at least 1).
#[derive(Debug)]
pub struct RateLimited {
    /// The error reply.
    pub error: ApiError,
    /// Seconds until the rate allows a write again.
    pub retry_after_s: u64,
}

impl RateLimited {
    /// The `Retry-After` header's value.
    #[must_use]
    pub fn retry_after(&self) -> axum::http::HeaderValue {
        axum::http::HeaderValue::from(self.retry_after_s)
    }
}

impl axum::response::IntoResponse for RateLimited {
    fn into_response(self) -> axum::response::Response {
        let retry_after = self.retry_after();
        let mut response = self.error.into_response();
        response
            .headers_mut()
            .insert(axum::http::header::RETRY_AFTER, retry_after);
        response
    }
}

/// Whether `method` changes something: what the write rate counts.
#[must_use]
pub fn is_write(method: &axum::http::Method) -> bool {
    !matches!(
        *method,
        axum::http::Method::GET | axum::http::Method::HEAD | axum::http::Method::OPTIONS
    )
}
