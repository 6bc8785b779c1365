//! Turning a command into a [`Plan`] of writes, or a refusal, without changing anything.
//!
//! Every check (validation, fencing, idempotency, compare-and-swap, quotas) happens here,
//! on `&Registry`; `Registry::commit` then applies the plan at one new revision. That split
//! is what makes "a rejected command changes nothing" hold by construction.

use std::collections::BTreeSet;
use std::sync::Arc;

use muster_core::error::Quota;
use muster_core::spec::bounded_text;
use muster_core::{
    Actor, DeleteReason, Endpoint, Incarnation, InstanceId, Label, LeaseId, Observation, Provenance, Rejection,
    Revision, ServiceKey, ServingState,
};
use smol_str::SmolStr;

use crate::applied::{Applied, LeaseGrant, Unchanged};
use crate::command::{
    CommandMeta, Deregister, Drain, Evict, ExpireLeases, GrantLease, LeaseSpec, Register, RevokeLease, SetPolicy,
    Target,
};
use crate::config::RegistryConfig;
use crate::drains::{DrainDeadline, MAX_DRAIN_GRACE_MS};
use crate::leases::Lease;
use crate::registry::{MAX_INCARNATION, Registry, Usage};

/// What an accepted command will do.
pub(crate) enum Planned {
    /// Write these changes at the next revision.
    Commit(Plan),
    /// Nothing to write; reply with this.
    Unchanged(Applied),
}

/// The writes of one command, all committed at one revision.
#[derive(Default)]
pub(crate) struct Plan {
    pub(crate) puts: Vec<(ServiceKey, Arc<Endpoint>)>,
    pub(crate) deletes: Vec<Delete>,
    pub(crate) grant: Option<Box<Lease>>,
    pub(crate) revoke: Vec<LeaseId>,
    /// The lease to report in the reply.
    pub(crate) lease: Option<LeaseGrant>,
    /// The policy to put in force (boxed: rare, and larger than the rest of a plan).
    pub(crate) policy: Option<Box<RegistryConfig>>,
    /// A drain's deadline to record.
    pub(crate) drain: Option<DrainDeadline>,
}

pub(crate) struct Delete {
    pub(crate) key: ServiceKey,
    pub(crate) instance: InstanceId,
    /// The incarnation the fence holds: at least the removed record's.
    pub(crate) fence: Incarnation,
    pub(crate) reason: DeleteReason,
}

fn unchanged(revision: Revision, lease: Option<LeaseGrant>, why: Unchanged) -> Planned {
    Planned::Unchanged(Applied {
        revision,
        updates: Vec::new(),
        lease,
        unchanged: Some(why),
        released: Vec::new(),
        mirrored: Vec::new(),
    })
}

fn check_expected(
    subject: impl FnOnce() -> String,
    expected: Option<Revision>,
    actual: Revision,
) -> Result<(), Rejection> {
    match expected {
        Some(expected) if expected != actual => Err(Rejection::RevisionMismatch {
            subject: subject(),
            expected,
            actual,
        }),
        _ => Ok(()),
    }
}

/// Refuses an incarnation above [`MAX_INCARNATION`].
fn check_incarnation(target: &Target) -> Result<(), Rejection> {
    if target.incarnation.0 > MAX_INCARNATION {
        return Err(Rejection::InvalidField {
            field: "incarnation".into(),
            reason: format!(
                "must be at most {MAX_INCARNATION} (2^53 - 1), got {}",
                target.incarnation
            ),
        });
    }
    Ok(())
}

fn not_found(target: &Target) -> Rejection {
    Rejection::NotFound {
        subject: format!(
            "instance '{}' incarnation {} of {}",
            target.instance, target.incarnation, target.key
        ),
    }
}

