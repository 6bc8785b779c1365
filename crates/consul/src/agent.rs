//! The agent routes of the Consul-compatible API (`/v1/agent/...`, SPEC E1): registration,
//! deregistration, maintenance, TTL check updates, and the agent's own view (`agent_read`).
//!
//! | route | Muster |
//! |---|---|
//! | `PUT /v1/agent/service/register[?replace-existing-checks]` | `RegisterNext` (a new incarnation the registry picks), as the app |
//! | `PUT /v1/agent/service/deregister/<id>` | `Deregister` of the live incarnation |
//! | `PUT /v1/agent/service/maintenance/<id>?enable=true&reason=` | `Drain` as the owner (no grace): `draining`, shown as maintenance |
//! | `PUT /v1/agent/service/maintenance/<id>?enable=false` | `SetServing` as the owner: `ready`, or `starting` for an endpoint with checks (its next pass makes it ready) |
//! | `PUT /v1/agent/check/pass\|warn\|fail/<check-id>[?note=]` | a TTL report pass / warn / fail (`Gate::ttl_report`, on the leader) |
//! | `PUT /v1/agent/check/update/<check-id>` `{Status, Output}` | the same, `passing` / `warning` / `critical` |
//! | `GET /v1/agent/services`, `/v1/agent/service/<id>`, `/v1/agent/checks`, `/v1/agent/self` | `agent_read` |
//!
//! Every write needs Consul's `service:write`, which is Muster's register (registration),
//! deregister, set_state (maintenance) or renew (check updates) on the service; reads need
//! read and leave out what the caller may not read. A write is judged before anything is
//! looked up (SPEC S1, S2): without credentials it is refused at once; naming an ID, it needs
//! the verb somewhere in the namespace, then finds the ID only among the services the caller
//! may act on, so no reply names a service the caller may not read (an ID held only where it
//! may not act is a bare 403). Errors are Consul's: plain text, 400 for
//! a body or name Muster refuses (the registry's own refusals included: a registration that
//! breaks a limit is a bad request to a Consul client), 404 for an unknown service or check
//! ID, 403 `Permission denied`.
//!
//! # Server-assigned incarnations, and what this path gives up
//! Consul's requests carry no incarnation (SPEC L2). Each registration is `RegisterNext`:
//! the registry, while applying it, gives it the incarnation after the highest it knows for
//! the instance (live, or removed within the fence retention). That is committed state, so
//! the number is the same on every replica and increases across restarts and leader changes;
//! the re-registration of a restarted process fences everything the old one left: the
//! leader's pending duties for it (a drain's end, a checker verdict, the
//! `DeregisterCriticalServiceAfter` removal) and any native write still naming the old
//! incarnation. Compared with the native API this path gives up:
//! - fencing between Consul callers: deregister, maintenance and check updates name the
//!   service ID, not an incarnation, and act on whatever incarnation is live, so an old
//!   process's late `deregister` removes its replacement, as it would in Consul;
//! - idempotent retries: a retried registration is a new incarnation (it cannot be told from
//!   a restart); it replaces the record (same instance, never a second endpoint) and resets
//!   its checks' verdicts, except that a record whose checks are unchanged keeps a `ready` or
//!   `degraded` state, as a Consul agent keeps check status across re-registration;
//! - leases: a Consul registration has none and stays until deregistered or reaped;
//! - compare-and-swap, the owner/app split (maintenance speaks as the owner, everything else
//!   as the app) and per-check TTL reports (a report applies to every TTL check of the
//!   endpoint, and its note is the endpoint's one `Output`).
//!
//! A TTL report's `?note=` (or `update`'s `Output`) is the reason recorded with the state it
//! sets, shown as `Output` wherever Consul shows it; cut to the registry's text limit (256
//! bytes by default, where Consul keeps 4 KiB). A note that changes while the state holds is
//! recorded at most once a minute per instance (Consul's `check_update_interval` is 5
//! minutes), from the cluster's format 3 on.
//!
//! What Consul accepts and this path refuses (400, nothing changed): an `Address` that is a
//! host name (Muster records IP addresses; `localhost` is 127.0.0.1), a registration whose
//! tags, meta and check names exceed the registry's label limits (each tag is a label; the
//! default policy allows 32 labels and 2,048 bytes of them, so a Traefik- or Fabio-style
//! service with dozens of tags needs a raised `[registry]` limit), and an ID already
//! registered under another service name (deregister it first; Consul would replace it).
//!
//! `replace-existing-checks` is accepted and changes nothing: every registration replaces
//! the endpoint's checks with those it names.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{FromRequest, Path, Request, State};
use axum::http::StatusCode;
use axum::routing::{get, put};
use axum::{Extension, Router};
use bytes::Bytes;
use muster_auth::Verb;
use muster_core::api::CheckReportRequest;
use muster_core::check::CheckStatus as TtlStatus;
use muster_core::{Actor, CheckKind, ErrorCode, Incarnation, ServiceKey, ServingState};
use muster_registry::{Command, Deregister, Drain, LeaseSpec, Register, SetServing, Target};

