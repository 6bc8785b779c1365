//! The view state machine (SPEC C1) and the stale budget (SPEC C2): pure, time as input.
//!
//! ```text
//!                 snapshot ──▶ install (whole set, digest verified on decode)
//!  frames ──▶ View ──update──▶ apply only if prev_revision == active revision and the digest
//!                 │             of the result matches; otherwise keep the old set, resnapshot
//!                 ├─progress──▶ the active set is still current up to that revision
//!                 └─compacted / resync / undecodable / wrong service ──▶ keep, resnapshot
//! ```
//!
//! The active set only ever changes to a set the server really had: a validated snapshot, or
//! a validated snapshot plus contiguous, digest-checked updates. Anything doubtful leaves the
//! old set in place (never an empty one) and asks the shell for a fresh snapshot. The view
//! reports three revisions apart — received (highest seen in any frame), validated (highest
//! whose content was checked), active (what picks use) — and the age of the active set: time
//! since the server last confirmed it (snapshot, applied update or progress).
//!
//! The set is kept as a [`MemberSet`]: compact records with each record's cached fingerprint,
//! so updates are still digest-checked without holding the server's full records.
//!
//! An application reads a view through its [`Resolver`](crate::Resolver) (`view()`,
//! `status()`, `changes()`); the machine's inputs ([`View::install`], [`View::on_frame`], ...)
//! are here for a shell of your own, as [`registrar`](crate::registrar) holds the registrar's.

use std::sync::Arc;

use muster_core::api::{ErrorDetail, Frame};
use muster_core::{Revision, ServiceKey, ServiceSnapshot, ServiceUpdate};

use crate::member::MemberSet;

/// Why the view wants a fresh snapshot. The active set is kept meanwhile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resnapshot {
    /// There is no active set yet.
    NoView,
    /// An update did not follow the active revision: something was missed.
    Gap {
        /// The active revision.
        have: Revision,
        /// The update's previous revision.
        prev: Revision,
    },
    /// An update's events did not produce the digest it vouched for.
    DigestMismatch {
        /// The update's revision.
        revision: Revision,
    },
    /// The server no longer has the history after the active revision.
    Compacted,
    /// The server cut the stream because the view fell behind.
    Resync,
    /// A frame could not be decoded or was about another service.
    Invalid(String),
}

/// What the shell should do after a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Keep reading the stream.
    Continue,
    /// Take a snapshot and watch from its revision.
    Resnapshot(Resnapshot),
}

/// The three revisions and the age the view reports (SPEC C1), and why it has no set when
/// it has none (SPEC C2: say what is wrong at once).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewStatus {
    /// The highest revision seen in any frame.
    pub received: Revision,
    /// The highest revision whose content was validated.
    pub validated: Revision,
    /// The revision of the active set (`None`: no view yet).
    pub active: Option<Revision>,
    /// Milliseconds since the server last confirmed the active set (`None`: no view yet).
    pub age_ms: Option<u64>,
    /// Whether the view is waiting for a fresh snapshot.
    pub resnapshot_pending: bool,
    /// The server answered that it holds nothing of the service (no set, SPEC W5).
    pub unknown: bool,
    /// The last transport error of the watch (cannot connect, connection lost), kept until
    /// the next frame arrives; `None` while the server answers.
    pub last_error: Option<Arc<str>>,
}

/// One service's view.
#[derive(Debug, Clone)]
pub struct View {
    key: ServiceKey,
    active: Option<Arc<MemberSet>>,
    /// The global revision up to which the server confirmed the active set.
    current_to: Revision,
    confirmed_ms: u64,
    received: Revision,
    validated: Revision,
    pending: Option<Resnapshot>,
    /// The service was confirmed unknown at `current_to` (a watch from "now" sent no
    /// snapshot before its first progress): its first update, from revision 0, may start
    /// the set. Unknown is not empty (SPEC W5): there is still no active set.
    absent: bool,
    /// The last transport error, until the next frame: why there is no fresher view.
    last_error: Option<Arc<str>>,
}

impl View {
    /// An empty view of `key`: no set until a snapshot (or a last-known-good) is installed.
    pub fn new(key: ServiceKey) -> View {
        View {
            key,
            active: None,
            current_to: Revision::ZERO,
            confirmed_ms: 0,
            received: Revision::ZERO,
            validated: Revision::ZERO,
            pending: Some(Resnapshot::NoView),
            absent: false,
            last_error: None,
        }
    }

