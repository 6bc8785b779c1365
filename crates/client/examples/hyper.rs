//! A hyper client balanced over a Muster service (SPEC C5, C7): `tower::Balance` picks an
//! endpoint per request (power of two choices by requests in flight), points the request at
//! it, and ejects an endpoint locally after consecutive errors or 5xx answers.
//!
//! ```sh
//! muster serve &                                   # a registry on 127.0.0.1:7070
//! python3 -m http.server 8081 & python3 -m http.server 8082 &
//! muster register prod/web web-1 --addr 127.0.0.1:8081 --incarnation 1 --ttl 5m
//! muster register prod/web web-2 --addr 127.0.0.1:8082 --incarnation 1 --ttl 5m
//! cargo run -p muster-client --example hyper -- default/prod/web
//! ```
//!
//! Balanced calls are read-only by default: killing the registry leaves them answered from
//! the last known set (fail static, SPEC C2). A misspelt service fails `unknown_service`.
//!
//! Stop one backend while it runs: after five failed requests it gets none for 30 s. Drain
//! one (`muster drain prod/web web-2 --incarnation 1`): new requests stop going there at once.

use std::sync::Arc;

use http_body_util::Empty;
use hyper::body::Bytes;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::TokioExecutor;
use muster_client::tower::Balance;
use muster_client::{BoxError, Client, DEFAULT_SERVER, Resolver, ResolverConfig, ServiceKey};
use tower::{Service, ServiceExt};

/// Requests the example sends: enough to see the spread, bounded.
const REQUESTS: usize = 20;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    // `tenant/namespace/service`, or `namespace/service` in the default tenant.
    let key: ServiceKey = std::env::args()
        .nth(1)
        .as_deref()
        .unwrap_or("default/prod/web")
        .parse()?;
    let server = std::env::var("MUSTER_SERVER").unwrap_or_else(|_| DEFAULT_SERVER.into());
    let resolver = Arc::new(Resolver::start(Client::new(&server)?, key, ResolverConfig::default()));

    // The whole integration: one pooled hyper client, balanced over the service's `http` ports.
    let http = HttpClient::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let mut web = Balance::builder(resolver).port("http").shared(http)?;

    for _ in 0..REQUESTS {
        let request = hyper::Request::get("/").body(Empty::new())?;
        match web.ready().await?.call(request).await {
            Ok(response) => println!("{}", response.status()),
            // The message starts with its code (`stale: ...`, `endpoint_failed: ...`).
            Err(error) => println!("{error}"),
        }
    }
    Ok(())
}
