//! tower's own power-of-two-choices balancer over a Muster service (SPEC C5, C7), fed by
//! [`EndpointDiscover`] with local ejection: each endpoint's service reports its outcomes to a
//! [`SharedEjections`], and an endpoint it ejects is removed from discovery until the ejection
//! ends. For a balancer that needs no assembly at all, see the `hyper` example.
//!
//! ```sh
//! muster serve &                                   # a registry on 127.0.0.1:7070
//! python3 -m http.server 8081 & python3 -m http.server 8082 &
//! muster register prod/web web-1 --addr 127.0.0.1:8081 --incarnation 1 --ttl 5m
//! muster register prod/web web-2 --addr 127.0.0.1:8082 --incarnation 1 --ttl 5m
//! cargo run -p muster-client --example balance_http -- default/prod/web
//! ```
//!
//! Cargo features it needs, in a crate of your own: `muster-client`, `tokio` (`macros`,
//! `rt-multi-thread`), `hyper`, `hyper-util` (`client-legacy`, `http1`, `tokio`),
//! `http-body-util` and `tower` (`balance`, `load`, `util`).

use std::sync::Arc;

use http_body_util::Empty;
use hyper::body::Bytes;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::TokioExecutor;
use muster_client::discover::EndpointDiscover;
use muster_client::tower::{SetAuthority, SharedEjections};
use muster_client::{
    BoxError, Client, DEFAULT_SERVER, EligibilityConfig, Member, Resolver, ResolverConfig, ServiceKey,
};
use tower::balance::p2c::Balance;
use tower::load::{CompleteOnResponse, PendingRequestsDiscover};
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
    let resolver = Resolver::start(Client::new(&server)?, key, ResolverConfig::default());

    let http = HttpClient::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let ejections = SharedEjections::default();
    let reporter = ejections.clone();
    // One service per endpoint: the shared client pointed at its address, outcomes reported.
    let discover = EndpointDiscover::with_ejections(
        resolver.clone(),
        EligibilityConfig::default(),
        ejections,
        move |endpoint: &Arc<Member>| {
            let port = endpoint.ports.first().map_or(80, |p| p.port);
            let addr = std::net::SocketAddr::new(endpoint.addresses[0].ip, port);
            let authority = addr.to_string().parse().expect("an IP and a port make an authority");
            reporter.report(endpoint, SetAuthority::new(http.clone(), authority))
        },
    );
    let mut balance = Balance::new(PendingRequestsDiscover::new(discover, CompleteOnResponse::default()));
    for _ in 0..REQUESTS {
        let request = hyper::Request::get("/").body(Empty::new())?;
        // A misspelt service or an unreachable registry ends discovery with its error
        // (`unknown_service: ...`, `unavailable: ...`): `ready` fails rather than hangs.
        let ready = match balance.ready().await {
            Ok(ready) => ready,
            Err(error) => {
                // tower wraps it: print the cause, code first.
                let cause = std::error::Error::source(&*error).map_or_else(|| error.to_string(), ToString::to_string);
                eprintln!("{cause}");
                std::process::exit(1);
            }
        };
        let response = ready.call(request).await?;
        println!("{}", response.status());
    }
    resolver.stop().await;
    Ok(())
}
