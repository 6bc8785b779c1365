//! What goes into and comes out of the [`LeaderEngine`](crate::LeaderEngine): the time, the
//! duties' proposals, probes, replies and notes.

use muster_core::api::CheckReportReply;
use muster_core::{Actor, InstanceId, LeaseId, Revision, ServiceKey};
use muster_health::checker::{Probe, ReportError};
use muster_health::hysteresis::Health;
use muster_registry::Command;

/// The time, both ways the engine needs it: monotonic milliseconds for lease deadlines (kept
/// in memory, never in the log) and Unix milliseconds for drain deadlines (committed, on the
/// proposing leader's wall clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    /// Monotonic milliseconds (since the shell started).
    pub monotonic_ms: u64,
    /// Unix milliseconds.
    pub unix_ms: u64,
}

impl Now {
    /// A monotonic time as Unix milliseconds.
    pub fn unix_of(&self, monotonic_ms: u64) -> u64 {
        self.unix_ms
            .saturating_add(monotonic_ms.saturating_sub(self.monotonic_ms))
    }
}

/// Names one proposal until the shell reports how it went ([`LeaderEngine::settled`]).
///
/// [`LeaderEngine::settled`]: crate::LeaderEngine::settled
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tag(pub u64);

/// Names a caller waiting for a reply; chosen by the shell, handed back in [`Output::Reply`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReplyTo(pub u64);

/// Which duty speaks in a proposal: its principal and authority (SPEC H4, L5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Duty {
    /// Lease expiry (`muster-lease-keeper`, as the owner).
    LeaseKeeper,
    /// The end of a drain (`muster-drain`, as the owner).
    Drain,
    /// The health checker (`muster-checker`, as the checker).
    Checker,
}

impl Duty {
    /// The principal the duty's commands are logged under.
    pub fn principal(self) -> &'static str {
        match self {
            Duty::LeaseKeeper => "muster-lease-keeper",
            Duty::Drain => "muster-drain",
            Duty::Checker => "muster-checker",
        }
    }

    /// The authority the duty's commands speak with.
    pub fn actor(self) -> Actor {
        match self {
            Duty::LeaseKeeper | Duty::Drain => Actor::Owner,
            Duty::Checker => Actor::Checker,
        }
    }
}

/// A command for the shell to propose; report its fate with the tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proposal {
    /// Hand back to [`LeaderEngine::settled`](crate::LeaderEngine::settled).
    pub tag: Tag,
    /// Who speaks.
    pub duty: Duty,
    /// What to propose.
    pub command: Command,
}

/// How a proposal went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Committed at `revision`; `changed` is false when the registry answered unchanged.
    Committed {
        /// The revision the reply named.
        revision: Revision,
        /// Whether it changed anything.
        changed: bool,
    },
    /// The registry refused it (e.g. a compare-and-swap that no longer matches).
    Refused,
    /// It did not commit (no quorum, leadership lost): the duty tries again.
    NotCommitted,
}

/// What an in-flight report did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InFlightReply {
    /// The drain ended: the instance was deregistered at `revision`.
    Ended {
        /// The deregistration's revision.
        revision: Revision,
    },
    /// No drain ended (none pending for that incarnation, work still in flight, or the owner
    /// lifted it): `revision` is the registry's.
    NothingEnded {
        /// The registry's revision.
        revision: Revision,
    },
}

/// A reply to a waiting caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// To an in-flight report.
    InFlight(InFlightReply),
    /// To a TTL report: the routing state after any change it caused, or the refusal.
    Report(Result<CheckReportReply, ReportError>),
    /// This node does not lead (any more): the caller retries on the leader.
    NotLeading,
    /// The change the request caused did not commit: the caller retries.
    NotCommitted,
}

/// What the engine reports for logs and metrics; nothing to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    /// The checker proposes a serving state (its threshold crossed).
    Crossing {
        /// The service.
        key: ServiceKey,
        /// The instance.
        instance: InstanceId,
        /// The state proposed.
        state: muster_core::ServingState,
        /// Why.
        reason: String,
    },
    /// Self-preservation held a checker's removal.
    Held {
        /// The service.
        key: ServiceKey,
        /// The instance.
        instance: InstanceId,
        /// The brake's reason.
        reason: String,
    },
    /// Self-preservation began holding removals from a service, or ended (SPEC H5): told
    /// once per hold.
    Protection {
        /// The service.
        key: ServiceKey,
        /// Began (`true`) or ended.
        active: bool,
        /// Its endpoints in routing when it began.
        serving: usize,
        /// All its endpoints when it began.
        total: usize,
    },
    /// Self-preservation held a lease's expiry (tried again next tick).
    ExpiryHeld {
        /// The lease.
        lease: LeaseId,
        /// The service whose brake held it.
        key: ServiceKey,
        /// The brake's reason.
        reason: String,
    },
    /// A liveness check crossed a threshold: reported, not routed on (SPEC H1).
    Liveness {
        /// The service.
        key: ServiceKey,
        /// The instance.
        instance: InstanceId,
        /// Where the check stands.
        health: Health,
        /// Why.
        reason: String,
    },
}

/// What an event asks the shell to do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
// A proposal carries its command (a checker's SetServing, a Deregister): the outputs live for
// one event, so boxing would add an allocation per proposal to save a few hundred bytes.
#[allow(clippy::large_enum_variant)]
pub enum Output {
    /// Propose a command.
    Propose(Proposal),
    /// Run a probe and hand its result to [`LeaderEngine::probe_result`](crate::LeaderEngine::probe_result).
    Probe(Probe),
    /// Answer a waiting caller.
    Reply {
        /// The caller.
        to: ReplyTo,
        /// The answer.
        reply: Reply,
    },
    /// Log or count.
    Note(Note),
}

/// Why a renewal was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RenewRefused {
    /// This node does not lead: renew on the leader.
    NotLeading,
    /// No such lease of that tenant, or its deadline has passed (it is expiring).
    NotFound,
}