use super::agent_body::{self, BodyError, InitialStatus};
use super::agent_lookup::{self, Found, Miss};
use super::agent_map::{self, Mapped};
use super::error::ConsulError;
use super::token::{ConsulCaller, query_pairs};
use super::{ConsulView, agent_read};
use crate::app::ConsulApp;
use muster_gate::forward::LeaderCall;
use muster_http::error::ApiError;
use muster_http::guard::BodyReadTimeout;
use muster_http::peer::Peer;

/// The body read deadline of a request that came without the guard's (as `extract`'s).
const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Consul's reason for maintenance enabled without one (`defaultServiceMaintReason`).
const DEFAULT_MAINTENANCE_REASON: &str =
    "Maintenance mode is enabled for this service, but no reason was provided. This is a default message.";

/// The agent routes, merged into the Consul router ([`super::router`]).
pub(super) fn routes() -> Router<Arc<ConsulApp>> {
    Router::new()
        .route("/v1/agent/service/register", put(register))
        .route("/v1/agent/service/deregister/{id}", put(deregister))
        .route("/v1/agent/service/maintenance/{id}", put(maintenance))
        .route(
            "/v1/agent/check/pass/{id}",
            put(|app, caller, view, id, request| report_as(TtlStatus::Pass, app, caller, view, id, request)),
        )
        .route(
            "/v1/agent/check/warn/{id}",
            put(|app, caller, view, id, request| report_as(TtlStatus::Warn, app, caller, view, id, request)),
        )
        .route(
            "/v1/agent/check/fail/{id}",
            put(|app, caller, view, id, request| report_as(TtlStatus::Fail, app, caller, view, id, request)),
        )
        .route("/v1/agent/check/update/{id}", put(update))
        .route("/v1/agent/services", get(agent_read::services))
        .route("/v1/agent/service/{id}", get(agent_read::service))
        .route("/v1/agent/checks", get(agent_read::checks))
        .route("/v1/agent/self", get(agent_read::agent_self))
}

fn bad(error: BodyError) -> ConsulError {
    ConsulError::bad_request(error.0)
}

/// A native refusal as a Consul client should see it: what the registry refuses about the
/// request's content is a 400 (a Consul agent has no quotas or fences to answer 403 or 409
/// with, and py-consul would take a 403 for an ACL denial); a revoked token is `ACL not
/// found`; the rest keeps its status.
fn refused(error: ApiError) -> ConsulError {
    match error.code {
        ErrorCode::Unauthenticated => ConsulError::acl_not_found(),
        ErrorCode::PermissionDenied => ConsulError::permission_denied(),
        _ if error.status == StatusCode::UNPROCESSABLE_ENTITY
            || error.status == StatusCode::CONFLICT
            || error.code == ErrorCode::QuotaExceeded =>
        {
            ConsulError::bad_request(format!("Invalid service: {}: {}", error.code.as_str(), error.message))
        }
        _ => ConsulError::from(error),
    }
}

/// Reads a request's body within the guard's deadline.
async fn body(request: Request) -> Result<Bytes, ConsulError> {
    let deadline = request
        .extensions()
        .get::<BodyReadTimeout>()
        .map_or(DEFAULT_BODY_READ_TIMEOUT, |timeout| timeout.0);
    match tokio::time::timeout(deadline, Bytes::from_request(request, &())).await {
        Err(_) => Err(ConsulError::new(
            StatusCode::REQUEST_TIMEOUT,
            format!("Request body did not arrive within {} ms", deadline.as_millis()),
        )),
        Ok(Err(rejection)) => Err(ConsulError::new(rejection.status(), rejection.body_text())),
        Ok(Ok(bytes)) => Ok(bytes),
    }
}

