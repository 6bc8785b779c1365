//! The ADS service (SPEC D5): one session per gRPC stream, driving the pure state machine of
//! its variant (`crate::SotwStream` or `DeltaStream`) from the client's requests and the
//! registry's changes.
//!
//! ```text
//!  stream opens ─▶ who? (token in `authorization` metadata, or an mTLS certificate bound to one)
//!  first request ─▶ node: id, tenant (token's, else node.metadata.tenant, else [xds] tenant), cohort
//!  loop: request ─▶ machine.on_request ─┐
//!        wake (a watched service changed) ┼─▶ refresh: watch the subscribed services, read their
//!        token table changed ─▶ re-check ─┘   snapshots, machine.respond(kind, resources) ─▶ send
//!  stop ─▶ the stream ends (the client reconnects elsewhere)
//! ```
//!
//! A session is a `Stream` that tonic polls on the connection's task: no task or queue of its
//! own, so an idle stream costs its state machine, its ledger and a `Notify`.

use std::collections::{HashSet, VecDeque};
use std::pin::Pin;
use std::sync::Arc;

use crate::pb::envoy::config::core::v3::Node;
use crate::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::AggregatedDiscoveryService;
use crate::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use crate::pb::google::protobuf::value::Kind as ValueKind;
use crate::{
    Answer, Cohort, DeltaStream, Heard, Kind, Ledger, ServiceName, SotwStream, Subscription, UnknownType, Versioned,
};
use futures_util::Stream;
use muster_auth::Verb;
use muster_core::{Label, Revision, ServiceKey, ServiceSnapshot};
use muster_gate::{Hold, NameBudget, Permit};
use tokio::sync::{Notify, watch};
use tonic::{Request, Response, Status, Streaming};

use super::caller::{Credential, identify, resolve};
use super::clients::{Identity, Registered};
use super::state::XdsState;
use super::state::{MAX_NAMES, OwnNames};
use muster_core::xds_view::Protocol;
use muster_gate::Caller;
use muster_http::peer::Peer;

/// The node metadata key that names a client's tenant.
pub(crate) const TENANT_METADATA: &str = "tenant";

/// The two variants' state machines, seen alike by a session.
pub(crate) trait Machine: Default + Send + 'static {
    type Request: Send + 'static;
    type Response: Send + 'static;
    const PROTOCOL: Protocol;
    fn node(request: &Self::Request) -> Option<&Node>;
    fn on_request(&mut self, request: &Self::Request, now_ms: u64) -> Result<Heard, UnknownType>;
    /// The kind `request` is about and, at most, how many names of it the stream would
    /// subscribe to after it: read from the request before the machine copies a name, so a
    /// request over a bound is refused at the cost of its decoding alone (SPEC W4). `None`
    /// for a type not served.
    fn asks(&self, request: &Self::Request) -> Option<(Kind, usize)>;
    fn subscription(&self, kind: Kind) -> Option<&Subscription>;
    fn respond(&mut self, kind: Kind, resources: &[Arc<Versioned>], revision: Revision) -> Option<Self::Response>;
    fn ledger(&self) -> &Ledger;
}

impl Machine for SotwStream {
    type Request = DiscoveryRequest;
    type Response = DiscoveryResponse;
    const PROTOCOL: Protocol = Protocol::Sotw;
    fn node(request: &DiscoveryRequest) -> Option<&Node> {
        request.node.as_ref()
    }
    fn on_request(&mut self, request: &DiscoveryRequest, now_ms: u64) -> Result<Heard, UnknownType> {
        SotwStream::on_request(self, request, now_ms)
    }
    fn asks(&self, request: &DiscoveryRequest) -> Option<(Kind, usize)> {
        // A state-of-the-world request replaces the kind's names (`*` is the wildcard).
        let kind = Kind::from_type_url(&request.type_url)?;
        let names: HashSet<&str> = request
            .resource_names
            .iter()
            .map(String::as_str)
            .filter(|name| *name != crate::subscription::WILDCARD)
            .collect();
        Some((kind, names.len()))
    }
    fn subscription(&self, kind: Kind) -> Option<&Subscription> {
        SotwStream::subscription(self, kind)
    }
    fn respond(&mut self, kind: Kind, resources: &[Arc<Versioned>], revision: Revision) -> Option<DiscoveryResponse> {
        SotwStream::respond(self, kind, resources, revision)
    }
    fn ledger(&self) -> &Ledger {
        SotwStream::ledger(self)
    }
}

