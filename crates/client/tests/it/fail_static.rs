//! Fail static by default (SPEC C2): past the stale budget a view keeps its last set for
//! read-only calls (the default class of balancers and picks), reports its age, and keeps in
//! force the drains and removals it saw before the outage; a caller that declares
//! `Risk::Mutation` fails closed. First the pure view on virtual time, then a real registry
//! killed under a balancer.

use std::time::Duration;

use http_body_util::Empty;
use hyper::body::Bytes;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use muster_client::tower::{Balance, NewSetAuthority};
use muster_client::view::View;
use muster_client::{EjectionConfig, Fraction, Resolver, ResolverConfig, Risk, ServingState, StaleBudget, StaleError};
use muster_core::{Actor, AddressSpec, EndpointSpec, Incarnation, InstanceId, Principal, Revision};
use muster_registry::{
    Command, CommandMeta, Deregister, LeaseSpec, Register, Registry, RegistryConfig, Scope, SetServing, Target,
};
use tower::{Service, ServiceExt};

use crate::inproc::{Backend, Registry as Server, STEP, key, until, until_endpoints};

fn target(instance: &str) -> Target {
    Target {
        key: key("api"),
        instance: InstanceId::new(instance).unwrap(),
        incarnation: Incarnation(1),
    }
}

fn apply(registry: &mut Registry, command: Command) {
    let meta = CommandMeta {
        at_ms: 1,
        principal: Principal::new("test").unwrap(),
        actor: Actor::App,
    };
    registry.apply(&command, &meta).unwrap();
}

fn register(registry: &mut Registry, instance: &str) {
    apply(
        registry,
        Register {
            target: target(instance),
            spec: EndpointSpec {
                addresses: vec![AddressSpec {
                    ip: "10.0.0.1".into(),
                    scope: None,
                }],
                ..EndpointSpec::default()
            },
            lease: LeaseSpec::None,
            expected_revision: None,
        }
        .into(),
    );
}

fn instances(view: &View, risk: Risk, budget: &StaleBudget, now_ms: u64) -> Vec<(String, ServingState)> {
    let usable = view.usable(risk, budget, now_ms).unwrap();
    usable
        .snapshot
        .iter()
        .map(|e| (e.instance.to_string(), e.serving))
        .collect()
}

/// The trace from the issue: a 45 s outage past a 30 s budget. Reads keep the last set (the
/// drain and the removal seen before the outage stay in force); mutations fail `stale`; the
/// age is reported; a progress after the outage makes the view fresh again.
#[test]
fn past_the_budget_reads_keep_the_last_set_with_its_drains_and_mutations_fail_closed() {
    let mut registry = Registry::new(RegistryConfig::default());
    for instance in ["a", "b", "c"] {
        register(&mut registry, instance);
    }
    let mut view = View::new(key("api"));
    let at = registry.revision();
    view.install(
        muster_core::ServiceSnapshot::clone(&registry.snapshot(&key("api")).unwrap()),
        at,
        0,
    );
    apply(
        &mut registry,
        SetServing {
            target: target("b"),
            state: ServingState::Draining,
            reason: "deploy".into(),
            expected_revision: None,
        }
        .into(),
    );
    apply(
        &mut registry,
        Deregister {
            target: target("c"),
            expected_revision: None,
        }
        .into(),
    );
    for update in registry.changes_since(&Scope::Service(key("api")), at).unwrap() {
        view.on_update(&update, 1_000);
    }
    // The server goes away: a transport error, then nothing for 45 s.
    view.on_transport_error("cannot connect to http://127.0.0.1:7070: connection refused");
    let budget = StaleBudget::default();
    let during = 1_000 + 45_000;

    assert_eq!(Risk::default(), Risk::ReadOnly, "picks default to the read-only class");
    let usable = view.usable(Risk::default(), &budget, during).unwrap();
    assert!(usable.stale, "past the budget, and said so");
    assert_eq!(usable.age_ms, 45_000);
    assert_eq!(
        instances(&view, Risk::ReadOnly, &budget, during),
        vec![("a".into(), ServingState::Ready), ("b".into(), ServingState::Draining)],
        "the last set: b still draining, c still gone"
    );
    assert!(matches!(
        view.usable(Risk::Mutation, &budget, during),
        Err(StaleError::Stale {
            age_ms: 45_000,
            budget_ms: 30_000,
            ..
        })
    ));
    let status = view.status(during);
    assert_eq!(status.age_ms, Some(45_000));
    assert!(status.last_error.as_deref().unwrap().contains("connection refused"));

    // Back: a progress confirms the set; the last error is over.
    view.on_frame(
        &muster_core::api::Frame::Progress {
            revision: Revision(registry.revision().0),
        },
        during + 1,
    );
    assert!(!view.usable(Risk::Mutation, &budget, during + 2).unwrap().stale);
    assert_eq!(view.status(during + 2).last_error, None);
}

