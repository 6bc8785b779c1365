//! What the storm workloads measure with, beside the driver and the histograms: the
//! server's revision and metrics, a poller of its RSS and watch queue gauges, the kernel's
//! TCP counters, a background closed loop that keeps each write's send time, and the
//! matching of watch receipts to revisions. Pure where it can be (parsers, matching).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hyper::Method;
use muster_core::api::StatusReply;

use crate::client::Http;
use crate::clock::now;
use crate::codec::parse_metric;

/// The server's current revision.
pub(crate) async fn revision(http: &Http) -> Result<u64, String> {
    let body = http.send_ok(Method::GET, "/v1/status", None).await?;
    let status: StatusReply = serde_json::from_slice(&body).map_err(|err| err.to_string())?;
    Ok(status.revision.0)
}

/// The samples of the named metrics on the server's `/v1/metrics`, each `None` when absent.
pub(crate) async fn metrics<const N: usize>(http: &Http, names: [&str; N]) -> [Option<f64>; N] {
    let page = http.send_ok(Method::GET, "/v1/metrics", None).await.ok();
    let text = page.as_deref().map(String::from_utf8_lossy);
    names.map(|name| text.as_deref().and_then(|text| parse_metric(text, name, &[])))
}

/// The watch queue gauges of `/v1/metrics`, polled while a storm runs: frames and bytes
/// held for watchers that have yet to send them.
pub(crate) const QUEUE_GAUGES: [&str; 2] = ["muster_watch_queued_frames", "muster_watch_outstanding_bytes"];

/// How often the gauges and RSS are polled during a storm: often enough to catch a peak a
/// few tens of milliseconds long, rarely enough that the polling costs the server nothing
/// measurable (one small page or one `/proc` read).
pub(crate) const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// The peaks a [`Poller`] saw.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Peaks {
    /// Largest server RSS, bytes.
    pub(crate) rss_bytes: Option<u64>,
    /// Largest `muster_watch_queued_frames`.
    pub(crate) queued_frames: Option<u64>,
    /// Largest `muster_watch_outstanding_bytes`.
    pub(crate) outstanding_bytes: Option<u64>,
}

impl Peaks {
    fn add(&mut self, rss: Option<u64>, queue: [Option<f64>; 2]) {
        let max = |a: Option<u64>, b: Option<u64>| a.max(b).or(a).or(b);
        self.rss_bytes = max(self.rss_bytes, rss);
        self.queued_frames = max(self.queued_frames, queue[0].map(|v| v as u64));
        self.outstanding_bytes = max(self.outstanding_bytes, queue[1].map(|v| v as u64));
    }
}

/// Polls the server's RSS (and, with a client, its watch queue gauges) until stopped.
pub(crate) struct Poller {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Peaks>,
}

impl Poller {
    /// Starts polling `pid`'s VmRSS and, if `http` is given, the queue gauges.
    pub(crate) fn start(pid: u32, http: Option<Http>) -> Poller {
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let mut peaks = Peaks::default();
            loop {
                let rss = crate::watch::rss_of(pid).ok();
                let queue = match &http {
                    Some(http) => metrics(http, QUEUE_GAUGES).await,
                    None => [None, None],
                };
                peaks.add(rss, queue);
                tokio::select! {
                    _ = &mut stopped => return peaks,
                    () = tokio::time::sleep(POLL_INTERVAL) => {}
                }
            }
        });
        Poller { stop, task }
    }

    /// Stops polling and returns the peaks.
    pub(crate) async fn finish(self) -> Peaks {
        let _ = self.stop.send(());
        self.task.await.unwrap_or_default()
    }
}

/// The first receipt of revision `revision` or later in `receipts` (one stream's, in arrival
/// order, so revisions ascend): a coalesced update covers every revision up to its own.
pub(crate) fn first_at_or_after(receipts: &[(u64, Instant)], revision: u64) -> Option<Instant> {
    let i = receipts.partition_point(|(seen, _)| *seen < revision);
    receipts.get(i).map(|(_, at)| *at)
}

/// Milliseconds from `from` to `to`, 0 if `to` is earlier.
pub(crate) fn ms_between(from: Instant, to: Instant) -> f64 {
    to.saturating_duration_since(from).as_secs_f64() * 1_000.0
}

/// A counter of `/proc/net/netstat`: `group` (`TcpExt`) names a header line of field names
/// and the line after it holds their values.
pub(crate) fn parse_netstat(text: &str, group: &str, field: &str) -> Option<u64> {
    let prefix = format!("{group}:");
    let mut lines = text.lines().filter(|line| line.starts_with(&prefix));
    while let (Some(names), Some(values)) = (lines.next(), lines.next()) {
        let column = names.split_whitespace().position(|name| name == field);
        if let Some(column) = column {
            return values.split_whitespace().nth(column)?.parse().ok();
        }
    }
    None
}

