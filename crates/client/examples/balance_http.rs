//! Balancing HTTP requests over a service Muster resolves, with tower's power-of-two-choices
//! balancer fed by [`EndpointDiscover`] (SPEC C7).
//!
//! ```sh
//! muster serve &                                   # a registry on 127.0.0.1:7070
//! python3 -m http.server 8081 & python3 -m http.server 8082 &
//! muster register prod/web web-1 --addr 127.0.0.1:8081 --incarnation 1 --ttl 5m
//! muster register prod/web web-2 --addr 127.0.0.1:8082 --incarnation 1 --ttl 5m
//! cargo run -p muster-client --example balance_http -- default/prod/web
//! ```
//!
//! Drain one (`muster drain prod/web web-2 --incarnation 1`) while it runs: new requests stop
//! going there at once.

use std::error::Error;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use http_body_util::Empty;
use hyper::body::Bytes;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::TokioExecutor;
use muster_client::discover::EndpointDiscover;
use muster_client::{Client, DEFAULT_SERVER, EligibilityConfig, Member, Resolver, ResolverConfig};
use muster_core::ServiceKey;
use tower::balance::p2c::Balance;
use tower::load::{CompleteOnResponse, PendingRequestsDiscover};
use tower::{Service, ServiceExt, service_fn};

type BoxError = Box<dyn Error + Send + Sync>;
type Reply = Pin<Box<dyn Future<Output = Result<(SocketAddr, hyper::StatusCode), BoxError>> + Send>>;

/// Requests the example sends: enough to see the spread, bounded.
const REQUESTS: usize = 20;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let target = std::env::args().nth(1).unwrap_or_else(|| "default/prod/web".into());
    let parts: Vec<&str> = target.split('/').collect();
    let [tenant, namespace, service] = parts[..] else {
        return Err("usage: balance_http TENANT/NAMESPACE/SERVICE".into());
    };
    let key = ServiceKey::new(tenant, namespace, service)?;
    let server = std::env::var("MUSTER_SERVER").unwrap_or_else(|_| DEFAULT_SERVER.into());
    let resolver = Resolver::start(Client::new(&server)?, key, ResolverConfig::default());

    let http = HttpClient::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let eligibility = EligibilityConfig::default();
    let reach = eligibility.clone();
    // One service per endpoint: it sends a request to that endpoint's reachable address.
    let discover = EndpointDiscover::new(&resolver, eligibility, move |endpoint: &Arc<Member>| {
        let ip = reach
            .reachable_address(endpoint)
            .map_or(endpoint.addresses[0].ip, |a| a.ip);
        let addr = SocketAddr::new(ip, endpoint.ports.first().map_or(80, |p| p.port));
        let http = http.clone();
        service_fn(move |path: String| -> Reply {
            let http = http.clone();
            Box::pin(async move {
                let uri: hyper::Uri = format!("http://{addr}{path}").parse()?;
                let reply = http.get(uri).await?;
                Ok((addr, reply.status()))
            })
        })
    });
    let mut balance = Balance::new(PendingRequestsDiscover::new(discover, CompleteOnResponse::default()));
    for _ in 0..REQUESTS {
        let (addr, status) = balance.ready().await?.call("/".to_owned()).await?;
        println!("{addr} answered {status}");
    }
    resolver.stop().await;
    Ok(())
}
