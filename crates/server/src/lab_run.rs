//! `GET /v1/lab/run?scenario=...`: the dashboard runs a `muster lab` simulation (SPEC X1, U2)
//! and shows its plots.
//!
//! ```text
//!  query ──validate (invalid_lab_request)──▶ LabRequest ──one at a time (lab_busy)──▶
//!      spawn_blocking(LabRunner::run) ──▶ {"report": ..., "plots": [{"name","svg"}]}
//!  no runner (muster_server::start) ──▶ 503 lab_unavailable
//! ```
//!
//! The lab (`muster-lab`) depends on this crate, so the server cannot call it: the binary
//! passes a [`LabRunner`] in [`Hooks`] to [`start_with`](crate::start_with). A `GET`,
//! because a same-origin `POST` carries an `Origin` the browser guard refuses (`guard`);
//! it changes no registry state, it only spends CPU, which the bounds below cap.
//!
//! # Bounds
//! One run at a time per server ([`LabState::busy`]); the run is on a blocking thread so no
//! request task waits on it. Parameters are bounded so one run takes seconds, not minutes:
//! see the constants.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use muster_core::ErrorCode;
use serde::{Deserialize, Serialize};

use muster_http::error::ApiError;

/// The most instances a dashboard run simulates: 2,000, four times the reference fleet.
const MAX_INSTANCES: u32 = 2_000;
/// The longest simulated run: 120 s, twice the reference scenario's 60 s.
const MAX_DURATION_MS: u64 = 120_000;
/// The shortest: 1 s, ten reference ticks.
const MIN_DURATION_MS: u64 = 1_000;
/// The most requests per simulated second, all callers together: 5,000, 2.5× the reference
/// 2,000. A pick per request is the simulation's hot loop, so this bounds a run's cost.
const MAX_REQUESTS_PER_S: u64 = 5_000;
/// The most setups compared in one run: the catalogue's eight (`all`).
const MAX_SETUPS: usize = 8;

/// What the dashboard asks the lab to run: the scenario's main parameters, already bounded.
/// `None`: the lab's default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LabRequest {
    /// Setups from the lab's catalogue (`reference`, `all`, or names like `ttl-2s`).
    pub setups: Vec<String>,
    /// Instances at the start.
    pub instances: Option<u32>,
    /// How many crash: a count (`50`) or a share (`10%`).
    pub kill: Option<String>,
    /// When they crash.
    pub crash_at_ms: Option<u64>,
    /// The run's length.
    pub duration_ms: Option<u64>,
    /// Callers.
    pub callers: Option<u32>,
    /// Requests per second of each caller.
    pub rate: Option<u32>,
    /// The seed of every random draw.
    pub seed: Option<u64>,
}

/// One plot of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LabPlot {
    /// What it shows (`failed_per_second`, `stale_windows`).
    pub name: String,
    /// The SVG document.
    pub svg: String,
}

/// What a run produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LabRun {
    /// The lab's report (`muster lab --json`).
    #[schema(value_type = Object)]
    pub report: serde_json::Value,
    /// Its plots.
    pub plots: Vec<LabPlot>,
}

/// Runs a lab scenario for the dashboard; `muster serve` passes one (`crates/muster`).
///
/// # Correctness
/// `run` must be pure computation on the request (no registry access, no I/O beyond
/// memory): it runs on a blocking thread, and a refused request (`Err`, a message naming
/// the parameter) must have started nothing.
pub trait LabRunner: Send + Sync {
    /// Runs the request, or refuses its parameters.
    fn run(&self, request: &LabRequest) -> Result<LabRun, String>;
}

/// What the binary plugs into the server ([`start_with`](crate::start_with)).
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct Hooks {
    /// Runs `GET /v1/lab/run`; without one the route answers `lab_unavailable`.
    pub lab: Option<Arc<dyn LabRunner>>,
}

impl Hooks {
    /// These hooks with `runner` for lab runs.
    pub fn with_lab(mut self, runner: Arc<dyn LabRunner>) -> Hooks {
        self.lab = Some(runner);
        self
    }
}

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hooks").field("lab", &self.lab.is_some()).finish()
    }
}

/// The route's state: the runner and whether a run is under way.
pub(crate) struct LabState {
    runner: Option<Arc<dyn LabRunner>>,
    busy: Arc<AtomicBool>,
}

