//! The `convergence` workload (opt-in; SPEC O3): a fleet of real muster-client resolvers of
//! one service, each its own `Client` reporting what it applied, then endpoint changes one at
//! a time: the server's commit→applied distribution, and commit→DNS-answer from a probe.
//!
//! ```text
//!  register c-0 of service conv-<run> (tenant `default`, the DNS listener's; namespace bench)
//!  open --watchers Resolvers (≤ OPEN_CONCURRENCY at once), client i: id bench-i, cohort
//!    zone=a / zone=b alternating, its own Client: a watch connection and a report connection
//!    ──▶ each has a first view ──▶ GET /v1/convergence/...: watch subscribers live == opened
//!  each change k of --changes (at most MAX_CHANGES), one at a time:
//!    register c-k with IP 10.77.k/256.k%256 ──▶ revision R, the write returned at t0
//!    ├─ DNS probe: UDP A queries of conv-<run>.bench.<domain>, back to back, until the answer
//!    │  holds the new IP at t ──▶ commit→DNS-answer t − t0
//!    └─ GET /v1/convergence/...?revision=R until applied == live ──▶ all applied (polled)
//!  after the last change: the summary at the last R ──▶ commit→applied p50/p99/p999/max and
//!    samples (the server's ledger), live/applied subscribers, stragglers
//! ```
//!
//! commit→applied is the server's figure: a client's `received_unix_ms` (when its resolver
//! got the frame) minus this node's commit of the change, so it does not depend on how often
//! clients report or the bench polls. The samples also hold the DNS listener's (it counts as a
//! subscriber of tenant `default` that applies at commit, 0 ms): one per change among the
//! watchers' thousands. The all-applied time is what the bench saw, so it includes the
//! clients' report interval (250 ms at most between reports) and the polling.
//!
//! The ledger keeps the last [`MAX_CHANGES`] changes of a service, so more changes would push
//! the first ones out of the distribution: `--changes` is capped there.
//!
//! # Scale on the 2-core build machine (December 2026, shared, load average 2–4)
//! - 1,000 resolvers (`--quick`): ~3–4.5 s in all; commit→applied p50 15–44 ms, p99 90–168 ms.
//! - 5,000: 61 s in all, open and live in 3.3 s; p50 745 ms, p99 1.7 s; every change applied
//!   by every subscriber.
//! - 9,000: open and live in 9–56 s, then the changes collapse: writes take seconds and some
//!   fail `no_quorum`, watches go 15 s without a frame and reconnect, p50 4.6–11.7 s.
//! - 10,000 do not fit: two connections per client on each side is 20,000 descriptors plus
//!   the server's reserve, above this machine's hard limit of 20,000 (raising it needs
//!   `CAP_SYS_RESOURCE`, which the build container lacks); the run says so in its notes.
//!
//! This module is the pure half (the DNS messages, the figures and their summary); the fleet
//! and the probe live in `fleet`.

use std::net::Ipv4Addr;

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use muster_core::convergence::{ConvergenceReply, DeliveryPath};
use serde::Serialize;

use crate::histogram::Histogram;
use crate::report::LatencySummary;

mod fleet;
pub(crate) use fleet::{convergence, descriptors_wanted};

/// Changes measured at most: the server's ledger keeps the last 16 changes of a service
/// (`LedgerConfig::changes_kept`), and the distribution is read after the last change.
pub const MAX_CHANGES: usize = 16;

/// The DNS listener's one tenant by default (`ZoneConfig::default()`): the service lives there
/// so the listener answers it.
pub(crate) const DNS_TENANT: &str = "default";

/// The DNS listener's default domain.
pub(crate) const DNS_DOMAIN: &str = "muster.";

/// Stragglers named in the report at most (the server lists up to 100).
const STRAGGLERS_NAMED: usize = 10;

/// The IP of change `k`'s new endpoint (change 0 is the service's first endpoint).
pub(crate) fn change_ip(k: u64) -> Ipv4Addr {
    Ipv4Addr::new(10, 77, ((k >> 8) & 0xff) as u8, (k & 0xff) as u8)
}

/// The A-record name of `service` in `namespace`: `<service>.<namespace>.<domain>` (muster-dns
/// "Names").
pub(crate) fn dns_name(service: &str, namespace: &str, domain: &str) -> String {
    format!("{service}.{namespace}.{}", domain.trim_end_matches('.')) + "."
}

