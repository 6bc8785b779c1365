//! What a registry is configured with. Every replica of one registry must be configured
//! alike: these values decide whether a logged command is applied or rejected.

use muster_core::{Limits, NetworkPolicy};
use serde::{Deserialize, Serialize};

/// Registry configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RegistryConfig {
    /// Record size limits.
    pub limits: Limits,
    /// Permitted networks for endpoint addresses.
    pub network: NetworkPolicy,
    /// Per-tenant and per-service quotas.
    pub quotas: Quotas,
    /// How many revisions of change history to keep for `changes_since` and past reads.
    /// 100,000 lets a watcher that was away for over a minute at 1,000 writes/s resume
    /// without a resnapshot, for tens of MiB of history. Tombstones (what fences a removed
    /// instance's older incarnations) are kept exactly as long, so 0 also turns off fencing
    /// across deregistration; keep it well above a delayed message's plausible age in
    /// revisions.
    pub history_revisions: u64,
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
            min_lease_ttl_ms: 1_000,
            max_lease_ttl_ms: 3_600_000,
        }
    }
}

/// Bounds that keep one tenant or one service from exhausting the registry (SPEC S5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Quotas {
    /// Services per tenant: 10,000.
    pub services_per_tenant: u64,
    /// Endpoints per service: 50,000, five times the largest set the benchmarks exercise.
    pub endpoints_per_service: u64,
    /// Endpoints per tenant: 1,000,000, the scale the memory budget is measured at.
    pub endpoints_per_tenant: u64,
    /// Leases per tenant: one per endpoint plus headroom for restarts.
    pub leases_per_tenant: u64,
}

impl Default for Quotas {
    fn default() -> Self {
        Quotas {
            services_per_tenant: 10_000,
            endpoints_per_service: 50_000,
            endpoints_per_tenant: 1_000_000,
            leases_per_tenant: 1_100_000,
        }
    }
}