impl Machine for DeltaStream {
    type Request = DeltaDiscoveryRequest;
    type Response = DeltaDiscoveryResponse;
    const PROTOCOL: Protocol = Protocol::Delta;
    fn node(request: &DeltaDiscoveryRequest) -> Option<&Node> {
        request.node.as_ref()
    }
    fn on_request(&mut self, request: &DeltaDiscoveryRequest, now_ms: u64) -> Result<Heard, UnknownType> {
        DeltaStream::on_request(self, request, now_ms)
    }
    fn asks(&self, request: &DeltaDiscoveryRequest) -> Option<(Kind, usize)> {
        // A Delta request adds to the kind's names; a reconnecting client's cache
        // (`initial_resource_versions`) is kept per name as well.
        // Subscriptions are applied before unsubscriptions, so a name in both ends
        // unsubscribed.
        let kind = Kind::from_type_url(&request.type_url)?;
        let held = DeltaStream::subscription(self, kind).map(Subscription::names);
        let is_held = |name: &str| held.is_some_and(|held| held.contains(name));
        let added: HashSet<&str> = request
            .resource_names_subscribe
            .iter()
            .map(String::as_str)
            .filter(|name| *name != crate::subscription::WILDCARD && !is_held(name))
            .collect();
        let dropped: HashSet<&str> = request
            .resource_names_unsubscribe
            .iter()
            .map(String::as_str)
            .filter(|name| is_held(name) || added.contains(name))
            .collect();
        let after = held.map_or(0, std::collections::BTreeSet::len) + added.len() - dropped.len();
        Some((kind, after.max(request.initial_resource_versions.len())))
    }
    fn subscription(&self, kind: Kind) -> Option<&Subscription> {
        DeltaStream::subscription(self, kind)
    }
    fn respond(
        &mut self,
        kind: Kind,
        resources: &[Arc<Versioned>],
        revision: Revision,
    ) -> Option<DeltaDiscoveryResponse> {
        DeltaStream::respond(self, kind, resources, revision)
    }
    fn ledger(&self) -> &Ledger {
        DeltaStream::ledger(self)
    }
}

/// The ADS service.
pub(crate) struct Ads {
    pub(crate) state: Arc<XdsState>,
}

impl Ads {
    fn open<M: Machine>(&self, request: Request<Streaming<M::Request>>) -> Result<Session<M>, Status> {
        // Marked before the token is checked: a revocation applied after this point wakes
        // the stream, one applied before it is seen by the check.
        let mut acl = self.state.gate.acl_changes.clone();
        acl.mark_unchanged();
        let (caller, credential, peer) = identify(&self.state.gate, &request)?;
        let own = request.extensions().get::<OwnNames>().cloned().unwrap_or_default();
        Ok(Session {
            state: Arc::clone(&self.state),
            inbound: request.into_inner(),
            machine: M::default(),
            caller,
            credential,
            peer,
            acl,
            stopping: self.state.gate.stopping(),
            wake: Arc::new(Notify::new()),
            known: None,
            watched: HashSet::new(),
            pinned: HashSet::new(),
            watching_tenant: false,
            rewatch: true,
            own,
            outbox: VecDeque::new(),
            ended: false,
        })
    }
}

