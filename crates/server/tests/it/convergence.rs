//! Convergence telemetry over HTTP (SPEC O3): reports in, summaries out, the DNS listener
//! as a subscriber, aggregates in the metrics without client ids, and every bad report
//! refused with a stable code and nothing recorded.

use hyper::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{Lines, Reply, TestServer, as_token, bootstrap, endpoint, instance_path};

const SUMMARY: &str = "/v1/convergence/acme/prod/api";

fn report(id: &str, cohort: Option<&str>, revision: u64, received: u64) -> Value {
    let mut body = json!({
        "client_id": id,
        "applied": [{
            "service": {"tenant": "acme", "namespace": "prod", "service": "api"},
            "revision": revision,
            "received_unix_ms": received,
        }],
    });
    if let Some(cohort) = cohort {
        body["cohort"] = json!(cohort);
    }
    body
}

async fn post(server: &TestServer, body: Value) -> Reply {
    server.call(Method::POST, "/v1/convergence/report", Some(body)).await
}

fn now_ms() -> u64 {
    #[allow(
        clippy::disallowed_methods,
        reason = "a test stamps its reports with the wall clock, as a client does"
    )]
    let now = std::time::SystemTime::now();
    now.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
}

#[tokio::test]
async fn reports_are_counted_per_cohort_and_a_change_is_measured_once_reported() {
    let server = TestServer::start().await;
    let first = server
        .register("api", "api-0", "10.0.0.1")
        .await
        .expect(StatusCode::OK)
        .revision();
    for (id, cohort) in [("a1", "zone=a"), ("a2", "zone=a"), ("b1", "zone=b")] {
        let reply = post(&server, report(id, Some(cohort), first, now_ms()))
            .await
            .expect(StatusCode::OK);
        assert_eq!(reply.body["accepted"], 1);
        assert_eq!(reply.body["report_every_ms"], 10_000);
        assert_eq!(reply.body["silent_after_ms"], 30_000);
    }
    let second = server
        .register("api", "api-1", "10.0.0.2")
        .await
        .expect(StatusCode::OK)
        .revision();
    post(&server, report("a1", Some("zone=a"), second, now_ms()))
        .await
        .expect(StatusCode::OK);

    let summary = server.get(SUMMARY).await.expect(StatusCode::OK);
    assert_eq!(summary.body["revision"], second);
    assert_eq!(summary.body["target"], second);
    assert_eq!(
        (summary.body["live"].as_u64(), summary.body["applied"].as_u64()),
        (Some(3), Some(1))
    );
    assert_eq!(summary.body["converged"], false);
    assert_eq!(summary.body["stragglers_total"], 2);
    assert_eq!(summary.body["latency"]["samples"], 1, "only a1 passed the change");
    assert_eq!(summary.body["changes"][0]["revision"], second);
    let cohorts = summary.body["cohorts"].as_array().unwrap();
    assert_eq!(cohorts[0], json!({"cohort": "zone=a", "live": 2, "applied": 1}));
    assert_eq!(cohorts[1], json!({"cohort": "zone=b", "live": 1, "applied": 0}));

    let at_first = server
        .get(&format!("{SUMMARY}?revision={first}"))
        .await
        .expect(StatusCode::OK);
    assert_eq!(at_first.body["converged"], true, "everyone applied the first revision");
    let zone_a = server
        .get(&format!("{SUMMARY}?cohort=zone%3Da&fraction=0.5"))
        .await
        .expect(StatusCode::OK);
    assert_eq!(
        (zone_a.body["live"].as_u64(), zone_a.body["converged"].as_bool()),
        (Some(2), Some(true))
    );

    // Aggregates only: the metrics never name a client.
    let (status, metrics) = server.get_text("/v1/metrics").await;
    assert_eq!(status, StatusCode::OK);
    assert!(metrics.contains("muster_convergence_subscribers 3"), "{metrics}");
    assert!(metrics.contains("muster_convergence_behind 2"), "{metrics}");
    assert!(
        metrics.contains("muster_convergence_apply_latency_seconds_count{path=\"watch\"} 1"),
        "{metrics}"
    );
    assert!(!metrics.contains("a1"), "no client id in the metrics");
}

