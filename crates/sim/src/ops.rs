//! One client operation in flight: proposed through the node it was sent to, or handed to
//! the leader duties, with its outcome traced and every acknowledgement checked.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use muster_consensus::Node;
use muster_core::Principal;
use muster_registry::{Command, CommandMeta};

use crate::clock::Clock;
use crate::duties::{Duties, Request};
use crate::invariants::Checks;
use crate::invariants::acknowledged::Ack;
use crate::observer::hash_json;
use crate::run::lock;
use crate::trace::Trace;
use crate::workload::{Op, OpKind, Workload};

/// How long a client waits for a write: beyond the batcher's own 5 s timeout.
pub(crate) const CLIENT_WAIT: Duration = Duration::from_secs(7);

/// One client operation in flight.
pub(crate) struct OpTask {
    pub(crate) id: u64,
    pub(crate) via: u64,
    pub(crate) sent: u64,
    pub(crate) op: Op,
    pub(crate) node: Option<Node>,
    pub(crate) duties: Arc<Duties>,
    pub(crate) workload: Arc<Mutex<Workload>>,
    pub(crate) trace: Arc<Mutex<Trace>>,
    pub(crate) checks: Arc<Mutex<Checks>>,
    pub(crate) clock: Clock,
    pub(crate) in_flight: Arc<AtomicUsize>,
}

impl OpTask {
    pub(crate) async fn run(self) {
        let outcome = match self.op.kind.clone() {
            OpKind::Propose(command, actor) => self.propose(command, actor).await,
            OpKind::Duty(request) => self.duty(request).await,
        };
        lock(&self.trace).line(
            self.clock.now_ms(),
            &format!("op {} via n{}: {} → {outcome}", self.id, self.via, self.op.what),
        );
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
    }

    async fn propose(&self, command: Command, actor: muster_core::Actor) -> String {
        let Some(node) = &self.node else {
            return "node down".into();
        };
        let meta = CommandMeta {
            at_ms: self.sent,
            principal: Principal::new("sim-client").expect("a valid principal"),
            actor,
        };
        let result = tokio::time::timeout(CLIENT_WAIT, node.propose(command, meta)).await;
        match result {
            Ok(Ok(Ok(applied))) => {
                let committed = applied.unchanged.is_none().then(|| hash_json(&applied));
                if let (Some(lease), Some(ttl)) = (applied.lease, self.op.grant_ttl) {
                    lock(&self.workload).leases.insert(lease.id, ttl);
                }
                let ack = Ack {
                    what: format!("op {} ({})", self.id, self.op.what),
                    revision: applied.revision.0,
                    committed,
                };
                let mut checks = lock(&self.checks);
                let checks = &mut *checks;
                let acked = checks.acknowledged.ack(self.id, ack, &checks.history);
                checks.fail("every acknowledged write is present", acked);
                match applied.unchanged {
                    None => format!("revision {}", applied.revision.0),
                    Some(why) => format!("unchanged ({why:?}) at revision {}", applied.revision.0),
                }
            }
            Ok(Ok(Err(rejection))) => format!("refused: {}", rejection.code()),
            Ok(Err(error)) => format!("failed: {error}"),
            Err(_) => "no answer in time".into(),
        }
    }

    async fn duty(&self, request: Request) -> String {
        let renewing = match &request {
            Request::Renew(lease) => Some(*lease),
            _ => None,
        };
        match self.duties.request(self.via, request).await {
            Ok(done) => {
                if let Some(lease) = renewing {
                    let ttl = lock(&self.workload).leases.get(&lease).copied();
                    let ttl = ttl.or_else(|| lock(&self.checks).leases.ttl(lease));
                    if let Some(ttl) = ttl {
                        let mut checks = lock(&self.checks);
                        let renewed = checks.leases.renewed(lease, ttl, self.sent);
                        checks.fail(
                            "leases: grants mint once, and no lease leaves before its floor",
                            renewed,
                        );
                    }
                }
                done
            }
            Err(error) => format!("failed: {error}"),
        }
    }
}