/// `PUT /v1/agent/service/register`.
async fn register(
    State(app): State<Arc<ConsulApp>>,
    caller: ConsulCaller,
    Extension(view): Extension<Arc<ConsulView>>,
    request: Request,
) -> Result<(), ConsulError> {
    caller.authenticated(&app, request.uri().path())?;
    let query = query_pairs(request.uri().query());
    // No `Address`: where the caller is, the nearest Muster knows to a Consul agent's node.
    let caller_ip = request
        .extensions()
        .get::<Peer>()
        .map_or(view.node_address, |peer| peer.addr.ip());
    let bytes = body(request).await?;
    let registration = agent_body::registration(&bytes).map_err(bad)?;
    let (place, named) = agent_lookup::placement(&view, &query);
    let mut mapped = agent_map::map(&registration, &place, named, caller_ip).map_err(bad)?;
    caller.require(&app, &mapped.key, Verb::Register)?;
    if let Some(other) = app
        .gate
        .read(|registry| agent_lookup::held_elsewhere(registry, &mapped.key, &mapped.instance))
    {
        let id = registration
            .id
            .as_deref()
            .filter(|id| !id.is_empty())
            .unwrap_or(&registration.name);
        // The other service is named only to a caller who may read it (SPEC S3).
        let other = if caller.may(&other, Verb::Read) {
            format!("service {:?}", other.service.as_str())
        } else {
            "another service".to_owned()
        };
        return Err(ConsulError::bad_request(format!(
            "Service ID {id:?} is registered as {other}: deregister it first \
             (PUT /v1/agent/service/deregister/{id}); Muster keeps instances per service",
        )));
    }
    keep_check_verdicts(&app, &mut mapped);
    let command = Command::RegisterNext(Register {
        target: Target {
            key: mapped.key,
            instance: mapped.instance,
            // Ignored: the registry picks the incarnation.
            incarnation: Incarnation(0),
        },
        spec: mapped.spec,
        lease: LeaseSpec::None,
        expected_revision: None,
    });
    let actor = muster_gate::role::capped(caller.caller().role(), Actor::App);
    app.gate
        .propose(command, app.gate.meta(actor, caller.caller()))
        .await
        .map_err(refused)?;
    Ok(())
}

/// A re-registration whose checks are those of the live record keeps its `ready` or
/// `degraded` state (as a Consul agent keeps check status across re-registration) instead of
/// starting over; one that says its own initial status keeps that.
fn keep_check_verdicts(app: &ConsulApp, mapped: &mut Mapped) {
    if mapped.spec.serving.is_some() || mapped.spec.checks.is_empty() {
        return;
    }
    let Ok(checks) = mapped
        .spec
        .checks
        .iter()
        .map(|check| check.validate("check"))
        .collect::<Result<Vec<_>, _>>()
    else {
        return;
    };
    let kept = app.gate.read(|registry| {
        let live = registry.snapshot(&mapped.key)?.get(&mapped.instance).cloned()?;
        (*live.checks == checks[..] && matches!(live.serving, ServingState::Ready | ServingState::Degraded))
            .then_some(live.serving)
    });
    mapped.spec.serving = kept;
}

/// A lookup that found nothing the caller may act on, as the reply: the lookup's own error,
/// or a `Permission denied` audited against the service found (named in the audit trail
/// only).
fn missed(app: &ConsulApp, caller: &ConsulCaller, verb: Verb, miss: Miss) -> ConsulError {
    match miss {
        Miss::Error(error) => error,
        Miss::Denied(key) => denied(app, caller, &key, verb),
    }
}

/// The audited refusal of `verb` on `key` (the rights changed in between: refused anyway).
fn denied(app: &ConsulApp, caller: &ConsulCaller, key: &ServiceKey, verb: Verb) -> ConsulError {
    caller
        .require(app, key, verb)
        .err()
        .unwrap_or_else(ConsulError::permission_denied)
}

