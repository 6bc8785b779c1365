//! [`Ledger`]: subscribers and changes per service.

use std::collections::{BTreeSet, HashMap, VecDeque};

use muster_core::convergence::{ClientId, Cohort, ConvergenceReply, ConvergenceReport, DeliveryPath};
use muster_core::{Label, Revision, ServiceKey};

use crate::summary;

/// The ledger's bounds and timeouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LedgerConfig {
    /// A subscriber that has not reported for this long stops counting as live. 30 s: three
    /// missed keep-alives at the default `report_every_ms`.
    pub silent_after_ms: u64,
    /// A silent subscriber is forgotten after this long. 10 min keeps a crashed client
    /// visible through a deploy's investigation without keeping every pod ever seen.
    pub forget_after_ms: u64,
    /// How often a client reports while nothing changes (told to it in every reply).
    pub report_every_ms: u64,
    /// Subscribers tracked in all (one per client and service): about 200 bytes each, so
    /// the default 250,000 is ~50 MB at most.
    pub max_subscribers: usize,
    /// Subscribers tracked for the services of one tenant (SPEC O3, S3): a caller can make up
    /// client ids, so without a bound of its own one tenant's reports (or its xDS clients'
    /// ACKs) could take the whole of `max_subscribers` and leave every other tenant's
    /// subscribers refused. 50,000 (~10 MB) is 5,000 clients following 10 services each,
    /// and a fifth of the default `max_subscribers`, so five tenants at their bound still fit.
    pub max_subscribers_per_tenant: usize,
    /// Distinct cohorts per service: cohorts are few by design (zones, versions); a label
    /// per client would be an unbounded series.
    pub max_cohorts: usize,
    /// Changes kept per service for the latency distribution.
    pub changes_kept: usize,
}

impl Default for LedgerConfig {
    fn default() -> Self {
        LedgerConfig {
            silent_after_ms: 30_000,
            forget_after_ms: 600_000,
            report_every_ms: 10_000,
            max_subscribers: 250_000,
            max_subscribers_per_tenant: 50_000,
            max_cohorts: 64,
            changes_kept: 16,
        }
    }
}

/// Samples one change keeps: more than any one service's subscribers in practice (the
/// `max_subscribers` bound is per server), and 400 KB at most.
pub const MAX_SAMPLES_PER_CHANGE: usize = 100_000;

/// What a summary is asked about.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Query {
    /// The revision subscribers should have applied (none: the service's last change).
    pub target: Option<Revision>,
    /// Only this cohort's subscribers.
    pub cohort: Option<Cohort>,
    /// The fraction of live subscribers that must have applied the target (none: all).
    pub fraction: Option<f64>,
}

/// Why a report was refused; it changed nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    /// More services than one report may carry.
    #[error("a report carries at most {max} services, this one {got}")]
    TooManyServices {
        /// The bound.
        max: usize,
        /// What came.
        got: usize,
    },
    /// The ledger tracks as many subscribers as it may.
    #[error("the server already tracks {max} subscribers; this report would add more")]
    TooManySubscribers {
        /// The bound.
        max: usize,
    },
    /// The ledger tracks as many subscribers of one tenant's services as it may.
    #[error(
        "tenant {tenant} already has {max} subscribers tracked, the most one tenant may; this report would add more"
    )]
    TooManySubscribersInTenant {
        /// The tenant.
        tenant: String,
        /// The bound.
        max: usize,
    },
    /// The service already has as many cohorts as it may.
    #[error("service {service} already counts {max} cohorts; cohort '{cohort}' would be one more")]
    TooManyCohorts {
        /// The service.
        service: String,
        /// The new cohort.
        cohort: String,
        /// The bound.
        max: usize,
    },
}

/// What a report did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReportOutcome {
    /// Entries recorded.
    pub accepted: usize,
    /// The commit→applied latencies (ms) it measured, for the metrics.
    pub latencies_ms: Vec<u64>,
}

/// Aggregates over every service, for the metrics (no client ids). The DNS listener is not
/// among them: it routes nobody.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Services with subscribers.
    pub services: usize,
    /// Live subscribers.
    pub live: usize,
    /// Live subscribers behind their service's last change.
    pub behind: usize,
    /// Silent subscribers not yet forgotten.
    pub silent: usize,
}

