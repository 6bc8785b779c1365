//! Golden files (SPEC R1–R7): what the v1 build wrote to disk and sent between nodes, read
//! back by this build through the real opening and decoding code. `tests/golden/README.md`
//! lists the files and the commit that wrote them; `examples/golden.rs` is the generator.
//!
//! Each test asserts the concrete values the generator's workload wrote, so a build that
//! decodes the files differently (a renamed field, a changed default, a lost record) fails
//! here, not in a cluster halfway through a rolling upgrade.

#[path = "golden/data_dir.rs"]
mod data_dir;
#[path = "golden/formats.rs"]
mod formats;
#[path = "golden/replay.rs"]
mod replay;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use muster_consensus::ApplyObserver;
use muster_core::{Endpoint, ServiceKey};
use muster_registry::{Applied, Registry};

/// The first command's time in the generator's workload (step `n` is `T0_MS + n * 1_000`).
const T0_MS: u64 = 1_700_000_000_000;
/// The proposal session of the generator's single node.
const SESSION: u64 = 0x676f_6c64_656e;

/// A file of the v1 golden set.
fn golden(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/v1").join(path)
}

/// A golden file's bytes.
fn read(path: &str) -> Vec<u8> {
    std::fs::read(golden(path)).unwrap_or_else(|e| panic!("golden file {path}: {e}"))
}

/// The one service of the workload.
fn api() -> ServiceKey {
    ServiceKey::new("acme", "prod", "api").unwrap()
}

/// An endpoint in one line: the fields the workload set, so an assertion names them all.
fn describe(endpoint: &Endpoint) -> String {
    let address = endpoint
        .addresses
        .iter()
        .map(|a| a.ip.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let ports = endpoint
        .ports
        .iter()
        .map(|p| format!("{}:{}/{:?}", p.name.as_str(), p.port, p.protocol))
        .collect::<Vec<_>>()
        .join(",");
    let region = endpoint.locality.region.as_ref().map_or("-", |l| l.as_str());
    let zone = endpoint.locality.zone.as_ref().map_or("-", |l| l.as_str());
    format!(
        "{}#{} {address} {ports} {region}/{zone} {:?} weight={} lease={:?} rev={} version={} by={}",
        endpoint.instance.as_str(),
        endpoint.incarnation.0,
        endpoint.serving,
        endpoint.weight,
        endpoint.lease.map(|l| l.0),
        endpoint.revision.0,
        endpoint.labels.get("version").unwrap_or("-"),
        endpoint.provenance.registrar.as_str(),
    )
}

/// Every endpoint of the workload's service, described, by instance.
fn endpoints(registry: &Registry) -> Vec<String> {
    registry
        .snapshot(&api())
        .expect("the workload's service is known")
        .iter()
        .map(|e| describe(e))
        .collect()
}

/// Every lease as `id tenant ttl revision`.
fn leases(registry: &Registry) -> Vec<String> {
    registry
        .leases()
        .map(|l| format!("{} {} {} rev={}", l.id.0, l.tenant.as_str(), l.ttl_ms, l.revision.0))
        .collect()
}

/// Hears nothing: the tests read the registry directly.
struct Quiet;

impl ApplyObserver for Quiet {
    fn applied(&self, _registry: &Registry, _applied: &Applied) {}
    fn reset(&self, _registry: &Registry) {}
}

fn quiet() -> Arc<dyn ApplyObserver> {
    Arc::new(Quiet)
}
