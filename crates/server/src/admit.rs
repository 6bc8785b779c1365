//! Admission at every listener (SPEC W4, S6): each stream and parked query — a watch, a
//! dashboard live view, an xDS stream, a native or Consul blocking query — takes its slot
//! from the node's one [`Admission`] table before it holds anything, so no principal or
//! tenant can take the node's tasks, descriptors or memory from the others, whichever way
//! it comes in.
//!
//! ```text
//!  handler ─▶ app.gate.admit(caller, tenant, hold, ..) ─┬─ over a budget ─▶ 429 too_many_watches
//!                                                 │   naming the budget; audited as a denial
//!                                                 └─ ok: a Permit, owned by the stream or
//!                                                     query; its drop gives the slot back
//! ```

use muster_gate::Budgets;

use crate::config::ServerConfig;

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
