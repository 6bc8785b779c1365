//! Convergence telemetry (SPEC O3) with real watch clients: muster-client resolvers report
//! what they applied, the server counts them per cohort, and the deploy gate
//! `muster wait-converged` (the real binary) passes or times out listing the stragglers.
//!
//! Trace defended against (reference/control-plane-state.txt, "Observability"): a deploy
//! moves on while part of the fleet still routes to the old endpoint, because nobody knew
//! which revision each caller had applied.

use std::time::Duration;

use muster_client::convergence::{ClientId, Cohort, ConvergenceQuery};
use muster_client::{Client, Resolver, ResolverConfig};
use muster_core::ServiceKey;
use muster_server::{ConvergenceConfig, ServerConfig};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::inproc::Registry;
use crate::support;

/// Not the DNS listener's tenant (`default`): the DNS listener would be one more subscriber.
fn key() -> ServiceKey {
    ServiceKey::new("acme", "prod", "api").unwrap()
}

/// A TCP relay to the registry that can be frozen: while frozen it forwards nothing either
/// way, as a client process stopped by a debugger or a stalled network would.
struct Relay {
    url: String,
    frozen: watch::Sender<bool>,
}

impl Relay {
    async fn start(upstream: std::net::SocketAddr) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (frozen, frozen_rx) = watch::channel(false);
        tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let Ok(outbound) = TcpStream::connect(upstream).await else {
                    continue;
                };
                let (client_read, client_write) = inbound.into_split();
                let (server_read, server_write) = outbound.into_split();
                tokio::spawn(pump(client_read, server_write, frozen_rx.clone()));
                tokio::spawn(pump(server_read, client_write, frozen_rx.clone()));
            }
        });
        Relay { url, frozen }
    }

    fn freeze(&self) {
        self.frozen.send_replace(true);
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut frozen: watch::Receiver<bool>,
) {
    let mut buffer = vec![0; 16 * 1024];
    loop {
        let Ok(n) = from.read(&mut buffer).await else {
            return;
        };
        if n == 0 || frozen.wait_for(|frozen| !*frozen).await.is_err() {
            return;
        }
        if to.write_all(&buffer[..n]).await.is_err() {
            return;
        }
    }
}

/// A client reporting as `id` in `cohort`, through `url`.
fn subscriber(url: &str, id: &str, cohort: &str) -> Client {
    Client::builder(url)
        .client_id(ClientId::new(id).unwrap())
        .cohort(Cohort::new(cohort).unwrap())
        .report_interval(Duration::from_millis(50))
        .build()
        .unwrap()
}

/// `muster ARGS` on a blocking thread (the in-process registry keeps running meanwhile).
async fn muster(args: Vec<String>) -> std::process::Output {
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        support::run(&args)
    })
    .await
    .unwrap()
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

/// The live and applied subscribers the server counts, against `query`.
async fn counts(client: &Client, query: &ConvergenceQuery) -> (usize, usize) {
    match client.convergence(&key(), query).await {
        Ok(reply) => (reply.live, reply.applied),
        Err(_) => (0, 0),
    }
}

