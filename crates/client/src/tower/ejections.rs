//! One outlier detector shared by whatever reports call outcomes and whatever reads the
//! ejections (SPEC C5, H6): the per-endpoint services of a tower balancer report into it,
//! and [`EndpointDiscover`](crate::discover::EndpointDiscover) removes what it ejects.
//!
//! ```text
//!  ReportOutcome<S> (per endpoint) ──report_success / report_failure──▶ SharedEjections
//!                                                                         │ ejection epoch
//!  EndpointDiscover diff task ◀──── rebuild on an ejection, and at next_return_ms ──┘
//! ```
//!
//! # Correctness
//! - Every reporter and reader uses the handle's one clock, so an ejection's end is the same
//!   instant for the detector and for the diff task's timer.
//! - The cap on ejected endpoints counts the *known* endpoints of the last set a reader
//!   built; before any set is built the cap is zero, so nothing is ejected by a report about
//!   an endpoint no reader has seen.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};

use crate::member::{Member, MemberSet};
use hyper::http::{Request, Response};
use tokio::sync::watch;

use crate::balance::{EligibilityConfig, EligibleSet};
use crate::eject::{FailureOutcome, OutlierDetector};
use crate::tower::{Clock, Outcome};

/// A clonable handle on one [`OutlierDetector`] and its clock (see the module docs).
#[derive(Debug, Clone)]
pub struct SharedEjections {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    detector: Mutex<OutlierDetector>,
    /// Known endpoints of the last set built, for the cap on ejected endpoints.
    known: AtomicUsize,
    /// Bumped at every ejection: readers rebuild their sets.
    ejected: watch::Sender<u64>,
    clock: Clock,
}

impl Default for SharedEjections {
    /// A handle on a detector with the default (Envoy-like) settings.
    fn default() -> Self {
        SharedEjections::new(OutlierDetector::default())
    }
}

impl SharedEjections {
    /// Shares `detector`; its clock starts now (tokio's clock).
    pub fn new(detector: OutlierDetector) -> SharedEjections {
        SharedEjections {
            inner: Arc::new(Inner {
                detector: Mutex::new(detector),
                known: AtomicUsize::new(0),
                ejected: watch::Sender::new(0),
                clock: Clock::start(),
            }),
        }
    }

    fn detector(&self) -> MutexGuard<'_, OutlierDetector> {
        self.inner.detector.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A call to `endpoint` succeeded: its run of failures is over.
    pub fn report_success(&self, endpoint: &Member) {
        let now_ms = self.inner.clock.now_ms();
        self.detector().record_success(endpoint, now_ms);
    }

    /// A call to `endpoint` failed: counts toward its local ejection; an ejection wakes the
    /// readers, which stop routing to it.
    pub fn report_failure(&self, endpoint: &Member) -> FailureOutcome {
        let now_ms = self.inner.clock.now_ms();
        let known = self.inner.known.load(Ordering::Relaxed);
        let outcome = self.detector().record_failure(endpoint, known, now_ms);
        if let FailureOutcome::Ejected(ejection) = outcome {
            tracing::info!(instance = %endpoint.instance, incarnation = %endpoint.incarnation, until_ms = ejection.until_ms, "endpoint ejected locally");
            self.inner.ejected.send_modify(|epoch| *epoch += 1);
        }
        outcome
    }

    /// Reports `outcome` of a call to `endpoint` as a success or a failure.
    pub fn report_outcome(&self, endpoint: &Member, outcome: Outcome) {
        if outcome.is_failure() {
            self.report_failure(endpoint);
        } else {
            self.report_success(endpoint);
        }
    }

    /// Whether `endpoint` (this incarnation) is ejected now.
    pub fn is_ejected(&self, endpoint: &Member) -> bool {
        self.detector().is_ejected(endpoint, self.inner.clock.now_ms())
    }

    /// Wraps `service`, the service of `endpoint`, so that every call's outcome is reported
    /// here (a layer for the services an [`EndpointDiscover`](crate::discover::EndpointDiscover)
    /// makes).
    pub fn report<S>(&self, endpoint: &Arc<Member>, service: S) -> ReportOutcome<S> {
        ReportOutcome {
            inner: service,
            endpoint: Arc::clone(endpoint),
            ejections: self.clone(),
        }
    }

    /// The eligible set of `set` with the current ejections applied, and when the next
    /// ejection ends (on this handle's clock). Drops the records of departed endpoints.
    pub(crate) fn eligible(&self, set: &MemberSet, config: &EligibilityConfig) -> (EligibleSet, Option<u64>) {
        let now_ms = self.inner.clock.now_ms();
        let mut detector = self.detector();
        detector.forget_departed(set.iter(), now_ms);
        let eligible = EligibleSet::build(set.revision(), set.iter(), config, &detector, now_ms);
        self.inner.known.store(eligible.known().len(), Ordering::Relaxed);
        (eligible, detector.next_return_ms(now_ms))
    }

    /// Changes at every ejection.
    pub(crate) fn ejections(&self) -> watch::Receiver<u64> {
        self.inner.ejected.subscribe()
    }

    pub(crate) fn clock(&self) -> Clock {
        self.inner.clock
    }
}

/// An endpoint's service whose call outcomes are reported to a [`SharedEjections`]
/// (classified by [`Outcome`]); made by [`SharedEjections::report`].
#[derive(Debug, Clone)]
pub struct ReportOutcome<S> {
    inner: S,
    endpoint: Arc<Member>,
    ejections: SharedEjections,
}

impl<S, B, RB> tower::Service<Request<B>> for ReportOutcome<S>
where
    S: tower::Service<Request<B>, Response = Response<RB>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    RB: Send + 'static,
{
    type Response = Response<RB>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<RB>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        let ready = self.inner.poll_ready(cx);
        if let Poll::Ready(Err(_)) = &ready {
            self.ejections.report_failure(&self.endpoint);
        }
        ready
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let call = self.inner.call(request);
        let endpoint = Arc::clone(&self.endpoint);
        let ejections = self.ejections.clone();
        Box::pin(async move {
            let result = call.await;
            let outcome = match &result {
                Ok(response) => Outcome::of_response(response),
                Err(_) => Outcome::TransportError,
            };
            ejections.report_outcome(&endpoint, outcome);
            result
        })
    }
}