/// The endpoint of a service ID in the request's placement that the caller may use `verb`
/// on: judged in the namespace first, then looked for among those services only.
fn find_service(
    app: &ConsulApp,
    caller: &ConsulCaller,
    view: &ConsulView,
    query: Option<&str>,
    id: &str,
    verb: Verb,
) -> Result<Found, ConsulError> {
    let (place, _) = agent_lookup::placement(view, &query_pairs(query));
    caller.require_in(app, &place, verb)?;
    app.gate
        .read(|registry| {
            agent_lookup::service(
                registry,
                &place,
                id,
                |key| caller.may(key, verb),
                |key| caller.may(key, Verb::Read),
            )
        })
        .map_err(|miss| missed(app, caller, verb, miss))
}

fn target_of(found: &Found) -> Target {
    Target {
        key: found.key.clone(),
        instance: found.endpoint.instance.clone(),
        incarnation: found.endpoint.incarnation,
    }
}

/// `PUT /v1/agent/service/deregister/<id>`.
async fn deregister(
    State(app): State<Arc<ConsulApp>>,
    caller: ConsulCaller,
    Extension(view): Extension<Arc<ConsulView>>,
    Path(id): Path<String>,
    request: Request,
) -> Result<(), ConsulError> {
    caller.authenticated(&app, request.uri().path())?;
    let found = find_service(&app, &caller, &view, request.uri().query(), &id, Verb::Deregister)?;
    caller.require(&app, &found.key, Verb::Deregister)?;
    let command = Deregister {
        target: target_of(&found),
        expected_revision: None,
    };
    let actor = muster_gate::role::capped(caller.caller().role(), Actor::App);
    match app
        .gate
        .propose(command.into(), app.gate.meta(actor, caller.caller()))
        .await
    {
        Ok(_) => Ok(()),
        // Gone (or replaced) since it was looked up.
        Err(error) if error.code == ErrorCode::NotFound => Err(agent_lookup::unknown_service(&id)),
        Err(error) => Err(refused(error)),
    }
}

/// Go's `strconv.ParseBool`, which Consul reads `enable` with (py-consul sends `True`).
fn parse_bool(text: &str) -> Option<bool> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// `PUT /v1/agent/service/maintenance/<id>?enable=&reason=`.
async fn maintenance(
    State(app): State<Arc<ConsulApp>>,
    caller: ConsulCaller,
    Extension(view): Extension<Arc<ConsulView>>,
    Path(id): Path<String>,
    request: Request,
) -> Result<(), ConsulError> {
    caller.authenticated(&app, request.uri().path())?;
    let query = query_pairs(request.uri().query());
    let value = |name: &str| query.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    let enable = match value("enable") {
        None | Some("") => return Err(ConsulError::bad_request("Missing value for enable")),
        Some(text) => {
            parse_bool(text).ok_or_else(|| ConsulError::bad_request(format!("Invalid value for enable: {text:?}")))?
        }
    };
    let reason = value("reason")
        .filter(|r| !r.is_empty())
        .unwrap_or(DEFAULT_MAINTENANCE_REASON);
    let found = find_service(&app, &caller, &view, request.uri().query(), &id, Verb::SetState)?;
    caller.require(&app, &found.key, Verb::SetState)?;
    let command: Command = if enable {
        Drain {
            target: target_of(&found),
            reason: reason.to_owned(),
            grace_ms: None,
            expected_revision: None,
        }
        .into()
    } else {
        if found.endpoint.serving != ServingState::Draining {
            return Ok(());
        }
        // Out of maintenance: usable at once without checks; with checks, after their next
        // pass (the checker decides from there on).
        let state = if found.endpoint.checks.is_empty() {
            ServingState::Ready
        } else {
            ServingState::Starting
        };
        SetServing {
            target: target_of(&found),
            state,
            reason: "maintenance mode disabled".to_owned(),
            expected_revision: None,
        }
        .into()
    };
    // The owner's authority, capped at the token's role (SPEC L5): an app's token enters
    // and leaves its own maintenance, never lifts an owner's drain.
    let actor = muster_gate::role::capped(caller.caller().role(), Actor::Owner);
    let applied = app
        .gate
        .propose(command, app.gate.meta(actor, caller.caller()))
        .await
        .map_err(refused)?;
    // Leaving maintenance that the owner set (or, before the registry's format 2, any) is not
    // the app's to do: said, not answered 200 with nothing changed.
    if applied.unchanged == Some(muster_registry::Unchanged::DrainHeld) {
        return Err(ConsulError::new(
            StatusCode::FORBIDDEN,
            "Permission denied: the instance was put in maintenance by its owner; only the owner's token takes it out",
        ));
    }
    Ok(())
}