/// 100 resolvers follow prod/api, half in zone=a and half in zone=b; 10 of zone=b are
/// frozen before a drain. The 90 others report it; the frozen ten are stragglers; the gate
/// passes at 0.9 and for zone=a at 1.0, and times out at 0.95 and 1.0 listing exactly them.
/// (With ten of a hundred frozen, 0.9 is the largest fraction that can pass: 90/100 < 0.95.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_watchers_converge_and_the_gate_names_the_ten_frozen_ones() {
    let registry = Registry::start().await;
    let admin = registry.client();
    crate::inproc::register(&admin, &key(), "api-0", 1, "10.0.0.1").await;
    crate::inproc::register(&admin, &key(), "api-1", 1, "10.0.0.2").await;
    let direct = admin.server().to_owned();
    let relay = Relay::start(direct.trim_start_matches("http://").parse().unwrap()).await;
    let mut resolvers = Vec::new();
    for i in 0..100 {
        let cohort = if i < 50 { "zone=a" } else { "zone=b" };
        // The last ten of zone=b go through the relay that will freeze.
        let url = if i >= 90 { relay.url.clone() } else { direct.clone() };
        let client = subscriber(&url, &format!("client-{i:03}"), cohort);
        resolvers.push(Resolver::start(client, key(), ResolverConfig::default()));
    }
    let everyone = ConvergenceQuery::default();
    until_async(
        "all 100 report the current set",
        || counts(&admin, &everyone),
        (100, 100),
    )
    .await;

    relay.freeze();
    let drain = admin
        .drain(
            &key(),
            &muster_core::InstanceId::new("api-0").unwrap(),
            muster_client::Drain::new(muster_core::Incarnation(1)),
        )
        .await
        .unwrap();
    let revision = drain.revision;
    let at_drain = ConvergenceQuery {
        revision: Some(revision),
        ..ConvergenceQuery::default()
    };
    until_async(
        "the 90 unfrozen report the drain",
        || counts(&admin, &at_drain),
        (100, 90),
    )
    .await;

    let reply = admin.convergence(&key(), &at_drain).await.unwrap();
    assert!(!reply.converged);
    assert_eq!(reply.stragglers_total, 10);
    let mut stragglers: Vec<_> = reply.stragglers.iter().map(|s| s.client_id.clone()).collect();
    stragglers.sort();
    let frozen: Vec<_> = (90..100).map(|i| format!("client-{i:03}")).collect();
    assert_eq!(stragglers, frozen);
    assert!(
        reply
            .stragglers
            .iter()
            .all(|s| s.revision < revision && s.cohort.as_deref() == Some("zone=b"))
    );
    let cohorts: Vec<_> = reply
        .cohorts
        .iter()
        .map(|c| (c.cohort.clone().unwrap(), c.live, c.applied))
        .collect();
    assert_eq!(cohorts, [("zone=a".into(), 50, 50), ("zone=b".into(), 50, 40)]);
    assert!(
        reply.latency.samples >= 90,
        "every unfrozen client measured the drain: {:?}",
        reply.latency
    );
    assert!(reply.latency.p50_ms <= reply.latency.p99_ms);

    let gate = |extra: &[&str]| {
        let mut list = args(&[
            "wait-converged",
            "prod/api",
            "--tenant",
            "acme",
            "--server",
            &direct,
            "--revision",
        ]);
        list.push(revision.0.to_string());
        list.extend(extra.iter().map(|s| (*s).to_owned()));
        list
    };
    let passed = muster(gate(&["--fraction", "0.9", "--timeout", "10s"])).await;
    assert!(passed.status.success(), "{}", String::from_utf8_lossy(&passed.stderr));
    assert!(String::from_utf8_lossy(&passed.stdout).contains("converged: 90 of 100"));
    let zone_a = muster(gate(&["--cohort", "zone=a", "--timeout", "10s"])).await;
    assert!(zone_a.status.success(), "{}", String::from_utf8_lossy(&zone_a.stderr));

    for fraction in ["0.95", "1.0"] {
        let timed_out = muster(gate(&["--fraction", fraction, "--timeout", "1s"])).await;
        assert_eq!(timed_out.status.code(), Some(1), "fraction {fraction}");
        let stderr = String::from_utf8_lossy(&timed_out.stderr);
        assert!(stderr.contains("not_converged"), "{stderr}");
        let stdout = String::from_utf8_lossy(&timed_out.stdout);
        for id in &frozen {
            assert!(stdout.contains(id.as_str()), "{id} is listed: {stdout}");
        }
        assert!(
            !stdout.contains("client-000"),
            "an applied client is not listed: {stdout}"
        );
    }

    let json = muster(args(&[
        "--json",
        "convergence",
        "prod/api",
        "--tenant",
        "acme",
        "--server",
        &direct,
    ]))
    .await;
    assert!(json.status.success());
    let reply: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(reply["stragglers_total"], 10);
    assert_eq!(reply["target"], revision.0);
    drop(resolvers);
}

