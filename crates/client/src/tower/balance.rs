//! [`Balance`]: a `tower::Service<http::Request<B>>` that picks an endpoint of a Muster
//! service per request, routes the request to it and reports the outcome (see the module
//! docs of [`crate::tower`]).
//!
//! # Correctness
//! - `poll_ready` never stays `Pending` for want of an endpoint, and never fails for it
//!   either (to tower an error from `poll_ready` means a dead service: a `Buffer` in front
//!   would close for good). It reports ready and the next `call` fails with the typed
//!   [`BalanceError`]: `no_endpoint` for a usable view without an eligible endpoint, `stale`
//!   beyond the stale budget (only for [`Risk::Mutation`] and [`Risk::Privileged`] calls:
//!   the default, [`Risk::ReadOnly`], keeps the last known set, SPEC C2), `unknown_service`
//!   as soon as the server answers that it holds nothing of the service, `unavailable` (with
//!   the last transport error) when no view arrived within [`DEFAULT_FIRST_VIEW_TIMEOUT`]. It
//!   is `Pending` only while waiting for that first answer or for the picked endpoint's own
//!   service to be ready.
//! - A pick held from an earlier `poll_ready` is dropped at the next poll if the view has
//!   since drained or removed it or this balancer ejected it (SPEC L6, C5).
//! - Every `call_started` has exactly one `call_ended`, also when the caller drops the
//!   response future (a guard ends the call), so least-request counts cannot leak.
//! - Each endpoint's service is made once per (instance, incarnation) and dropped when that
//!   key leaves the view: a restarted instance gets a new connection, never the old one's.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::http::uri::{Authority, PathAndQuery, Scheme};
use hyper::http::{Request, Response, Uri};
use muster_core::{Incarnation, InstanceId, Revision};

use crate::member::Member;
use tracing::Instrument;

use crate::BoxError;
use crate::balance::{ConfigError, EligibilityConfig, Pick};
use crate::discover::EndpointKey;
use crate::eject::{EjectionConfig, OutlierDetector};
use crate::picker::{PickError, Picker, Strategy};
use crate::resolver::Resolver;
use crate::tower::{Clock, Outcome};
use crate::view::{Risk, StaleError};

/// How long a new balancer waits for its resolver's first view before a call is refused as
/// `unavailable`: the client's connect timeout (5 s), so a registry that accepts the watch
/// at all is waited for, and a down one is reported as soon as the connect gives up.
pub const DEFAULT_FIRST_VIEW_TIMEOUT: Duration = crate::CONNECT_TIMEOUT;

/// Where a picked endpoint is reached: its reachable address and chosen port.
#[derive(Debug, Clone)]
pub struct Target {
    endpoint: Arc<Member>,
    addr: SocketAddr,
    authority: Authority,
    uri: Uri,
}

impl Target {
    fn new(
        endpoint: &Arc<Member>,
        eligibility: &EligibilityConfig,
        port: Option<&str>,
    ) -> Result<Target, BalanceError> {
        let no_port = || BalanceError::NoPort {
            instance: endpoint.instance.clone(),
            incarnation: endpoint.incarnation,
            port: port.map(str::to_owned),
        };
        let number = match port {
            Some(name) => endpoint.ports.iter().find(|p| p.name.as_str() == name),
            None => endpoint.ports.first(),
        }
        .ok_or_else(no_port)?
        .port;
        // Eligible endpoints have a reachable address (SPEC C3); a panic pick may not.
        let ip = eligibility
            .reachable_address(endpoint)
            .or_else(|| endpoint.addresses.first())
            .map(|address| address.ip)
            .ok_or_else(no_port)?;
        let addr = SocketAddr::new(ip, number);
        let authority = Authority::try_from(addr.to_string()).map_err(|_| no_port())?;
        let uri = Uri::builder()
            .scheme(Scheme::HTTP)
            .authority(authority.clone())
            .path_and_query("/")
            .build()
            .map_err(|_| no_port())?;
        Ok(Target {
            endpoint: Arc::clone(endpoint),
            addr,
            authority,
            uri,
        })
    }

    /// The endpoint.
    pub fn endpoint(&self) -> &Arc<Member> {
        &self.endpoint
    }

    /// Its address and port.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `address:port`, as a URI authority.
    pub fn authority(&self) -> &Authority {
        &self.authority
    }

    /// `http://address:port/`, e.g. for `tonic::transport::Channel::builder`.
    pub fn uri(&self) -> &Uri {
        &self.uri
    }
}

/// Makes the service that calls one endpoint (STYLE.md rule 8: a factory is `New*`). Any
/// `Fn(&Target) -> S` is one.
pub trait NewEndpointService {
    /// The per-endpoint service.
    type Service;

