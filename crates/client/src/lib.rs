#![doc = include_str!("../README.md")]
//!
//! # A tour
//!
//! Muster's client library (SPEC section 7): resolve a service to an eligible endpoint from a
//! local view that is provably complete and current, keep working through registry outages
//! within a stated budget, route around failing endpoints locally, and register with correct
//! fencing and draining. One dependency suffices: the vocabulary of `muster-core` a caller
//! needs is re-exported here. The examples below run against an in-process server.
//!
//! **A client** of one server, built once and cloned freely (SPEC C7, D4); over TLS with a
//! token:
//!
//! ```no_run
//! # async fn tour() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use muster_client::{Client, ClientTls};
//!
//! let tls = ClientTls::from_files("ca.pem".as_ref(), None, None)?;
//! let client = Client::builder("https://muster.internal:7070")
//!     .token(std::env::var("MUSTER_TOKEN")?)
//!     .tls(&tls)
//!     .timeout(Duration::from_secs(5))
//!     .build()?; // a bad URL or token is a typed error: err.code() == "invalid_url"
//! # Ok(()) }
//! ```
//! [`ClientBuilder::connector`] or [`ClientBuilder::service`] put any hyper connector, tower
//! middleware stack or mock underneath.
//!
//! **Register** once with the request types [`Registration`], [`ServingChange`], [`Drain`],
//! [`Deregistration`], ...; a [`Registrar`] keeps a registration alive (a lease renewed with
//! jitter, readiness, a drain on shutdown, SPEC C6):
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let server = muster_testkit::server::InProcess::start().await;
//! # let client = server.client();
//! use muster_client::{InstanceId, Registration, ServiceKey, ServingState, incarnation_at_start};
//!
//! let key: ServiceKey = "prod/api".parse()?;
//! let registration = Registration::new(incarnation_at_start())
//!     .address("10.0.0.7")
//!     .port("http", 8080)
//!     .serving(ServingState::Ready);
//! let written = client.register(&key, &InstanceId::new("api-1")?, registration).await?;
//! assert!(written.revision.0 > 0);
//! # Ok(()) }
//! ```
//!
//! **Resolve and pick**: a [`Resolver`] keeps one service's verified view current over a
//! watch; a [`Picker`] picks from its eligible set with a [`Strategy`] and ejects failing
//! endpoints locally ([`OutlierDetector`]):
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let server = muster_testkit::server::InProcess::start().await;
//! # let client = server.client();
//! # let key: muster_client::ServiceKey = "prod/api".parse()?;
//! # let ready = muster_client::Registration::new(muster_client::Incarnation(1))
//! #     .address("10.0.0.7").port("http", 8080).serving(muster_client::ServingState::Ready);
//! # client.register(&key, &muster_client::InstanceId::new("api-1")?, ready).await?;
//! use std::time::Duration;
//! use muster_client::{EligibilityConfig, OutlierDetector, Picker, Resolver, ResolverConfig, Risk, Strategy};
//!
//! let resolver = Resolver::start(client, key, ResolverConfig::default());
//! resolver.first_view(Duration::from_secs(5)).await?;
//! let picker = Picker::new(resolver, EligibilityConfig::default(), Strategy::RoundRobin, OutlierDetector::default())?;
//! let now_ms = 0; // the picker's clock for local ejection: any monotonic milliseconds
//! let pick = picker.pick(Risk::ReadOnly, now_ms)?;
//! assert_eq!(pick.endpoint.instance.as_str(), "api-1");
//! println!("calling {} at revision {}", pick.endpoint.instance, pick.revision);
//! # Ok(()) }
//! ```
//!
//! **tower**: [`tower::Balance`] is a `tower::Service` that balances a hyper or tonic client
//! over a service's endpoints and ejects failing ones from the calls' own outcomes (here the
//! one backend is the server itself); [`discover`] turns a resolver into a
//! `tower::discover::Discover` source for tower's own balancers:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let server = muster_testkit::server::InProcess::start().await;
//! # let client = server.client();
//! # let backend = server.addr();
//! use muster_client::{Incarnation, InstanceId, Registration, Resolver, ResolverConfig, ServingState};
//! use tower::{Service, ServiceExt};
//!
//! let key: muster_client::ServiceKey = "prod/web".parse()?;
//! let web_1 = Registration::new(Incarnation(1))
//!     .address(backend.ip().to_string())
//!     .port("http", backend.port())
//!     .serving(ServingState::Ready);
//! client.register(&key, &InstanceId::new("web-1")?, web_1).await?;
//!
//! let resolver = Resolver::start(client, key, ResolverConfig::default());
//! let http = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
//!     .build_http::<http_body_util::Empty<bytes::Bytes>>();
//! let mut web = muster_client::tower::Balance::builder(resolver).port("http").shared(http)?;
//! let request = hyper::Request::get("/v1/status").body(http_body_util::Empty::new())?;
//! let response = web.ready().await?.call(request).await?; // 5xx and errors count toward ejection
//! assert_eq!(response.status(), 200);
//! # Ok(()) }
//! ```
//!
//! # One path per item
//! Every item is public at exactly one path. The crate root holds what an application names:
//! the client and its requests, the resolver, the picker and its configuration, the registrar,
//! the errors, and muster-core's vocabulary. The public modules hold the rest: [`balance`]
//! (the balancers and the eligible set, for a picker of your own), [`view`] (the view's pure
//! machine, for a watch shell of your own), [`registrar`] (the registrar's pure machine),
//! [`convergence`] (convergence reports), [`discover`] and [`tower`] (tower), [`api`] (the
//! wire bodies and replies, muster-core's), [`duration`] (milliseconds on the wire) and
//! [`lkg`] (the last-known-good file).
//!
//! # Layout
//! - `http`: [`Client`], [`ClientBuilder`], the request types, [`ClientError`] and its typed
//!   [`ClientErrorCode`], [`ClientTls`], [`Watch`] (a `Stream` of frames), the pluggable
//!   [`HttpService`].
//! - `view`: the view state machine (pure, C1) and the stale budget (C2): [`view::View`],
//!   [`StaleBudget`], [`Risk`].
//! - `resolver`: the I/O shell that keeps one service's view current over a watch and
//!   publishes it (reconnects, backoff, last-known-good saves): [`Resolver`].
//! - `balance`: eligibility (C3) and the balancers (C4), all over one [`balance::EligibleSet`].
//! - `eject`: local outlier ejection (C5, H6): [`OutlierDetector`].
//! - `picker`: resolve and pick in one call, traced, with local ejection: [`Picker`].
//! - `resolver_set`: resolvers of many services sharing one namespace watch: [`ResolverSet`].
//! - `member`: the compact endpoint record and set a view keeps (routing fields and
//!   fingerprints): [`Member`], [`MemberSet`].
//! - [`registrar`]: register, renew with jitter, report readiness, drain on shutdown (C6).
//! - [`lkg`]: the last-known-good set on disk.
//! - [`discover`]: a `tower::discover::Discover` source (C7), local ejections applied.
//! - [`tower`]: a balancing `tower::Service` for hyper and tonic clients, outcomes fed back
//!   into local ejection (C5, C7, H6).

