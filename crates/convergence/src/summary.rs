//! A service's [`ConvergenceReply`], read from its ledger.

use std::collections::BTreeMap;

use muster_core::convergence::{
    ChangeSummary, ConvergenceReply, DeliveryPath, GroupCount, LatencyBucket, LatencySummary, PathCount, RevisionCount,
    SilentClient, Straggler,
};
use muster_core::{Revision, ServiceKey};

use crate::ledger::{LedgerConfig, Query, ServiceLedger};

/// The histogram's upper bounds (ms): a 1-2-5 series from a loopback delivery (about a
/// millisecond) to a client that took half a minute; slower ones land in the last, unbounded
/// bucket.
pub const BUCKET_BOUNDS_MS: [u64; 14] = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 30_000];

/// Stragglers and silent clients listed in a reply (all are counted): enough to act on, and
/// a reply stays small at 10,000 subscribers.
const LISTED: usize = 100;

/// Percentiles (nearest rank) and the histogram of `samples`.
pub fn latency_summary(samples: &mut [u32]) -> LatencySummary {
    if samples.is_empty() {
        return LatencySummary {
            buckets: buckets(samples),
            ..LatencySummary::default()
        };
    }
    samples.sort_unstable();
    let rank = |q: f64| {
        let index = ((q * samples.len() as f64).ceil() as usize).clamp(1, samples.len()) - 1;
        u64::from(samples[index])
    };
    LatencySummary {
        samples: samples.len(),
        p50_ms: rank(0.50),
        p90_ms: rank(0.90),
        p99_ms: rank(0.99),
        p999_ms: rank(0.999),
        max_ms: u64::from(samples[samples.len() - 1]),
        buckets: buckets(samples),
    }
}

fn buckets(samples: &[u32]) -> Vec<LatencyBucket> {
    let mut counts = vec![0usize; BUCKET_BOUNDS_MS.len() + 1];
    for &sample in samples {
        let index = BUCKET_BOUNDS_MS.partition_point(|&bound| bound < u64::from(sample));
        counts[index] += 1;
    }
    counts
        .into_iter()
        .enumerate()
        .map(|(i, count)| LatencyBucket {
            le_ms: BUCKET_BOUNDS_MS.get(i).copied(),
            count,
        })
        .collect()
}

/// How many of `live` subscribers a `fraction` asks for: the smallest count whose share is
/// at least the fraction. The float product is rounded off by a millionth first, so that
/// 0.07 × 100 asks for 7, not 8.
pub fn needed(fraction: f64, live: usize) -> usize {
    let exact = fraction * live as f64;
    (exact - 1e-6).ceil().max(0.0) as usize
}

/// Live and applied subscribers.
#[derive(Default, Clone, Copy)]
struct Count {
    live: usize,
    applied: usize,
}

pub(crate) fn reply(
    config: &LedgerConfig,
    key: &ServiceKey,
    ledger: Option<&ServiceLedger>,
    current: Revision,
    query: &Query,
    now_ms: u64,
) -> ConvergenceReply {
    let target = query.target.unwrap_or(current);
    let fraction = query.fraction.unwrap_or(1.0);
    let empty = ServiceLedger::default();
    let ledger = ledger.unwrap_or(&empty);
    let (mut total, mut cohorts, mut paths) = (Count::default(), BTreeMap::new(), BTreeMap::new());
    let mut by_revision: BTreeMap<Revision, usize> = BTreeMap::new();
    let (mut stragglers, mut silent) = (Vec::new(), Vec::new());
    for (id, subscriber) in &ledger.subscribers {
        if query
            .cohort
            .as_ref()
            .is_some_and(|c| subscriber.cohort.as_ref() != Some(c))
        {
            continue;
        }
        // The DNS listener is shown by its path only: it applies at commit, and counting it
        // would let a service that no client follows look converged.
        if subscriber.path == DeliveryPath::Dns {
            let count = paths.entry(subscriber.path).or_insert_with(Count::default);
            count.live += 1;
            count.applied += usize::from(subscriber.revision >= target);
            continue;
        }
        let quiet_ms = subscriber.quiet_ms(now_ms);
        if quiet_ms >= config.silent_after_ms {
            silent.push(SilentClient {
                client_id: id.0.to_string(),
                cohort: subscriber.cohort.as_ref().map(ToString::to_string),
                path: subscriber.path,
                revision: subscriber.revision,
                silent_ms: quiet_ms,
            });
            continue;
        }
        let applied = subscriber.revision >= target;
        for count in [
            &mut total,
            cohorts.entry(subscriber.cohort.as_ref()).or_insert_with(Count::default),
            paths.entry(subscriber.path).or_insert_with(Count::default),
        ] {
            count.live += 1;
            count.applied += usize::from(applied);
        }
        *by_revision.entry(subscriber.revision).or_default() += 1;
        if !applied {
            // Behind since the first change it lacks was committed.
            let lacking = ledger.changes.iter().find(|c| c.revision > subscriber.revision);
            stragglers.push(Straggler {
                client_id: id.0.to_string(),
                cohort: subscriber.cohort.as_ref().map(ToString::to_string),
                path: subscriber.path,
                revision: subscriber.revision,
                behind_ms: lacking.map_or(0, |c| now_ms.saturating_sub(c.committed_ms)),
                last_report_ms: quiet_ms,
            });
        }
    }
    let (stragglers_total, silent_total) = (stragglers.len(), silent.len());
    stragglers.sort_by(|a, b| b.behind_ms.cmp(&a.behind_ms).then(a.client_id.cmp(&b.client_id)));
    stragglers.truncate(LISTED);
    silent.sort_by(|a, b| a.silent_ms.cmp(&b.silent_ms).then(a.client_id.cmp(&b.client_id)));
    silent.truncate(LISTED);
    let needed = needed(fraction, total.live);
    let mut all_samples: Vec<u32> = ledger.changes.iter().flat_map(|c| c.samples.iter().copied()).collect();
    ConvergenceReply {
        service: key.clone(),
        revision: current,
        target,
        cohort: query.cohort.as_ref().map(ToString::to_string),
        fraction,
        live: total.live,
        applied: total.applied,
        needed,
        converged: total.applied >= needed,
        cohorts: cohorts
            .into_iter()
            .map(|(cohort, count)| GroupCount {
                cohort: cohort.map(ToString::to_string),
                live: count.live,
                applied: count.applied,
            })
            .collect(),
        paths: paths
            .into_iter()
            .map(|(path, count): (DeliveryPath, Count)| PathCount {
                path,
                live: count.live,
                applied: count.applied,
            })
            .collect(),
        by_revision: by_revision
            .into_iter()
            .rev()
            .map(|(revision, subscribers)| RevisionCount { revision, subscribers })
            .collect(),
        latency: latency_summary(&mut all_samples),
        changes: ledger
            .changes
            .iter()
            .rev()
            .map(|change| {
                let mut samples = change.samples.clone();
                let latency = latency_summary(&mut samples);
                ChangeSummary {
                    revision: change.revision,
                    committed_unix_ms: change.committed_ms,
                    applied: latency.samples,
                    p50_ms: latency.p50_ms,
                    p99_ms: latency.p99_ms,
                }
            })
            .collect(),
        stragglers,
        stragglers_total,
        silent,
        silent_total,
        silent_after_ms: config.silent_after_ms,
        unix_ms: now_ms,
    }
}
