//! Admission at every listener (SPEC W4, S6): each stream and parked query — a watch, a
//! dashboard live view, an xDS stream, a native or Consul blocking query — takes its slot
//! from the node's one [`Admission`] table before it holds anything, so no principal or
//! tenant can take the node's tasks, descriptors or memory from the others, whichever way
//! it comes in.
//!
//! ```text
//!  handler ─▶ app.admit(caller, tenant, hold, ..) ─┬─ over a budget ─▶ 429 too_many_watches
//!                                                 │   naming the budget; audited as a denial
//!                                                 └─ ok: a Permit, owned by the stream or
//!                                                     query; its drop gives the slot back
//! ```

use std::net::SocketAddr;

use muster_auth::Verb;
use muster_core::api::AdmissionStatus;
use muster_core::{ErrorCode, Label};
use muster_gate::{Budget, Budgets, Hold, Holder, Permit, Refusal};

use crate::app::App;
use crate::audit::Denial as AuditDenial;
use crate::auth::Caller;
use crate::config::ServerConfig;
use muster_http::error::ApiError;

/// The live views one principal may stream in one tenant: a dashboard tab holds one or two,
/// so 64 is a team's open tabs, while one principal can no longer take every view of the
/// node from the operator's own dashboard.
pub(crate) const LIVE_PER_PRINCIPAL: usize = 64;

/// The budgets a configuration sets.
pub(crate) fn budgets(config: &ServerConfig) -> Budgets {
    Budgets {
        per_principal: config.max_watches_per_principal,
        per_tenant: config.max_watches_per_tenant,
        live_per_principal: LIVE_PER_PRINCIPAL,
        names_per_principal: config.xds.max_names_per_principal,
    }
}

/// The holder for `caller` addressing `tenant` (`None`: cluster-wide).
pub(crate) fn holder(caller: &Caller, tenant: Option<&Label>) -> Holder {
    Holder::new(tenant.cloned(), caller.principal().clone())
}

impl App {
    /// One more `hold` for `caller` in `tenant`, or 429 `too_many_watches` naming the spent
    /// budget; the refusal is on the audit trail under the tenant asked for. `resource`
    /// names what was asked for (`GET /v1/watch/acme/prod/api`).
    pub(crate) fn admit(
        &self,
        caller: &Caller,
        tenant: Option<&Label>,
        hold: Hold,
        source: Option<SocketAddr>,
        resource: impl FnOnce() -> String,
    ) -> Result<Permit, ApiError> {
        self.admission
            .acquire(&holder(caller, tenant), hold)
            .map_err(|refusal| self.refused(&refusal, hold, source, resource()))
    }

    /// Records `refusal` and turns it into the error reply.
    pub(crate) fn refused(
        &self,
        refusal: &Refusal,
        hold: Hold,
        source: Option<SocketAddr>,
        resource: String,
    ) -> ApiError {
        let message = refusal.to_string();
        tracing::info!(
            principal = %refusal.holder.principal,
            ?source,
            budget = refusal.budget.as_str(),
            "admission refused"
        );
        self.audit.denied(AuditDenial {
            principal: Some(refusal.holder.principal.clone()),
            tenant: refusal.holder.tenant.clone(),
            key: None,
            verb: match hold {
                Hold::Parked => Verb::Read,
                Hold::Watch | Hold::Live | Hold::Xds => Verb::Watch,
            }
            .to_string(),
            resource,
            code: ErrorCode::TooManyWatches,
            reason: message.clone(),
            source,
            at_ms: self.clock.unix_now_ms(),
        });
        ApiError::new(ErrorCode::TooManyWatches, message)
    }
}

/// A write refused for its principal's rate: `429 rate_limited`, with `Retry-After` in whole
/// seconds (at least 1).
#[derive(Debug)]
pub(crate) struct RateLimited {
    pub(crate) error: ApiError,
    pub(crate) retry_after_s: u64,
}

impl RateLimited {
    /// The `Retry-After` header's value.
    pub(crate) fn retry_after(&self) -> axum::http::HeaderValue {
        axum::http::HeaderValue::from(self.retry_after_s)
    }
}

impl axum::response::IntoResponse for RateLimited {
    fn into_response(self) -> axum::response::Response {
        let retry_after = self.retry_after();
        let mut response = self.error.into_response();
        response
            .headers_mut()
            .insert(axum::http::header::RETRY_AFTER, retry_after);
        response
    }
}

/// Whether `method` changes something: what the write rate counts.
pub(crate) fn is_write(method: &axum::http::Method) -> bool {
    !matches!(
        *method,
        axum::http::Method::GET | axum::http::Method::HEAD | axum::http::Method::OPTIONS
    )
}

impl App {
    /// Takes one write from `caller`'s rate (SPEC W4, S6), or refuses it; the refusal is on
    /// the audit trail (aggregated per source, as every denial is). Without authentication
    /// there is no rate: every caller is the one anonymous principal.
    pub(crate) fn throttle(
        &self,
        caller: &Caller,
        tenant: Option<&Label>,
        source: Option<SocketAddr>,
        resource: impl FnOnce() -> String,
    ) -> Result<(), RateLimited> {
        if !self.auth.enabled {
            return Ok(());
        }
        let Err(throttled) = self.write_rates.take(caller.principal(), self.clock.now_ms()) else {
            return Ok(());
        };
        let message = throttled.to_string();
        self.audit.denied(AuditDenial {
            principal: Some(throttled.principal.clone()),
            tenant: tenant.cloned(),
            key: None,
            verb: "write".to_owned(),
            resource: resource(),
            code: ErrorCode::RateLimited,
            reason: message.clone(),
            source,
            at_ms: self.clock.unix_now_ms(),
        });
        Err(RateLimited {
            error: ApiError::new(ErrorCode::RateLimited, message),
            retry_after_s: throttled.retry_after_ms.div_ceil(1_000).max(1),
        })
    }
}

/// The admission table for `/v1/status`: totals only, no tenant or principal names.
pub(crate) fn status(app: &App) -> AdmissionStatus {
    let report = app.admission.report();
    let budgets = app.admission.budgets();
    let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
    AdmissionStatus {
        held: Hold::ALL
            .into_iter()
            .map(|hold| (hold.as_str().to_owned(), count(report.held.of(hold))))
            .collect(),
        xds_names: count(report.held.names),
        principals: count(report.principals),
        tenants: count(report.tenants.len()),
        budgets: Budget::ALL
            .into_iter()
            .map(|budget| (budget.as_str().to_owned(), count(budgets.of(budget))))
            .collect(),
        refused: Budget::ALL
            .into_iter()
            .zip(report.refused)
            .map(|(budget, refused)| (budget.as_str().to_owned(), refused))
            .collect(),
    }
}