#![forbid(unsafe_code)]

pub mod balance;
pub mod discover;
mod eject;
pub mod failover;
mod http;
pub mod lkg;
mod member;
mod picker;
pub mod registrar;
mod report;
mod resolver;
mod resolver_set;
mod seed;
mod tier;
pub mod tower;
pub mod view;

/// The HTTP API's bodies and watch frames (the replies a [`Client`] returns), as
/// `muster-core` defines them.
pub use muster_core::api;

pub use http::duration;

// The vocabulary (muster-core): keys and names, the endpoint record, revisions, codes.
pub use muster_core::check::CheckStatus;
pub use muster_core::{
    Actor, Address, AddressSpec, CheckSpec, Digest, Endpoint, EndpointSpec, ErrorCode, Incarnation, InstanceId, Label,
    Labels, LeaseId, Locality, LocalitySpec, NamedPort, NamespaceKey, PortSpec, Protocol, Revision, ServiceKey,
    ServiceSnapshot, ServiceUpdate, ServingState, Signal,
};

// The HTTP client.
pub use http::{
    ACTOR_HEADER, Body, BoxError, CONNECT_TIMEOUT, CheckReport, Client, ClientBuilder, ClientError, ClientErrorCode,
    ClientTls, ClientTlsBuilder, DEFAULT_SERVER, Deregistration, Drain, ErrorSource, HttpService, InFlightReport,
    LeaseGrant, NewToken, REQUEST_TIMEOUT, Registration, ServingChange, SnapshotQuery, Watch,
};

/// Convergence reports (SPEC O3): who this client says it is ([`ClientBuilder::client_id`],
/// [`ClientBuilder::cohort`]), what it reports, and the server's read of a fleet.
pub mod convergence {
    pub use crate::http::ConvergenceQuery;
    pub use crate::report::{DEFAULT_REPORT_INTERVAL, ReportIdentity};
    pub use muster_core::convergence::{ClientId, Cohort, ConvergenceReply, ConvergenceReport};
}

// The view, its stale budget, and the resolver that keeps it current.
pub use member::{Member, MemberSet};
pub use resolver::{Resolver, ResolverConfig, ViewChanges};
pub use resolver_set::{ResolverSet, ResolverSetConfig};
pub use view::{Risk, StaleBudget, StaleError, ViewStatus};

// Eligibility, the balancers, ejection, and the picker over them.
pub use balance::config::{ConfigError, Fraction};
pub use balance::eligibility::EligibilityConfig;
pub use balance::hash::HashRingConfig;
pub use balance::locality::LocalityConfig;
pub use eject::{Ejection, EjectionConfig, FailureOutcome, OutlierDetector};
pub use picker::{PickError, Picker, Strategy};
pub use tier::FailoverTier;

// The registrar.
pub use registrar::config::{DEFAULT_DRAIN_GRACE, DEFAULT_TTL, LeaseLossPolicy, RegistrarConfig};
pub use registrar::incarnation::{
    INCARNATION_STRIDE, MAX_REREGISTRATIONS, incarnation_at_start, incarnation_from_counter, incarnation_from_unix_ms,
};
pub use registrar::status::{LiveRegistration, RegistrarStatus, ShutdownStage};
pub use registrar::task::{Registrar, RegistrarBuilder};