/// Why a DNS answer could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum DnsProbeError {
    /// The name is not a DNS name, or the query could not be encoded.
    #[error("cannot build a query for '{name}': {reason}")]
    Query {
        /// The name.
        name: String,
        /// Why.
        reason: String,
    },
    /// The packet is not a DNS message.
    #[error("undecodable answer: {0}")]
    Undecodable(String),
    /// The answer is for another query (an earlier, late one): not an error of the server.
    #[error("answer to query {got}, expected {expected}")]
    OtherId {
        /// The ID expected.
        expected: u16,
        /// The ID received.
        got: u16,
    },
    /// The server answered with an error code.
    #[error("answered {0}")]
    Rcode(String),
}

/// An A query for `name` with ID `id`, recursion not desired (the listener is authoritative).
pub(crate) fn dns_query(id: u16, name: &str) -> Result<Vec<u8>, DnsProbeError> {
    let fail = |reason: String| DnsProbeError::Query {
        name: name.to_owned(),
        reason,
    };
    let name = Name::from_ascii(name).map_err(|err| fail(err.to_string()))?;
    let mut message = Message::new(id, MessageType::Query, OpCode::Query);
    message.add_query(Query::query(name, RecordType::A));
    message.to_vec().map_err(|err| fail(err.to_string()))
}

/// Whether the answer `packet` to query `id` holds an A record of `ip`. NXDOMAIN and NODATA
/// (a service not yet known, or with nothing eligible) are answers without it.
pub(crate) fn answer_holds(packet: &[u8], id: u16, ip: Ipv4Addr) -> Result<bool, DnsProbeError> {
    let message = Message::from_vec(packet).map_err(|err| DnsProbeError::Undecodable(err.to_string()))?;
    if message.metadata.id != id || message.metadata.message_type != MessageType::Response {
        return Err(DnsProbeError::OtherId {
            expected: id,
            got: message.metadata.id,
        });
    }
    match message.metadata.response_code {
        ResponseCode::NoError | ResponseCode::NXDomain => {}
        other => return Err(DnsProbeError::Rcode(other.to_string())),
    }
    Ok(message
        .answers
        .iter()
        .any(|record| matches!(&record.data, RData::A(a) if a.0 == ip)))
}

/// What one change measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConvergenceChange {
    /// The write's revision.
    pub revision: u64,
    /// Write sent → its reply, in milliseconds.
    pub reply_ms: f64,
    /// Write returned → the DNS listener's first answer holding the new IP (`None`: not within
    /// the bound, or no probe).
    pub dns_ms: Option<f64>,
    /// Write returned → the bench's first read of `applied == live` at this revision (polled,
    /// so it includes the clients' report interval); `None`: not within the bound.
    pub all_applied_ms: Option<f64>,
    /// Subscribers that applied it, by the server's ledger (after the last change).
    pub applied: Option<usize>,
    /// The ledger's commit→applied median for this change, ms.
    pub p50_ms: Option<u64>,
    /// The ledger's commit→applied p99 for this change, ms.
    pub p99_ms: Option<u64>,
}

/// commit→applied as the server's ledger summarises it, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AppliedLatency {
    /// Applications measured.
    pub samples: usize,
    /// Median.
    pub p50_ms: u64,
    /// 90th percentile.
    pub p90_ms: u64,
    /// 99th percentile.
    pub p99_ms: u64,
    /// 99.9th percentile.
    pub p999_ms: u64,
    /// Slowest.
    pub max_ms: u64,
}

/// What the convergence workload measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConvergenceSummary {
    /// The service (`tenant/namespace/service`).
    pub service: String,
    /// Resolvers asked for.
    pub watchers: u64,
    /// Resolvers that got a first view.
    pub opened: u64,
    /// Seconds from the first resolver started to the server counting every opened one live.
    pub open_s: f64,
    /// Watch subscribers the server counted live before the first change.
    pub live_before: usize,
    /// The descriptor limit of this process during the run (each client holds two).
    pub descriptor_limit: Option<u64>,
    /// Changes asked for, and how many ran (at most [`MAX_CHANGES`]).
    pub changes_asked: usize,
    /// Per change, in order.
    pub changes: Vec<ConvergenceChange>,
    /// commit→applied over the kept changes (the server's ledger, every subscriber).
    pub applied: AppliedLatency,
    /// Live subscribers after the last change (the watchers and the DNS listener).
    pub live: usize,
    /// Of them, those at the last change's revision.
    pub applied_subscribers: usize,
    /// Whether all of them were.
    pub converged: bool,
    /// Live subscribers behind the last change.
    pub stragglers_total: usize,
    /// The first of them (`id@revision, behind N ms`).
    pub stragglers: Vec<String>,
    /// Subscribers that went silent.
    pub silent_total: usize,
    /// Write returned → DNS answer with the new IP, over the changes (the bench's probe).
    pub dns: Option<LatencySummary>,
    /// Changes whose new IP the DNS listener did not answer within the bound.
    pub dns_missed: usize,
    /// Why there was no DNS probe, if there was none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dns_skipped: Option<String>,
    /// Changes not applied by every live subscriber within the bound.
    pub changes_not_converged: usize,
    /// The 1-minute load average when the changes ended.
    pub load_average_at_end: Option<f64>,
}

