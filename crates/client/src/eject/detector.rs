//! The consecutive-failure detector: one record per instance, time as an input.

use std::collections::HashMap;
use std::collections::HashSet;
use std::sync::Arc;

use muster_core::{Incarnation, InstanceId};

use crate::balance::ConfigError;
use crate::eject::EjectionConfig;
use crate::member::Member;

/// Per-endpoint failure counters and ejections for one client (see the module docs).
#[derive(Debug, Clone)]
pub struct OutlierDetector {
    config: EjectionConfig,
    records: HashMap<InstanceId, Record>,
}

/// What the detector knows about one incarnation of an instance.
#[derive(Debug, Clone, Copy)]
struct Record {
    incarnation: Incarnation,
    consecutive_failures: u32,
    /// The ejection multiplier, before decay.
    times_ejected: u32,
    /// When the current (or last) ejection ends.
    ejected_until_ms: Option<u64>,
    /// When the endpoint last came back from an ejection: the decay runs from here.
    returned_at_ms: u64,
}

impl Record {
    fn new(incarnation: Incarnation) -> Record {
        Record {
            incarnation,
            consecutive_failures: 0,
            times_ejected: 0,
            ejected_until_ms: None,
            returned_at_ms: 0,
        }
    }

    fn ejected_at(&self, now_ms: u64) -> bool {
        self.ejected_until_ms.is_some_and(|until| now_ms < until)
    }

    /// Ends an ejection that has timed out: back in service with a clean failure count.
    fn settle(&mut self, now_ms: u64) {
        if let Some(until) = self.ejected_until_ms.filter(|&until| until <= now_ms) {
            self.ejected_until_ms = None;
            self.consecutive_failures = 0;
            self.returned_at_ms = until;
        }
    }
}

/// A running ejection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ejection {
    /// When the endpoint is back in the set.
    pub until_ms: u64,
    /// How many recent ejections this one makes (the duration multiplier).
    pub times_ejected: u32,
}

/// What one reported failure did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailureOutcome {
    /// Counted; not (yet) enough in a row.
    Counted {
        /// Failures in a row so far.
        consecutive_failures: u32,
    },
    /// The endpoint is now ejected: rebuild the eligible set.
    Ejected(Ejection),
    /// Enough in a row, but the cap on ejected endpoints is reached; a later failure retries.
    CapReached {
        /// Failures in a row so far.
        consecutive_failures: u32,
    },
    /// Already ejected (a request that started before the ejection failed late): ignored.
    AlreadyEjected(Ejection),
    /// About an older incarnation than the one recorded: ignored.
    Stale,
}

impl Default for OutlierDetector {
    /// A detector with the default (Envoy-like) settings.
    fn default() -> Self {
        OutlierDetector {
            config: EjectionConfig::default(),
            records: HashMap::new(),
        }
    }
}

impl OutlierDetector {
    /// A detector with `config`, if it can work.
    pub fn new(config: EjectionConfig) -> Result<OutlierDetector, ConfigError> {
        config.validate()?;
        Ok(OutlierDetector {
            config,
            records: HashMap::new(),
        })
    }

    /// The settings.
    pub fn config(&self) -> &EjectionConfig {
        &self.config
    }

    /// A request to `endpoint` succeeded: its run of failures is over.
    pub fn record_success(&mut self, endpoint: &Member, now_ms: u64) {
        if let Some(record) = self.records.get_mut(&endpoint.instance)
            && record.incarnation == endpoint.incarnation
        {
            record.settle(now_ms);
            if !record.ejected_at(now_ms) {
                record.consecutive_failures = 0;
            }
        }
    }

    /// A request to `endpoint` failed (connection refused, timeout, reset, ...). `known` is
    /// the number of known endpoints of the service, for the cap on ejected endpoints.
    pub fn record_failure(&mut self, endpoint: &Member, known: usize, now_ms: u64) -> FailureOutcome {
        let limit = self.config.ejection_limit(known);
        let ejected_now = self.ejected_count(now_ms);
        let config = self.config;
        let record = self
            .records
            .entry(endpoint.instance.clone())
            .or_insert_with(|| Record::new(endpoint.incarnation));
        if endpoint.incarnation < record.incarnation {
            return FailureOutcome::Stale;
        }
        if endpoint.incarnation > record.incarnation {
            *record = Record::new(endpoint.incarnation);
        }
        record.settle(now_ms);
        if let Some(until_ms) = record.ejected_until_ms {
            return FailureOutcome::AlreadyEjected(Ejection {
                until_ms,
                times_ejected: record.times_ejected,
            });
        }
        record.consecutive_failures = record.consecutive_failures.saturating_add(1);
        let consecutive_failures = record.consecutive_failures;
        if consecutive_failures < config.consecutive_failures {
            return FailureOutcome::Counted { consecutive_failures };
        }
        if ejected_now >= limit {
            return FailureOutcome::CapReached { consecutive_failures };
        }
        // Decay: one step back per base period spent in service since the last return.
        let in_service = now_ms.saturating_sub(record.returned_at_ms);
        let decay = u32::try_from(in_service / config.base_ejection_ms).unwrap_or(u32::MAX);
        let times_ejected = record.times_ejected.saturating_sub(decay).saturating_add(1);
        let duration = config
            .base_ejection_ms
            .saturating_mul(u64::from(times_ejected))
            .min(config.max_ejection_ms);
        let until_ms = now_ms.saturating_add(duration);
        record.times_ejected = times_ejected;
        record.ejected_until_ms = Some(until_ms);
        FailureOutcome::Ejected(Ejection {
            until_ms,
            times_ejected,
        })
    }

    /// Whether this client has ejected `endpoint` (this incarnation) as of `now_ms`.
    pub fn is_ejected(&self, endpoint: &Member, now_ms: u64) -> bool {
        self.ejection(endpoint, now_ms).is_some()
    }

    /// The running ejection of `endpoint` (this incarnation), if any.
    pub fn ejection(&self, endpoint: &Member, now_ms: u64) -> Option<Ejection> {
        let record = self.records.get(&endpoint.instance)?;
        if record.incarnation != endpoint.incarnation || !record.ejected_at(now_ms) {
            return None;
        }
        Some(Ejection {
            until_ms: record.ejected_until_ms?,
            times_ejected: record.times_ejected,
        })
    }

    /// How many endpoints are ejected as of `now_ms`.
    pub fn ejected_count(&self, now_ms: u64) -> usize {
        self.records.values().filter(|record| record.ejected_at(now_ms)).count()
    }

    /// When the next running ejection ends: the caller rebuilds its eligible set then.
    pub fn next_return_ms(&self, now_ms: u64) -> Option<u64> {
        self.records
            .values()
            .filter_map(|record| record.ejected_until_ms)
            .filter(|&until| now_ms < until)
            .min()
    }

    /// Drops what is no longer worth keeping, given the current `view`: counters of instances
    /// that left it and are not ejected, and records of incarnations the view has replaced
    /// (unless ejected: an ejection always runs its course). Ejections themselves stay.
    pub fn forget_departed<'a>(&mut self, view: impl IntoIterator<Item = &'a Arc<Member>>, now_ms: u64) {
        let present: HashSet<(&InstanceId, Incarnation)> = view
            .into_iter()
            .map(|endpoint| (&endpoint.instance, endpoint.incarnation))
            .collect();
        self.records
            .retain(|instance, record| record.ejected_at(now_ms) || present.contains(&(instance, record.incarnation)));
    }

    /// How many instances the detector holds a record for.
    pub fn tracked(&self) -> usize {
        self.records.len()
    }
}

#[cfg(test)]
#[path = "detector_tests.rs"]
mod tests;