type Outbound<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl AggregatedDiscoveryService for Ads {
    type StreamAggregatedResourcesStream = Outbound<DiscoveryResponse>;
    type DeltaAggregatedResourcesStream = Outbound<DeltaDiscoveryResponse>;

    async fn stream_aggregated_resources(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<Self::StreamAggregatedResourcesStream>, Status> {
        let session = self.open::<SotwStream>(request)?;
        Ok(Response::new(Box::pin(session.run())))
    }

    async fn delta_aggregated_resources(
        &self,
        request: Request<Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<Response<Self::DeltaAggregatedResourcesStream>, Status> {
        let session = self.open::<DeltaStream>(request)?;
        Ok(Response::new(Box::pin(session.run())))
    }
}

/// What woke a session.
enum Event<R> {
    Message(Result<Option<R>, Status>),
    Changed,
    /// The token table changed (`false`: its watch is gone, the server is stopping).
    Tokens(bool),
    Stopping,
}

/// Who the stream speaks for, known from its first request.
struct Known {
    tenant: Label,
    cohort: Cohort,
    node_id: String,
    registered: Registered,
    /// The stream's slot in the admission table (SPEC W4, S6).
    _permit: Permit,
    /// The names it subscribes to, every type together, against its principal's budget.
    names: NameBudget,
}

/// One open stream.
struct Session<M: Machine> {
    state: Arc<XdsState>,
    inbound: Streaming<M::Request>,
    machine: M,
    caller: Caller,
    credential: Credential,
    peer: Option<Peer>,
    acl: watch::Receiver<u64>,
    stopping: watch::Receiver<bool>,
    wake: Arc<Notify>,
    known: Option<Known>,
    watched: HashSet<ServiceKey>,
    /// The services a wildcard subscription listed at the last refresh, not watched by name:
    /// their cached resources are kept for this stream.
    pinned: HashSet<ServiceKey>,
    /// Whether the hub wakes this stream when its tenant gains or loses a service.
    watching_tenant: bool,
    /// Whether the subscriptions or the token changed since the watched set was made: a
    /// wake-up of a stream naming 10,000 services reads them, it does not parse them again.
    rewatch: bool,
    /// The names this stream holds, for its decoder's early refusal (`service::Room`).
    own: OwnNames,
    outbox: VecDeque<M::Response>,
    ended: bool,
}

impl<M: Machine> Session<M> {
    fn run(self) -> impl Stream<Item = Result<M::Response, Status>> + Send {
        // A stream ended with an error lets go of the session at once: tonic sends the status
        // and never polls again, and the response body (with this stream in it) lives until
        // the client closes its side, so a refused stream would otherwise keep its request
        // buffer, its subscriptions and its admission slot (SPEC W4).
        futures_util::stream::unfold(Some(self), |session| async move {
            let mut session = session?;
            let item = session.next().await?;
            let open = item.is_ok();
            Some((item, open.then_some(session)))
        })
    }

    /// The next message to send, or `None` when the stream is over.
    async fn next(&mut self) -> Option<Result<M::Response, Status>> {
        loop {
            if let Some(response) = self.outbox.pop_front() {
                return Some(Ok(response));
            }
            if self.ended {
                return None;
            }
            let auth = self.state.gate.auth.enabled;
            let event = tokio::select! {
                message = self.inbound.message() => Event::Message(message),
                () = self.wake.notified() => Event::Changed,
                changed = self.acl.changed(), if auth => Event::Tokens(changed.is_ok()),
                _ = self.stopping.wait_for(|stopping| *stopping) => Event::Stopping,
            };
            match event {
                Event::Message(Ok(Some(request))) => match self.on_request(&request) {
                    Ok(true) => self.rewatch = true,
                    Ok(false) => continue,
                    Err(status) => {
                        self.ended = true;
                        return Some(Err(status));
                    }
                },
                Event::Message(Ok(None)) | Event::Stopping => return None,
                // A request refused before it was decoded (`service::Counted`, or past the
                // size limit): the client is told why.
                Event::Message(Err(status))
                    if matches!(status.code(), tonic::Code::ResourceExhausted | tonic::Code::OutOfRange) =>
                {
                    self.ended = true;
                    return Some(Err(status));
                }
                Event::Message(Err(status)) => {
                    tracing::debug!(%status, "xDS stream ended by the client");
                    return None;
                }
                Event::Changed => {}
                Event::Tokens(open) => match open
                    .then(|| resolve(&self.state.gate, &self.credential, self.peer.as_ref()))
                    .flatten()
                {
                    Some(caller) => {
                        self.caller = caller;
                        self.rewatch = true;
                    }
                    None => {
                        if let Some(token) = self.caller.token_ref() {
                            let source = self.peer.as_ref().map(|peer| peer.addr);
                            self.state
                                .gate
                                .record_revoked(token, Verb::Watch, source, "xDS stream".to_owned());
                        }
                        self.ended = true;
                        return Some(Err(Status::unauthenticated("the stream's token was revoked")));
                    }
                },
            }
            self.refresh();
        }
    }

    /// Takes in one request; `Ok(true)` when the stream's view must be looked at again.
    fn on_request(&mut self, request: &M::Request) -> Result<bool, Status> {
        if self.known.is_none() {
            self.known = Some(self.introduce(M::node(request))?);
        }
        if let Some((kind, names)) = self.machine.asks(request) {
            if names > MAX_NAMES {
                return Err(Status::resource_exhausted(format!(
                    "more than {MAX_NAMES} {kind} resources on one stream"
                )));
            }
            // A growth is reserved before any name is copied or reaches the hub (SPEC W4);
            // the hold is set to what the stream subscribes to once the machine took the
            // request in (a stale request changes nothing, and never shrinks it first).
            let others: usize = Kind::ALL
                .into_iter()
                .filter(|other| *other != kind)
                .filter_map(|other| self.machine.subscription(other))
                .map(|subscription| subscription.names().len())
                .sum();
            let held = self.known.as_ref().map_or(0, |known| known.names.held());
            if others + names > held {
                self.hold_names(others + names)?;
            }
        }
        let now = self.state.gate.clock.now_ms();
        let node = self.known.as_ref().map_or("", |known| known.node_id.as_str());
        let heard = match self.machine.on_request(request, now) {
            Ok(heard) => heard,
            Err(UnknownType(type_url)) => {
                tracing::debug!(node, type_url, "xDS request for a type not served: ignored");
                return Ok(false);
            }
        };
        let kind = heard.kind;
        match &heard.answer {
            Answer::Stale => tracing::debug!(node, %kind, "xDS request with a stale nonce: ignored"),
            Answer::Nacked(nack) => {
                self.state.stats.nacked(kind);
                tracing::warn!(
                    node,
                    %kind,
                    revision = nack.revision.0,
                    message = nack.message,
                    "an xDS client refused a response (NACK); it keeps its previous state"
                );
            }
            Answer::Acked if kind == Kind::Endpoint => self.report_applied(),
            Answer::None | Answer::Acked => {}
        }
        let names = Kind::ALL
            .into_iter()
            .filter_map(|kind| self.machine.subscription(kind))
            .map(|subscription| subscription.names().len())
            .sum();
        self.hold_names(names)?;
        if !heard.subscribed
            && let Some(known) = &self.known
        {
            // An ACK or NACK changes only the ledger.
            known.registered.record.update(self.machine.ledger());
        }
        Ok(heard.subscribed)
    }

    /// Holds `names` subscribed names against the principal's budget, or ends the stream
    /// with `RESOURCE_EXHAUSTED` naming it (the refusal audited as a denial).
    fn hold_names(&mut self, names: usize) -> Result<(), Status> {
        let Some(known) = &mut self.known else {
            return Ok(());
        };
        let source = self.peer.as_ref().map(|peer| peer.addr);
        self.state
            .gate
            .hold_names(&mut known.names, names, source, "xDS subscription")
            .map_err(|error| Status::resource_exhausted(error.message))?;
        self.own
            .0
            .store(known.names.held(), std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// An endpoint ACK: the client applied those services at the revisions it acknowledged
    /// (SPEC O3). Each acknowledged revision is reported as received now, the server's
    /// clock: an ACK is the client's word that it applied what it was sent.
    fn report_applied(&self) {
        let Some(known) = &self.known else {
            return;
        };
        let mut by_revision: std::collections::BTreeMap<Revision, Vec<ServiceKey>> = Default::default();
        for (kind, name, state) in self.machine.ledger().iter() {
            if kind != Kind::Endpoint {
                continue;
            }
            if let (Some(name), Some((revision, _))) = (ServiceName::parse(name), state.acked) {
                let key = name.key(&known.tenant);
                // A failover tier's served revision can run past the registry's
                // (`muster_federation`'s `tiers`): what the client holds is what it was built from.
                let held = self.state.serving.acked_as(&key, revision);
                if let Some(held) = held {
                    by_revision.entry(held).or_default().push(key);
                }
            }
        }
        for (revision, services) in by_revision {
            self.state
                .serving
                .converged(&known.node_id, known.cohort.zone.as_deref(), services, revision);
        }
    }

    /// Who the stream is, from its first request's node.
    fn introduce(&self, node: Option<&Node>) -> Result<Known, Status> {
        let named = node
            .and_then(|node| node.metadata.as_ref())
            .and_then(|metadata| metadata.fields.get(TENANT_METADATA))
            .and_then(|value| match &value.kind {
                Some(ValueKind::StringValue(tenant)) => Some(tenant.as_str()),
                _ => None,
            });
        let named = named
            .map(|tenant| {
                Label::new("tenant", tenant)
                    .map_err(|error| Status::invalid_argument(format!("node.metadata.tenant: {error}")))
            })
            .transpose()?;
        let tenant = match (self.caller.confined_to(), named) {
            (Some(confined), Some(named)) if *confined != named => {
                return Err(Status::permission_denied(format!(
                    "the token is confined to tenant {confined}; the node asks for tenant {named}"
                )));
            }
            (Some(confined), _) => confined.clone(),
            (None, Some(named)) => named,
            (None, None) => self.state.tenant.clone(),
        };
        let source = self.peer.as_ref().map(|peer| peer.addr);
        let permit = self
            .state
            .gate
            .admit(&self.caller, Some(&tenant), Hold::Xds, source, || {
                "xDS stream".to_owned()
            })
            .map_err(|error| Status::resource_exhausted(error.message))?;
        let names = self
            .state
            .gate
            .name_budget(&muster_gate::holder(&self.caller, Some(&tenant)));
        let node_id = node.map(|node| node.id.clone()).unwrap_or_default();
        let registered = self.state.clients.register(
            Identity {
                node_id: node_id.clone(),
                cluster: node.map(|node| node.cluster.clone()).unwrap_or_default(),
                tenant: tenant.clone(),
                protocol: M::PROTOCOL,
                peer: self.peer.as_ref().map(|peer| peer.addr),
            },
            self.state.gate.clock.now_ms(),
        );
        tracing::debug!(node = node_id, %tenant, protocol = M::PROTOCOL.as_str(), "xDS stream opened");
        Ok(Known {
            cohort: Cohort::of(node.and_then(|node| node.locality.as_ref())),
            tenant,
            node_id,
            registered,
            _permit: permit,
            names,
        })
    }

    /// Watches what the stream subscribes to and queues what its view lacks.
    fn refresh(&mut self) {
        let Some(known) = &self.known else {
            return;
        };
        let hub = &self.state.hub;
        let id = known.registered.record.stream;
        let wildcard = self
            .machine
            .subscription(Kind::Cluster)
            .is_some_and(Subscription::is_wildcard);
        if std::mem::take(&mut self.rewatch) {
            // Only names the token may watch reach the hub (SPEC S3): the others are
            // neither watched nor answered.
            let caller = &self.caller;
            let keys: HashSet<ServiceKey> = Kind::ALL
                .into_iter()
                .filter_map(|kind| self.machine.subscription(kind))
                .flat_map(|subscription| subscription.names())
                .filter_map(|name| ServiceName::parse(name))
                .map(|name| name.key(&known.tenant))
                .filter(|key| caller.may(key, Verb::Watch))
                .collect();
            if keys != self.watched || wildcard != self.watching_tenant {
                hub.watch(id, &self.wake, &keys, wildcard.then_some(&known.tenant), &self.watched);
                self.watched = keys;
                self.watching_tenant = wildcard;
            }
        }
        let caller = &self.caller;
        // A failover tier's choice is made at wall-clock time (`Serving::served`).
        let now = self.state.gate.clock.unix_now_ms();
        let (revision, snapshots, every) = self.state.gate.read(|registry| {
            let snapshots: Vec<Arc<ServiceSnapshot>> = self
                .watched
                .iter()
                .filter_map(|key| self.state.serving.served(registry, key, now))
                .collect();
            let every: Vec<Arc<ServiceSnapshot>> = if wildcard {
                registry
                    .namespace_keys()
                    .filter(|namespace| namespace.tenant == known.tenant)
                    .flat_map(|namespace| registry.services(namespace))
                    .filter(|snapshot| caller.may(snapshot.key(), Verb::Watch))
                    .collect()
            } else {
                Vec::new()
            };
            (registry.revision(), snapshots, every)
        });
        // The services the wildcard lists are pinned, not watched: their clusters keep
        // their cached versions (and are not resent), but their endpoint changes do not wake
        // this stream; a service appearing or going does, through the tenant.
        let listed: HashSet<ServiceKey> = every
            .iter()
            .map(|snapshot| snapshot.key().clone())
            .filter(|key| !self.watched.contains(key))
            .collect();
        if listed != self.pinned {
            hub.pin(id, &listed, &self.pinned);
            self.pinned = listed;
        }
        for kind in Kind::ALL {
            let Some(subscription) = self.machine.subscription(kind) else {
                continue;
            };
            let listed = if kind == Kind::Cluster && subscription.is_wildcard() {
                every.as_slice()
            } else {
                &[]
            };
            let mut named = HashSet::new();
            let resources: Vec<Arc<Versioned>> = snapshots
                .iter()
                .chain(listed)
                .map(|snapshot| (ServiceName::of(snapshot.key()).to_string(), snapshot))
                .filter(|(name, _)| subscription.covers(name) && named.insert(name.clone()))
                .map(|(name, snapshot)| hub.resource(kind, &name, snapshot, &known.cohort))
                .collect();
            if let Some(response) = self.machine.respond(kind, &resources, revision) {
                self.state.stats.responded(kind);
                self.outbox.push_back(response);
            }
        }
        known.registered.record.update(self.machine.ledger());
    }
}

impl<M: Machine> Drop for Session<M> {
    fn drop(&mut self) {
        if let Some(known) = &self.known {
            self.state
                .hub
                .leave(known.registered.record.stream, &self.watched, &self.pinned);
            tracing::debug!(node = known.node_id, "xDS stream closed");
        }
    }
}
