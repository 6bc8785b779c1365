//! A `tower::discover::Discover` source (SPEC C7): the eligible endpoints of a resolved
//! service as a stream of `Change::Insert` / `Change::Remove`, so tower's balancers (p2c,
//! `PeakEwmaDiscover`) and hyper or tonic clients route over Muster's verified view, with
//! this client's local ejections applied (SPEC C3, C5).
//!
//! ```text
//!  Resolver ──views──────▶ diff task: EligibleSet per view, ejections applied, diffed
//!  SharedEjections ──ejected / ejection ends──▶   │ against what was sent
//!                                                │  Insert((instance, incarnation), make(endpoint)) / Remove(key)
//!                                                ▼
//!                                 bounded channel ──▶ EndpointDiscover (a Stream of Change) ──▶ tower Balance
//! ```
//!
//! Keys are (instance, incarnation): a restarted instance is a new service to the balancer,
//! never a reused connection to the old process. A draining endpoint is removed the moment the
//! view carries the drain (it is not eligible), and a registry outage removes nothing (the
//! view keeps its last set). An endpoint this client ejects is removed at once and inserted
//! again (a fresh service from `make`) when its ejection ends, at
//! [`OutlierDetector::next_return_ms`](crate::OutlierDetector::next_return_ms); outcomes reach
//! the shared detector through [`SharedEjections::report`].
//!
//! The stream never pends forever for want of a first view (SPEC C2: say what is wrong at
//! once): a service the server answers it holds nothing of ends the stream with
//! `unknown_service` at once, and no view within the first-view timeout ends it with
//! `unavailable` and the last transport error. tower's balancers return that error from
//! `poll_ready`. Once a first view has arrived, an outage ends nothing: the last set stays.

use std::collections::BTreeSet;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use muster_core::{Incarnation, InstanceId, ServiceKey};

use crate::member::{Member, MemberSet};
use tokio::sync::{mpsc, watch};
use tower::discover::Change;

use crate::balance::EligibilityConfig;
use crate::resolver::Resolver;
use crate::tower::{DEFAULT_FIRST_VIEW_TIMEOUT, SharedEjections};
use crate::view::{StaleError, View};

/// What identifies an endpoint to the balancer: one run of one instance.
pub type EndpointKey = (InstanceId, Incarnation);

/// Changes buffered for a balancer that is not polling: one view change of a large service
/// fits; a balancer further behind makes the diff task wait (never grow memory).
const CHANGE_BUFFER: usize = 1024;

/// The eligible endpoints of a resolved service, as tower discovery changes.
#[derive(Debug)]
pub struct EndpointDiscover<S> {
    changes: mpsc::Receiver<Result<Change<EndpointKey, S>, StaleError>>,
}

impl<S: Send + 'static> EndpointDiscover<S> {
    /// Follows `resolver`'s views; `make` turns each newly eligible endpoint into the
    /// service the balancer will call (e.g. an HTTP client bound to its address). No local
    /// ejection: nobody reports outcomes to this source (see [`EndpointDiscover::with_ejections`]).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = muster_testkit::server::InProcess::start().await;
    /// # let client = server.client();
    /// use std::future::poll_fn;
    /// use std::pin::Pin;
    /// use muster_client::discover::EndpointDiscover;
    /// use muster_client::{EligibilityConfig, Incarnation, InstanceId, Registration, Resolver, ResolverConfig, ServingState};
    /// use tower::discover::{Change, Discover};
    ///
    /// let key: muster_client::ServiceKey = "prod/web".parse()?;
    /// let web_1 = Registration::new(Incarnation(1)).address("10.0.0.7").port("http", 8080).serving(ServingState::Ready);
    /// client.register(&key, &InstanceId::new("web-1")?, web_1).await?;
    /// let resolver = Resolver::start(client, key, ResolverConfig::default());
    /// // Each endpoint becomes the service a balancer calls: here, just its address.
    /// let mut discover = EndpointDiscover::new(resolver, EligibilityConfig::default(), |endpoint| endpoint.addresses[0].ip.to_string());
    /// // tower's balancers poll this; a Stream of Change by hand:
    /// let change = poll_fn(|cx| Pin::new(&mut discover).poll_discover(cx)).await.expect("the resolver runs")?;
    /// let Change::Insert(_, address) = change else { panic!("an insert first") };
    /// assert_eq!(address, "10.0.0.7");
    /// # Ok(()) }
    /// ```
    pub fn new<F>(resolver: Resolver, eligibility: EligibilityConfig, make: F) -> EndpointDiscover<S>
    where
        F: FnMut(&Arc<Member>) -> S + Send + 'static,
    {
        EndpointDiscover::with_ejections(resolver, eligibility, SharedEjections::default(), make)
    }

    /// Like [`EndpointDiscover::new`], with the local ejections of `ejections` applied: an
    /// endpoint it ejects is removed, and inserted again when the ejection ends. Wrap the
    /// services `make` returns with [`SharedEjections::report`] to feed it.
    pub fn with_ejections<F>(
        resolver: Resolver,
        eligibility: EligibilityConfig,
        ejections: SharedEjections,
        make: F,
    ) -> EndpointDiscover<S>
    where
        F: FnMut(&Arc<Member>) -> S + Send + 'static,
    {
        EndpointDiscover::with_first_view_timeout(resolver, eligibility, ejections, DEFAULT_FIRST_VIEW_TIMEOUT, make)
    }

    /// Like [`EndpointDiscover::with_ejections`], ending the stream with `unavailable` when
    /// no view arrived within `first_view_timeout` (default: [`DEFAULT_FIRST_VIEW_TIMEOUT`]).
    pub fn with_first_view_timeout<F>(
        resolver: Resolver,
        eligibility: EligibilityConfig,
        ejections: SharedEjections,
        first_view_timeout: Duration,
        make: F,
    ) -> EndpointDiscover<S>
    where
        F: FnMut(&Arc<Member>) -> S + Send + 'static,
    {
        let deadline = tokio::time::Instant::now() + first_view_timeout;
        let (sender, changes) = mpsc::channel(CHANGE_BUFFER);
        let views = resolver.subscribe();
        let diff = Diff {
            eligibility,
            ejections,
            sender,
            service: resolver.key().clone(),
            sent: BTreeSet::new(),
            _resolver: resolver,
        };
        tokio::spawn(diff.run(views, deadline, make));
        EndpointDiscover { changes }
    }
}