impl Registry {
    pub(crate) fn plan_register(&self, cmd: &Register, meta: &CommandMeta) -> Result<Planned, Rejection> {
        let config = self.policy();
        let target = &cmd.target;
        check_incarnation(target)?;
        let attrs = cmd.spec.validate(&config.limits, &config.network)?;
        let service = self.service(&target.key);
        let existing = service.and_then(|s| s.current.get(&target.instance));
        let highest = self.highest_incarnation(&target.key, &target.instance, meta.at_ms);
        let same_incarnation = existing.filter(|e| e.incarnation == target.incarnation);
        if let Some(current) =
            highest.filter(|h| target.incarnation < *h || (existing.is_none() && target.incarnation == *h))
        {
            return Err(Rejection::StaleIncarnation {
                instance: target.instance.clone(),
                presented: target.incarnation,
                current,
            });
        }

        // The lease: an existing one of this tenant, the one a retried register-with-grant
        // already got, or a new grant (`true`) committed with the record.
        let lease: Option<(LeaseGrant, bool)> = match cmd.lease {
            LeaseSpec::None => None,
            LeaseSpec::Attach(id) => Some((self.lease_for(&target.key, id)?, false)),
            LeaseSpec::Grant { ttl_ms } => {
                self.check_ttl(ttl_ms)?;
                let held = same_incarnation
                    .and_then(|e| e.lease)
                    .and_then(|id| self.lease_table().get(id))
                    .filter(|held| held.ttl_ms == ttl_ms);
                Some(match held {
                    Some(held) => (LeaseGrant { id: held.id, ttl_ms }, false),
                    None => (
                        LeaseGrant {
                            id: self.lease_table().next_id(),
                            ttl_ms,
                        },
                        true,
                    ),
                })
            }
        };
        let reply_lease = lease.map(|(grant, _)| grant);
        if let Some(existing) = same_incarnation
            && existing.lease == reply_lease.map(|l| l.id)
            && has_attributes(existing, &attrs)
        {
            return Ok(unchanged(existing.revision, reply_lease, Unchanged::AlreadyCommitted));
        }
        check_expected(
            || format!("instance '{}' of {}", target.instance, target.key),
            cmd.expected_revision,
            existing.map_or(Revision::ZERO, |e| e.revision),
        )?;
        if existing.is_none() {
            let new_service = service.is_none_or(|s| s.current.is_empty());
            self.check_quota_endpoints(&target.key, new_service)?;
        }
        let grant = match lease {
            Some((LeaseGrant { id, ttl_ms }, true)) => {
                self.check_quota_leases(&target.key.tenant)?;
                Some(Box::new(Lease {
                    id,
                    tenant: target.key.tenant.clone(),
                    ttl_ms,
                    revision: self.revision().next(),
                    // From format 2 on, a lease granted with a registration is its
                    // service's (SPEC L4): its own token can renew it, no other service's.
                    service: (self.format() >= 2).then(|| target.key.clone()),
                }))
            }
            _ => None,
        };

        let (serving, observation) = match same_incarnation {
            Some(e) => (e.serving, e.observation.clone()),
            None => (
                attrs.initial_serving,
                Observation {
                    actor: meta.actor,
                    principal: meta.principal.clone(),
                    at_ms: meta.at_ms,
                    reason: SmolStr::new_static("registered"),
                },
            ),
        };
        let endpoint = Endpoint {
            instance: target.instance.clone(),
            incarnation: target.incarnation,
            addresses: attrs.addresses,
            ports: attrs.ports,
            locality: attrs.locality,
            serving,
            weight: attrs.weight,
            capacity: attrs.capacity,
            labels: attrs.labels,
            lease: reply_lease.map(|l| l.id),
            revision: self.revision().next(),
            provenance: Provenance {
                registrar: meta.principal.clone(),
                source_revision: attrs.source_revision,
                policy_revision: config.network.revision,
            },
            observation,
            checks: attrs.checks,
        };
        self.check_size(&endpoint)?;
        Ok(Planned::Commit(Plan {
            puts: vec![(target.key.clone(), Arc::new(endpoint))],
            grant,
            lease: reply_lease,
            ..Plan::default()
        }))
    }

