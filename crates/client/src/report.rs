//! Convergence reports (SPEC O3): every resolver tells the server which revision of its
//! service it applied, so a deploy can wait until the fleet has.
//!
//! ```text
//!  Feed::step (a resolver's view moved) ──note(key, revision, received)──▶ Reporter
//!                                                                            │ dirty entries
//!                              one task per Client: at most every `interval`,│
//!                              and every `report_every_ms` (the server's      ▼
//!                              word) while nothing changes ──POST /v1/convergence/report
//! ```
//!
//! One [`Reporter`] per [`Client`](crate::Client) reports for all of its resolvers under one
//! client id, so a process with fifty resolvers sends one small request per change, not
//! fifty. A service is forgotten when the last resolver of it stops (its feed's drop), and a
//! reporter with nothing to report sends nothing. A failed report is sent again after a
//! doubling pause (at most 5 s): convergence is telemetry, and never holds up a resolver.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use muster_core::convergence::{AppliedRevision, ClientId, Cohort, ConvergenceReport};
use muster_core::{Revision, ServiceKey};
use tokio::sync::Notify;

use crate::http::Client;

/// The shortest gap between two reports of one client: a burst of changes is one report,
/// and 10,000 clients of one service send at most 40,000 reports a second in a storm.
pub const DEFAULT_REPORT_INTERVAL: Duration = Duration::from_millis(250);

/// How often to report while calm until the server says otherwise: its default.
const DEFAULT_REPORT_EVERY: Duration = Duration::from_secs(10);

/// Who reports, and how often at most.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportIdentity {
    /// The stable client id.
    pub client_id: ClientId,
    /// The cohort label, if any.
    pub cohort: Option<Cohort>,
    /// The shortest gap between two reports.
    pub interval: Duration,
}

