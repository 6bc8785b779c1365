//! The `xds` workload (opt-in; SPEC D5, "Performance"): N ADS streams subscribed to one
//! service, then K endpoint changes, and how fast each change reaches every stream and comes
//! back acknowledged.
//!
//! ```text
//!  register one endpoint of service `xds` (tenant bench-<run>, namespace bench)
//!  RSS before ──▶ open --xds-streams SotW ADS streams (EDS `xds.bench`, node metadata tenant)
//!                 each on its own HTTP/2 connection unless --xds-connections says fewer;
//!                 every stream ACKs every response
//!            ──▶ all got their first assignment, settle ──▶ RSS after: (after − before) ÷ N
//!  each change k of --changes, one every CHANGE_INTERVAL at the earliest:
//!    t0 = write sent; register instance x-k → revision R (its reply at t1)
//!    every stream: the response with version_info ≥ R at t ──▶ commit-to-push t − t0
//!    then GET /v1/xds/clients until every stream's acked_revision ≥ R; each stream's ACK
//!    at (reply received − age_ms) ──▶ commit-to-ACK as the server saw it; the last one is
//!    the change's all-acked time
//! ```
//! The fan-out alone is each change's first push → every stream's push: the first push comes
//! at about the commit (pushes often beat the write's own reply), so it is commit-to-push
//! without the commit's fsync.
//!
//! Latencies run from the instant the write was *sent* (as the fanout workload's do): the
//! write's own commit time is inside every figure, and reported apart (`reply_ms`). An ACK's
//! instant comes from the server's own ledger (`age_ms`, milliseconds since that ACK) read
//! against the instant its reply arrived, so it is an upper bound, by at most the read's
//! own duration plus a millisecond of rounding, and independent of how often the bench polls.
//!
//! This module is the pure half (figures and their summary); the streams live in `ads`,
//! built with the `xds` feature only (the Envoy protobuf types are large).

use serde::Serialize;

use crate::histogram::Histogram;
use crate::report::LatencySummary;

#[cfg(feature = "xds")]
mod ads;
#[cfg(feature = "xds")]
pub(crate) use ads::xds;

/// What one change measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct XdsChange {
    /// The write's revision, the version every stream should receive.
    pub revision: u64,
    /// Write sent → its HTTP reply, in milliseconds.
    pub reply_ms: f64,
    /// Streams that received that version (or a later one) within the delivery bound.
    pub pushed: u64,
    /// Write sent → each stream's push.
    pub push: Option<LatencySummary>,
    /// Write sent → each stream's ACK, as the server's ledger recorded it.
    pub ack: Option<LatencySummary>,
    /// Write sent → the last stream's ACK (every stream acknowledged `revision`); `None` when
    /// some stream did not within the bound.
    pub all_acked_ms: Option<f64>,
}

/// What the xds workload measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct XdsSummary {
    /// Streams asked for.
    pub streams: u64,
    /// Streams that got their first assignment.
    pub opened: u64,
    /// HTTP/2 connections they ran over.
    pub connections: u64,
    /// Per change, in order.
    pub changes: Vec<XdsChange>,
    /// Commit-to-push over every stream and change.
    pub push: Option<LatencySummary>,
    /// The fan-out alone: each change's first push → each stream's push, over every stream
    /// and change (the write's own commit time left out).
    pub fanout: Option<LatencySummary>,
    /// Commit-to-ACK (server's ledger) over every stream and change.
    pub ack: Option<LatencySummary>,
    /// The median of the changes' all-acked times.
    pub median_all_acked_ms: Option<f64>,
    /// The largest all-acked time.
    pub max_all_acked_ms: Option<f64>,
    /// Pushes expected (opened × changes) that did not arrive in time.
    pub missed_pushes: u64,
    /// Changes that not every stream acknowledged in time.
    pub changes_not_all_acked: u64,
    /// Server RSS before opening the streams.
    pub rss_before_bytes: Option<u64>,
    /// Server RSS with every stream open and idle.
    pub rss_after_bytes: Option<u64>,
    /// (after − before) ÷ opened, in KiB.
    pub kib_per_stream: Option<f64>,
}