/// The diff task's state: what the balancer was sent.
struct Diff<S> {
    eligibility: EligibilityConfig,
    ejections: SharedEjections,
    sender: mpsc::Sender<Result<Change<EndpointKey, S>, StaleError>>,
    service: ServiceKey,
    sent: BTreeSet<EndpointKey>,
    /// The resolver this source owns: its watch runs as long as the source does.
    _resolver: Resolver,
}

/// Why the diff task stopped: the balancer dropped the stream, or the resolver stopped.
struct Closed;

impl<S> Diff<S> {
    /// Waits for the first view (a set, or the answer that the service is unknown) until
    /// `deadline`; `Err` is the error that ends the stream (`None`: the resolver stopped).
    async fn first_view(
        &self,
        views: &mut watch::Receiver<Arc<View>>,
        deadline: tokio::time::Instant,
    ) -> Result<(), Option<StaleError>> {
        let answered = views.wait_for(|view| view.active().is_some() || view.is_unknown());
        // `Some(unknown)` once answered; the borrow of `views` ends with this statement.
        let answer = match tokio::time::timeout_at(deadline, answered).await {
            Ok(Ok(view)) => Some(view.is_unknown()),
            Ok(Err(_)) => return Err(None),
            Err(_) => None,
        };
        let Some(unknown) = answer else {
            let last_error = views.borrow().last_error().map(Arc::from);
            return Err(Some(StaleError::Unavailable {
                key: self.service.clone(),
                last_error,
            }));
        };
        if unknown {
            return Err(Some(StaleError::UnknownService {
                key: self.service.clone(),
            }));
        }
        Ok(())
    }

    async fn run<F>(mut self, mut views: watch::Receiver<Arc<View>>, deadline: tokio::time::Instant, mut make: F)
    where
        F: FnMut(&Arc<Member>) -> S,
    {
        match self.first_view(&mut views, deadline).await {
            Ok(()) => {}
            Err(Some(error)) => {
                tracing::warn!(service = %self.service, %error, "discovery ends without a first view");
                let _ = self.sender.send(Err(error)).await;
                return;
            }
            Err(None) => return,
        }
        let mut ejected = self.ejections.ejections();
        let clock = self.ejections.clock();
        // The set last diffed: the resolver publishes on every frame, progress included, and
        // a view whose set did not change has nothing to diff (only new sets get a new `Arc`),
        // unless the ejections changed meanwhile.
        let mut diffed: Option<Arc<MemberSet>> = None;
        let mut ejections_changed = true;
        let mut next_return_ms: Option<u64> = None;
        loop {
            let view = Arc::clone(&views.borrow_and_update());
            ejected.borrow_and_update();
            if let Some(set) = view.active() {
                let new_set = !diffed.as_ref().is_some_and(|last| Arc::ptr_eq(last, set));
                if new_set || ejections_changed {
                    diffed = Some(Arc::clone(set));
                    match self.diff(set, &mut make).await {
                        Ok(next) => next_return_ms = next,
                        Err(Closed) => return,
                    }
                }
            }
            ejections_changed = false;
            let ejection_ends = async {
                match next_return_ms {
                    Some(at) => tokio::time::sleep_until(clock.at(at)).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                changed = views.changed() => if changed.is_err() { return },
                // The handle holds the sender and this task holds a handle: never closed.
                _ = ejected.changed() => ejections_changed = true,
                () = ejection_ends => ejections_changed = true,
                () = self.sender.closed() => return,
            }
        }
    }

    /// Sends what changed between what was sent and `set`'s eligible endpoints now; returns
    /// when the next ejection ends.
    async fn diff<F>(&mut self, set: &MemberSet, make: &mut F) -> Result<Option<u64>, Closed>
    where
        F: FnMut(&Arc<Member>) -> S,
    {
        let (eligible, next_return_ms) = self.ejections.eligible(set, &self.eligibility);
        let now: BTreeSet<EndpointKey> = eligible
            .routable()
            .iter()
            .map(|e| (e.instance.clone(), e.incarnation))
            .collect();
        for gone in self.sent.difference(&now) {
            tracing::debug!(service = %self.service, revision = %set.revision(), instance = %gone.0, incarnation = %gone.1, "discover remove");
            self.sender
                .send(Ok(Change::Remove(gone.clone())))
                .await
                .map_err(|_| Closed)?;
        }
        for endpoint in eligible.routable() {
            let endpoint_key = (endpoint.instance.clone(), endpoint.incarnation);
            if !self.sent.contains(&endpoint_key) {
                tracing::debug!(service = %self.service, revision = %set.revision(), instance = %endpoint.instance, incarnation = %endpoint.incarnation, "discover insert");
                let change = Change::Insert(endpoint_key, make(endpoint));
                self.sender.send(Ok(change)).await.map_err(|_| Closed)?;
            }
        }
        self.sent = now;
        Ok(next_return_ms)
    }
}

impl<S> futures_core::Stream for EndpointDiscover<S> {
    type Item = Result<Change<EndpointKey, S>, StaleError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.changes.poll_recv(cx)
    }
}
