//! A `tower::discover::Discover` source (SPEC C7): the eligible endpoints of a resolved
//! service as a stream of `Change::Insert` / `Change::Remove`, so tower's balancers (p2c,
//! `PeakEwmaDiscover`) and hyper or tonic clients route over Muster's verified view.
//!
//! ```text
//!  Resolver ──views──▶ diff task: EligibleSet::build per view, diff against what was sent
//!                         │  Insert((instance, incarnation), make(endpoint)) / Remove(key)
//!                         ▼
//!                  bounded channel ──▶ EndpointDiscover (a Stream of Change) ──▶ tower Balance
//! ```
//!
//! Keys are (instance, incarnation): a restarted instance is a new service to the balancer,
//! never a reused connection to the old process. A draining endpoint is removed the moment the
//! view carries the drain (it is not eligible), and a registry outage removes nothing (the
//! view keeps its last set).

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use muster_core::{Incarnation, InstanceId};
use tokio::sync::mpsc;
use tower::discover::Change;

use crate::balance::{EligibilityConfig, EligibleSet};
use crate::eject::OutlierDetector;
use crate::member::Member;
use crate::resolver::Resolver;

/// What identifies an endpoint to the balancer: one run of one instance.
pub type EndpointKey = (InstanceId, Incarnation);

/// Changes buffered for a balancer that is not polling: one view change of a large service
/// fits; a balancer further behind makes the diff task wait (never grow memory).
const CHANGE_BUFFER: usize = 1024;

/// The eligible endpoints of a resolved service, as tower discovery changes.
#[derive(Debug)]
pub struct EndpointDiscover<S> {
    changes: mpsc::Receiver<Change<EndpointKey, S>>,
}

impl<S: Send + 'static> EndpointDiscover<S> {
    /// Follows `resolver`'s views; `make` turns each newly eligible endpoint into the
    /// service the balancer will call (e.g. an HTTP client bound to its address).
    pub fn new<F>(resolver: &Resolver, eligibility: EligibilityConfig, make: F) -> EndpointDiscover<S>
    where
        F: FnMut(&Arc<Member>) -> S + Send + 'static,
    {
        let (sender, changes) = mpsc::channel(CHANGE_BUFFER);
        let views = resolver.subscribe();
        let service = resolver.key().clone();
        tokio::spawn(diff_views(views, eligibility, make, sender, service));
        EndpointDiscover { changes }
    }
}

async fn diff_views<S, F>(
    mut views: tokio::sync::watch::Receiver<Arc<crate::view::View>>,
    eligibility: EligibilityConfig,
    mut make: F,
    sender: mpsc::Sender<Change<EndpointKey, S>>,
    service: muster_core::ServiceKey,
) where
    F: FnMut(&Arc<Member>) -> S,
{
    // Ejection is per call site; a balancer fed by discovery ejects through its own load and
    // readiness signals, so no local ejections are applied here.
    let ejections = OutlierDetector::default();
    let mut sent: BTreeSet<EndpointKey> = BTreeSet::new();
    // The set last diffed: the resolver publishes on every frame, progress included, and a
    // view whose set did not change has nothing to diff (only new sets get a new `Arc`).
    let mut diffed: Option<Arc<crate::member::MemberSet>> = None;
    loop {
        let view = Arc::clone(&views.borrow_and_update());
        if let Some(set) = view
            .active()
            .filter(|set| !diffed.as_ref().is_some_and(|last| Arc::ptr_eq(last, set)))
        {
            diffed = Some(Arc::clone(set));
            let eligible = EligibleSet::build(set.revision(), set.iter(), &eligibility, &ejections, 0);
            let now: BTreeSet<EndpointKey> = eligible
                .routable()
                .iter()
                .map(|e| (e.instance.clone(), e.incarnation))
                .collect();
            for gone in sent.difference(&now) {
                tracing::debug!(service = %service, revision = %set.revision(), instance = %gone.0, incarnation = %gone.1, "discover remove");
                if sender.send(Change::Remove(gone.clone())).await.is_err() {
                    return;
                }
            }
            for endpoint in eligible.routable() {
                let endpoint_key = (endpoint.instance.clone(), endpoint.incarnation);
                if !sent.contains(&endpoint_key) {
                    tracing::debug!(service = %service, revision = %set.revision(), instance = %endpoint.instance, incarnation = %endpoint.incarnation, "discover insert");
                    if sender.send(Change::Insert(endpoint_key, make(endpoint))).await.is_err() {
                        return;
                    }
                }
            }
            sent = now;
        }
        if views.changed().await.is_err() {
            return;
        }
    }
}

impl<S> futures_core::Stream for EndpointDiscover<S> {
    type Item = Result<Change<EndpointKey, S>, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.changes.poll_recv(cx).map(|change| change.map(Ok))
    }
}