    /// The service.
    pub fn key(&self) -> &ServiceKey {
        &self.key
    }

    /// The active set, if any.
    pub fn active(&self) -> Option<&Arc<MemberSet>> {
        self.active.as_ref()
    }

    /// The global revision the active set is known current at: where a watch resumes.
    pub fn resume_from(&self) -> Option<Revision> {
        self.active.as_ref().map(|_| self.current_to)
    }

    /// Where a watch shared with other services (a namespace watch) may resume this view
    /// from: like [`resume_from`](Self::resume_from), but also for a service confirmed
    /// unknown (its first update, from revision 0, starts the set); `None` while a snapshot
    /// is wanted.
    pub fn shared_resume_from(&self) -> Option<Revision> {
        if self.pending.is_some() || (self.active.is_none() && !self.absent) {
            return None;
        }
        Some(self.current_to)
    }

    /// The revisions and age.
    pub fn status(&self, now_ms: u64) -> ViewStatus {
        ViewStatus {
            received: self.received,
            validated: self.validated,
            active: self.active.as_ref().map(|s| s.revision()),
            age_ms: self.active.as_ref().map(|_| now_ms.saturating_sub(self.confirmed_ms)),
            resnapshot_pending: self.pending.is_some(),
            unknown: self.is_unknown(),
            last_error: self.last_error.clone(),
        }
    }

    /// Whether the server answered that it holds nothing of this service: no set, and none
    /// expected until the service is registered (SPEC W5: unknown is not empty).
    pub fn is_unknown(&self) -> bool {
        self.active.is_none() && self.absent
    }