    /// Set-serving and drain: the owner/app precedence of SPEC L5 lives here.
    pub(crate) fn plan_serving(
        &self,
        target: &Target,
        state: ServingState,
        reason: &str,
        expected: Option<Revision>,
        meta: &CommandMeta,
    ) -> Result<Planned, Rejection> {
        let reason = bounded_text("reason", reason, self.policy().limits.max_text_bytes)?;
        let existing = self.fenced_existing(target, meta.at_ms)?;
        // From format 2 on, the owner draining what the app drained makes it the owner's drain.
        let owner_takes_drain = self.format() >= 2
            && state == ServingState::Draining
            && meta.actor == Actor::Owner
            && existing.observation.actor != Actor::Owner;
        // From format 3 on, the checker records a new reason for a state it set itself (a TTL
        // report's note, SPEC H4), keeping the time of the transition; never another actor's
        // observation, nor a drain's, whose reason is the drainer's.
        let new_note = self.format() >= 3
            && meta.actor == Actor::Checker
            && existing.observation.actor == Actor::Checker
            && state != ServingState::Draining
            && existing.observation.reason != reason;
        if existing.serving == state && !owner_takes_drain && !new_note {
            return Ok(unchanged(existing.revision, None, Unchanged::AlreadyCommitted));
        }
        // A drain holds against all but the owner; from format 2 on, the app may lift a drain
        // it set itself (an app draining on shutdown), never the owner's, and nothing lifts a
        // checker's but the owner (the health checker speaks as one) (SPEC L5).
        let own_drain = self.format() >= 2 && meta.actor == Actor::App && existing.observation.actor == Actor::App;
        if existing.serving == ServingState::Draining && meta.actor != Actor::Owner && !own_drain {
            return Ok(unchanged(existing.revision, None, Unchanged::DrainHeld));
        }
        check_expected(
            || format!("instance '{}' of {}", target.instance, target.key),
            expected,
            existing.revision,
        )?;
        let note_only = existing.serving == state && !owner_takes_drain;
        let mut endpoint = Endpoint::clone(existing);
        endpoint.serving = state;
        endpoint.revision = self.revision().next();
        endpoint.observation = Observation {
            actor: meta.actor,
            principal: meta.principal.clone(),
            at_ms: if note_only {
                existing.observation.at_ms
            } else {
                meta.at_ms
            },
            reason,
        };
        self.check_size(&endpoint)?;
        Ok(Planned::Commit(Plan {
            puts: vec![(target.key.clone(), Arc::new(endpoint))],
            ..Plan::default()
        }))
    }

    /// A drain: set-serving `draining` as the caller, plus its grace's deadline.
    pub(crate) fn plan_drain(&self, cmd: &Drain, meta: &CommandMeta) -> Result<Planned, Rejection> {
        if let Some(grace) = cmd.grace_ms
            && grace > MAX_DRAIN_GRACE_MS
        {
            return Err(Rejection::InvalidField {
                field: "grace_ms".into(),
                reason: format!("must be at most {MAX_DRAIN_GRACE_MS} (one hour), got {grace}"),
            });
        }
        let planned = self.plan_serving(
            &cmd.target,
            ServingState::Draining,
            &cmd.reason,
            cmd.expected_revision,
            meta,
        )?;
        let Some(grace) = cmd.grace_ms else {
            return Ok(planned);
        };
        let deadline = DrainDeadline {
            key: cmd.target.key.clone(),
            instance: cmd.target.instance.clone(),
            incarnation: cmd.target.incarnation,
            deadline_ms: meta.at_ms.saturating_add(grace),
        };
        Ok(match planned {
            Planned::Commit(mut plan) => {
                plan.drain = Some(deadline);
                Planned::Commit(plan)
            }
            // Already draining with a grace: the first drain's grace stands (a retry changes
            // nothing).
            unchanged if self.drain_deadline(&cmd.target.key, &cmd.target.instance).is_some() => unchanged,
            // Already draining without one (set by a set-serving, or a drain without a grace):
            // this drain's grace is recorded, at a revision of its own, so the instance is
            // still deregistered when it ends.
            _ => Planned::Commit(Plan {
                drain: Some(deadline),
                ..Plan::default()
            }),
        })
    }

