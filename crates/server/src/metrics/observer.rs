//! The apply path's outcomes as metrics: one observer sees every committed command with its
//! verdict ([`ApplyObserver::judged`]), so registrations, fenced rejections and expiries are
//! counted in one place, the same way on every node.
//!
//! Counted per node as applied there, from the start of this process: the log a restart
//! applies again up to the committed id it held ([`Judged::replayed`]) was counted by the
//! process before, and counting it again would show a burst of writes at every restart.

use std::sync::Arc;

use muster_consensus::{ApplyObserver, Judged};
use muster_core::{DeleteReason, Event, Rejection};
use muster_registry::{Applied, Command, Registry};

use super::counters::{Metrics, expiry, fenced, registration_refused};

/// Counts applied commands' outcomes into [`Metrics`].
pub(crate) struct MetricsObserver(pub(crate) Arc<Metrics>);

impl ApplyObserver for MetricsObserver {
    fn applied(&self, _registry: &Registry, _applied: &Applied) {}

    fn judged(&self, judged: &Judged<'_>) {
        if judged.replayed {
            return;
        }
        let metrics = &self.0;
        let (target, command) = match judged.command {
            // A registration whose incarnation the registry picks (the Consul API's) is a
            // registration like any other.
            Command::Register(register) | Command::RegisterNext(register) => {
                let outcome = match judged.result {
                    Ok(applied) if applied.unchanged.is_some() => 1,
                    Ok(_) => 0,
                    Err(rejection) => registration_refused(rejection),
                };
                metrics.registrations.add(Some(&register.target.key.tenant), outcome, 1);
                (&register.target, fenced::REGISTER)
            }
            Command::SetServing(command) => (&command.target, fenced::SET_SERVING),
            Command::Drain(command) => (&command.target, fenced::DRAIN),
            Command::Deregister(command) => (&command.target, fenced::DEREGISTER),
            Command::ExpireLeases(_) => {
                if let Ok(applied) = judged.result {
                    for update in &applied.updates {
                        let expired = update
                            .events
                            .iter()
                            .filter(|event| {
                                matches!(
                                    event,
                                    Event::Delete {
                                        reason: DeleteReason::LeaseExpired,
                                        ..
                                    }
                                )
                            })
                            .count();
                        if expired > 0 {
                            metrics
                                .expiries
                                .add(Some(&update.key.tenant), expiry::EXPIRED, expired as u64);
                        }
                    }
                }
                return;
            }
            _ => return,
        };
        if let Err(Rejection::StaleIncarnation { .. }) = judged.result {
            metrics.fenced.add(Some(&target.key.tenant), command, 1);
        }
    }

    fn reset(&self, _registry: &Registry) {}
}
