//! What the checker decides and reports: proposals, held removals, liveness reports, and
//! TTL reports with their refusals.

use muster_core::check::CheckStatus;
use muster_core::{Incarnation, InstanceId, ServiceKey, ServingState};

use crate::hysteresis::Health;

/// An endpoint's routing state to propose, speaking as the checker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proposal {
    /// The service.
    pub key: ServiceKey,
    /// The instance.
    pub instance: InstanceId,
    /// The incarnation the checks belong to (the proposal is fenced by it).
    pub incarnation: Incarnation,
    /// The new state.
    pub state: ServingState,
    /// Why: the check and its crossing, e.g. `http://10.0.0.1:8080/healthz: 3 consecutive failures`.
    pub reason: String,
}

/// What a result or report led to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Propose this state.
    Propose(Proposal),
    /// Record a TTL check's new note: the state stays, the reason is the note.
    Note(Proposal),
    /// The endpoint should leave routing but the brake holds it there (logged, retried).
    Held {
        /// The service.
        key: ServiceKey,
        /// The instance.
        instance: InstanceId,
        /// The brake's reason.
        reason: String,
    },
    /// A liveness check crossed a threshold: reported, not routed on.
    Liveness {
        /// The service.
        key: ServiceKey,
        /// The instance.
        instance: InstanceId,
        /// Where the liveness check stands.
        health: Health,
        /// Why.
        reason: String,
    },
}

/// A TTL check's report, from the instance or its agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TtlReport {
    /// The service.
    pub key: ServiceKey,
    /// The instance.
    pub instance: InstanceId,
    /// The incarnation reporting (a stale one is refused).
    pub incarnation: Incarnation,
    /// Its status.
    pub status: CheckStatus,
    /// What the check saw, in the app's words: the reason of the state it sets.
    pub note: Option<String>,
}

/// Why a TTL report was refused (nothing changed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    /// No such endpoint is registered (with checks).
    #[error("{key}/{instance} is not registered with a ttl check")]
    NotFound {
        /// The service.
        key: ServiceKey,
        /// The instance.
        instance: InstanceId,
    },
    /// The report speaks for another incarnation than the registered one.
    #[error("incarnation {given} does not match the registered incarnation {registered}")]
    StaleIncarnation {
        /// The incarnation in the report.
        given: Incarnation,
        /// The registered one.
        registered: Incarnation,
    },
    /// The endpoint has checks, but no TTL check to report to.
    #[error("{key}/{instance} has no ttl check; its checks are probed by the registry")]
    NoTtlCheck {
        /// The service.
        key: ServiceKey,
        /// The instance.
        instance: InstanceId,
    },
}

impl ReportError {
    /// The stable error code.
    pub fn code(&self) -> &'static str {
        self.error_code().as_str()
    }

    /// The code as the shared vocabulary.
    pub fn error_code(&self) -> muster_core::ErrorCode {
        match self {
            ReportError::NotFound { .. } => muster_core::ErrorCode::NotFound,
            ReportError::StaleIncarnation { .. } => muster_core::ErrorCode::StaleIncarnation,
            ReportError::NoTtlCheck { .. } => muster_core::ErrorCode::NoTtlCheck,
        }
    }
}