    pub(crate) fn plan_deregister(&self, cmd: &Deregister, meta: &CommandMeta) -> Result<Planned, Rejection> {
        let target = &cmd.target;
        check_incarnation(target)?;
        let service = self.service(&target.key);
        let existing = service.and_then(|s| s.current.get(&target.instance));
        let Some(existing) = existing else {
            return match self.fence(&target.key, &target.instance, meta.at_ms) {
                Some(t) if t.incarnation == target.incarnation => {
                    Ok(unchanged(t.revision, None, Unchanged::AlreadyCommitted))
                }
                Some(t) if t.incarnation > target.incarnation => Err(Rejection::StaleIncarnation {
                    instance: target.instance.clone(),
                    presented: target.incarnation,
                    current: t.incarnation,
                }),
                _ => Err(not_found(target)),
            };
        };
        if target.incarnation < existing.incarnation {
            return Err(Rejection::StaleIncarnation {
                instance: target.instance.clone(),
                presented: target.incarnation,
                current: existing.incarnation,
            });
        }
        check_expected(
            || format!("instance '{}' of {}", target.instance, target.key),
            cmd.expected_revision,
            existing.revision,
        )?;
        Ok(Planned::Commit(Plan {
            deletes: vec![Delete {
                key: target.key.clone(),
                instance: target.instance.clone(),
                fence: target.incarnation,
                reason: DeleteReason::Deregistered,
            }],
            ..Plan::default()
        }))
    }

    pub(crate) fn plan_evict(&self, cmd: &Evict) -> Result<Planned, Rejection> {
        let existing = self
            .service(&cmd.key)
            .and_then(|s| s.current.get(&cmd.instance))
            .ok_or_else(|| Rejection::NotFound {
                subject: format!("instance '{}' of {}", cmd.instance, cmd.key),
            })?;
        check_expected(
            || format!("instance '{}' of {}", cmd.instance, cmd.key),
            cmd.expected_revision,
            existing.revision,
        )?;
        Ok(Planned::Commit(Plan {
            deletes: vec![Delete {
                key: cmd.key.clone(),
                instance: cmd.instance.clone(),
                fence: existing.incarnation,
                reason: DeleteReason::Evicted,
            }],
            ..Plan::default()
        }))
    }

    pub(crate) fn plan_grant(&self, cmd: &GrantLease) -> Result<Planned, Rejection> {
        if let Some(key) = &cmd.service {
            self.needs_format(2, "a lease bound to a service")?;
            if key.tenant != cmd.tenant {
                return Err(Rejection::InvalidField {
                    field: "service".into(),
                    reason: format!("{key} is not a service of tenant '{}'", cmd.tenant),
                });
            }
        }
        self.check_ttl(cmd.ttl_ms)?;
        self.check_quota_leases(&cmd.tenant)?;
        let id = self.lease_table().next_id();
        Ok(Planned::Commit(Plan {
            grant: Some(Box::new(Lease {
                id,
                tenant: cmd.tenant.clone(),
                ttl_ms: cmd.ttl_ms,
                revision: self.revision().next(),
                service: cmd.service.clone(),
            })),
            lease: Some(LeaseGrant { id, ttl_ms: cmd.ttl_ms }),
            ..Plan::default()
        }))
    }