    /// The last transport error of the watch, until the next frame arrives.
    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }

    /// The server could not be reached, or the watch was lost: the set (if any) is kept and
    /// `why` is reported by [`status`](Self::status) and by [`StaleError::Unavailable`]
    /// until a frame arrives.
    pub fn on_transport_error(&mut self, why: &str) {
        self.last_error = Some(Arc::from(why));
    }

    /// Installs a complete set read at global revision `read_at` (its digest was checked when
    /// it was decoded). A set for another service is refused and the old one kept.
    pub fn install(&mut self, snapshot: ServiceSnapshot, read_at: Revision, now_ms: u64) -> Next {
        self.install_set(MemberSet::from_snapshot(&snapshot), read_at, now_ms)
    }

    /// Like [`install`](Self::install), for a set already in compact form.
    pub fn install_set(&mut self, snapshot: MemberSet, read_at: Revision, now_ms: u64) -> Next {
        if snapshot.key() != &self.key {
            return self.doubt(Resnapshot::Invalid(format!(
                "a snapshot of {} for a view of {}",
                snapshot.key(),
                self.key
            )));
        }
        self.received = self.received.max(read_at);
        self.validated = self.validated.max(read_at);
        self.current_to = read_at.max(snapshot.revision());
        self.active = Some(Arc::new(snapshot));
        self.confirmed_ms = now_ms;
        self.pending = None;
        self.absent = false;
        Next::Continue
    }

    /// Installs a last-known-good set loaded from disk at start: usable within the stale
    /// budget, but the view still wants a fresh snapshot. `saved_ms` is when it was last
    /// confirmed, so its age counts from then, not from the load.
    pub fn install_last_known_good(&mut self, snapshot: MemberSet, current_to: Revision, saved_ms: u64) {
        if snapshot.key() != &self.key || self.active.is_some() {
            return;
        }
        self.current_to = current_to;
        self.active = Some(Arc::new(snapshot));
        self.confirmed_ms = saved_ms;
        self.pending = Some(Resnapshot::NoView);
    }

    /// Applies one watch frame.
    pub fn on_frame(&mut self, frame: &Frame, now_ms: u64) -> Next {
        // The server answers: whatever failed before is over.
        self.last_error = None;
        match frame {
            Frame::Snapshot { revision, snapshot } => {
                self.install_set(MemberSet::from_snapshot(snapshot), *revision, now_ms)
            }
            Frame::Update(update) => self.on_update(update, now_ms),
            Frame::Progress { revision } => self.on_progress(*revision, now_ms),
            Frame::Error { error, revision } => {
                self.received = self.received.max(*revision);
                self.on_refused(error)
            }
            Frame::Resync { revision } => {
                self.received = self.received.max(*revision);
                self.doubt(Resnapshot::Resync)
            }
            // The server is stopping: nothing is wrong with the set; the shell reconnects
            // and resumes from `resume_from`.
            Frame::Closing { revision } => {
                self.received = self.received.max(*revision);
                Next::Continue
            }
        }
    }

    /// The server refused to go on from the active set's lineage: a watch's `error` frame, or
    /// a watch it would not open from [`resume_from`](Self::resume_from) (`future_revision`
    /// once a registry has lost its state and counts from a lower revision, `compacted`).
    /// Resuming again would be refused again, so the set is kept and a snapshot asked for.
    pub fn on_refused(&mut self, error: &ErrorDetail) -> Next {
        if error.code == "compacted" {
            self.doubt(Resnapshot::Compacted)
        } else {
            self.doubt(Resnapshot::Invalid(format!("{}: {}", error.code, error.message)))
        }
    }

    /// A line that did not decode as a frame.
    pub fn on_undecodable(&mut self, why: &str) -> Next {
        self.doubt(Resnapshot::Invalid(why.to_owned()))
    }

    /// Applies an update if it is the contiguous next one of the active set's lineage and
    /// its digest checks out; otherwise keeps the active set and asks for a snapshot.
    pub fn on_update(&mut self, update: &ServiceUpdate, now_ms: u64) -> Next {
        self.received = self.received.max(update.revision);
        if let Some(why) = &self.pending {
            // Waiting for a snapshot: updates on a doubted lineage are not applied.
            return Next::Resnapshot(why.clone());
        }
        let mut next = match &self.active {
            Some(active) => MemberSet::clone(active),
            None if self.absent => MemberSet::empty(self.key.clone()),
            None => return self.doubt(Resnapshot::NoView),
        };
        match next.apply(update) {
            Ok(true) => {
                self.absent = false;
                self.active = Some(Arc::new(next));
                self.validated = self.validated.max(update.revision);
                self.current_to = self.current_to.max(update.revision);
                self.confirmed_ms = now_ms;
                Next::Continue
            }
            // A replay of something already applied: harmless.
            Ok(false) => Next::Continue,
            Err(muster_core::GapError::Gap { have, prev, .. }) => self.doubt(Resnapshot::Gap { have, prev }),
            Err(muster_core::GapError::DigestMismatch { revision, .. }) => {
                self.doubt(Resnapshot::DigestMismatch { revision })
            }
            Err(other) => self.doubt(Resnapshot::Invalid(other.to_string())),
        }
    }

    /// The server says everything up to `revision` has been sent: with nothing pending and
    /// nothing missed, the active set is current up to there.
    ///
    /// A progress that arrives while a fresh watch still owes its snapshot means the service
    /// is unknown at that revision: the view stays without a set, but follows the stream.
    /// Whatever the doubt that asked for that watch (no view yet, or a gap in the stream of
    /// a service that was unknown), the fresh watch's answer settles it; waiting for a
    /// snapshot the server will never send would leave the view pending for good.
    pub fn on_progress(&mut self, revision: Revision, now_ms: u64) -> Next {
        self.received = self.received.max(revision);
        if self.active.is_none() && self.pending.is_some() {
            self.pending = None;
            self.absent = true;
            self.current_to = revision;
            self.confirmed_ms = now_ms;
            return Next::Continue;
        }
        if self.pending.is_none() && self.active.is_some() && revision >= self.current_to {
            self.current_to = revision;
            self.confirmed_ms = now_ms;
        }
        Next::Continue
    }

    fn doubt(&mut self, why: Resnapshot) -> Next {
        if self.pending.is_none() {
            self.pending = Some(why.clone());
        }
        Next::Resnapshot(why)
    }
}

/// How risky an operation is, which decides how stale a view it may use (SPEC C2).
///
/// Balancers and picks default to [`Risk::ReadOnly`]: a registry outage means "use the last
/// known set", never "use an empty set" (fail static). A caller whose calls mutate state says
/// [`Risk::Mutation`] and only then fails closed beyond the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Risk {
    /// Read-only or idempotent: continues on the last known set beyond the budget (reporting
    /// its age) unless [`StaleBudget::stale_reads_allowed`] is turned off. The default.
    #[default]
    ReadOnly,
    /// A stateful mutation: fails closed beyond the budget.
    Mutation,
    /// A privileged or irreversible effect: fails closed beyond its own, tighter budget.
    Privileged,
}