#[tokio::test]
async fn the_dns_listener_shows_as_a_path_of_its_tenants_services() {
    let server =
        TestServer::start_with(|config| config.dns_zone.tenant = muster_core::Label::new("tenant", "acme").unwrap())
            .await;
    let revision = server
        .register("api", "api-0", "10.0.0.1")
        .await
        .expect(StatusCode::OK)
        .revision();
    let summary = server.get(SUMMARY).await.expect(StatusCode::OK);
    assert_eq!(summary.body["paths"], json!([{"path": "dns", "live": 1, "applied": 1}]));
    // Shown by its path only: a service nobody else follows has no live subscriber.
    assert_eq!(
        (summary.body["live"].as_u64(), summary.body["converged"].as_bool()),
        (Some(0), Some(true))
    );
    assert_eq!(summary.body["by_revision"], json!([]));
    assert!(revision > 0);
}

#[tokio::test]
async fn bad_reports_and_queries_are_refused_and_change_nothing() {
    let server = TestServer::start_with(|config| config.convergence.max_subscribers = 2).await;
    let revision = server
        .register("api", "api-0", "10.0.0.1")
        .await
        .expect(StatusCode::OK)
        .revision();
    let now = now_ms();
    for (body, code) in [
        (report("has space", None, revision, now), "bad_request"),
        (report("ok", Some("zone"), revision, now), "bad_request"),
        (report("ok", Some("Zone=A"), revision, now), "bad_request"),
        (json!({"client_id": "ok", "applied": [], "extra": 1}), "bad_request"),
    ] {
        let reply = post(&server, body).await;
        assert_eq!(
            (reply.status, reply.code()),
            (StatusCode::BAD_REQUEST, code),
            "{}",
            reply.body
        );
    }
    let many: Vec<Value> = (0..257)
        .map(|i| json!({"service": {"tenant": "acme", "namespace": "prod", "service": format!("s{i}")}, "revision": 1, "received_unix_ms": now}))
        .collect();
    let reply = post(&server, json!({"client_id": "ok", "applied": many})).await;
    assert_eq!(
        (reply.status, reply.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_report")
    );
    post(&server, report("one", None, revision, now))
        .await
        .expect(StatusCode::OK);
    post(&server, report("two", None, revision, now))
        .await
        .expect(StatusCode::OK);
    let full = post(&server, report("three", None, revision, now)).await;
    assert_eq!(
        (full.status, full.code()),
        (StatusCode::TOO_MANY_REQUESTS, "too_many_subscribers")
    );

    let ahead = post(&server, report("ahead", None, revision + 100, now)).await;
    assert_eq!(
        (ahead.status, ahead.code()),
        (StatusCode::BAD_REQUEST, "future_revision"),
        "{}",
        ahead.body
    );
    for query in ["?fraction=0", "?fraction=1.5", "?cohort=nope", "?revision=x", "?what=1"] {
        let reply = server.get(&format!("{SUMMARY}{query}")).await;
        assert_eq!(
            (reply.status, reply.code()),
            (StatusCode::BAD_REQUEST, "bad_request"),
            "{query}"
        );
    }
    let unknown = server.get("/v1/convergence/acme/prod/nothing").await;
    assert_eq!((unknown.status, unknown.code()), (StatusCode::NOT_FOUND, "not_found"));
    let summary = server.get(SUMMARY).await.expect(StatusCode::OK);
    assert_eq!(summary.body["live"], 2, "only the two accepted reports count");
}

#[tokio::test]
async fn a_token_reports_only_what_it_may_watch() {
    let server = TestServer::start_with(|config| config.auth.enabled = true).await;
    let operator = bootstrap(&server).await;
    let rules = json!({"tenant": "acme", "allow": ["prod/api=watch"], "deny": []});
    let created = as_token(&server, &operator, Method::POST, "/v1/acl/tokens", Some(rules))
        .await
        .expect(StatusCode::CREATED);
    let watcher = created.body["secret"].as_str().unwrap().to_owned();
    let record = json!({"incarnation": 1, "endpoint": endpoint("10.0.0.1")});
    let registered = as_token(
        &server,
        &operator,
        Method::PUT,
        &instance_path("api", "api-0"),
        Some(record),
    )
    .await
    .expect(StatusCode::OK);
    const REPORT: &str = "/v1/convergence/report";
    let mut both = report("w", None, registered.revision(), now_ms());
    both["applied"].as_array_mut().unwrap().push(json!({
        "service": {"tenant": "acme", "namespace": "prod", "service": "secret"},
        "revision": 1, "received_unix_ms": 1
    }));
    let denied = as_token(&server, &watcher, Method::POST, REPORT, Some(both)).await;
    assert_eq!(
        (denied.status, denied.code()),
        (StatusCode::FORBIDDEN, "permission_denied")
    );
    let anonymous = server.call(Method::POST, REPORT, Some(report("w", None, 1, 1))).await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
    let live = |secret: String| {
        let server = &server;
        async move { as_token(server, &secret, Method::GET, SUMMARY, None).await }
    };
    assert_eq!(
        live(operator.clone()).await.expect(StatusCode::OK).body["live"],
        0,
        "nothing was recorded"
    );
    let own = report("w", None, registered.revision(), now_ms());
    as_token(&server, &watcher, Method::POST, REPORT, Some(own))
        .await
        .expect(StatusCode::OK);
    assert_eq!(live(operator).await.expect(StatusCode::OK).body["live"], 1);
    let watcher_reads = live(watcher).await;
    assert_eq!(
        watcher_reads.status,
        StatusCode::FORBIDDEN,
        "watch is not read: {}",
        watcher_reads.body
    );
}

/// SPEC O3, S3: client ids are the reporter's word, so a tenant's token can make up as many
/// as it likes; they fill that tenant's own bound (`max_subscribers_per_tenant`), never the
/// room another tenant's real subscribers need.
#[tokio::test]
async fn made_up_client_ids_fill_their_tenants_bound_and_another_tenant_still_reports() {
    let server = TestServer::start_with(|config| {
        config.auth.enabled = true;
        config.convergence.max_subscribers = 5;
        config.convergence.max_subscribers_per_tenant = 3;
    })
    .await;
    let operator = bootstrap(&server).await;
    let token = |tenant: &'static str| {
        let (server, operator) = (&server, &operator);
        async move {
            let rules = json!({"tenant": tenant, "allow": ["*/*=read,watch"], "deny": []});
            as_token(server, operator, Method::POST, "/v1/acl/tokens", Some(rules))
                .await
                .expect(StatusCode::CREATED)
                .body["secret"]
                .as_str()
                .unwrap()
                .to_owned()
        }
    };
    let (acme, beta) = (token("acme").await, token("beta").await);
    let revision = server.revision().await;
    let in_tenant = |tenant: &str, id: &str| {
        json!({
            "client_id": id,
            "applied": [{
                "service": {"tenant": tenant, "namespace": "prod", "service": "api"},
                "revision": revision,
                "received_unix_ms": now_ms(),
            }],
        })
    };
    const REPORT: &str = "/v1/convergence/report";
    for i in 0..3 {
        as_token(
            &server,
            &acme,
            Method::POST,
            REPORT,
            Some(in_tenant("acme", &format!("fake-{i}"))),
        )
        .await
        .expect(StatusCode::OK);
    }
    for i in 3..8 {
        let full = as_token(
            &server,
            &acme,
            Method::POST,
            REPORT,
            Some(in_tenant("acme", &format!("fake-{i}"))),
        )
        .await;
        assert_eq!(
            (full.status, full.code()),
            (StatusCode::TOO_MANY_REQUESTS, "too_many_subscribers"),
            "{}",
            full.body
        );
        assert!(!full.body.to_string().contains("beta"), "{}", full.body);
    }
    // The other tenant's subscribers are still counted, and acme's known ones still report.
    for id in ["beta-0", "beta-1"] {
        let reply = as_token(&server, &beta, Method::POST, REPORT, Some(in_tenant("beta", id)))
            .await
            .expect(StatusCode::OK);
        assert_eq!(reply.body["accepted"], 1);
    }
    as_token(&server, &acme, Method::POST, REPORT, Some(in_tenant("acme", "fake-0")))
        .await
        .expect(StatusCode::OK);
    let beta_api = as_token(&server, &operator, Method::GET, "/v1/convergence/beta/prod/api", None)
        .await
        .expect(StatusCode::OK);
    assert_eq!(beta_api.body["live"], 2);
}

#[tokio::test]
async fn the_summary_streams_a_new_line_when_a_subscriber_reports() {
    let server = TestServer::start().await;
    let revision = server
        .register("api", "api-0", "10.0.0.1")
        .await
        .expect(StatusCode::OK)
        .revision();
    let mut lines = Lines::open(&server, &format!("{SUMMARY}?stream=true")).await;
    assert_eq!(lines.status, StatusCode::OK);
    let first: Value = serde_json::from_str(&lines.next().await).unwrap();
    assert_eq!(first["live"], 0);
    post(&server, report("late", Some("zone=a"), revision, now_ms()))
        .await
        .expect(StatusCode::OK);
    // Lines come as the summary changes (its clock moves every 500 ms): within a bounded
    // number of them, one counts the new subscriber.
    for _ in 0..40 {
        let next = lines.next().await;
        if next.is_empty() {
            continue;
        }
        let line: Value = serde_json::from_str(&next).unwrap();
        if line["live"] == 1 {
            assert_eq!(line["applied"], 1);
            return;
        }
    }
    panic!("no line counted the report");
}
