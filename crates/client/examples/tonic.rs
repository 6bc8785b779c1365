//! A tonic client balanced over a Muster service (SPEC C5, C7): `tower::Balance` makes one
//! lazily connecting `Channel` per endpoint, picks one per call, and ejects an endpoint locally
//! after consecutive connect errors, resets or `UNAVAILABLE` answers. Any generated client
//! takes it in place of a `Channel`; here grpc.health.v1's.
//!
//! ```sh
//! muster serve &                                   # a registry on 127.0.0.1:7070
//! # two gRPC servers that serve grpc.health.v1, on 50051 and 50052, then:
//! muster register prod/pay pay-1 --addr 127.0.0.1:50051 --port-name grpc --incarnation 1 --ttl 5m
//! muster register prod/pay pay-2 --addr 127.0.0.1:50052 --port-name grpc --incarnation 1 --ttl 5m
//! cargo run -p muster-client --example tonic -- default/prod/pay
//! ```
//!
//! Cargo features it needs, in a crate of your own: `muster-client`, `tokio` (`macros`, `rt-multi-thread`),
//! `tonic` (`channel`), `tonic-health`.

use muster_client::tower::{Balance, Target};
use muster_client::{BoxError, Client, DEFAULT_SERVER, Resolver, ResolverConfig, ServiceKey};
use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

/// Calls the example makes: enough to see the spread, bounded.
const CALLS: usize = 10;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    // `tenant/namespace/service`, or `namespace/service` in the default tenant.
    let key: ServiceKey = std::env::args()
        .nth(1)
        .as_deref()
        .unwrap_or("default/prod/pay")
        .parse()?;
    let server = std::env::var("MUSTER_SERVER").unwrap_or_else(|_| DEFAULT_SERVER.into());
    let resolver = Resolver::start(Client::new(&server)?, key, ResolverConfig::default());

    // The whole integration: a Channel per endpoint's `grpc` port, made on first pick.
    let channels = Balance::builder(resolver)
        .port("grpc")
        .per_endpoint(|target: &Target| Channel::builder(target.uri().clone()).connect_lazy())?;
    let mut health = HealthClient::new(channels);

    for _ in 0..CALLS {
        let request = HealthCheckRequest { service: String::new() };
        match health.check(request).await {
            Ok(reply) => println!("status {}", reply.into_inner().status),
            Err(status) => println!("{status}"),
        }
    }
    Ok(())
}
