//! Memory per endpoint at scale: 1,000,000 endpoints in 2,000 services of 500, each with its
//! own lease, retained change log excluded. Target: ≤ 1 KiB per endpoint.
//!
//! Every endpoint has one IPv4 address, ports `http` and `grpc`, and four labels (`team`,
//! `version`, `zone` and the instance-specific `pod`), and is registered with
//! `LeaseSpec::Grant`, so each one also costs a lease and a lease-index entry. Instance ids
//! are `pod-<8 hex digits>`, hashed so that each service's map is filled in random order, as
//! a cluster's pods arrive, not in key order. `history_revisions` is 0, so every change leaves
//! the retained history as soon as it commits and only the live state is counted.
//!
//! # How memory is measured
//! Two ways, both from just before the registry is created to just after the last
//! registration, with every command dropped as soon as it is applied:
//! - live heap bytes, counted by a wrapping `#[global_allocator]` (the figure the budget is
//!   stated in: what the registry's data structures hold, indexes included);
//! - the growth of the process's resident anonymous memory (`RssAnon`), which adds the
//!   allocator's own overhead and fragmentation: an upper bound (Linux only).
//!
//! Run with `cargo bench -p muster-registry --bench memory`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use muster_core::ServiceKey;
use muster_registry::{Command, LeaseSpec, Quotas, Registry, RegistryConfig};
use muster_testkit::Counting;

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The scale the memory budget is stated at.
const ENDPOINTS: u32 = 1_000_000;
/// 2,000 services of 500: many mid-sized services, as in a large cluster, rather than a few
/// huge ones, so per-service overhead is counted too.
const SERVICES: u32 = 2_000;
/// A lease TTL inside the default 1 s to 1 h bounds; its value does not change the memory.
const LEASE_TTL_MS: u64 = 10_000;
/// The budget: 1 KiB per endpoint keeps a million endpoints within 1 GiB per replica.
const TARGET_BYTES_PER_ENDPOINT: u64 = 1024;

fn main() {
    let config = RegistryConfig {
        quotas: Quotas {
            // The defaults sit exactly at this bench's scale; headroom keeps the bench
            // independent of them.
            services_per_tenant: u64::from(SERVICES) * 2,
            endpoints_per_tenant: u64::from(ENDPOINTS) * 2,
            leases_per_tenant: u64::from(ENDPOINTS) * 2,
            ..Quotas::default()
        },
        // Retained change log excluded: only live state is measured.
        history_revisions: 0,
        ..RegistryConfig::default()
    };
    let keys: Vec<ServiceKey> = (0..SERVICES)
        .map(|s| ServiceKey::new("acme", "prod", &format!("svc-{s:04}")).expect("valid names"))
        .collect();

    let building = build_all(&keys);
    let before = resident_anonymous_bytes();
    let live_before = muster_testkit::live_bytes();
    let (registry, elapsed) = register_all(config, &keys);
    let live = muster_testkit::live_bytes().saturating_sub(live_before) as u64;
    let after = resident_anonymous_bytes();

    let count: usize = keys
        .iter()
        .map(|key| registry.snapshot(key).expect("every service exists").len())
        .sum();
    assert_eq!(count, ENDPOINTS as usize, "every registration is live");

    println!("endpoints: {count} in {} services", keys.len());
    println!(
        "register time: {:.2} s ({:.2} µs per registration, of which {:.2} µs build the command)",
        elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1e6 / f64::from(ENDPOINTS),
        building.as_secs_f64() * 1e6 / f64::from(ENDPOINTS)
    );
    let per_endpoint = live / u64::from(ENDPOINTS);
    let verdict = if per_endpoint <= TARGET_BYTES_PER_ENDPOINT {
        "met"
    } else {
        "MISSED"
    };
    println!("live heap: {} MiB", live >> 20);
    println!("bytes per endpoint: {per_endpoint} (target ≤ {TARGET_BYTES_PER_ENDPOINT}: {verdict})");
    match (before, after) {
        (Some(before), Some(after)) => {
            let grown = after.saturating_sub(before);
            let per_endpoint = grown / u64::from(ENDPOINTS);
            println!("resident anonymous memory: {} MiB grown", grown >> 20);
            println!("resident bytes per endpoint (upper bound): {per_endpoint}");
        }
        _ => println!("resident bytes per endpoint: unavailable (no /proc/self/status RssAnon)"),
    }
    drop(registry);
}

/// Builds and drops every command without applying it: the part of `register_all`'s time
/// that is the bench's own, not the registry's.
#[allow(
    clippy::disallowed_methods,
    reason = "a benchmark measures wall time; no registry code reads this clock"
)]
fn build_all(keys: &[ServiceKey]) -> Duration {
    let start = Instant::now();
    for n in 0..ENDPOINTS {
        black_box(register(&keys[(n % SERVICES) as usize], n));
    }
    start.elapsed()
}

/// Registers every endpoint, one command at a time, each dropped once applied.
#[allow(
    clippy::disallowed_methods,
    reason = "a benchmark measures wall time; no registry code reads this clock"
)]
fn register_all(config: RegistryConfig, keys: &[ServiceKey]) -> (Registry, Duration) {
    let meta = muster_testkit::meta();
    let mut registry = Registry::new(config);
    let start = Instant::now();
    for n in 0..ENDPOINTS {
        let key = &keys[(n % SERVICES) as usize];
        let applied = registry.apply(&register(key, n), &meta).expect("registration accepted");
        assert!(applied.lease.is_some(), "each registration holds its own lease");
    }
    (registry, start.elapsed())
}

fn register(key: &ServiceKey, n: u32) -> Command {
    let pod = format!("pod-{:08x}", scramble(n));
    muster_testkit::register(key, &pod, n, 100, LeaseSpec::Grant { ttl_ms: LEASE_TTL_MS })
}

/// A bijection on `u32` (multiplication by an odd constant), so ids are unique but arrive in
/// no particular key order.
fn scramble(n: u32) -> u32 {
    n.wrapping_mul(0x9e37_79b1)
}

/// `RssAnon` of this process in bytes: heap pages actually touched, without the binary.
fn resident_anonymous_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("RssAnon:"))?;
    let kib: u64 = line
        .trim_start_matches("RssAnon:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}