impl ReportIdentity {
    /// The default identity of this process: `host:pid`, with `-N` for the second and later
    /// clients built in it (each client is one subscriber).
    pub fn for_this_process() -> ReportIdentity {
        static CLIENTS: AtomicUsize = AtomicUsize::new(0);
        let n = CLIENTS.fetch_add(1, Ordering::Relaxed);
        let host = std::env::var("HOSTNAME")
            .ok()
            .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
            .map(|h| {
                h.trim()
                    .chars()
                    .filter(|c| c.is_ascii_alphanumeric() || "-.".contains(*c))
                    .collect::<String>()
            })
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "client".to_owned());
        let mut id = format!("{host}:{}", std::process::id());
        if n > 0 {
            id.push_str(&format!("-{n}"));
        }
        id.truncate(ClientId::MAX_LEN);
        ReportIdentity {
            client_id: ClientId::new(id).unwrap_or_else(|_| ClientId::new("client").expect("a valid id")),
            cohort: None,
            interval: DEFAULT_REPORT_INTERVAL,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    revision: Revision,
    received_unix_ms: u64,
    dirty: bool,
}

#[derive(Debug, Default)]
struct State {
    entries: BTreeMap<ServiceKey, Entry>,
    /// Resolvers of this client following each service: the entry goes with the last one.
    followers: BTreeMap<ServiceKey, usize>,
    started: bool,
}

/// Reports what one client's resolvers applied. See the module docs.
#[derive(Debug)]
pub(crate) struct Reporter {
    identity: ReportIdentity,
    /// The client the reports go through (one without a reporter of its own).
    client: Client,
    state: Mutex<State>,
    wake: Arc<Notify>,
}

impl Reporter {
    pub(crate) fn new(identity: ReportIdentity, client: Client) -> Arc<Reporter> {
        Arc::new(Reporter {
            identity,
            client,
            state: Mutex::new(State::default()),
            wake: Arc::new(Notify::new()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Who reports.
    pub(crate) fn identity(&self) -> &ReportIdentity {
        &self.identity
    }

    /// `key`'s view is current at `revision` since `received_unix_ms`. Cheap: a map update;
    /// the report goes out from the reporter's task.
    pub(crate) fn note(self: &Arc<Self>, key: &ServiceKey, revision: Revision, received_unix_ms: u64) {
        let mut state = self.lock();
        let changed = state.entries.get(key).is_none_or(|entry| entry.revision != revision);
        if !changed {
            return;
        }
        state.entries.insert(
            key.clone(),
            Entry {
                revision,
                received_unix_ms,
                dirty: true,
            },
        );
        // The task starts with the first note made on a Tokio runtime (resolvers always run on
        // one; a caller of `Client::note_applied` outside one has its notes sent once a
        // later note starts it).
        if !state.started
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            state.started = true;
            runtime.spawn(run(Arc::downgrade(self), Arc::clone(&self.wake)));
        }
        drop(state);
        self.wake.notify_one();
    }

    /// One more resolver of this client follows `key`.
    pub(crate) fn follow(&self, key: &ServiceKey) {
        *self.lock().followers.entry(key.clone()).or_default() += 1;
    }

    /// A resolver of `key` stopped; with the last one, `key` is no longer reported.
    pub(crate) fn forget(&self, key: &ServiceKey) {
        let mut state = self.lock();
        let left = state.followers.get_mut(key).map(|n| {
            *n = n.saturating_sub(1);
            *n
        });
        if left.unwrap_or(0) == 0 {
            state.followers.remove(key);
            state.entries.remove(key);
        }
    }

    /// The report to send: the changed entries, or all of them when `all`.
    fn take(&self, all: bool) -> Vec<AppliedRevision> {
        let mut state = self.lock();
        state
            .entries
            .iter_mut()
            .filter(|(_, entry)| all || entry.dirty)
            .map(|(key, entry)| {
                entry.dirty = false;
                AppliedRevision {
                    service: key.clone(),
                    revision: entry.revision,
                    received_unix_ms: entry.received_unix_ms,
                }
            })
            .collect()
    }

    /// A report failed: send these again next time.
    fn retry(&self, applied: &[AppliedRevision]) {
        let mut state = self.lock();
        for sent in applied {
            if let Some(entry) = state.entries.get_mut(&sent.service)
                && entry.revision == sent.revision
            {
                entry.dirty = true;
            }
        }
    }

    /// Sends `applied` in reports of at most [`ConvergenceReport::MAX_SERVICES`]: the
    /// server's `report_every_ms` on success, and whether any part failed (to be sent
    /// again).
    async fn send(&self, applied: Vec<AppliedRevision>) -> (Option<Duration>, bool) {
        let (mut report_every, mut failed) = (None, false);
        for chunk in applied.chunks(ConvergenceReport::MAX_SERVICES) {
            let report = ConvergenceReport {
                client_id: self.identity.client_id.clone(),
                cohort: self.identity.cohort.clone(),
                applied: chunk.to_vec(),
            };
            match self.client.report_applied(&report).await {
                Ok(reply) => report_every = Some(Duration::from_millis(reply.report_every_ms.max(1))),
                Err(error) => {
                    tracing::debug!(%error, "convergence report failed; it is sent again later");
                    self.retry(chunk);
                    failed = true;
                }
            }
        }
        (report_every, failed)
    }
}

/// The longest pause after failed reports: a registry that is back is told within 5 s.
const MAX_RETRY: Duration = Duration::from_secs(5);

/// The reporter's task: ends when the client and every resolver using it are gone.
async fn run(reporter: Weak<Reporter>, wake: Arc<Notify>) {
    let mut report_every = DEFAULT_REPORT_EVERY;
    let mut last_full = tokio::time::Instant::now();
    let mut failures = 0u32;
    loop {
        tokio::select! {
            () = wake.notified() => {}
            () = tokio::time::sleep_until(last_full + report_every) => {}
        }
        let Some(reporter) = reporter.upgrade() else {
            return;
        };
        let interval = reporter.identity.interval;
        // Everything once per `report_every` (the keep-alive), else only what changed.
        let full = last_full.elapsed() >= report_every;
        if full {
            last_full = tokio::time::Instant::now();
        }
        let applied = reporter.take(full);
        let mut pause = interval;
        if !applied.is_empty() {
            let (every, failed) = reporter.send(applied).await;
            if let Some(every) = every {
                report_every = every;
            }
            if failed {
                // Sent again after a doubling pause, without waiting for the next change.
                failures = failures.saturating_add(1);
                pause = interval.saturating_mul(1 << failures.min(5)).min(MAX_RETRY);
                wake.notify_one();
            } else {
                failures = 0;
            }
        }
        drop(reporter);
        tokio::time::sleep(pause).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(service: &str) -> ServiceKey {
        ServiceKey::new("acme", "prod", service).unwrap()
    }

    fn reporter() -> Arc<Reporter> {
        // No runtime in a plain test: the task never starts, the state is ours to inspect.
        let client = Client::builder("http://127.0.0.1:9")
            .report_applied(false)
            .build()
            .unwrap();
        Reporter::new(ReportIdentity::for_this_process(), client)
    }

    fn revisions(applied: &[AppliedRevision]) -> Vec<(String, u64)> {
        applied
            .iter()
            .map(|a| (a.service.service.to_string(), a.revision.0))
            .collect()
    }

    #[test]
    fn a_change_is_sent_once_a_keep_alive_sends_everything_and_a_failure_sends_again() {
        let reporter = reporter();
        reporter.note(&key("api"), Revision(3), 1_000);
        reporter.note(&key("web"), Revision(3), 1_000);
        assert_eq!(revisions(&reporter.take(false)), [("api".into(), 3), ("web".into(), 3)]);
        assert!(reporter.take(false).is_empty(), "nothing changed since");
        // The same revision again (a progress frame at an unchanged view) is no change.
        reporter.note(&key("api"), Revision(3), 1_500);
        assert!(reporter.take(false).is_empty());
        reporter.note(&key("api"), Revision(5), 2_000);
        let sent = reporter.take(false);
        assert_eq!(revisions(&sent), [("api".into(), 5)]);
        assert_eq!(sent[0].received_unix_ms, 2_000);
        reporter.retry(&sent);
        assert_eq!(
            revisions(&reporter.take(false)),
            [("api".into(), 5)],
            "a failed report is sent again"
        );
        assert_eq!(revisions(&reporter.take(true)), [("api".into(), 5), ("web".into(), 3)]);
        reporter.forget(&key("web"));
        assert_eq!(
            revisions(&reporter.take(true)),
            [("api".into(), 5)],
            "a stopped resolver is not reported"
        );
    }

    #[test]
    fn a_newer_revision_noted_while_a_report_was_out_is_not_overwritten_by_its_retry() {
        let reporter = reporter();
        reporter.note(&key("api"), Revision(3), 1_000);
        let sent = reporter.take(false);
        reporter.note(&key("api"), Revision(4), 1_100);
        reporter.retry(&sent);
        assert_eq!(revisions(&reporter.take(false)), [("api".into(), 4)]);
    }

    #[test]
    fn the_default_identity_is_a_valid_id_per_client() {
        let first = ReportIdentity::for_this_process();
        let second = ReportIdentity::for_this_process();
        assert_ne!(
            first.client_id, second.client_id,
            "two clients of one process are two subscribers"
        );
        assert!(first.client_id.as_str().contains(&std::process::id().to_string()));
    }
}