/// Subscribers that stop (their process gone) stop counting once they have been silent for
/// `silent_after_ms` (here 3 s), and are listed as silent rather than as stragglers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_stops_counting_after_the_silence_timeout() {
    let registry = Registry::start_with(|config| ServerConfig {
        convergence: ConvergenceConfig {
            silent_after_ms: 3_000,
            report_every_ms: 300,
            ..ConvergenceConfig::default()
        },
        ..config
    })
    .await;
    let admin = registry.client();
    crate::inproc::register(&admin, &key(), "api-0", 1, "10.0.0.1").await;
    let url = admin.server().to_owned();
    let mut resolvers: Vec<_> = (0..20)
        .map(|i| {
            Resolver::start(
                subscriber(&url, &format!("c{i:02}"), "zone=a"),
                key(),
                ResolverConfig::default(),
            )
        })
        .collect();
    let everyone = ConvergenceQuery::default();
    until_async("all 20 report", || counts(&admin, &everyone), (20, 20)).await;
    // Keep-alives (every 300 ms, ten per silence timeout) hold the calm ones live past it.
    tokio::time::sleep(Duration::from_millis(4_000)).await;
    assert_eq!(counts(&admin, &everyone).await, (20, 20));

    for resolver in resolvers.drain(15..) {
        resolver.stop().await;
    }
    until_async(
        "the 5 stopped clients stop counting",
        || counts(&admin, &everyone),
        (15, 15),
    )
    .await;
    let reply = admin.convergence(&key(), &everyone).await.unwrap();
    assert_eq!(reply.silent_total, 5);
    assert_eq!(reply.stragglers_total, 0, "a silent client is not a straggler");
    let mut silent: Vec<_> = reply.silent.iter().map(|s| s.client_id.clone()).collect();
    silent.sort();
    assert_eq!(silent, ["c15", "c16", "c17", "c18", "c19"]);
    assert!(reply.silent.iter().all(|s| s.silent_ms >= 3_000));
    drop(resolvers);
}

/// Waits (bounded) until `probe` answers `want`; the last answer in the failure message.
async fn until_async<T, F, Fut>(what: &str, mut probe: F, want: T)
where
    T: PartialEq + std::fmt::Debug,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let mut last = None;
    for _ in 0..400 {
        let now = probe().await;
        if now == want {
            return;
        }
        last = Some(now);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting until {what}: last {last:?}, want {want:?}");
}

/// The measured grace (SPEC L6): a registrar told to drain until its callers converged
/// deregisters once they all applied the drain, not after its 60 s grace, which would
/// outlast the bounded wait below.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_ends_once_the_callers_applied_it_not_after_the_whole_grace() {
    let registry = Registry::start().await;
    let admin = registry.client();
    let url = admin.server().to_owned();
    let instance = muster_core::InstanceId::new("api-9").unwrap();
    let spec = muster_core::EndpointSpec {
        addresses: vec![muster_core::AddressSpec {
            ip: "10.0.0.9".into(),
            scope: None,
        }],
        ..muster_core::EndpointSpec::default()
    };
    let registrar = muster_client::Registrar::builder(
        admin.clone(),
        key(),
        instance,
        muster_client::Registration::new(muster_client::incarnation_from_counter(1)).endpoint(spec),
    )
    .drain_grace(Duration::from_secs(60))
    .drain_until_converged(1.0)
    .start();
    tokio::time::timeout(crate::inproc::STEP, registrar.registered())
        .await
        .unwrap()
        .unwrap();
    let resolvers: Vec<_> = (0..5)
        .map(|i| {
            Resolver::start(
                subscriber(&url, &format!("caller-{i}"), "zone=a"),
                key(),
                ResolverConfig::default(),
            )
        })
        .collect();
    let everyone = ConvergenceQuery::default();
    until_async("the callers report", || counts(&admin, &everyone), (5, 5)).await;

    let last = tokio::time::timeout(crate::inproc::STEP, registrar.shutdown())
        .await
        .expect("the drain ended before its grace");
    assert!(
        matches!(last, muster_client::RegistrarStatus::Stopped { deregistered: true, .. }),
        "{last:?}"
    );
    let reply = admin.convergence(&key(), &everyone).await.unwrap();
    assert!(
        reply.changes.len() >= 2,
        "the drain and the removal: {:?}",
        reply.changes
    );
    drop(resolvers);
}
