//! Durable proposals per second through the node alone (no HTTP): many concurrent writers
//! against one node, to show group commit (many appends per fsync) at work.
//!
//! Run with `cargo bench -p muster-consensus --bench propose`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use muster_consensus::{ApplyObserver, Node, NodeConfig};
use muster_core::{Actor, AddressSpec, EndpointSpec, Incarnation, InstanceId, Principal, ServiceKey};
use muster_registry::{Applied, CommandMeta, LeaseSpec, Register, Registry, RegistryConfig, Target};

struct Quiet;

impl ApplyObserver for Quiet {
    fn applied(&self, _registry: &Registry, _applied: &Applied) {}
    fn reset(&self, _registry: &Registry) {}
}

/// Concurrent writers, as the 64-connection load generator.
const WRITERS: u64 = 64;
/// How long each run lasts.
const RUN: Duration = Duration::from_secs(5);

#[allow(clippy::disallowed_methods, reason = "a benchmark measures wall time")]
fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let dir = tempfile::tempdir().expect("a scratch dir");
        let mut config = NodeConfig::new(dir.path());
        config.registry = RegistryConfig::default();
        let node = Node::open(config, Arc::new(Quiet)).await.expect("opens");
        let done = Arc::new(AtomicU64::new(0));
        let start = Instant::now();
        let writers: Vec<_> = (0..WRITERS)
            .map(|writer| {
                let (node, done) = (node.clone(), Arc::clone(&done));
                tokio::spawn(async move {
                    let mut n = 0u64;
                    while start.elapsed() < RUN {
                        let command = Register {
                            target: Target {
                                key: ServiceKey::new("bench", "prod", &format!("svc-{}", n % 100)).expect("valid"),
                                instance: InstanceId::new(&format!("w{writer}-{n}")).expect("valid"),
                                incarnation: Incarnation(1),
                            },
                            spec: EndpointSpec {
                                addresses: vec![AddressSpec {
                                    ip: "10.0.0.1".into(),
                                    scope: None,
                                }],
                                ..EndpointSpec::default()
                            },
                            lease: LeaseSpec::None,
                            expected_revision: None,
                        };
                        let meta = CommandMeta {
                            at_ms: 0,
                            principal: Principal::new("bench").expect("valid"),
                            actor: Actor::App,
                        };
                        node.propose(command.into(), meta)
                            .await
                            .expect("committed")
                            .expect("accepted");
                        done.fetch_add(1, Ordering::Relaxed);
                        n += 1;
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.await.expect("writer");
        }
        let elapsed = start.elapsed().as_secs_f64();
        let total = done.load(Ordering::Relaxed);
        println!(
            "{total} durable proposals in {elapsed:.2} s: {:.0}/s with {WRITERS} writers",
            total as f64 / elapsed
        );
        node.shutdown().await.expect("stops");
    });
}