type Http = HttpClient<HttpConnector, Empty<Bytes>>;

async fn get(balance: &mut Balance<NewSetAuthority<Http>>) -> Result<u16, &'static str> {
    let request = hyper::Request::get("/").body(Empty::new()).unwrap();
    let call = async { balance.ready().await?.call(request).await };
    match tokio::time::timeout(STEP, call).await.expect("an answer in time") {
        Ok(response) => Ok(response.status().as_u16()),
        Err(error) => Err(error.code()),
    }
}

/// The acceptance trace: two healthy backends, the registry killed past the budget. The
/// default balancer keeps answering 200 from the last set, and local ejection still takes
/// out a backend that starts failing during the outage; the one that declared
/// `Risk::Mutation` fails `stale`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_killed_past_the_budget_leaves_reads_answered_and_mutations_refused() {
    let server = Server::start().await;
    let (a, b) = (Backend::start().await, Backend::start().await);
    server.register("api", "web-a", a.port()).await;
    server.register("api", "web-b", b.port()).await;
    let config = ResolverConfig {
        // A short budget so the outage passes it quickly; the default class is what is tested.
        budget: StaleBudget {
            budget_ms: 300,
            privileged_budget_ms: 100,
            ..StaleBudget::default()
        },
        ..ResolverConfig::default()
    };
    let resolver = Resolver::start(server.client(), key("api"), config);
    until_endpoints(&resolver, 2).await;
    let http: Http = HttpClient::builder(TokioExecutor::new()).build_http();
    let ejection = EjectionConfig {
        consecutive_failures: 3,
        base_ejection_ms: 60_000,
        max_ejection_ms: 60_000,
        max_ejected: Fraction::percent(50),
    };
    let mut reads = Balance::builder(resolver.clone())
        .ejection(ejection)
        .port("http")
        .shared(http.clone())
        .unwrap();
    let mut writes = Balance::builder(resolver.clone())
        .risk(Risk::Mutation)
        .port("http")
        .shared(http)
        .unwrap();
    assert_eq!(get(&mut reads).await, Ok(200));
    assert_eq!(get(&mut writes).await, Ok(200));

    server.stop().await;
    until("the view is past its budget", || {
        resolver.status().age_ms.is_some_and(|age| age > 300)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    for _ in 0..10 {
        assert_eq!(get(&mut reads).await, Ok(200), "fail static: the last known set");
    }
    assert_eq!(get(&mut writes).await, Err("stale"), "a mutation fails closed");
    assert!(resolver.status().last_error.is_some(), "the outage's cause is reported");

    // Local ejection keeps working during the outage: web-a fails, is ejected, and every
    // request goes to web-b.
    a.answer(503);
    for _ in 0..12 {
        let _ = get(&mut reads).await;
    }
    let (before_a, before_b) = (a.requests(), b.requests());
    for _ in 0..10 {
        assert_eq!(get(&mut reads).await, Ok(200));
    }
    assert_eq!(a.requests(), before_a, "the ejected backend gets nothing");
    assert_eq!(b.requests(), before_b + 10);
}