/// How stale a view each kind of operation may use.
///
/// ```
/// use muster_client::{Risk, StaleBudget};
///
/// let budget = StaleBudget::default();
/// assert_eq!(budget.limit_ms(Risk::Mutation), 30_000);
/// assert_eq!(budget.limit_ms(Risk::Privileged), 5_000);
/// // Fail static: reads go on with the last known set beyond the budget.
/// assert!(budget.stale_reads_allowed);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StaleBudget {
    /// Age up to which any operation may use the view.
    pub budget_ms: u64,
    /// Age up to which a privileged operation may use it (at most `budget_ms`).
    pub privileged_budget_ms: u64,
    /// Whether read-only operations continue beyond `budget_ms` on the last known set
    /// (reporting the age). On by default (SPEC C2: fail static).
    pub stale_reads_allowed: bool,
}

impl Default for StaleBudget {
    /// 30 s covers a registry leader election and a watch reconnect with room; privileged
    /// effects get 5 s, about one missed progress frame. Read-only operations go on with the
    /// last known set beyond the budget (SPEC C2: a registry outage means "use the last known
    /// set", as Envoy, linkerd and kube-proxy do); mutations and privileged effects fail
    /// closed.
    fn default() -> Self {
        StaleBudget {
            budget_ms: 30_000,
            privileged_budget_ms: 5_000,
            stale_reads_allowed: true,
        }
    }
}

impl StaleBudget {
    /// The age beyond which an operation of `risk` is past its budget.
    pub fn limit_ms(&self, risk: Risk) -> u64 {
        match risk {
            Risk::Privileged => self.privileged_budget_ms.min(self.budget_ms),
            Risk::ReadOnly | Risk::Mutation => self.budget_ms,
        }
    }
}

/// Why a view may not be used for an operation. Each displays its code once, first.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StaleError {
    /// There has never been a view (first start, registry down, no last-known-good).
    #[error("unavailable: no view of {key} yet{}", last_error.as_deref().map(|why| format!(" ({why})")).unwrap_or_default())]
    Unavailable {
        /// The service.
        key: ServiceKey,
        /// The last transport error (e.g. the connection refused), if there was one.
        last_error: Option<Arc<str>>,
    },
    /// The server holds nothing of the service: a misspelt name, or one not registered yet
    /// (SPEC W5: unknown is not empty).
    #[error("unknown_service: the registry holds nothing of {key}")]
    UnknownService {
        /// The service.
        key: ServiceKey,
    },
    /// The view is older than this operation's budget: fail closed.
    #[error("stale: the view of {key} is {age_ms} ms old, beyond the {budget_ms} ms budget for this operation")]
    Stale {
        /// The service.
        key: ServiceKey,
        /// The view's age.
        age_ms: u64,
        /// The budget it broke.
        budget_ms: u64,
    },
}

impl StaleError {
    /// A stable machine-readable code: `unavailable`, `unknown_service`, `stale`.
    pub fn code(&self) -> &'static str {
        match self {
            StaleError::Unavailable { .. } => "unavailable",
            StaleError::UnknownService { .. } => "unknown_service",
            StaleError::Stale { .. } => "stale",
        }
    }

    /// The service.
    pub fn key(&self) -> &ServiceKey {
        match self {
            StaleError::Unavailable { key, .. }
            | StaleError::UnknownService { key }
            | StaleError::Stale { key, .. } => key,
        }
    }
}

/// A set an operation may use, with how old it is.
#[derive(Debug, Clone)]
pub struct Usable {
    /// The set: possibly empty, which is an answer (SPEC W5), never replaced by an older one.
    pub snapshot: Arc<MemberSet>,
    /// Its age.
    pub age_ms: u64,
    /// Whether it is beyond the budget (allowed only for stale-tolerant reads).
    pub stale: bool,
}

impl View {
    /// The active set if an operation of this risk may use it now.
    pub fn usable(&self, risk: Risk, budget: &StaleBudget, now_ms: u64) -> Result<Usable, StaleError> {
        let Some(snapshot) = &self.active else {
            if self.absent {
                return Err(StaleError::UnknownService { key: self.key.clone() });
            }
            return Err(StaleError::Unavailable {
                key: self.key.clone(),
                last_error: self.last_error.clone(),
            });
        };
        let age_ms = now_ms.saturating_sub(self.confirmed_ms);
        let limit = budget.limit_ms(risk);
        let stale = age_ms > limit;
        if stale && !(risk == Risk::ReadOnly && budget.stale_reads_allowed) {
            return Err(StaleError::Stale {
                key: self.key.clone(),
                age_ms,
                budget_ms: limit,
            });
        }
        Ok(Usable {
            snapshot: Arc::clone(snapshot),
            age_ms,
            stale,
        })
    }
}