/// A TTL check's report for check `id`.
async fn report(
    app: Arc<ConsulApp>,
    caller: ConsulCaller,
    view: &ConsulView,
    query: Option<&str>,
    id: &str,
    status: TtlStatus,
    note: Option<String>,
) -> Result<(), ConsulError> {
    let (place, _) = agent_lookup::placement(view, &query_pairs(query));
    caller.require_in(&app, &place, Verb::Renew)?;
    let (found, index) = app
        .gate
        .read(|registry| agent_lookup::check(registry, &place, id, |key| caller.may(key, Verb::Renew)))
        .map_err(|miss| missed(&app, &caller, Verb::Renew, miss))?;
    caller.require(&app, &found.key, Verb::Renew)?;
    if !matches!(found.endpoint.checks[index].kind, CheckKind::Ttl { .. }) {
        // Consul's answer (a 500) for an update of a check that is not a TTL check.
        return Err(ConsulError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("CheckID {id:?} does not have associated TTL"),
        ));
    }
    let (key, instance) = (found.key.clone(), found.endpoint.instance.clone());
    let request = CheckReportRequest {
        incarnation: found.endpoint.incarnation,
        status,
        note,
    };
    let call = LeaderCall::Report {
        key: key.clone(),
        instance: instance.clone(),
        request: request.clone(),
    };
    match app
        .gate
        .on_leader(call, app.gate.ttl_report(key, instance, request))
        .await
    {
        Ok(_) => Ok(()),
        Err(error) if matches!(error.code, ErrorCode::NotFound | ErrorCode::StaleIncarnation) => {
            Err(agent_lookup::unknown_check(id))
        }
        Err(error) => Err(refused(error)),
    }
}

/// `PUT /v1/agent/check/pass|warn|fail/<id>`: a TTL report of `status`.
async fn report_as(
    status: TtlStatus,
    State(app): State<Arc<ConsulApp>>,
    caller: ConsulCaller,
    Extension(view): Extension<Arc<ConsulView>>,
    Path(id): Path<String>,
    request: Request,
) -> Result<(), ConsulError> {
    caller.authenticated(&app, request.uri().path())?;
    let query = request.uri().query();
    // Consul's `?note=`: the check's `Output` (an empty note is none).
    let note = query_pairs(query)
        .into_iter()
        .find_map(|(name, value)| (name == "note" && !value.is_empty()).then_some(value));
    report(app, caller, &view, query, &id, status, note).await
}

/// `PUT /v1/agent/check/update/<id>` with `{"Status": ..., "Output": ...}`.
async fn update(
    State(app): State<Arc<ConsulApp>>,
    caller: ConsulCaller,
    Extension(view): Extension<Arc<ConsulView>>,
    Path(id): Path<String>,
    request: Request,
) -> Result<(), ConsulError> {
    caller.authenticated(&app, request.uri().path())?;
    let query = request.uri().query().map(str::to_owned);
    let bytes = body(request).await?;
    let update = agent_body::check_update(&bytes).map_err(bad)?;
    let status = match update.status {
        InitialStatus::Passing => TtlStatus::Pass,
        InitialStatus::Warning => TtlStatus::Warn,
        InitialStatus::Critical => TtlStatus::Fail,
    };
    let note = Some(update.output).filter(|output| !output.is_empty());
    report(app, caller, &view, query.as_deref(), &id, status, note).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enable_reads_as_go_s_parse_bool() {
        for yes in ["1", "t", "T", "true", "True", "TRUE"] {
            assert_eq!(parse_bool(yes), Some(true), "{yes}");
        }
        for no in ["0", "f", "F", "false", "False", "FALSE"] {
            assert_eq!(parse_bool(no), Some(false), "{no}");
        }
        for neither in ["", "yes", "on", "tRuE"] {
            assert_eq!(parse_bool(neither), None, "{neither}");
        }
    }
}