impl LabState {
    pub(crate) fn new(hooks: &Hooks) -> Arc<LabState> {
        Arc::new(LabState {
            runner: hooks.lab.clone(),
            busy: Arc::new(AtomicBool::new(false)),
        })
    }
}

/// The query of `GET /v1/lab/run`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct LabQuery {
    /// The setups to compare: `reference` (default), `all`, or catalogue names separated by
    /// commas (`ttl-2s,watch`).
    #[serde(default)]
    #[param(pattern = r"^[a-z0-9-]{1,32}(,[a-z0-9-]{1,32}){0,7}$")]
    scenario: Option<String>,
    /// Instances at the start (1 to 2,000).
    #[serde(default)]
    #[param(minimum = 1, maximum = 2000)]
    instances: Option<u32>,
    /// How many crash: a count or a share (`50`, `10%`).
    #[serde(default)]
    #[param(pattern = r"^[0-9]{1,4}%?$")]
    kill: Option<String>,
    /// When they crash, in milliseconds (before the end).
    #[serde(default)]
    crash_at_ms: Option<u64>,
    /// The run's length in milliseconds (1,000 to 120,000).
    #[serde(default)]
    #[param(minimum = 1000, maximum = 120000)]
    duration_ms: Option<u64>,
    /// Callers (1 or more; callers × rate at most 5,000).
    #[serde(default)]
    #[param(minimum = 1)]
    callers: Option<u32>,
    /// Requests per second of each caller (1 or more).
    #[serde(default)]
    #[param(minimum = 1)]
    rate: Option<u32>,
    /// The seed of every random draw.
    #[serde(default)]
    seed: Option<u64>,
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::InvalidLabRequest, message)
}

/// Checks a query into a request; every refusal names its parameter.
pub(crate) fn validate(query: LabQuery) -> Result<LabRequest, ApiError> {
    let setups: Vec<String> = match &query.scenario {
        None => vec!["reference".to_owned()],
        Some(text) => text.split(',').map(str::to_owned).collect(),
    };
    if setups.is_empty() || setups.len() > MAX_SETUPS {
        return Err(invalid(format!("scenario: 1 to {MAX_SETUPS} setups, comma-separated")));
    }
    for name in &setups {
        let valid = !name.is_empty()
            && name.len() <= 32
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !valid {
            return Err(invalid(format!(
                "scenario: '{}' is not a setup name (lower-case letters, digits and '-')",
                name.escape_debug()
            )));
        }
    }
    if let Some(instances) = query.instances
        && !(1..=MAX_INSTANCES).contains(&instances)
    {
        return Err(invalid(format!("instances: 1 to {MAX_INSTANCES}, got {instances}")));
    }
    if let Some(kill) = &query.kill {
        let digits = kill.strip_suffix('%').unwrap_or(kill);
        if digits.is_empty() || digits.len() > 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(invalid(format!(
                "kill: a count or a share like 50 or 10%, got '{}'",
                kill.escape_debug()
            )));
        }
    }
    if let Some(duration) = query.duration_ms
        && !(MIN_DURATION_MS..=MAX_DURATION_MS).contains(&duration)
    {
        return Err(invalid(format!(
            "duration_ms: {MIN_DURATION_MS} to {MAX_DURATION_MS}, got {duration}"
        )));
    }
    if let Some(crash_at) = query.crash_at_ms
        && crash_at >= query.duration_ms.unwrap_or(MAX_DURATION_MS)
    {
        return Err(invalid(format!(
            "crash_at_ms: must be before the run's end, got {crash_at}"
        )));
    }
    for (name, value) in [("callers", query.callers), ("rate", query.rate)] {
        if value == Some(0) {
            return Err(invalid(format!("{name}: at least 1")));
        }
    }
    // The lab's defaults: 20 callers, 100 requests/s each.
    let per_second = u64::from(query.callers.unwrap_or(20)) * u64::from(query.rate.unwrap_or(100));
    if per_second > MAX_REQUESTS_PER_S {
        return Err(invalid(format!(
            "callers × rate: at most {MAX_REQUESTS_PER_S} requests/s in all, got {per_second}"
        )));
    }
    Ok(LabRequest {
        setups,
        instances: query.instances,
        kill: query.kill,
        crash_at_ms: query.crash_at_ms,
        duration_ms: query.duration_ms,
        callers: query.callers,
        rate: query.rate,
        seed: query.seed,
    })
}