    /// The service for `target`, made when it is first picked.
    fn new_service(&self, target: &Target) -> Self::Service;
}

impl<F, S> NewEndpointService for F
where
    F: Fn(&Target) -> S,
{
    type Service = S;

    fn new_service(&self, target: &Target) -> S {
        self(target)
    }
}

/// Calls a clone of one shared service with the request's URI pointed at an endpoint: the
/// scheme kept (`http` if none), the authority replaced by the endpoint's address and port,
/// path and query kept. hyper-util's legacy client then sets `Host` from it.
#[derive(Debug, Clone)]
pub struct SetAuthority<S> {
    inner: S,
    authority: Authority,
}

impl<S> SetAuthority<S> {
    /// Sends every request through `inner` to `authority`.
    pub fn new(inner: S, authority: Authority) -> SetAuthority<S> {
        SetAuthority { inner, authority }
    }
}

impl<S, B> tower::Service<Request<B>> for SetAuthority<S>
where
    S: tower::Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> S::Future {
        let (mut head, body) = request.into_parts();
        let mut uri = std::mem::take(&mut head.uri).into_parts();
        uri.scheme.get_or_insert(Scheme::HTTP);
        uri.authority = Some(self.authority.clone());
        uri.path_and_query.get_or_insert(PathAndQuery::from_static("/"));
        head.uri = Uri::from_parts(uri).expect("a scheme, an authority and a path always make a URI");
        self.inner.call(Request::from_parts(head, body))
    }
}

/// [`NewEndpointService`] for one shared service: a [`SetAuthority`] around a clone of it.
#[derive(Debug, Clone)]
pub struct NewSetAuthority<S> {
    shared: S,
}

impl<S: Clone> NewEndpointService for NewSetAuthority<S> {
    type Service = SetAuthority<S>;

    fn new_service(&self, target: &Target) -> SetAuthority<S> {
        SetAuthority::new(self.shared.clone(), target.authority.clone())
    }
}

/// Why a balanced call failed. Every variant has a stable [`BalanceError::code`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BalanceError {
    /// Nothing could be picked: no usable view, or no eligible endpoint in it.
    #[error(transparent)]
    Pick(#[from] PickError),
    /// The picked endpoint has no port of the configured name (or no port at all).
    #[error("no_port: endpoint {instance} (incarnation {incarnation}) has no {} port", port.as_deref().unwrap_or("usable"))]
    NoPort {
        /// The endpoint's instance.
        instance: InstanceId,
        /// Its incarnation.
        incarnation: Incarnation,
        /// The port name asked for, if any.
        port: Option<String>,
    },
    /// The endpoint's service failed (connect error, reset, timeout); counted toward its
    /// local ejection.
    #[error("endpoint_failed: endpoint {instance} (incarnation {incarnation}): {}", chain(&**source))]
    Endpoint {
        /// The endpoint's instance.
        instance: InstanceId,
        /// Its incarnation.
        incarnation: Incarnation,
        /// The inner service's error.
        #[source]
        source: BoxError,
    },
    /// `call` without a successful `poll_ready` first (a bug in the caller).
    #[error("not_ready: call before poll_ready returned Ready(Ok)")]
    NotReady,
}

impl BalanceError {
    /// A stable machine-readable code: `unavailable`, `unknown_service`, `stale`,
    /// `no_endpoint`, `no_port`, `endpoint_failed`, `not_ready`. The `Display` of every
    /// error starts with it, once.
    pub fn code(&self) -> &'static str {
        match self {
            BalanceError::Pick(pick) => pick.code(),
            BalanceError::NoPort { .. } => "no_port",
            BalanceError::Endpoint { .. } => "endpoint_failed",
            BalanceError::NotReady => "not_ready",
        }
    }

    fn endpoint(endpoint: &Member, source: BoxError) -> BalanceError {
        BalanceError::Endpoint {
            instance: endpoint.instance.clone(),
            incarnation: endpoint.incarnation,
            source,
        }
    }
}

/// An error and its sources, joined by `: ` (hyper's own message, `client error (Connect)`,
/// says nothing of the cause below it). The source stays reachable as `source()` too.
fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(source) = next {
        let more = source.to_string();
        // A wrapper that already printed its source (as `ClientError` does) is not repeated.
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        next = source.source();
    }
    text
}

/// Settings of a [`Balance`]; start from [`Balance::builder`].
#[derive(Debug, Clone)]
pub struct BalanceBuilder {
    resolver: Resolver,
    eligibility: EligibilityConfig,
    ejection: EjectionConfig,
    strategy: Strategy,
    risk: Risk,
    port: Option<String>,
    first_view_timeout: Duration,
}

