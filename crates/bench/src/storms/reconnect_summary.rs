//! The reconnect workload's pure part: how a resumed stream began, the tally, the summary
//! and its notes.

use serde::Serialize;

use super::super::stream::{Head, Kind};
use crate::render::{format_ms, latency_text, mib_text, thousands};
use crate::report::LatencySummary;

/// How a watcher's stream began again after the restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Resumption {
    /// By revision: replayed updates or a progress frame first.
    Resumed,
    /// A full snapshot: the server re-listed the service.
    Snapshot,
    /// `error{compacted}`: the revision left the history.
    Compacted,
    /// Any other first frame (another error, `resync`, `closing`).
    Refused,
}

impl Resumption {
    /// How a stream resumed at `from_revision` began, from its first frame.
    pub(crate) fn of(head: &Head) -> Resumption {
        match head.kind {
            Kind::Update | Kind::Progress => Resumption::Resumed,
            Kind::Snapshot => Resumption::Snapshot,
            Kind::Error if head.error.as_ref().is_some_and(|e| e.code == "compacted") => Resumption::Compacted,
            _ => Resumption::Refused,
        }
    }
}

/// The reconnects counted by how they began.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    pub(crate) resumed: u64,
    pub(crate) snapshots: u64,
    pub(crate) compacted: u64,
    pub(crate) refused: u64,
    /// No first frame: the connection or the request failed.
    pub(crate) failed: u64,
    pub(crate) first_failure: Option<String>,
}

impl Tally {
    /// Counts one reconnect.
    pub(crate) fn count(&mut self, how: Result<Resumption, String>) {
        match how {
            Ok(Resumption::Resumed) => self.resumed += 1,
            Ok(Resumption::Snapshot) => self.snapshots += 1,
            Ok(Resumption::Compacted) => self.compacted += 1,
            Ok(Resumption::Refused) => self.refused += 1,
            Err(why) => {
                self.failed += 1;
                self.first_failure.get_or_insert(why);
            }
        }
    }

    /// Streams live again: resumed or re-listed (the others ended).
    pub(crate) fn live(&self) -> u64 {
        self.resumed + self.snapshots
    }
}

/// What the reconnect workload measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReconnectSummary {
    /// Watch streams asked for.
    pub watchers: u64,
    /// Services they watch, round-robin.
    pub services: u64,
    /// Endpoints per service.
    pub endpoints_per_service: u64,
    /// Streams that opened before the restart.
    pub opened: u64,
    /// Of those, the ones whose first frame carried the server's latest revision.
    pub at_latest: u64,
    /// The server's revision before the restart.
    pub revision: u64,
    /// After the restart (the same, unless the log lost a commit).
    pub revision_after_restart: Option<u64>,
    /// Server RSS with every stream open, before the kill.
    pub rss_before_kill_bytes: Option<u64>,
    /// SIGKILL → the new process answered ready.
    pub restart_ms: f64,
    /// Streams that noticed the kill and reconnected.
    pub lost: u64,
    /// Resumed by revision (update or progress first).
    pub resumed: u64,
    /// Began with a full snapshot instead.
    pub snapshots: u64,
    /// Told `compacted`.
    pub compacted: u64,
    /// Began with any other frame.
    pub refused: u64,
    /// Got no frame at all.
    pub failed: u64,
    /// The first failure's message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_failure: Option<String>,
    /// Go (the new server ready, every watcher released) → the last stream's first frame;
    /// `None` when not every stream came back live.
    pub all_live_ms: Option<f64>,
    /// Go → each stream's first frame.
    pub reconnect: Option<LatencySummary>,
    /// Of which: go → its TCP connection established (the kernel's accept queue and SYN
    /// retries)...
    pub connect: Option<LatencySummary>,
    /// ... and connected → first frame (the server's accept, request and resume).
    pub resume: Option<LatencySummary>,
    /// The new server's RSS when it answered ready, before any watcher came back.
    pub rss_at_ready_bytes: Option<u64>,
    /// Its largest RSS during the storm (polled every 20 ms).
    pub rss_peak_bytes: Option<u64>,
    /// Its own counters after the storm: streams opened, of them resumed, and compactions.
    pub server_connects: Option<u64>,
    /// See `server_connects`.
    pub server_resumes: Option<u64>,
    /// See `server_connects`.
    pub server_compactions: Option<u64>,
    /// This host's TCP listen-queue overflows during the storm (`/proc/net/netstat`): SYNs
    /// the server's accept queue had no room for.
    pub listen_overflows: Option<u64>,
    /// SYN retransmissions during the storm: each waited a second (then 2, 4 ...) for the
    /// kernel's retry.
    pub syn_retransmits: Option<u64>,
    /// The load average at the workload's start and end.
    #[serde(flatten)]
    pub load: crate::LoadSpan,
}

impl ReconnectSummary {
    /// The notes under the table.
    pub(crate) fn notes(&self) -> String {
        let counter = |v: Option<u64>| v.map_or_else(|| "?".to_owned(), thousands);
        let latency = |summary| latency_text(summary, "none came back");
        format!(
            "reconnect: {} of {} streams over {} services ({} endpoints each) open, {} at the latest revision {}; \
             server RSS {} before the kill\n\
             reconnect: SIGKILL → ready again in {} (revision {} after); {} streams lost, all released at once \
             (this host: {} listen-queue overflows, {} SYNs retransmitted)\n\
             reconnect: resumed by revision {}, full snapshot {}, compacted {}, refused {}, failed {}{}\n\
             reconnect: all live again {} after go; per stream go → first frame {}: go → TCP connected {}, \
             connected → first frame {}\n\
             reconnect: new server RSS {} at ready, peak {} during the storm; its counters: {} connects, {} resumes, \
             {} compactions; {}\n",
            thousands(self.opened),
            thousands(self.watchers),
            thousands(self.services),
            self.endpoints_per_service,
            thousands(self.at_latest),
            self.revision,
            mib_text(self.rss_before_kill_bytes),
            format_ms(self.restart_ms),
            self.revision_after_restart
                .map_or_else(|| "?".to_owned(), |r| r.to_string()),
            thousands(self.lost),
            counter(self.listen_overflows),
            counter(self.syn_retransmits),
            thousands(self.resumed),
            thousands(self.snapshots),
            thousands(self.compacted),
            thousands(self.refused),
            thousands(self.failed),
            self.first_failure
                .as_ref()
                .map_or_else(String::new, |why| format!(" (first: {why})")),
            self.all_live_ms
                .map_or_else(|| "never (not every stream came back)".to_owned(), format_ms),
            latency(self.reconnect),
            latency(self.connect),
            latency(self.resume),
            mib_text(self.rss_at_ready_bytes),
            mib_text(self.rss_peak_bytes),
            counter(self.server_connects),
            counter(self.server_resumes),
            counter(self.server_compactions),
            self.load.text(),
        )
    }
}