/// Clears the busy flag when the run ends, however it ends.
struct Running(Arc<AtomicBool>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// `GET /v1/lab/run`.
pub(crate) async fn run(
    State(state): State<Arc<LabState>>,
    headers: axum::http::HeaderMap,
    query: Result<Query<LabQuery>, QueryRejection>,
) -> Result<Json<LabRun>, ApiError> {
    refuse_cross_site(&headers)?;
    let Query(query) = query.map_err(|rejection| invalid(format!("query: {}", rejection.body_text())))?;
    let request = validate(query)?;
    let Some(runner) = state.runner.clone() else {
        return Err(ApiError::new(
            ErrorCode::LabUnavailable,
            "this server has no lab runner (it was started as a library, not by `muster serve`)",
        ));
    };
    if state.busy.swap(true, Ordering::AcqRel) {
        return Err(ApiError::new(
            ErrorCode::LabBusy,
            "a lab run is under way on this server; retry when it is done",
        ));
    }
    // Moved into the blocking task: a caller that goes away does not free the slot before
    // the simulation has ended.
    let running = Running(Arc::clone(&state.busy));
    let outcome = tokio::task::spawn_blocking(move || {
        let _running = running;
        runner.run(&request)
    })
    .await
    .map_err(|error| ApiError::new(ErrorCode::Internal, format!("the lab run failed: {error}")))?;
    outcome.map(Json).map_err(invalid)
}

/// A run costs seconds of CPU, and a GET from another site's page (an `<img src>`) carries
/// no `Origin` for the browser guard to refuse (SPEC S6). Browsers name the request's site
/// in `Sec-Fetch-Site`: only the dashboard's own page (`same-origin`) or the user typing the
/// URL (`none`) may start one; native clients send no such header.
fn refuse_cross_site(headers: &axum::http::HeaderMap) -> Result<(), ApiError> {
    match headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        None | Some("same-origin" | "none") => Ok(()),
        Some(site) => Err(ApiError::new(
            ErrorCode::ForbiddenOrigin,
            format!("a lab run may start only from the dashboard itself, not from a {site} page"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(text: &str) -> LabQuery {
        let Query(query) = Query::<LabQuery>::try_from_uri(&format!("http://x/?{text}").parse().unwrap()).unwrap();
        query
    }

    #[test]
    fn defaults_run_the_reference_setups() {
        let request = validate(query("")).unwrap();
        assert_eq!(request.setups, ["reference"]);
        assert_eq!(request.instances, None);
    }

    #[test]
    fn every_out_of_range_parameter_is_refused_by_name() {
        for (text, named) in [
            ("instances=0", "instances"),
            ("instances=2001", "instances"),
            ("duration_ms=999", "duration_ms"),
            ("duration_ms=120001", "duration_ms"),
            ("duration_ms=5000&crash_at_ms=5000", "crash_at_ms"),
            ("kill=ten", "kill"),
            ("kill=%25", "kill"),
            ("callers=0", "callers"),
            ("callers=100&rate=100", "callers × rate"),
            ("scenario=TTL", "scenario"),
            ("scenario=a,,b", "scenario"),
            ("scenario=a,b,c,d,e,f,g,h,i", "scenario"),
        ] {
            let error = validate(query(text)).unwrap_err();
            assert_eq!(error.code, ErrorCode::InvalidLabRequest, "{text}");
            assert!(error.message.starts_with(named), "{text}: {}", error.message);
        }
    }

    #[test]
    fn a_valid_request_keeps_its_parameters() {
        let request = validate(query(
            "scenario=ttl-2s,watch&instances=100&kill=10%25&crash_at_ms=5000&duration_ms=20000&callers=5&rate=50&seed=7",
        ))
        .unwrap();
        assert_eq!(request.setups, ["ttl-2s", "watch"]);
        assert_eq!(request.kill.as_deref(), Some("10%"));
        assert_eq!(
            (request.instances, request.callers, request.rate, request.seed),
            (Some(100), Some(5), Some(50), Some(7))
        );
    }
}
