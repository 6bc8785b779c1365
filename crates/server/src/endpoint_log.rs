//! Endpoint events in the log (SPEC O2): every event about an endpoint carries `tenant`,
//! `namespace`, `service`, `instance`, `incarnation` and `revision` as fields, under the
//! target [`TARGET`], so a log query by any of them finds the endpoint's whole story.
//!
//! ```text
//!  apply path (every node, replays too) ──judged──▶ EndpointLog   debug: endpoint changed /
//!                                                                  removed / write refused
//!  leader duty committed (leader only) ──▶ duty_committed()        info: endpoint expired,
//!                                                                  drain ended, health changed
//!  checker notes (leader only, before commit) ──▶ leader.rs        info/warn, `revision` the
//!                                                                  record's at the decision
//! ```
//!
//! Levels: what the registry decides on its own (a lease expired, a drain ended, a check
//! crossed its threshold) is `info` and is logged once, by the leader that proposed it, after
//! it committed. What a client asked for and got (register, set-state, drain, deregister) or
//! was refused (a fenced incarnation) is `debug`, on every node that applies it: a fleet
//! re-registering at a deploy would otherwise write a line per instance under the registry's
//! write lock, and a restart replays the log since the last snapshot through the same path.
//! `--log-level info,muster::endpoint=debug` shows them.

use std::sync::atomic::{AtomicU64, Ordering};

use muster_consensus::{ApplyObserver, Judged};
use muster_core::{DeleteReason, Event, Incarnation, InstanceId, Revision, ServiceKey};
use muster_leader::Duty;
use muster_registry::{Applied, Command, Registry};

/// The `tracing` target of every endpoint event.
pub(crate) const TARGET: &str = "muster::endpoint";

/// One endpoint event at `$level` with the six fields of SPEC O2, then any more fields and
/// the message: `endpoint_event!(Level::INFO, key, instance, incarnation, revision, reason = ?r, "endpoint expired")`.
macro_rules! endpoint_event {
    ($level:expr, $key:expr, $instance:expr, $incarnation:expr, $revision:expr, $($rest:tt)+) => {
        tracing::event!(
            target: "muster::endpoint",
            $level,
            tenant = %$key.tenant,
            namespace = %$key.namespace,
            service = %$key.service,
            instance = %$instance,
            incarnation = $incarnation.0,
            revision = $revision.0,
            $($rest)+
        )
    };
}
pub(crate) use endpoint_event;

use tracing::Level;

/// The endpoint a command addresses, and the incarnation it speaks for (an eviction speaks
/// for none: 0).
pub(crate) fn command_target(command: &Command) -> Option<(&ServiceKey, &InstanceId, Incarnation)> {
    command.target()
}

/// The command's name, as the audit trail spells it.
fn verb(command: &Command) -> &'static str {
    match command {
        Command::Register(_) | Command::RegisterNext(_) => "register",
        Command::SetServing(_) => "set_serving",
        Command::Drain(_) => "drain",
        Command::Deregister(_) => "deregister",
        Command::Evict(_) => "evict",
        Command::GrantLease(_) => "grant_lease",
        Command::RevokeLease(_) => "revoke_lease",
        Command::ExpireLeases(_) => "expire_leases",
        Command::SetPolicy(_) => "set_policy",
        Command::AclBootstrap(_) => "acl_bootstrap",
        Command::CreateToken(_) => "create_token",
        Command::RevokeToken(_) => "revoke_token",
        Command::Mirror(_) => "mirror",
        Command::RaiseFormat(_) => "raise_format",
    }
}

/// The apply path's endpoint events (`debug`): each change a committed command made, and each
/// endpoint write it refused. Holds the registry's revision, for the `revision` of a refusal
/// (nothing was committed: the revision the registry was at).
#[derive(Debug, Default)]
pub(crate) struct EndpointLog {
    revision: AtomicU64,
}

impl ApplyObserver for EndpointLog {
    fn applied(&self, _registry: &Registry, applied: &Applied) {
        self.revision.fetch_max(applied.revision.0, Ordering::Relaxed);
    }

    fn reset(&self, registry: &Registry) {
        self.revision.store(registry.revision().0, Ordering::Relaxed);
    }

    fn judged(&self, judged: &Judged<'_>) {
        // Checked once: the events below cost nothing more when debug is off.
        if !tracing::enabled!(target: TARGET, Level::DEBUG) {
            return;
        }
        let change = verb(judged.command);
        let principal = judged.meta.principal.as_str();
        let actor = judged.meta.actor;
        match judged.result {
            Ok(applied) => {
                for_each_event(applied, |key, event| match event {
                    Event::Put { endpoint } => endpoint_event!(
                        Level::DEBUG, key, endpoint.instance, endpoint.incarnation, applied.revision,
                        change, principal, ?actor, state = ?endpoint.serving, "endpoint changed"
                    ),
                    Event::Delete {
                        instance,
                        incarnation,
                        reason,
                    } => endpoint_event!(
                        Level::DEBUG,
                        key,
                        instance,
                        incarnation,
                        applied.revision,
                        change,
                        principal,
                        ?actor,
                        ?reason,
                        "endpoint removed"
                    ),
                });
            }
            Err(rejection) => {
                if let Some((key, instance, incarnation)) = command_target(judged.command) {
                    let revision = Revision(self.revision.load(Ordering::Relaxed));
                    endpoint_event!(
                        Level::DEBUG, key, instance, incarnation, revision,
                        change, principal, ?actor, code = rejection.code(), %rejection,
                        "endpoint write refused"
                    );
                }
            }
        }
    }
}

/// Calls `each` with every endpoint event of a committed command, with its service.
fn for_each_event(applied: &Applied, mut each: impl FnMut(&ServiceKey, &Event)) {
    for update in &applied.updates {
        for event in &update.events {
            each(&update.key, event);
        }
    }
}

/// The leader's own decisions, once committed (`info`, on the leader only): a lease expired,
/// a drain ended, a check moved an endpoint's serving state.
pub(crate) fn duty_committed(duty: Duty, applied: &Applied) {
    let principal = duty.principal();
    let revision = applied.revision;
    for_each_event(applied, |key, event| match (duty, event) {
        (
            _,
            Event::Delete {
                instance,
                incarnation,
                reason: DeleteReason::LeaseExpired,
            },
        ) => endpoint_event!(
            Level::INFO,
            key,
            instance,
            incarnation,
            revision,
            principal,
            "endpoint expired: its lease ran out"
        ),
        (
            Duty::Drain,
            Event::Delete {
                instance, incarnation, ..
            },
        ) => endpoint_event!(
            Level::INFO,
            key,
            instance,
            incarnation,
            revision,
            principal,
            "drain ended: endpoint removed"
        ),
        (
            _,
            Event::Delete {
                instance,
                incarnation,
                reason,
            },
        ) => endpoint_event!(
            Level::INFO,
            key,
            instance,
            incarnation,
            revision,
            principal,
            ?reason,
            "endpoint removed"
        ),
        (Duty::Checker, Event::Put { endpoint }) => endpoint_event!(
            Level::INFO, key, endpoint.instance, endpoint.incarnation, revision,
            principal, state = ?endpoint.serving, "health: serving state changed"
        ),
        (_, Event::Put { endpoint }) => endpoint_event!(
            Level::INFO, key, endpoint.instance, endpoint.incarnation, revision,
            principal, state = ?endpoint.serving, "endpoint changed"
        ),
    });
}

#[cfg(test)]
#[path = "endpoint_log_tests.rs"]
mod tests;
