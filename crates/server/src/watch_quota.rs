//! Caps on open watch streams (SPEC W4, S6): per principal and per tenant, so one client (or
//! one tenant's fleet) cannot hold every stream, task and descriptor of a node.
//!
//! ```text
//!  watch request ──▶ acquire(tenant, principal) ─ over a cap ─▶ 429 too_many_watches (no stream)
//!                         │ ok: a WatchPermit
//!                         ▼
//!                    the stream owns the permit ──▶ the stream ends (client gone, resync,
//!                                                   closing) ──▶ permit dropped: the slots return
//! ```
//!
//! # Correctness
//! - The counts only change under one lock, and `acquire` takes both slots or neither, so a
//!   principal's and a tenant's count never exceed their caps.
//! - A slot is given back exactly once: by the [`WatchPermit`]'s drop. An entry whose count
//!   reaches zero is removed, so the maps hold only principals and tenants with open
//!   streams.
//!
//! The principal is the caller's (`auth::Caller::principal`): its token's, or the anonymous
//! principal while authentication is off, when every caller shares one cap.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use muster_core::{ErrorCode, Label, Principal};

use crate::error::ApiError;

/// Open watch streams by tenant and by (tenant, principal), with their caps.
pub(crate) struct WatchQuota {
    per_principal: usize,
    per_tenant: usize,
    open: Mutex<Counts>,
}

#[derive(Default)]
struct Counts {
    tenants: HashMap<Label, usize>,
    principals: HashMap<(Label, Principal), usize>,
}

/// One open stream's slots; dropping it gives them back.
pub(crate) struct WatchPermit {
    quota: Arc<WatchQuota>,
    tenant: Label,
    principal: Principal,
}

impl WatchQuota {
    /// Caps of `per_principal` streams for each (tenant, principal) and `per_tenant` for each
    /// tenant.
    pub(crate) fn new(per_principal: usize, per_tenant: usize) -> Arc<WatchQuota> {
        Arc::new(WatchQuota {
            per_principal,
            per_tenant,
            open: Mutex::new(Counts::default()),
        })
    }

    /// A slot for one more stream of `principal` in `tenant`, or 429 `too_many_watches`
    /// naming the cap that is full.
    pub(crate) fn acquire(self: &Arc<Self>, tenant: &Label, principal: &Principal) -> Result<WatchPermit, ApiError> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (tenant.clone(), principal.clone());
        let by_principal = open.principals.get(&key).copied().unwrap_or(0);
        let by_tenant = open.tenants.get(tenant).copied().unwrap_or(0);
        if by_principal >= self.per_principal {
            return Err(ApiError::new(
                ErrorCode::TooManyWatches,
                format!(
                    "{principal} already holds {by_principal} open watches in tenant {tenant}, the \
                     max_watches_per_principal; close one or watch a namespace instead of each service"
                ),
            ));
        }
        if by_tenant >= self.per_tenant {
            return Err(ApiError::new(
                ErrorCode::TooManyWatches,
                format!("tenant {tenant} already holds {by_tenant} open watches, the max_watches_per_tenant"),
            ));
        }
        *open.principals.entry(key).or_insert(0) += 1;
        *open.tenants.entry(tenant.clone()).or_insert(0) += 1;
        Ok(WatchPermit {
            quota: Arc::clone(self),
            tenant: tenant.clone(),
            principal: principal.clone(),
        })
    }

    /// Open streams of `principal` in `tenant`, and of the whole tenant.
    #[cfg(test)]
    fn open(&self, tenant: &Label, principal: &Principal) -> (usize, usize) {
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (tenant.clone(), principal.clone());
        (
            open.principals.get(&key).copied().unwrap_or(0),
            open.tenants.get(tenant).copied().unwrap_or(0),
        )
    }
}

impl Drop for WatchPermit {
    fn drop(&mut self) {
        let mut open = self.quota.open.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (self.tenant.clone(), self.principal.clone());
        release(&mut open.principals, key);
        release(&mut open.tenants, self.tenant.clone());
    }
}

fn release<K: std::hash::Hash + Eq>(counts: &mut HashMap<K, usize>, key: K) {
    if let Some(count) = counts.get_mut(&key) {
        *count -= 1;
        if *count == 0 {
            counts.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(name: &str) -> Label {
        Label::new("tenant", name).unwrap()
    }

    fn principal(name: &str) -> Principal {
        Principal::new(name).unwrap()
    }

    #[test]
    fn a_principal_over_its_cap_is_refused_and_gets_the_slot_back_when_a_stream_ends() {
        let quota = WatchQuota::new(2, 10);
        let (acme, alice) = (tenant("acme"), principal("alice"));
        let first = quota.acquire(&acme, &alice).unwrap();
        let _second = quota.acquire(&acme, &alice).unwrap();
        let refused = quota.acquire(&acme, &alice).err().unwrap();
        assert_eq!(refused.code, ErrorCode::TooManyWatches);
        // Another principal of the tenant, and the same name in another tenant, are not held up.
        assert!(quota.acquire(&acme, &principal("bob")).is_ok());
        assert!(quota.acquire(&tenant("globex"), &alice).is_ok());
        drop(first);
        assert_eq!(quota.open(&acme, &alice), (1, 1));
        assert!(quota.acquire(&acme, &alice).is_ok());
    }

    #[test]
    fn a_tenant_over_its_cap_is_refused_whichever_principal_asks() {
        let quota = WatchQuota::new(10, 3);
        let acme = tenant("acme");
        let held: Vec<_> = ["a", "b", "c"]
            .iter()
            .map(|name| quota.acquire(&acme, &principal(name)).unwrap())
            .collect();
        assert_eq!(
            quota.acquire(&acme, &principal("d")).err().unwrap().code,
            ErrorCode::TooManyWatches
        );
        // A refusal takes no slot: the counts are unchanged.
        assert_eq!(quota.open(&acme, &principal("d")), (0, 3));
        drop(held);
        assert_eq!(quota.open(&acme, &principal("a")), (0, 0));
    }
}