/// The bench's own figures of one change, before the server's summary is read.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct ChangeProbe {
    pub(crate) revision: u64,
    pub(crate) reply_ms: f64,
    pub(crate) dns_ms: Option<f64>,
    pub(crate) all_applied_ms: Option<f64>,
}

/// How the fleet opened, before the changes.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct FleetFigures {
    pub(crate) service: String,
    pub(crate) watchers: u64,
    pub(crate) opened: u64,
    pub(crate) open_s: f64,
    pub(crate) live_before: usize,
    pub(crate) descriptor_limit: Option<u64>,
    pub(crate) changes_asked: usize,
}

/// Watch-path subscribers the server counts live in `reply`.
pub(crate) fn live_watchers(reply: &ConvergenceReply) -> usize {
    reply
        .paths
        .iter()
        .find(|count| count.path == DeliveryPath::Watch)
        .map_or(0, |count| count.live)
}

/// Whether every live subscriber applied the reply's target (and there is one).
pub(crate) fn all_applied(reply: &ConvergenceReply) -> bool {
    reply.live > 0 && reply.applied >= reply.live
}

impl ConvergenceSummary {
    /// The summary from the fleet's figures, each change's probe, and the server's `last`
    /// reply (at the last change's revision); `dns_skipped` says why there was no probe.
    pub(crate) fn new(
        fleet: FleetFigures,
        probes: &[ChangeProbe],
        last: &ConvergenceReply,
        dns_skipped: Option<String>,
        load_average_at_end: Option<f64>,
    ) -> ConvergenceSummary {
        let mut dns = Histogram::new();
        for ms in probes.iter().filter_map(|probe| probe.dns_ms) {
            dns.record(std::time::Duration::from_secs_f64(ms / 1_000.0));
        }
        let changes = probes
            .iter()
            .map(|probe| {
                let server = last.changes.iter().find(|change| change.revision.0 == probe.revision);
                ConvergenceChange {
                    revision: probe.revision,
                    reply_ms: probe.reply_ms,
                    dns_ms: probe.dns_ms,
                    all_applied_ms: probe.all_applied_ms,
                    applied: server.map(|change| change.applied),
                    p50_ms: server.map(|change| change.p50_ms),
                    p99_ms: server.map(|change| change.p99_ms),
                }
            })
            .collect();
        let latency = &last.latency;
        ConvergenceSummary {
            service: fleet.service,
            watchers: fleet.watchers,
            opened: fleet.opened,
            open_s: fleet.open_s,
            live_before: fleet.live_before,
            descriptor_limit: fleet.descriptor_limit,
            changes_asked: fleet.changes_asked,
            changes,
            applied: AppliedLatency {
                samples: latency.samples,
                p50_ms: latency.p50_ms,
                p90_ms: latency.p90_ms,
                p99_ms: latency.p99_ms,
                p999_ms: latency.p999_ms,
                max_ms: latency.max_ms,
            },
            live: last.live,
            applied_subscribers: last.applied,
            converged: all_applied(last),
            stragglers_total: last.stragglers_total,
            stragglers: last
                .stragglers
                .iter()
                .take(STRAGGLERS_NAMED)
                .map(|s| format!("{}@{}, behind {} ms", s.client_id, s.revision.0, s.behind_ms))
                .collect(),
            silent_total: last.silent_total,
            dns: LatencySummary::of(&dns),
            dns_missed: if dns_skipped.is_some() {
                0
            } else {
                probes.iter().filter(|probe| probe.dns_ms.is_none()).count()
            },
            dns_skipped,
            changes_not_converged: probes.iter().filter(|probe| probe.all_applied_ms.is_none()).count(),
            load_average_at_end,
        }
    }
}

#[cfg(test)]
#[path = "convergence_tests.rs"]
mod tests;
