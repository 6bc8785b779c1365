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
//! The growth of the process's resident anonymous memory (`RssAnon` in `/proc/self/status`)
//! from just before the registry is created to just after the last registration, with every
//! command dropped as soon as it is applied. That counts the allocator's per-block overhead
//! and fragmentation on top of the live bytes, so it is an upper bound of what a counting
//! allocator would report: meeting the target here meets it there.
//!
//! A counting `#[global_allocator]` needs an `unsafe impl GlobalAlloc`, and the workspace sets
//! `unsafe_code = "forbid"`, which no `#[allow]` in this file can lift (rustc E0453). Linux
//! only: elsewhere the bench says so and only reports the time.
//!
//! Run with `cargo bench -p muster-registry --bench memory`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use muster_core::{
    Actor, AddressSpec, EndpointSpec, Incarnation, InstanceId, PortSpec, Principal, Protocol, ServiceKey,
};
use muster_registry::{Command, CommandMeta, LeaseSpec, Quotas, Register, Registry, RegistryConfig, Target};

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

    let before = resident_anonymous_bytes();
    let (registry, elapsed) = register_all(config, &keys);
    let after = resident_anonymous_bytes();

    let count: usize = keys
        .iter()
        .map(|key| registry.snapshot(key).expect("every service exists").len())
        .sum();
    assert_eq!(count, ENDPOINTS as usize, "every registration is live");

    println!("endpoints: {count} in {} services", keys.len());
    println!(
        "register time: {:.2} s ({:.2} µs per registration)",
        elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1e6 / f64::from(ENDPOINTS)
    );
    match (before, after) {
        (Some(before), Some(after)) => {
            let grown = after.saturating_sub(before);
            let per_endpoint = grown / u64::from(ENDPOINTS);
            println!("resident anonymous memory: {} MiB grown", grown >> 20);
            println!(
                "bytes per endpoint: {per_endpoint} (target ≤ {TARGET_BYTES_PER_ENDPOINT}: {})",
                if per_endpoint <= TARGET_BYTES_PER_ENDPOINT {
                    "met"
                } else {
                    "MISSED"
                }
            );
        }
        _ => println!("bytes per endpoint: unavailable (no /proc/self/status RssAnon)"),
    }
    drop(registry);
}

/// Registers every endpoint, one command at a time, each dropped once applied.
#[allow(
    clippy::disallowed_methods,
    reason = "a benchmark measures wall time; no registry code reads this clock"
)]
fn register_all(config: RegistryConfig, keys: &[ServiceKey]) -> (Registry, Duration) {
    let meta = CommandMeta {
        at_ms: 0,
        principal: Principal::new("bench").expect("a valid principal"),
        actor: Actor::App,
    };
    let mut registry = Registry::new(config);
    let start = Instant::now();
    for n in 0..ENDPOINTS {
        let key = &keys[(n % SERVICES) as usize];
        let applied = registry.apply(&register(key, n), &meta).expect("registration accepted");
        debug_assert!(applied.lease.is_some());
    }
    (registry, start.elapsed())
}

fn register(key: &ServiceKey, n: u32) -> Command {
    let pod = format!("pod-{:08x}", scramble(n));
    let zones = ["eu-west-1a", "eu-west-1b", "eu-west-1c"];
    let labels = BTreeMap::from([
        ("team".to_owned(), "core".to_owned()),
        ("version".to_owned(), "v1.2.3".to_owned()),
        ("zone".to_owned(), zones[n as usize % zones.len()].to_owned()),
        ("pod".to_owned(), pod.clone()),
    ]);
    Command::Register(Register {
        target: Target {
            key: key.clone(),
            instance: InstanceId::new(&pod).expect("a valid instance id"),
            incarnation: Incarnation(1),
        },
        spec: EndpointSpec {
            addresses: vec![AddressSpec {
                ip: format!("10.{}.{}.{}", (n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff),
                scope: None,
            }],
            ports: vec![
                PortSpec {
                    name: "http".into(),
                    port: 8080,
                    protocol: Protocol::Http,
                },
                PortSpec {
                    name: "grpc".into(),
                    port: 9090,
                    protocol: Protocol::Grpc,
                },
            ],
            labels,
            ..EndpointSpec::default()
        },
        lease: LeaseSpec::Grant { ttl_ms: LEASE_TTL_MS },
        expected_revision: None,
    })
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