    pub(crate) fn plan_revoke(&self, cmd: &RevokeLease) -> Result<Planned, Rejection> {
        let lease = self.tenant_lease(&cmd.tenant, cmd.lease)?;
        let granted_at = self.lease_table().get(lease.id).map_or(Revision::ZERO, |l| l.revision);
        check_expected(|| format!("lease {}", cmd.lease), cmd.expected_revision, granted_at)?;
        Ok(Planned::Commit(
            self.plan_lease_removal([cmd.lease], DeleteReason::Deregistered),
        ))
    }

    pub(crate) fn plan_expire(&self, cmd: &ExpireLeases) -> Planned {
        let live: BTreeSet<LeaseId> = cmd
            .leases
            .iter()
            .copied()
            .filter(|id| self.lease_table().get(*id).is_some())
            .collect();
        if live.is_empty() {
            return unchanged(self.revision(), None, Unchanged::NothingToExpire);
        }
        Planned::Commit(self.plan_lease_removal(live, DeleteReason::LeaseExpired))
    }

    fn plan_lease_removal(&self, leases: impl IntoIterator<Item = LeaseId>, reason: DeleteReason) -> Plan {
        let mut plan = Plan::default();
        for id in leases {
            for (key, instance) in self.lease_table().attached(id) {
                let fence = self
                    .service(key)
                    .and_then(|s| s.current.get(instance))
                    .map(|e| e.incarnation)
                    .expect("the lease index only names live endpoints");
                plan.deletes.push(Delete {
                    key: ServiceKey::clone(key),
                    instance: instance.clone(),
                    fence,
                    reason,
                });
            }
            plan.revoke.push(id);
        }
        plan
    }

    /// A new policy, validated. `None`: no policy was committed yet, so this one is adopted
    /// without a new revision. Otherwise committed at a new revision unless it is the one in
    /// force. Every branch depends only on committed state, never on the policy a replica
    /// was created with.
    pub(crate) fn plan_policy(&self, cmd: &SetPolicy) -> Result<Option<Planned>, Rejection> {
        cmd.policy.validate()?;
        if !self.policy_committed() {
            return Ok(None);
        }
        if cmd.initial {
            // A bootstrap proposal after a policy was committed: the committed one stands.
            return Ok(Some(unchanged(
                self.policy_revision(),
                None,
                Unchanged::AlreadyCommitted,
            )));
        }
        if &cmd.policy == self.policy() {
            return Ok(Some(unchanged(
                self.policy_revision(),
                None,
                Unchanged::AlreadyCommitted,
            )));
        }
        Ok(Some(Planned::Commit(Plan {
            policy: Some(Box::new(cmd.policy.clone())),
            ..Plan::default()
        })))
    }

    /// The live record of exactly the target's incarnation, or the refusal that explains why not.
    fn fenced_existing(&self, target: &Target, now_ms: u64) -> Result<&Arc<Endpoint>, Rejection> {
        check_incarnation(target)?;
        let service = self.service(&target.key);
        if let Some(current) = self.highest_incarnation(&target.key, &target.instance, now_ms)
            && target.incarnation < current
        {
            return Err(Rejection::StaleIncarnation {
                instance: target.instance.clone(),
                presented: target.incarnation,
                current,
            });
        }
        service
            .and_then(|s| s.current.get(&target.instance))
            .filter(|e| e.incarnation == target.incarnation)
            .ok_or_else(|| not_found(target))
    }

    /// A lease an endpoint of `key` may hold: its tenant's, and if bound to a service, that
    /// one (SPEC L4).
    fn lease_for(&self, key: &ServiceKey, id: LeaseId) -> Result<LeaseGrant, Rejection> {
        let grant = self.tenant_lease(&key.tenant, id)?;
        match self.lease_table().get(id).and_then(|lease| lease.service.as_ref()) {
            Some(owner) if owner != key => Err(Rejection::LeaseScopeMismatch {
                lease: id,
                key: Box::new(key.clone()),
            }),
            _ => Ok(grant),
        }
    }

