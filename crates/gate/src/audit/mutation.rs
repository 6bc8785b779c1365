//! A committed command, judged, as audit records: what [`AuditLog`] hears from the apply path
//! ([`ApplyObserver::judged`]), on every node, in log order.
//!
//! Most commands make one record. A lease revocation or expiry, which removes every endpoint
//! attached to the lease in one revision, makes one record per endpoint removed (each with its
//! key, instance and incarnation, all at that revision), or one without a key when it removed
//! none, so the `key` and `tenant` filters find an endpoint's removal whatever removed it.

use muster_auth::Accessor;
use muster_consensus::{ApplyObserver, Judged};
use muster_core::api::{AuditKind, AuditRecord};
use muster_core::{Event, Incarnation, InstanceId, Label, LeaseId, ServiceKey};
use muster_registry::{Applied, Command, LeaseSpec, Registry};

use crate::audit::log::AuditLog;

/// What a command addresses, as the audit trail names it.
struct Subject<'a> {
    verb: &'static str,
    tenant: Option<&'a Label>,
    key: Option<&'a ServiceKey>,
    instance: Option<&'a InstanceId>,
    incarnation: Option<Incarnation>,
    lease: Option<LeaseId>,
    accessor: Option<&'a Accessor>,
    /// Whether each endpoint it removed gets a record of its own.
    per_endpoint: bool,
}

impl<'a> Subject<'a> {
    fn of(verb: &'static str) -> Subject<'a> {
        Subject {
            verb,
            tenant: None,
            key: None,
            instance: None,
            incarnation: None,
            lease: None,
            accessor: None,
            per_endpoint: false,
        }
    }

    fn target(verb: &'static str, target: &'a muster_registry::Target) -> Subject<'a> {
        Subject {
            tenant: Some(&target.key.tenant),
            key: Some(&target.key),
            instance: Some(&target.instance),
            incarnation: Some(target.incarnation),
            ..Subject::of(verb)
        }
    }
}

/// The one place that names every command kind: a new kind must say here how it is recorded.
fn subject(command: &Command) -> Subject<'_> {
    match command {
        Command::Register(register) => Subject {
            lease: match register.lease {
                LeaseSpec::Attach(id) => Some(id),
                LeaseSpec::None | LeaseSpec::Grant { .. } => None,
            },
            ..Subject::target("register", &register.target)
        },
        // The incarnation is the registry's pick, seen in the record the command wrote.
        Command::RegisterNext(register) => Subject {
            incarnation: None,
            ..Subject::target("register", &register.target)
        },
        Command::SetServing(set) => Subject::target("set_serving", &set.target),
        Command::Drain(drain) => Subject::target("drain", &drain.target),
        Command::Deregister(deregister) => Subject::target("deregister", &deregister.target),
        Command::Evict(evict) => Subject {
            tenant: Some(&evict.key.tenant),
            key: Some(&evict.key),
            instance: Some(&evict.instance),
            ..Subject::of("evict")
        },
        Command::GrantLease(grant) => Subject {
            tenant: Some(&grant.tenant),
            key: grant.service.as_ref(),
            ..Subject::of("grant_lease")
        },
        Command::RevokeLease(revoke) => Subject {
            tenant: Some(&revoke.tenant),
            lease: Some(revoke.lease),
            per_endpoint: true,
            ..Subject::of("revoke_lease")
        },
        Command::ExpireLeases(expire) => Subject {
            lease: match expire.leases[..] {
                [only] => Some(only),
                _ => None,
            },
            per_endpoint: true,
            ..Subject::of("expire_leases")
        },
        Command::SetPolicy(_) => Subject::of("set_policy"),
        Command::AclBootstrap(bootstrap) => Subject {
            accessor: Some(&bootstrap.token.accessor),
            ..Subject::of("acl_bootstrap")
        },
        Command::CreateToken(create) => Subject {
            tenant: create.token.tenant.as_ref(),
            accessor: Some(&create.token.accessor),
            ..Subject::of("create_token")
        },
        // The token's tenant is gone with it once applied: an operator's record.
        Command::RevokeToken(revoke) => Subject {
            accessor: Some(&revoke.accessor),
            ..Subject::of("revoke_token")
        },
        // A peer region's history, applied as it was: not an endpoint write of this region.
        Command::Mirror(_) => Subject::of("mirror"),
        // The cluster's, not a tenant's: an operator's record.
        Command::RaiseFormat(_) => Subject::of("raise_format"),
    }
}

/// Calls `record` with every audit record of one judged proposal (at least one, but for a
/// mirror's heartbeat: a peer heard from, nothing changed. One a second per import would
/// flush the trail's retention within minutes and say nothing).
pub(crate) fn records(judged: &Judged<'_>, mut record: impl FnMut(AuditRecord)) {
    if matches!(judged.command, Command::Mirror(_))
        && matches!(judged.result, Ok(applied) if applied.unchanged == Some(muster_registry::Unchanged::MirrorCurrent))
    {
        return;
    }
    let subject = subject(judged.command);
    let (outcome, revision, reason, applied) = match judged.result {
        Ok(applied) => {
            let outcome = match applied.unchanged {
                None => "applied".to_owned(),
                Some(why) => format!("unchanged:{}", why.code()),
            };
            (outcome, Some(applied.revision), None, Some(applied))
        }
        Err(rejection) => (
            format!("refused:{}", rejection.code()),
            None,
            Some(rejection.to_string()),
            None,
        ),
    };
    let base = AuditRecord {
        seq: 0,
        at_ms: judged.meta.at_ms,
        kind: AuditKind::Mutation,
        principal: Some(judged.meta.principal.as_str().to_owned()),
        actor: Some(judged.meta.actor),
        verb: subject.verb.to_owned(),
        tenant: subject.tenant.cloned(),
        key: subject.key.map(ToString::to_string),
        instance: subject.instance.cloned(),
        incarnation: subject.incarnation,
        lease: subject.lease.or(applied.and_then(|a| a.lease.map(|grant| grant.id))),
        accessor: subject.accessor.map(ToString::to_string),
        revision,
        outcome,
        reason,
        resource: None,
        source: None,
        log_index: Some(judged.log_index),
        origin: judged.origin,
        count: None,
        last_at_ms: None,
    };
    let removed = applied.filter(|_| subject.per_endpoint).map(removed_endpoints);
    match removed {
        Some(removed) if !removed.is_empty() => {
            for (key, instance, incarnation) in removed {
                record(AuditRecord {
                    tenant: Some(key.tenant.clone()),
                    key: Some(key.to_string()),
                    instance: Some(instance.clone()),
                    incarnation: Some(incarnation),
                    ..base.clone()
                });
            }
        }
        _ => record(base),
    }
}

/// The endpoints a revision removed, in the order of its updates.
fn removed_endpoints(applied: &Applied) -> Vec<(&ServiceKey, &InstanceId, Incarnation)> {
    applied
        .updates
        .iter()
        .flat_map(|update| {
            update.events.iter().filter_map(move |event| match event {
                Event::Delete {
                    instance, incarnation, ..
                } => Some((&update.key, instance, *incarnation)),
                Event::Put { .. } => None,
            })
        })
        .collect()
}

impl ApplyObserver for AuditLog {
    fn applied(&self, _registry: &Registry, _applied: &Applied) {}

    /// The trail is history, not state derived from the registry: a snapshot installed from
    /// the leader leaves the records already held as they are.
    fn reset(&self, _registry: &Registry) {}

    fn judged(&self, judged: &Judged<'_>) {
        records(judged, |record| self.push(record));
    }
}