impl BalanceBuilder {
    /// Settings for a balancer over `resolver`'s service (a clone shares its view and
    /// watch): least-request, default eligibility and ejection, [`Risk::ReadOnly`]
    /// (fail static: the last known set beyond the stale budget, SPEC C2), each endpoint's
    /// first port.
    pub fn new(resolver: Resolver) -> BalanceBuilder {
        BalanceBuilder {
            resolver,
            eligibility: EligibilityConfig::default(),
            ejection: EjectionConfig::default(),
            strategy: Strategy::LeastRequest,
            risk: Risk::ReadOnly,
            port: None,
            first_view_timeout: DEFAULT_FIRST_VIEW_TIMEOUT,
        }
    }

    /// Who may be picked (default: [`EligibilityConfig::default`]).
    pub fn eligibility(mut self, eligibility: EligibilityConfig) -> BalanceBuilder {
        self.eligibility = eligibility;
        self
    }

    /// When endpoints are ejected locally (default: [`EjectionConfig::default`]).
    pub fn ejection(mut self, ejection: EjectionConfig) -> BalanceBuilder {
        self.ejection = ejection;
        self
    }

    /// The balancer (default: [`Strategy::LeastRequest`], power of two choices by requests
    /// in flight, which this service counts itself).
    pub fn strategy(mut self, strategy: Strategy) -> BalanceBuilder {
        self.strategy = strategy;
        self
    }

    /// The risk of the calls, for the stale budget (SPEC C2). The default,
    /// [`Risk::ReadOnly`], fails static: beyond the budget calls go on to the last known set
    /// (never an empty one; drains and removals seen before stay in force, and local ejection
    /// keeps working). Calls that mutate state say [`Risk::Mutation`] and then fail `stale`
    /// beyond the budget; [`Risk::Privileged`] fails beyond the tighter privileged budget.
    pub fn risk(mut self, risk: Risk) -> BalanceBuilder {
        self.risk = risk;
        self
    }

    /// Route to the endpoint's port of this name (default: its first port).
    pub fn port(mut self, name: impl Into<String>) -> BalanceBuilder {
        self.port = Some(name.into());
        self
    }

    /// How long `poll_ready` waits for the resolver's first view (default:
    /// [`DEFAULT_FIRST_VIEW_TIMEOUT`]).
    pub fn first_view_timeout(mut self, timeout: Duration) -> BalanceBuilder {
        self.first_view_timeout = timeout;
        self
    }

    /// Balances over one shared service (e.g. hyper-util's legacy client), each request's
    /// URI pointed at the picked endpoint by [`SetAuthority`].
    pub fn shared<S: Clone>(self, service: S) -> Result<Balance<NewSetAuthority<S>>, ConfigError> {
        self.per_endpoint(NewSetAuthority { shared: service })
    }

    /// Balances over one service per endpoint, made by `new_service` when the endpoint is
    /// first picked (e.g. a lazily connecting tonic `Channel`).
    pub fn per_endpoint<N: NewEndpointService>(self, new_service: N) -> Result<Balance<N>, ConfigError> {
        let ejections = OutlierDetector::new(self.ejection)?;
        let picker = Picker::new(self.resolver.clone(), self.eligibility, self.strategy, ejections)?;
        let clock = Clock::start();
        Ok(Balance {
            shared: Arc::new(Shared {
                first_view_deadline: clock.at(0) + self.first_view_timeout,
                resolver: self.resolver,
                picker,
                new_service,
                services: Mutex::new(Services {
                    revision: None,
                    by_key: HashMap::new(),
                }),
                clock,
                risk: self.risk,
                port: self.port,
            }),
            ready: None,
            first_view: None,
            refused: None,
        })
    }

    /// These settings as a `tower::Layer` over a shared service (see
    /// [`BalanceBuilder::shared`]), for `ServiceBuilder::new().layer(...)`.
    pub fn into_layer(self) -> Result<BalanceLayer, ConfigError> {
        // Builds once to check the settings, so `Layer::layer` cannot fail.
        self.clone().per_endpoint(|_: &Target| ())?;
        Ok(BalanceLayer { builder: self })
    }
}

/// A `tower::Layer` that balances a shared inner service over a Muster service: made by
/// [`BalanceBuilder::into_layer`]. Each layered service has its own picker and ejections.
#[derive(Debug, Clone)]
pub struct BalanceLayer {
    builder: BalanceBuilder,
}

