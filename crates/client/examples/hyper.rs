//! A hyper client balanced over a Muster service (SPEC C5, C7): `tower::Balance` picks an
//! endpoint per request (power of two choices by requests in flight), points the request at
//! it, and ejects an endpoint locally after consecutive errors or 5xx answers.
//!
//! ```sh
//! muster serve &                                   # a registry on 127.0.0.1:7070
//! python3 -m http.server 8081 & python3 -m http.server 8082 &
//! muster register prod/web web-1 --addr 127.0.0.1:8081 --incarnation 1 --ttl 5m
//! muster register prod/web web-2 --addr 127.0.0.1:8082 --incarnation 1 --ttl 5m
//! cargo run -p muster-client --example hyper -- default/prod/web --requests 600 --every 100ms
//! ```
//!
//! Cargo features it needs, in a crate of your own: `muster-client`, `tokio` (`macros`,
//! `rt-multi-thread`), `hyper`, `hyper-util` (`client-legacy`, `http1`, `tokio`),
//! `http-body-util` and `tower` (`util`).
//!
//! It prints one line per request: the status, or the error's code and message (the defaults
//! send 20 requests, 100 ms apart). With `--requests 600 --every 100ms` and the registry
//! killed meanwhile, every request is still answered (`Risk::ReadOnly`); `--mutation`
//! declares the calls mutating (`.risk(Risk::Mutation)`), and they fail `stale` once the view
//! is older than its 30 s budget.
//!
//! Balanced calls are read-only by default: killing the registry leaves them answered from
//! the last known set (fail static, SPEC C2). A misspelt service fails `unknown_service`, and
//! no server at all `unavailable` naming the connection error: the example then exits 1.
//!
//! Stop one backend while it runs: after five failed requests it gets none for 30 s. Drain
//! one (`muster drain prod/web web-2 --incarnation 1`): new requests stop going there at once.

use std::time::Duration;

use http_body_util::Empty;
use hyper::body::Bytes;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::TokioExecutor;
use muster_client::tower::Balance;
use muster_client::{BoxError, Client, DEFAULT_SERVER, Resolver, ResolverConfig, Risk, ServiceKey};
use tower::{Service, ServiceExt};

/// What the command line asks for.
struct Args {
    key: ServiceKey,
    requests: u64,
    every: Duration,
    risk: Risk,
}

fn args() -> Result<Args, BoxError> {
    let mut args = Args {
        key: "default/prod/web".parse()?,
        requests: 20,
        every: Duration::from_millis(100),
        risk: Risk::ReadOnly,
    };
    let mut given = std::env::args().skip(1);
    while let Some(arg) = given.next() {
        let mut value = || given.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--requests" => args.requests = value()?.parse()?,
            "--every" => args.every = duration(&value()?)?,
            "--mutation" => args.risk = Risk::Mutation,
            // `tenant/namespace/service`, or `namespace/service` in the default tenant.
            key if !key.starts_with('-') => args.key = key.parse()?,
            other => {
                return Err(
                    format!("unknown option {other}: SERVICE [--requests N] [--every 100ms] [--mutation]").into(),
                );
            }
        }
    }
    Ok(args)
}

/// `250ms`, `2s` or `1m`.
fn duration(text: &str) -> Result<Duration, BoxError> {
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("{text}: not a duration like 100ms, 2s, 1m"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(number)),
        "s" => Ok(Duration::from_secs(number)),
        "m" => Ok(Duration::from_secs(number * 60)),
        _ => Err(format!("{text}: not a duration like 100ms, 2s, 1m").into()),
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let Args {
        key,
        requests,
        every,
        risk,
    } = args()?;
    let server = std::env::var("MUSTER_SERVER").unwrap_or_else(|_| DEFAULT_SERVER.into());
    let resolver = Resolver::start(Client::new(&server)?, key, ResolverConfig::default());

    // The whole integration: one pooled hyper client, balanced over the service's `http` ports.
    let http = HttpClient::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let mut web = Balance::builder(resolver).port("http").risk(risk).shared(http)?;

    let mut answered = 0_u64;
    let mut pace = tokio::time::interval(every);
    for n in 1..=requests {
        pace.tick().await;
        let request = hyper::Request::get("/").body(Empty::new())?;
        match web.ready().await?.call(request).await {
            Ok(response) => {
                answered += 1;
                println!("{n} {}", response.status());
            }
            Err(error) => {
                // The message starts with its code, once (`stale: ...`, `endpoint_failed: ...`).
                println!("{n} {error}");
                // Nothing to wait for: the service does not exist, or there never was a server.
                let never = error.code() == "unavailable" && answered == 0;
                if error.code() == "unknown_service" || never {
                    std::process::exit(1);
                }
            }
        }
    }
    Ok(())
}
