//! The registry's policy: every rule `apply` judges a command by (record limits, network
//! policy, quotas, history and fence retention, lease TTL bounds).
//!
//! The policy is replicated state, not configuration read at apply time: a registry starts
//! from the policy it is created with (the `[registry]` section of the first node's file),
//! and from then on only a committed [`SetPolicy`](crate::SetPolicy) changes it, at a new
//! revision, judging the commands after it and never the ones before. A restart with a
//! different file therefore replays its log under the policy each entry was judged by, and
//! replicas configured differently still agree (SPEC L2).

use muster_core::{Limits, NetworkPolicy, Rejection};
use serde::{Deserialize, Serialize};

/// The registry's policy. The type keeps its historical name: it is what the `[registry]`
/// section of the config file holds, and the file is the initial policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RegistryConfig {
    /// Record size limits.
    pub limits: Limits,
    /// Permitted networks for endpoint addresses.
    pub network: NetworkPolicy,
    /// Per-tenant and per-service quotas.
    pub quotas: Quotas,
    /// How many revisions of change history to keep for `changes_since` and past reads.
    /// 100,000 lets a watcher that was away for over a minute at 1,000 writes/s resume
    /// without a resnapshot, for tens of MiB of history. A service left empty is released
    /// (stops counting against `services_per_tenant`, its state goes) once its last change
    /// leaves this window.
    pub history_revisions: u64,
    /// How long a removed instance stays fenced (SPEC L7): its highest incarnation is kept
    /// this long after removal, whatever the write volume, and no command of that or an
    /// older incarnation changes anything meanwhile. 24 h outlasts any plausible delay of a
    /// message from an older process (a retry queue, a paused VM, a partition healed the next
    /// morning) while one fence is a few dozen bytes: a million removals a day is tens of MiB.
    pub fence_retention_ms: u64,
    /// Shortest lease TTL: 1 s. Shorter leases turn renewal into a hot loop and let a GC
    /// pause expire a healthy instance.
    pub min_lease_ttl_ms: u64,
    /// Longest lease TTL: 1 h. A crashed instance keeps its traffic for up to a TTL.
    pub max_lease_ttl_ms: u64,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        RegistryConfig {
            limits: Limits::default(),
            network: NetworkPolicy::default(),
            quotas: Quotas::default(),
            history_revisions: 100_000,
            fence_retention_ms: 86_400_000,
            min_lease_ttl_ms: 1_000,
            max_lease_ttl_ms: 3_600_000,
        }
    }
}

impl RegistryConfig {
    /// Checks that the policy is one a registry can run under: a refused
    /// [`SetPolicy`](crate::SetPolicy) names the offending field.
    pub fn validate(&self) -> Result<(), Rejection> {
        let invalid = |field: &str, reason: String| {
            Err(Rejection::InvalidField {
                field: field.into(),
                reason,
            })
        };
        if self.min_lease_ttl_ms == 0 {
            return invalid("min_lease_ttl_ms", "must be at least 1 ms".into());
        }
        if self.min_lease_ttl_ms > self.max_lease_ttl_ms {
            return invalid(
                "min_lease_ttl_ms",
                format!(
                    "must not exceed max_lease_ttl_ms ({}), got {}",
                    self.max_lease_ttl_ms, self.min_lease_ttl_ms
                ),
            );
        }
        Ok(())
    }
}

/// Bounds that keep one tenant or one service from exhausting the registry (SPEC S5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Quotas {
    /// Live (non-empty) services per tenant: 10,000.
    pub services_per_tenant: u64,
    /// Endpoints per service: 50,000, five times the largest set the benchmarks exercise.
    pub endpoints_per_service: u64,
    /// Endpoints per tenant: 1,000,000, the scale the memory budget is measured at.
    pub endpoints_per_tenant: u64,
    /// Leases per tenant: one per endpoint plus headroom for restarts.
    pub leases_per_tenant: u64,
    /// Tenants holding anything (a live service or a lease): 10,000. Tenant names are
    /// caller-chosen, so without a bound the per-tenant quotas bound nothing; 10,000 tenants
    /// of a few services each is far beyond one registry's intended scale (SPEC S5), and an
    /// idle tenant costs nothing, since it stops counting once it holds nothing.
    pub max_tenants: u64,
}

impl Default for Quotas {
    fn default() -> Self {
        Quotas {
            services_per_tenant: 10_000,
            endpoints_per_service: 50_000,
            endpoints_per_tenant: 1_000_000,
            leases_per_tenant: 1_100_000,
            max_tenants: 10_000,
        }
    }
}