impl<S: Clone> tower::Layer<S> for BalanceLayer {
    type Service = Balance<NewSetAuthority<S>>;

    fn layer(&self, inner: S) -> Self::Service {
        self.builder
            .clone()
            .shared(inner)
            .expect("settings checked by BalanceBuilder::into_layer")
    }
}

/// Balances requests over the endpoints of one Muster service, with local ejection fed by
/// the calls' outcomes (see the module docs of [`crate::tower`]). Clones share the picker,
/// the ejections and the per-endpoint services.
pub struct Balance<N: NewEndpointService> {
    shared: Arc<Shared<N>>,
    /// The endpoint picked by `poll_ready`, and its service (polled ready or pending).
    ready: Option<Ready<N::Service>>,
    /// Waiting for the resolver's first view.
    first_view: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    /// Why nothing could be picked: `poll_ready` reports ready and the next `call` fails with
    /// this, because an error from `poll_ready` means a dead service to tower (a `Buffer`
    /// would close for good over a moment without an eligible endpoint).
    refused: Option<BalanceError>,
}

struct Ready<S> {
    pick: Pick,
    service: S,
}

struct Shared<N: NewEndpointService> {
    resolver: Resolver,
    picker: Picker,
    new_service: N,
    services: Mutex<Services<N::Service>>,
    clock: Clock,
    risk: Risk,
    port: Option<String>,
    first_view_deadline: tokio::time::Instant,
}

impl<N: NewEndpointService> Shared<N> {
    /// Whether `endpoint` (this incarnation) may still get new work: in the view, eligible by
    /// its serving state, not ejected here.
    fn still_eligible(&self, endpoint: &Member) -> bool {
        let accept_degraded = self.picker.eligibility().accept_degraded;
        self.resolver
            .view()
            .active()
            .and_then(|set| set.get(&endpoint.instance).cloned())
            .is_some_and(|now| now.incarnation == endpoint.incarnation && now.serving.is_eligible(accept_degraded))
            && !self.picker.is_ejected(endpoint, self.clock.now_ms())
    }
}

/// The per-endpoint services, and the revision whose set they were last pruned to.
struct Services<S> {
    revision: Option<Revision>,
    by_key: HashMap<EndpointKey, S>,
}

impl Balance<NewSetAuthority<()>> {
    /// Settings for a balancer over `resolver`'s service ([`BalanceBuilder::new`]).
    pub fn builder(resolver: Resolver) -> BalanceBuilder {
        BalanceBuilder::new(resolver)
    }
}

impl<N: NewEndpointService> Balance<N> {
    /// The picker: its ejections (`is_ejected`) and eligibility, for diagnostics.
    pub fn picker(&self) -> &Picker {
        &self.shared.picker
    }

    /// Whether this balancer has ejected `endpoint` (this incarnation) now, on its clock.
    pub fn is_ejected(&self, endpoint: &Member) -> bool {
        self.shared.picker.is_ejected(endpoint, self.shared.clock.now_ms())
    }

    /// The resolver.
    pub fn resolver(&self) -> &Resolver {
        &self.shared.resolver
    }
}

impl<N: NewEndpointService> Clone for Balance<N> {
    fn clone(&self) -> Self {
        Balance {
            shared: Arc::clone(&self.shared),
            ready: None,
            first_view: None,
            refused: None,
        }
    }
}

impl<N: NewEndpointService> std::fmt::Debug for Balance<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Balance")
            .field("picker", &self.shared.picker)
            .field("ready", &self.ready.as_ref().map(|ready| &ready.pick.endpoint.instance))
            .finish_non_exhaustive()
    }
}

impl<N> Shared<N>
where
    N: NewEndpointService,
    N::Service: Clone,
{
    /// The service of the picked endpoint, made on first pick; prunes services of endpoints
    /// that left the view when the picked revision moves.
    fn service_for(&self, pick: &Pick) -> Result<N::Service, BalanceError> {
        let mut services = self.services.lock().unwrap_or_else(PoisonError::into_inner);
        if services.revision != Some(pick.revision) {
            if let Some(set) = self.resolver.view().active() {
                let present: std::collections::HashSet<(&InstanceId, Incarnation)> =
                    set.iter().map(|e| (&e.instance, e.incarnation)).collect();
                services
                    .by_key
                    .retain(|(instance, incarnation), _| present.contains(&(instance, *incarnation)));
            }
            services.revision = Some(pick.revision);
        }
        let key = (pick.endpoint.instance.clone(), pick.endpoint.incarnation);
        if let Some(service) = services.by_key.get(&key) {
            return Ok(service.clone());
        }
        let target = Target::new(&pick.endpoint, self.picker.eligibility(), self.port.as_deref())?;
        let service = self.new_service.new_service(&target);
        services.by_key.insert(key, service.clone());
        Ok(service)
    }

    fn report(&self, endpoint: &Member, outcome: Outcome) {
        let now_ms = self.clock.now_ms();
        if outcome.is_failure() {
            self.picker.report_failure(endpoint, now_ms);
        } else {
            self.picker.report_success(endpoint, now_ms);
        }
    }
}