/// This host's TCP listen-queue overflows and SYN retransmissions so far (`None` without
/// `/proc/net/netstat`): a connection storm past a listener's backlog shows here, its SYNs
/// retried by the kernel after a second.
pub(crate) fn tcp_counters() -> [Option<u64>; 2] {
    let text = std::fs::read_to_string("/proc/net/netstat").unwrap_or_default();
    ["ListenOverflows", "TCPSynRetrans"].map(|field| parse_netstat(&text, "TcpExt", field))
}

/// One write of a background closed loop: when it was sent, how long it took, and the
/// revision it committed at (`None`: it failed).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sample {
    pub(crate) sent: Instant,
    pub(crate) latency: Duration,
    pub(crate) revision: Option<u64>,
}

/// A bound on one background loop's samples, against a runaway run: 40 bytes each, so
/// 80 MiB at most, and far more than two minutes of writes.
const MAX_SAMPLES: usize = 2_000_000;

/// A closed loop in the background: `workers` tasks each sending `op(n)` (n counts up per
/// worker, interleaved) one at a time until `stop` is set, `bound` has passed or the
/// samples' cap is reached. Unlike [`crate::driver::closed_loop`], it runs until told and
/// keeps each write's send time, so a caller can split the samples into phases afterwards.
pub(crate) async fn closed_until<F, Fut>(workers: usize, stop: Arc<AtomicBool>, bound: Duration, op: F) -> Vec<Sample>
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<u64, String>> + Send + 'static,
{
    let op = Arc::new(op);
    let deadline = now() + bound;
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..workers as u64 {
        let (op, stop) = (Arc::clone(&op), Arc::clone(&stop));
        tasks.spawn(async move {
            let mut samples = Vec::new();
            let mut n = worker;
            while !stop.load(Ordering::Relaxed) && samples.len() < MAX_SAMPLES / workers.max(1) {
                let sent = now();
                if sent >= deadline {
                    break;
                }
                let revision = op(n).await.ok();
                samples.push(Sample {
                    sent,
                    latency: now() - sent,
                    revision,
                });
                n += workers as u64;
            }
            samples
        });
    }
    let mut samples = Vec::new();
    while let Some(Ok(mut worker)) = tasks.join_next().await {
        samples.append(&mut worker);
    }
    samples
}

/// A write's committed revision, from its reply.
pub(crate) fn revision_of(reply: Result<bytes::Bytes, String>) -> Result<u64, String> {
    let body = reply?;
    serde_json::from_slice::<muster_core::api::WriteReply>(&body)
        .map(|reply| reply.revision.0)
        .map_err(|err| err.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netstat_counters_are_read_by_name_from_the_line_after_their_header() {
        let text = "TcpExt: SyncookiesSent ListenOverflows ListenDrops TCPSynRetrans\n\
                    TcpExt: 0 516 517 445\n\
                    IpExt: InNoRoutes ListenOverflows\n\
                    IpExt: 1 99\n";
        assert_eq!(parse_netstat(text, "TcpExt", "ListenOverflows"), Some(516));
        assert_eq!(parse_netstat(text, "TcpExt", "TCPSynRetrans"), Some(445));
        assert_eq!(parse_netstat(text, "IpExt", "ListenOverflows"), Some(99));
        assert_eq!(parse_netstat(text, "TcpExt", "Missing"), None);
        assert_eq!(parse_netstat("", "TcpExt", "ListenOverflows"), None);
    }

    #[test]
    fn a_coalesced_update_delivers_every_revision_it_covers() {
        // Trace: drains at 10 and 11 coalesced into one update at 12 for a lagging watcher.
        let t = crate::clock::now();
        let at = |ms| t + Duration::from_millis(ms);
        let receipts = [(5, at(1)), (12, at(9)), (13, at(20))];
        assert_eq!(first_at_or_after(&receipts, 10), Some(at(9)));
        assert_eq!(first_at_or_after(&receipts, 12), Some(at(9)));
        assert_eq!(first_at_or_after(&receipts, 13), Some(at(20)));
        assert_eq!(first_at_or_after(&receipts, 14), None, "not delivered yet");
    }

    #[test]
    fn peaks_keep_the_largest_reading_and_survive_missing_ones() {
        let mut peaks = Peaks::default();
        peaks.add(Some(10), [None, None]);
        peaks.add(None, [Some(3.0), Some(300.0)]);
        peaks.add(Some(7), [Some(1.0), None]);
        assert_eq!(
            peaks,
            Peaks {
                rss_bytes: Some(10),
                queued_frames: Some(3),
                outstanding_bytes: Some(300),
            }
        );
    }
}