/// The raw figures of one change, before summarising.
#[cfg_attr(
    not(feature = "xds"),
    allow(dead_code, reason = "only the `xds` feature's streams make them")
)]
#[derive(Debug, Default)]
pub(crate) struct ChangeFigures {
    pub(crate) revision: u64,
    pub(crate) reply_ms: f64,
    pub(crate) push: Histogram,
    /// First stream's push → each stream's push.
    pub(crate) fanout: Histogram,
    pub(crate) ack: Histogram,
    /// Whether every open stream's ACK was seen.
    pub(crate) all_acked: bool,
}

#[cfg_attr(
    not(feature = "xds"),
    allow(dead_code, reason = "only the `xds` feature's streams make them")
)]
impl XdsSummary {
    /// Summarises the changes of a run with `opened` of `streams` streams over `connections`.
    pub(crate) fn new(
        streams: u64,
        opened: u64,
        connections: u64,
        changes: &[ChangeFigures],
        rss: Option<(u64, u64)>,
    ) -> XdsSummary {
        let (mut push, mut ack, mut fanout) = (Histogram::new(), Histogram::new(), Histogram::new());
        let mut all_acked = Vec::new();
        let mut per_change = Vec::with_capacity(changes.len());
        for change in changes {
            push.merge(&change.push);
            fanout.merge(&change.fanout);
            ack.merge(&change.ack);
            let all = (change.all_acked && change.ack.count() > 0)
                .then(|| change.ack.max())
                .flatten()
                .map(|d| d.as_secs_f64() * 1_000.0);
            all_acked.extend(all);
            per_change.push(XdsChange {
                revision: change.revision,
                reply_ms: change.reply_ms,
                pushed: change.push.count(),
                push: LatencySummary::of(&change.push),
                ack: LatencySummary::of(&change.ack),
                all_acked_ms: all,
            });
        }
        let expected = opened * changes.len() as u64;
        XdsSummary {
            streams,
            opened,
            connections,
            push: LatencySummary::of(&push),
            fanout: LatencySummary::of(&fanout),
            ack: LatencySummary::of(&ack),
            median_all_acked_ms: crate::consul::median(&all_acked),
            max_all_acked_ms: all_acked.iter().copied().reduce(f64::max),
            missed_pushes: expected.saturating_sub(push.count()),
            changes_not_all_acked: changes.len() as u64 - all_acked.len() as u64,
            rss_before_bytes: rss.map(|(before, _)| before),
            rss_after_bytes: rss.map(|(_, after)| after),
            kib_per_stream: rss
                .filter(|_| opened > 0)
                .map(|(before, after)| after.saturating_sub(before) as f64 / opened as f64 / 1024.0),
            changes: per_change,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn change(revision: u64, push_ms: &[u64], ack_ms: &[u64], all_acked: bool) -> ChangeFigures {
        let mut figures = ChangeFigures {
            revision,
            reply_ms: 1.0,
            all_acked,
            ..ChangeFigures::default()
        };
        for ms in push_ms {
            figures.push.record(Duration::from_millis(*ms));
        }
        for ms in ack_ms {
            figures.ack.record(Duration::from_millis(*ms));
        }
        figures
    }

    #[test]
    fn the_all_acked_time_of_a_change_is_its_last_ack_and_missing_pushes_are_counted() {
        let changes = [
            change(10, &[2, 3, 4], &[5, 6, 20], true),
            change(11, &[2, 3], &[5, 6], false),
        ];
        let summary = XdsSummary::new(3, 3, 3, &changes, Some((100 << 20, 103 << 20)));
        assert_eq!(summary.missed_pushes, 1, "6 expected, 5 arrived");
        assert_eq!(summary.changes_not_all_acked, 1);
        let first = summary.changes[0].all_acked_ms.unwrap();
        assert!((19.0..=21.0).contains(&first), "{first}");
        assert_eq!(summary.changes[1].all_acked_ms, None);
        assert_eq!(summary.median_all_acked_ms, Some(first));
        assert_eq!(summary.kib_per_stream, Some(1024.0), "3 MiB over 3 streams");
        assert_eq!(summary.changes[0].pushed, 3);
    }

    #[test]
    fn memory_shrinking_is_zero_per_stream_and_no_streams_is_no_figure() {
        let summary = XdsSummary::new(10, 10, 1, &[], Some((200, 100)));
        assert_eq!(summary.kib_per_stream, Some(0.0));
        let summary = XdsSummary::new(10, 0, 0, &[], Some((100, 200)));
        assert_eq!(summary.kib_per_stream, None);
        assert_eq!(summary.median_all_acked_ms, None);
    }
}