/// Ends a started call when dropped: on completion, on error, or when the caller gives up.
struct InFlight<N: NewEndpointService> {
    shared: Arc<Shared<N>>,
    endpoint: Arc<Member>,
}

impl<N: NewEndpointService> Drop for InFlight<N> {
    fn drop(&mut self) {
        self.shared.picker.call_ended(&self.endpoint);
    }
}

impl<N, B, RB> tower::Service<Request<B>> for Balance<N>
where
    N: NewEndpointService + Send + Sync + 'static,
    N::Service: tower::Service<Request<B>, Response = Response<RB>> + Clone + Send + 'static,
    <N::Service as tower::Service<Request<B>>>::Future: Send + 'static,
    <N::Service as tower::Service<Request<B>>>::Error: Into<BoxError>,
    RB: Send + 'static,
{
    type Response = Response<RB>;
    type Error = BalanceError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<RB>, BalanceError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BalanceError>> {
        let mut waited = false;
        self.refused = None;
        // A pick held from an earlier poll is dropped once the view drains or removes it, or
        // this balancer ejects it (SPEC L6, C5): it would otherwise get the next call. Checked
        // once per poll, before picking, so a pick made in panic mode is not refused at once.
        if let Some(ready) = &self.ready
            && ready.pick.reason != crate::balance::PickReason::Panic
            && !self.shared.still_eligible(&ready.pick.endpoint)
        {
            self.ready = None;
        }
        loop {
            if let Some(ready) = &mut self.ready {
                return match ready.service.poll_ready(cx) {
                    Poll::Ready(Ok(())) => Poll::Ready(Ok(())),
                    Poll::Pending => Poll::Pending,
                    Poll::Ready(Err(error)) => {
                        let endpoint = Arc::clone(&ready.pick.endpoint);
                        self.ready = None;
                        self.shared.report(&endpoint, Outcome::TransportError);
                        self.refused = Some(BalanceError::endpoint(&endpoint, error.into()));
                        Poll::Ready(Ok(()))
                    }
                };
            }
            match self.shared.picker.pick(self.shared.risk, self.shared.clock.now_ms()) {
                Ok(pick) => {
                    self.first_view = None;
                    match self.shared.service_for(&pick) {
                        Ok(service) => self.ready = Some(Ready { pick, service }),
                        Err(error) => {
                            self.refused = Some(error);
                            return Poll::Ready(Ok(()));
                        }
                    }
                }
                Err(PickError::View(StaleError::Unavailable { .. }))
                    if !waited && tokio::time::Instant::now() < self.shared.first_view_deadline =>
                {
                    let deadline = self.shared.first_view_deadline;
                    let mut views = self.shared.resolver.subscribe();
                    let wait = self.first_view.get_or_insert_with(|| {
                        Box::pin(async move {
                            // A set, or the server's answer that there is none: an unknown
                            // service is refused at once, not after the timeout.
                            let first = views.wait_for(|view| view.active().is_some() || view.is_unknown());
                            let _ = tokio::time::timeout_at(deadline, first).await;
                        })
                    });
                    if wait.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    self.first_view = None;
                    waited = true;
                }
                Err(error) => {
                    self.first_view = None;
                    self.refused = Some(error.into());
                    return Poll::Ready(Ok(()));
                }
            }
        }
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let Some(Ready { pick, mut service }) = self.ready.take() else {
            let error = self.refused.take().unwrap_or(BalanceError::NotReady);
            return Box::pin(std::future::ready(Err(error)));
        };
        let shared = Arc::clone(&self.shared);
        shared.picker.call_started(&pick.endpoint);
        let span = pick.span(shared.resolver.key());
        let in_flight = InFlight {
            shared,
            endpoint: pick.endpoint,
        };
        let call = service.call(request);
        Box::pin(
            async move {
                let result = call.await;
                let outcome = match &result {
                    Ok(response) => Outcome::of_response(response),
                    Err(_) => Outcome::TransportError,
                };
                in_flight.shared.report(&in_flight.endpoint, outcome);
                result.map_err(|error| BalanceError::endpoint(&in_flight.endpoint, error.into()))
            }
            .instrument(span),
        )
    }
}
