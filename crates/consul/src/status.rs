//! Muster serving states as Consul check statuses (SPEC E1, M3): a pure mapping.
//!
//! | Muster `serving` | the service's checks | extra check |
//! |---|---|---|
//! | `ready` | `passing` | — |
//! | `degraded` | `warning` | — |
//! | `draining` | `passing` | `_service_maintenance:<id>`, `critical` (what Consul shows for service maintenance) |
//! | `starting`, `not_serving`, `unknown` | `critical` | — |
//!
//! Muster keeps one serving state per endpoint, decided from all its checks (SPEC H1); it does
//! not keep a verdict per check. So every Consul check of an endpoint carries the endpoint's
//! status, and an endpoint without checks gets one (`service:<id>`) so that a client that
//! filters on `passing` still sees a `not_serving` endpoint go. A draining endpoint is
//! planned maintenance, not a failure: its own checks stay `passing` and the maintenance check
//! is the critical one, as when a Consul agent puts a service in maintenance.
//!
//! Every node answers for itself with `serfHealth` passing: the node a Consul client sees is
//! the one that answered, and it is alive.

use muster_core::ServingState;

/// A Consul check's status, as the `api` package spells it (`api.HealthPassing`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum CheckStatus {
    /// Healthy.
    Passing,
    /// Serving, but something is off.
    Warning,
    /// Not serving.
    Critical,
}

impl CheckStatus {
    /// The wire name.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            CheckStatus::Passing => "passing",
            CheckStatus::Warning => "warning",
            CheckStatus::Critical => "critical",
        }
    }
}

/// What `/v1/health/state/<state>` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StateFilter {
    /// Every check.
    Any,
    /// Checks in this status.
    Only(CheckStatus),
}

impl StateFilter {
    /// `any`, `passing`, `warning` or `critical` (what Consul accepts); `None` otherwise.
    pub(crate) fn parse(text: &str) -> Option<StateFilter> {
        if text == "any" {
            return Some(StateFilter::Any);
        }
        [CheckStatus::Passing, CheckStatus::Warning, CheckStatus::Critical]
            .into_iter()
            .find(|status| status.as_str() == text)
            .map(StateFilter::Only)
    }

    /// Whether a check in `status` is answered.
    pub(crate) fn admits(self, status: CheckStatus) -> bool {
        match self {
            StateFilter::Any => true,
            StateFilter::Only(wanted) => wanted == status,
        }
    }
}

/// The node check every node answers with.
pub(crate) const SERF_HEALTH_ID: &str = "serfHealth";
/// Its name, as a Consul agent names it.
pub(crate) const SERF_HEALTH_NAME: &str = "Serf Health Status";
/// Its output, as a Consul agent words it.
pub(crate) const SERF_HEALTH_OUTPUT: &str = "Agent alive and reachable";
/// The prefix of a service's maintenance check id (Consul's `structs.ServiceMaintPrefix`).
pub(crate) const MAINTENANCE_PREFIX: &str = "_service_maintenance:";
/// The maintenance check's name, as a Consul agent names it.
pub(crate) const MAINTENANCE_NAME: &str = "Service Maintenance Mode";
/// The maintenance check's notes when the drain gave no reason (Consul's
/// `defaultServiceMaintReason`).
pub(crate) const DEFAULT_MAINTENANCE_NOTES: &str =
    "Maintenance mode is enabled for this service, but no reason was provided. This is a default message.";

/// The status of an endpoint's own checks in `state`.
pub(crate) fn check_status(state: ServingState) -> CheckStatus {
    match state {
        ServingState::Ready | ServingState::Draining => CheckStatus::Passing,
        ServingState::Degraded => CheckStatus::Warning,
        ServingState::Starting | ServingState::NotServing | ServingState::Unknown => CheckStatus::Critical,
    }
}

/// Whether an endpoint in `state` shows the maintenance check.
pub(crate) fn in_maintenance(state: ServingState) -> bool {
    state == ServingState::Draining
}

/// The maintenance check's id for service id `id`.
pub(crate) fn maintenance_check_id(id: &str) -> String {
    format!("{MAINTENANCE_PREFIX}{id}")
}

/// The id of an endpoint's `n`-th check (0-based) of `count`: `service:<id>` for one,
/// `service:<id>:<n+1>` for several, as a Consul agent numbers the `Checks` of a
/// registration.
pub(crate) fn check_id(service_id: &str, n: usize, count: usize) -> String {
    if count <= 1 {
        format!("service:{service_id}")
    } else {
        format!("service:{service_id}:{}", n + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_is_passing_degraded_warning_and_everything_else_critical() {
        let cases = [
            (ServingState::Ready, CheckStatus::Passing, false),
            (ServingState::Degraded, CheckStatus::Warning, false),
            (ServingState::Draining, CheckStatus::Passing, true),
            (ServingState::Starting, CheckStatus::Critical, false),
            (ServingState::NotServing, CheckStatus::Critical, false),
            (ServingState::Unknown, CheckStatus::Critical, false),
        ];
        for (state, own, maintenance) in cases {
            assert_eq!(check_status(state), own, "{state:?}");
            assert_eq!(in_maintenance(state), maintenance, "{state:?}");
        }
    }

    #[test]
    fn check_ids_follow_the_consul_agent_s_numbering() {
        assert_eq!(check_id("web-1", 0, 1), "service:web-1");
        assert_eq!(check_id("web-1", 0, 0), "service:web-1");
        assert_eq!(check_id("web-1", 0, 2), "service:web-1:1");
        assert_eq!(check_id("web-1", 1, 2), "service:web-1:2");
        assert_eq!(maintenance_check_id("web-1"), "_service_maintenance:web-1");
    }

    #[test]
    fn health_state_accepts_consul_s_four_states_only() {
        assert_eq!(StateFilter::parse("any"), Some(StateFilter::Any));
        assert_eq!(
            StateFilter::parse("warning"),
            Some(StateFilter::Only(CheckStatus::Warning))
        );
        assert_eq!(StateFilter::parse("maintenance"), None);
        assert_eq!(StateFilter::parse("Passing"), None);
        assert!(StateFilter::Any.admits(CheckStatus::Critical));
        assert!(!StateFilter::Only(CheckStatus::Passing).admits(CheckStatus::Warning));
        for status in [CheckStatus::Passing, CheckStatus::Warning, CheckStatus::Critical] {
            assert_eq!(StateFilter::parse(status.as_str()), Some(StateFilter::Only(status)));
        }
    }
}