    fn tenant_lease(&self, tenant: &Label, id: LeaseId) -> Result<LeaseGrant, Rejection> {
        match self.lease_table().get(id) {
            Some(lease) if &lease.tenant == tenant => Ok(LeaseGrant {
                id,
                ttl_ms: lease.ttl_ms,
            }),
            // Another tenant's lease is reported as missing: its existence is not ours to learn.
            _ => Err(Rejection::LeaseNotFound { lease: id }),
        }
    }

    fn check_ttl(&self, ttl_ms: u64) -> Result<(), Rejection> {
        let config = self.policy();
        if !(config.min_lease_ttl_ms..=config.max_lease_ttl_ms).contains(&ttl_ms) {
            return Err(Rejection::InvalidField {
                field: "ttl_ms".into(),
                reason: format!(
                    "must be {} to {} ms, got {ttl_ms}",
                    config.min_lease_ttl_ms, config.max_lease_ttl_ms
                ),
            });
        }
        Ok(())
    }

    fn check_size(&self, endpoint: &Endpoint) -> Result<(), Rejection> {
        let limit = self.policy().limits.max_record_bytes;
        let size = endpoint.size();
        if size > limit {
            return Err(Rejection::RecordTooLarge {
                field: "record bytes".into(),
                size,
                limit,
            });
        }
        Ok(())
    }

    fn check_quota_endpoints(&self, key: &ServiceKey, new_service: bool) -> Result<(), Rejection> {
        let quotas = &self.policy().quotas;
        let usage = self.usage(&key.tenant);
        let tenant = || format!("tenant '{}'", key.tenant);
        if new_service {
            self.check_quota_tenants(&key.tenant)?;
        }
        if new_service && usage.services >= quotas.services_per_tenant {
            return Err(Rejection::QuotaExceeded {
                quota: Quota::ServicesPerTenant,
                scope: tenant(),
                limit: quotas.services_per_tenant,
            });
        }
        if usage.endpoints >= quotas.endpoints_per_tenant {
            return Err(Rejection::QuotaExceeded {
                quota: Quota::EndpointsPerTenant,
                scope: tenant(),
                limit: quotas.endpoints_per_tenant,
            });
        }
        let in_service = self.service(key).map_or(0, |s| s.current.len() as u64);
        if in_service >= quotas.endpoints_per_service {
            return Err(Rejection::QuotaExceeded {
                quota: Quota::EndpointsPerService,
                scope: format!("service {key}"),
                limit: quotas.endpoints_per_service,
            });
        }
        Ok(())
    }

    /// A tenant that holds nothing yet may start to only while fewer than `max_tenants` do.
    fn check_quota_tenants(&self, tenant: &Label) -> Result<(), Rejection> {
        let limit = self.policy().quotas.max_tenants;
        if self.usage(tenant) == Usage::default() && self.tenant_count() as u64 >= limit {
            return Err(Rejection::QuotaExceeded {
                quota: Quota::MaxTenants,
                scope: "the registry".into(),
                limit,
            });
        }
        Ok(())
    }

    fn check_quota_leases(&self, tenant: &Label) -> Result<(), Rejection> {
        self.check_quota_tenants(tenant)?;
        let limit = self.policy().quotas.leases_per_tenant;
        if self.usage(tenant).leases >= limit {
            return Err(Rejection::QuotaExceeded {
                quota: Quota::LeasesPerTenant,
                scope: format!("tenant '{tenant}'"),
                limit,
            });
        }
        Ok(())
    }
}

/// Whether a record already holds exactly these registrant-controlled attributes.
fn has_attributes(endpoint: &Endpoint, attrs: &muster_core::Attributes) -> bool {
    endpoint.addresses == attrs.addresses
        && endpoint.ports == attrs.ports
        && endpoint.locality == attrs.locality
        && endpoint.weight == attrs.weight
        && endpoint.capacity == attrs.capacity
        && endpoint.labels == attrs.labels
        && endpoint.provenance.source_revision == attrs.source_revision
        && endpoint.checks == attrs.checks
}