#[derive(Debug, Clone)]
pub(crate) struct Subscriber {
    pub(crate) cohort: Option<Cohort>,
    pub(crate) path: DeliveryPath,
    pub(crate) revision: Revision,
    /// The highest revision it ever reported: a change below it was measured already.
    pub(crate) highest: Revision,
    pub(crate) last_report_ms: u64,
}

impl Subscriber {
    /// How long it has not reported. The DNS listener lives in the server itself: it is
    /// live as long as the server is, and never reports while nothing changes.
    pub(crate) fn quiet_ms(&self, now_ms: u64) -> u64 {
        match self.path {
            DeliveryPath::Dns => 0,
            DeliveryPath::Watch | DeliveryPath::Xds => now_ms.saturating_sub(self.last_report_ms),
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Change {
    pub(crate) revision: Revision,
    pub(crate) committed_ms: u64,
    /// Commit→applied latencies (ms), one per subscriber that passed this change.
    pub(crate) samples: Vec<u32>,
}

/// A subscriber: one client over one delivery path (SPEC O3). The same client id over
/// another path is another subscriber, so no report moves a subscriber between the counted
/// paths and the DNS listener's, which is not counted.
pub(crate) type SubscriberId = (ClientId, DeliveryPath);

/// Whether subscribers over `path` count against the bounds: every path but the DNS
/// listener's (one per server, in the server itself).
fn counted(path: DeliveryPath) -> bool {
    path != DeliveryPath::Dns
}

#[derive(Debug, Default, Clone)]
pub(crate) struct ServiceLedger {
    pub(crate) subscribers: HashMap<SubscriberId, Subscriber>,
    /// Oldest first.
    pub(crate) changes: VecDeque<Change>,
}

impl ServiceLedger {
    fn cohorts(&self) -> BTreeSet<&Cohort> {
        self.subscribers.values().filter_map(|s| s.cohort.as_ref()).collect()
    }
}

/// One service's part of a [`Ledger`], copied out ([`Ledger::copy`]).
#[derive(Debug, Clone)]
pub struct ServiceCopy {
    config: LedgerConfig,
    key: ServiceKey,
    ledger: Option<ServiceLedger>,
}

impl ServiceCopy {
    /// What [`Ledger::summary`] would have said when the copy was taken.
    pub fn summary(&self, current: Revision, query: &Query, now_ms: u64) -> ConvergenceReply {
        summary::reply(&self.config, &self.key, self.ledger.as_ref(), current, query, now_ms)
    }
}

/// How many counted subscribers there are, in all (against `max_subscribers`) and per
/// tenant (against `max_subscribers_per_tenant`). It changes only where a counted
/// subscriber enters or leaves a service's map, one for one, so it is the size of that set
/// by construction; a model-based test checks it.
#[derive(Debug, Default)]
struct Census {
    all: usize,
    /// A tenant with none is absent.
    per_tenant: HashMap<Label, usize>,
}

impl Census {
    fn added(&mut self, tenant: &Label) {
        self.all += 1;
        *self.per_tenant.entry(tenant.clone()).or_default() += 1;
    }

    /// `n` counted subscribers of `tenant`'s services were forgotten.
    fn forgotten(&mut self, tenant: &Label, n: usize) {
        if n == 0 {
            return;
        }
        debug_assert!(n <= self.all, "forgetting {n} of {} counted subscribers", self.all);
        self.all = self.all.saturating_sub(n);
        if let Some(count) = self.per_tenant.get_mut(tenant) {
            debug_assert!(n <= *count, "forgetting {n} of {count} subscribers of {tenant}");
            *count = count.saturating_sub(n);
            if *count == 0 {
                self.per_tenant.remove(tenant);
            }
        }
    }

    fn of(&self, tenant: &Label) -> usize {
        self.per_tenant.get(tenant).copied().unwrap_or(0)
    }
}

/// Subscribers and changes per service. See the crate docs.
#[derive(Debug, Default)]
pub struct Ledger {
    config: LedgerConfig,
    services: HashMap<ServiceKey, ServiceLedger>,
    /// The counted subscribers (the DNS listener is not).
    census: Census,
}

impl Ledger {
    /// An empty ledger.
    pub fn new(config: LedgerConfig) -> Ledger {
        Ledger {
            config,
            ..Ledger::default()
        }
    }

    /// The bounds and timeouts.
    pub fn config(&self) -> &LedgerConfig {
        &self.config
    }

    /// This node applied a change of `key` at `revision`. Only services with subscribers
    /// keep it: the others have nobody to measure.
    pub fn changed(&mut self, key: &ServiceKey, revision: Revision, now_ms: u64) {
        let Some(service) = self.services.get_mut(key) else {
            return;
        };
        if service.changes.back().is_some_and(|last| last.revision >= revision) {
            return;
        }
        service.changes.push_back(Change {
            revision,
            committed_ms: now_ms,
            samples: Vec::new(),
        });
        while service.changes.len() > self.config.changes_kept {
            service.changes.pop_front();
        }
    }

    /// Records what one client applied over `path`. Refused whole (changing nothing) past
    /// a bound.
    ///
    /// A client's word is taken with three limits: a `received_unix_ms` in the future counts
    /// as now, a change is measured only the first time the client's revision passes it
    /// (a client going back and forth adds nothing), and a change keeps at most
    /// [`MAX_SAMPLES_PER_CHANGE`] samples.
    pub fn report(
        &mut self,
        path: DeliveryPath,
        report: &ConvergenceReport,
        now_ms: u64,
    ) -> Result<ReportOutcome, ReportError> {
        self.admit(path, report)?;
        let mut outcome = ReportOutcome::default();
        let id: SubscriberId = (report.client_id.clone(), path);
        for entry in &report.applied {
            let service = self.services.entry(entry.service.clone()).or_default();
            let previous = service.subscribers.get(&id).map(|s| s.highest);
            if previous.is_none() && counted(path) {
                self.census.added(&entry.service.tenant);
            }
            let received = entry.received_unix_ms.min(now_ms);
            // The DNS listener applies at commit by construction (the live zone folds a
            // change in at its next query): its zero latencies would only dilute the
            // clients'. The time to a changed DNS answer is measured from outside.
            if let Some(previous) = previous.filter(|_| path != DeliveryPath::Dns) {
                for change in service.changes.iter_mut() {
                    if previous < change.revision
                        && change.revision <= entry.revision
                        && change.samples.len() < MAX_SAMPLES_PER_CHANGE
                    {
                        let latency = received.saturating_sub(change.committed_ms);
                        change.samples.push(u32::try_from(latency).unwrap_or(u32::MAX));
                        outcome.latencies_ms.push(latency);
                    }
                }
            }
            service.subscribers.insert(
                id.clone(),
                Subscriber {
                    cohort: report.cohort.clone(),
                    path,
                    revision: entry.revision,
                    highest: previous.map_or(entry.revision, |p| p.max(entry.revision)),
                    last_report_ms: now_ms,
                },
            );
            outcome.accepted += 1;
        }
        Ok(outcome)
    }

    /// Checks a report against the bounds before anything is recorded. The DNS listener, one
    /// per server, is not counted against `max_subscribers` nor its tenant's bound.
    fn admit(&self, path: DeliveryPath, report: &ConvergenceReport) -> Result<(), ReportError> {
        let got = report.applied.len();
        if got > ConvergenceReport::MAX_SERVICES {
            return Err(ReportError::TooManyServices {
                max: ConvergenceReport::MAX_SERVICES,
                got,
            });
        }
        // The tenant of each subscriber the report would add.
        let id: SubscriberId = (report.client_id.clone(), path);
        let mut new: Vec<&Label> = Vec::new();
        for entry in &report.applied {
            let Some(service) = self.services.get(&entry.service) else {
                new.push(&entry.service.tenant);
                continue;
            };
            let known = service.subscribers.get(&id);
            if known.is_none() {
                new.push(&entry.service.tenant);
            }
            // Only a cohort new to this subscriber can be one too many: the common report
            // (same client, same cohort) costs no walk over the service's subscribers.
            if known.is_some_and(|s| s.cohort == report.cohort) {
                continue;
            }
            if let Some(cohort) = &report.cohort {
                let cohorts = service.cohorts();
                if !cohorts.contains(cohort) && cohorts.len() >= self.config.max_cohorts {
                    return Err(ReportError::TooManyCohorts {
                        service: entry.service.to_string(),
                        cohort: cohort.to_string(),
                        max: self.config.max_cohorts,
                    });
                }
            }
        }
        if !counted(path) {
            return Ok(());
        }
        // The tenant's own bound first: a tenant at it is told so, and what it would add
        // never reaches the bound every tenant shares (SPEC O3, S3). A report names a few
        // tenants at most (most name one), so counting them is a short walk.
        let max = self.config.max_subscribers_per_tenant;
        for (i, tenant) in new.iter().enumerate() {
            if new[..i].contains(tenant) {
                continue;
            }
            let adding = new[i..].iter().filter(|t| *t == tenant).count();
            if self.census.of(tenant) + adding > max {
                return Err(ReportError::TooManySubscribersInTenant {
                    tenant: tenant.to_string(),
                    max,
                });
            }
        }
        if self.census.all + new.len() > self.config.max_subscribers {
            return Err(ReportError::TooManySubscribers {
                max: self.config.max_subscribers,
            });
        }
        Ok(())
    }

    /// `key` was released (unknown from now on): the DNS listener no longer answers for it.
    /// Its clients' records stay until they stop reporting it.
    pub fn released(&mut self, key: &ServiceKey) {
        if let Some(service) = self.services.get_mut(key) {
            // Only the DNS listener's records go, and they were never counted.
            service.subscribers.retain(|(_, path), _| counted(*path));
            if service.subscribers.is_empty() {
                self.services.remove(key);
            }
        }
    }

    /// `client` is still connected over `path` and following `keys` (an xDS stream, which has
    /// nothing to say between changes): it counts as having just reported them.
    pub fn touch<'k>(
        &mut self,
        client: &ClientId,
        path: DeliveryPath,
        keys: impl IntoIterator<Item = &'k ServiceKey>,
        now_ms: u64,
    ) {
        let id: SubscriberId = (client.clone(), path);
        for key in keys {
            if let Some(subscriber) = self.services.get_mut(key).and_then(|s| s.subscribers.get_mut(&id)) {
                subscriber.last_report_ms = now_ms;
            }
        }
    }

    /// Whether anything is known of `key`'s subscribers.
    pub fn tracks(&self, key: &ServiceKey) -> bool {
        self.services.contains_key(key)
    }

    /// Forgets subscribers silent past `forget_after_ms`, and services left without any.
    pub fn sweep(&mut self, now_ms: u64) {
        let forget_after = self.config.forget_after_ms;
        let census = &mut self.census;
        self.services.retain(|key, service| {
            let mut forgotten = 0;
            service.subscribers.retain(|(_, path), s| {
                let keep = s.quiet_ms(now_ms) < forget_after;
                // Only what was counted is uncounted: the DNS listener never was.
                forgotten += usize::from(!keep && counted(*path));
                keep
            });
            census.forgotten(&key.tenant, forgotten);
            !service.subscribers.is_empty()
        });
    }

    /// Everything known about `key`'s subscribers, against `query`; `current` is the
    /// service's last change as the registry has it (the default target).
    pub fn summary(&self, key: &ServiceKey, current: Revision, query: &Query, now_ms: u64) -> ConvergenceReply {
        summary::reply(&self.config, key, self.services.get(key), current, query, now_ms)
    }

    /// A copy of `key`'s part of the ledger, to summarise after letting go of the ledger:
    /// copying is a memcpy of its subscribers and samples, while a summary sorts every
    /// sample and formats every straggler (milliseconds at 10,000 subscribers).
    pub fn copy(&self, key: &ServiceKey) -> ServiceCopy {
        ServiceCopy {
            config: self.config,
            key: key.clone(),
            ledger: self.services.get(key).cloned(),
        }
    }

    /// Aggregates for the metrics; `current` gives each service's last change.
    pub fn totals(&self, now_ms: u64, current: impl Fn(&ServiceKey) -> Option<Revision>) -> Totals {
        let mut totals = Totals {
            services: self.services.len(),
            ..Totals::default()
        };
        for (key, service) in &self.services {
            let last = current(key).or(service.changes.back().map(|c| c.revision));
            for subscriber in service.subscribers.values().filter(|s| s.path != DeliveryPath::Dns) {
                if subscriber.quiet_ms(now_ms) >= self.config.silent_after_ms {
                    totals.silent += 1;
                    continue;
                }
                totals.live += 1;
                if last.is_some_and(|last| subscriber.revision < last) {
                    totals.behind += 1;
                }
            }
        }
        totals
    }
}

#[cfg(test)]
#[path = "ledger_tests.rs"]
mod tests;
