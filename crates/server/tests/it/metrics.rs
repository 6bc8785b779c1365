//! `/v1/metrics` and `/metrics` (SPEC O1): the exposition parses as Prometheus text, every
//! counter moves when its event happens, no label names an endpoint, and a tenant's token
//! sees only the rows it may read (SPEC S3).

use std::collections::BTreeMap;
use std::time::Duration;

use hyper::{Method, StatusCode};
use serde_json::json;

use crate::support::{STEP, TestServer, endpoint, instance_path, poll};

/// One sample line.
#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// Labels no metric may carry (SPEC O1: no endpoint ids, addresses or revisions).
const FORBIDDEN_LABELS: [&str; 6] = ["instance", "endpoint", "address", "ip", "revision", "incarnation"];

fn is_name(text: &str) -> bool {
    let mut chars = text.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// Parses the text format 0.0.4 strictly enough to catch what Prometheus would refuse:
/// every sample's family has `# HELP` and `# TYPE` first, names and label names are valid,
/// values are numbers, a counter's samples end in `_total`, a histogram's in
/// `_bucket`/`_sum`/`_count`.
fn parse(text: &str) -> Vec<Sample> {
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut helped = std::collections::BTreeSet::new();
    let mut samples = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap();
            assert!(is_name(name), "HELP name {name:?}");
            helped.insert(name.to_owned());
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE name kind");
            assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
            assert!(helped.contains(name), "TYPE before HELP: {line}");
            types.insert(name.to_owned(), kind.to_owned());
            continue;
        }
        assert!(!line.starts_with('#') && !line.is_empty(), "unexpected line {line:?}");
        let (series, value) = line.rsplit_once(' ').expect("series value");
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            other => other.parse().unwrap_or_else(|_| panic!("value of {line:?}")),
        };
        let (name, labels) = match series.split_once('{') {
            None => (series, BTreeMap::new()),
            Some((name, rest)) => {
                let body = rest.strip_suffix('}').expect("labels end with }");
                let mut labels = BTreeMap::new();
                for pair in body.split("\",").filter(|p| !p.is_empty()) {
                    let (key, value) = pair.split_once("=\"").expect("key=\"value\"");
                    assert!(is_name(key), "label name {key:?} in {line:?}");
                    labels.insert(key.to_owned(), value.trim_end_matches('"').to_owned());
                }
                (name, labels)
            }
        };
        let family = types
            .keys()
            .find(|family| {
                name == family.as_str()
                    || ["_bucket", "_sum", "_count"]
                        .iter()
                        .any(|suffix| name.strip_suffix(suffix) == Some(family.as_str()))
            })
            .unwrap_or_else(|| panic!("sample {name} has no TYPE"));
        if types[family] == "counter" {
            assert!(name.ends_with("_total"), "counter sample {name}");
        }
        samples.push(Sample {
            name: name.to_owned(),
            labels,
            value,
        });
    }
    samples
}

/// The sum of the samples of `name` whose labels include `labels`.
fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
        .sum()
}

async fn scrape(server: &TestServer) -> Vec<Sample> {
    let (status, text) = server.get_text("/v1/metrics").await;
    assert_eq!(status, StatusCode::OK, "{text}");
    parse(&text)
}

#[tokio::test]
async fn the_exposition_parses_has_no_endpoint_labels_and_is_served_at_both_paths() {
    let server = TestServer::start().await;
    server.register("api", "a", "10.0.0.1").await.expect(StatusCode::OK);
    let (status, text) = server.get_text("/metrics").await;
    assert_eq!(status, StatusCode::OK);
    let samples = parse(&text);
    for sample in &samples {
        for label in FORBIDDEN_LABELS {
            assert!(!sample.labels.contains_key(label), "{sample:?} has label {label}");
        }
    }
    assert_eq!(value(&samples, "muster_revision", &[]), 1.0);
    assert_eq!(value(&samples, "muster_leader_present", &[]), 1.0);
    assert_eq!(value(&samples, "muster_leader", &[]), 1.0);
    assert_eq!(value(&samples, "muster_apply_lag", &[]), 0.0);
    assert!(value(&samples, "muster_commit_latency_seconds_count", &[]) >= 1.0);
    assert!(
        value(&samples, "muster_leader_changes_total", &[]) <= 1.0,
        "at most the first election"
    );
    for path in ["/v1/metrics", "/metrics"] {
        assert_eq!(
            server.content_type(path).await.as_deref(),
            Some("text/plain; version=0.0.4; charset=utf-8"),
            "{path}"
        );
    }
}

#[tokio::test]
async fn registrations_fenced_rejections_renewals_watches_and_blocking_queries_are_counted() {
    let server = TestServer::start().await;
    let acme = [("tenant", "acme")];
    server.register("api", "a", "10.0.0.1").await.expect(StatusCode::OK);
    // Incarnation 2 replaces 1; 1 again is fenced (SPEC L2).
    let body = |incarnation: u64| Some(json!({"incarnation": incarnation, "endpoint": endpoint("10.0.0.1")}));
    server
        .call(Method::PUT, &instance_path("api", "a"), body(2))
        .await
        .expect(StatusCode::OK);
    server
        .call(Method::PUT, &instance_path("api", "a"), body(1))
        .await
        .expect(StatusCode::CONFLICT);
    let set_serving = server
        .call(
            Method::PUT,
            &format!("{}/serving", instance_path("api", "a")),
            Some(json!({"incarnation": 1, "state": "not_serving"})),
        )
        .await;
    assert_eq!(set_serving.code(), "stale_incarnation");

    let grant = server
        .call(Method::POST, "/v1/leases/acme", Some(json!({"ttl_ms": 30000})))
        .await
        .expect(StatusCode::OK);
    let id = grant.body["lease"]["id"].as_u64().unwrap();
    for _ in 0..3 {
        server
            .call(Method::PUT, &format!("/v1/leases/acme/{id}/renew"), None)
            .await
            .expect(StatusCode::OK);
    }
    server
        .call(Method::PUT, "/v1/leases/acme/999999/renew", None)
        .await
        .expect(StatusCode::NOT_FOUND);

    let mut live = server.watch("/v1/watch/acme/prod/api").await;
    let mut resumed = server.watch("/v1/watch/acme/prod/api?from_revision=1").await;
    assert!(live.next().await.is_some() && resumed.next().await.is_some());
    let revision = server.revision().await;
    server
        .get(&format!("/v1/registry/acme/prod/api?index={revision}&wait=50ms"))
        .await
        .expect(StatusCode::OK);

    let samples = scrape(&server).await;
    let count = |name: &str, labels: &[(&str, &str)]| value(&samples, name, labels);
    assert_eq!(count("muster_registrations_total", &[acme[0], ("outcome", "ok")]), 2.0);
    assert_eq!(
        count(
            "muster_registrations_total",
            &[acme[0], ("outcome", "stale_incarnation")]
        ),
        1.0
    );
    assert_eq!(
        count("muster_fenced_rejections_total", &[acme[0], ("command", "register")]),
        1.0
    );
    assert_eq!(
        count("muster_fenced_rejections_total", &[acme[0], ("command", "set_serving")]),
        1.0
    );
    assert_eq!(count("muster_renewals_total", &[acme[0], ("outcome", "ok")]), 3.0);
    assert_eq!(
        count("muster_renewals_total", &[acme[0], ("outcome", "lease_not_found")]),
        1.0
    );
    assert_eq!(count("muster_watch_connects_total", &[]), 2.0);
    assert_eq!(count("muster_watch_resumes_total", &[]), 1.0);
    assert_eq!(count("muster_watchers", &[]), 2.0);
    assert_eq!(
        count(
            "muster_blocking_queries_total",
            &[("api", "native"), ("outcome", "timeout")]
        ),
        1.0
    );
    assert!(count("muster_commit_latency_seconds_count", &[]) >= 3.0);
}

#[tokio::test]
async fn a_restart_does_not_count_again_what_the_process_before_it_counted() {
    // Trace: every restart replayed the log after the newest snapshot through the metrics,
    // so `muster_registrations_total` jumped by every registration since that snapshot and
    // `rate()` showed a burst of writes at each restart.
    let mut server = TestServer::start().await;
    for (n, instance) in ["a", "b", "c"].into_iter().enumerate() {
        server
            .register("api", instance, &format!("10.0.0.{}", n + 1))
            .await
            .expect(StatusCode::OK);
    }
    let ok = [("tenant", "acme"), ("outcome", "ok")];
    assert_eq!(value(&scrape(&server).await, "muster_registrations_total", &ok), 3.0);
    server.restart_with(|_| {}).await;
    let read = server.get("/v1/registry/acme/prod/api").await.expect(StatusCode::OK);
    assert_eq!(
        read.body["endpoints"].as_array().map(Vec::len),
        Some(3),
        "the state came back"
    );
    assert_eq!(value(&scrape(&server).await, "muster_registrations_total", &ok), 0.0);
    server.register("api", "d", "10.0.0.4").await.expect(StatusCode::OK);
    assert_eq!(value(&scrape(&server).await, "muster_registrations_total", &ok), 1.0);
}

#[tokio::test]
async fn a_compacted_resume_is_counted() {
    let server = TestServer::start_with(|config| config.registry.history_revisions = 5).await;
    for n in 0..10 {
        server
            .register("api", &format!("i{n}"), "10.0.0.1")
            .await
            .expect(StatusCode::OK);
    }
    let mut watch = server.watch("/v1/watch/acme/prod/api?from_revision=1").await;
    let frame = watch.next().await;
    assert!(
        matches!(frame, Some(muster_core::api::Frame::Error { .. })),
        "{frame:?}"
    );
    let samples = scrape(&server).await;
    assert_eq!(value(&samples, "muster_watch_compactions_total", &[]), 1.0);
    assert_eq!(value(&samples, "muster_watch_resumes_total", &[]), 0.0);
}

#[tokio::test]
async fn an_expired_lease_counts_its_endpoints_as_expiries() {
    let server = TestServer::start().await;
    server
        .call(
            Method::PUT,
            &instance_path("api", "crashed"),
            Some(json!({"incarnation": 1, "endpoint": endpoint("10.0.0.2"), "lease": {"ttl_ms": 1000}})),
        )
        .await
        .expect(StatusCode::OK);
    let server = &server;
    let expired = poll(Duration::from_millis(100), || async move {
        let samples = scrape(server).await;
        let n = value(
            &samples,
            "muster_expiries_total",
            &[("tenant", "acme"), ("outcome", "expired")],
        );
        (n > 0.0).then_some(n)
    })
    .await
    .expect("the lease expires in time");
    assert_eq!(expired, 1.0);
}

#[tokio::test]
async fn a_dns_query_is_counted_under_its_response_code() {
    let server = TestServer::start().await;
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    // A query for `nothing.muster.` A: id 0x1234, recursion desired, one question.
    let mut query = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in ["nothing", "muster"] {
        query.push(label.len() as u8);
        query.extend_from_slice(label.as_bytes());
    }
    query.extend_from_slice(&[0, 0, 1, 0, 1]);
    socket.send_to(&query, server.dns_addr()).await.unwrap();
    let mut reply = [0u8; 512];
    let (len, _) = tokio::time::timeout(STEP, socket.recv_from(&mut reply))
        .await
        .expect("a DNS reply in time")
        .unwrap();
    assert!(len >= 12);
    let rcode = match reply[3] & 0x0f {
        0 => "NOERROR",
        3 => "NXDOMAIN",
        5 => "REFUSED",
        other => panic!("unexpected rcode {other}"),
    };
    let samples = scrape(&server).await;
    assert_eq!(value(&samples, "muster_dns_queries_total", &[("rcode", rcode)]), 1.0);
}

#[tokio::test]
async fn denials_are_counted_and_a_tenant_token_sees_only_its_own_tenant() {
    let server = TestServer::start_with(|config| config.auth.enabled = true).await;
    let (status, _) = server.get_text("/v1/metrics").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let operator = server
        .call(Method::POST, "/v1/acl/bootstrap", None)
        .await
        .expect(StatusCode::CREATED)
        .body["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    let as_operator = format!("Bearer {operator}");
    let operator_header = [("authorization", as_operator.as_str())];
    let token = |tenant: &'static str, allow: &'static [&'static str]| {
        let server = &server;
        let operator_header = &operator_header;
        async move {
            let body = serde_json::to_vec(&json!({"tenant": tenant, "allow": allow})).unwrap();
            let reply = server
                .send(Method::POST, "/v1/acl/tokens", Some(body), operator_header)
                .await
                .expect(StatusCode::CREATED);
            format!("Bearer {}", reply.body["secret"].as_str().unwrap())
        }
    };
    let reader = token("acme", &["*/*=read,metrics"]).await;
    let register = |tenant: &str| {
        let body = serde_json::to_vec(&json!({"incarnation": 1, "endpoint": endpoint("10.0.0.1")})).unwrap();
        (format!("/v1/registry/{tenant}/prod/api/a"), body)
    };
    for tenant in ["acme", "beta"] {
        let (path, body) = register(tenant);
        server
            .send(Method::PUT, &path, Some(body), &operator_header)
            .await
            .expect(StatusCode::OK);
    }
    let (path, body) = register("acme");
    server
        .send(Method::PUT, &path, Some(body), &[("authorization", reader.as_str())])
        .await
        .expect(StatusCode::FORBIDDEN);

    let (status, text) = server.get_text_with("/v1/metrics", &operator_header).await;
    assert_eq!(status, StatusCode::OK);
    let all = parse(&text);
    assert_eq!(
        value(
            &all,
            "muster_denials_total",
            &[("tenant", "acme"), ("outcome", "permission_denied")]
        ),
        1.0
    );
    assert!(
        value(
            &all,
            "muster_denials_total",
            &[("tenant", "_none"), ("outcome", "unauthenticated")]
        ) >= 1.0
    );
    assert_eq!(value(&all, "muster_registrations_total", &[("tenant", "beta")]), 1.0);

    let (status, text) = server
        .get_text_with("/v1/metrics", &[("authorization", reader.as_str())])
        .await;
    assert_eq!(status, StatusCode::OK);
    let confined = parse(&text);
    assert_eq!(
        value(&confined, "muster_registrations_total", &[("tenant", "acme")]),
        1.0
    );
    for sample in &confined {
        let tenant = sample.labels.get("tenant").map(String::as_str);
        assert!(
            tenant.is_none_or(|t| t == "acme"),
            "a tenant's token sees another tenant's row: {sample:?}"
        );
    }
}

/// SPEC S3 and DECISIONS "Metrics and tenant-wide views": a token allowed only
/// `prod/x=read,watch` in acme holds no `metrics` right, so the scrape is refused (it once
/// saw the node's own figures); a tenant's `metrics` right shows that tenant's rows and no
/// figure summed over every tenant (watches, convergence, blocking queries, checks, DNS,
/// commit latency).
#[tokio::test]
async fn a_token_without_the_metrics_right_is_refused_and_a_tenants_sees_no_figure_over_every_tenant() {
    let server = TestServer::start_with(|config| config.auth.enabled = true).await;
    let operator = server
        .call(Method::POST, "/v1/acl/bootstrap", None)
        .await
        .expect(StatusCode::CREATED)
        .body["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    let as_operator = format!("Bearer {operator}");
    let operator_header = [("authorization", as_operator.as_str())];
    let body = serde_json::to_vec(&json!({"tenant": "acme", "allow": ["prod/x=read,watch"]})).unwrap();
    let one_service = server
        .send(Method::POST, "/v1/acl/tokens", Some(body), &operator_header)
        .await
        .expect(StatusCode::CREATED)
        .body["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    let one_service = format!("Bearer {one_service}");
    let one_service_header = [("authorization", one_service.as_str())];
    for (tenant, service) in [("acme", "x"), ("acme", "y"), ("beta", "x")] {
        let body = serde_json::to_vec(&json!({"incarnation": 1, "endpoint": endpoint("10.0.0.1")})).unwrap();
        server
            .send(
                Method::PUT,
                &format!("/v1/registry/{tenant}/prod/{service}/a"),
                Some(body),
                &operator_header,
            )
            .await
            .expect(StatusCode::OK);
    }
    // A denial of the token itself, counted under acme.
    server
        .send(Method::GET, "/v1/registry/acme/prod/y", None, &one_service_header)
        .await
        .expect(StatusCode::FORBIDDEN);

    let (status, text) = server.get_text_with("/v1/metrics", &operator_header).await;
    assert_eq!(status, StatusCode::OK);
    let all = parse(&text);
    assert_eq!(value(&all, "muster_registrations_total", &[("tenant", "acme")]), 2.0);
    assert!(all.iter().any(|s| s.name == "muster_watchers"), "the operator sees all");

    let (status, text) = server.get_text_with("/v1/metrics", &one_service_header).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{text}");
    assert!(text.contains("permission_denied"), "{text}");
    let (_, acme_metrics) =
        crate::support::mint_token(&server, &operator, json!({"tenant": "acme", "allow": ["*/*=metrics"]})).await;
    let acme_metrics = format!("Bearer {acme_metrics}");
    let (status, text) = server
        .get_text_with("/v1/metrics", &[("authorization", acme_metrics.as_str())])
        .await;
    assert_eq!(status, StatusCode::OK);
    let seen = parse(&text);
    assert!(seen.iter().any(|s| s.name == "muster_revision"), "{text}");
    assert_eq!(value(&seen, "muster_registrations_total", &[("tenant", "acme")]), 2.0);
    for sample in &seen {
        assert!(
            sample.labels.get("tenant").is_none_or(|t| t == "acme"),
            "a row of another tenant: {sample:?}"
        );
        for over_every_tenant in [
            "muster_watchers",
            "muster_watch_connects_total",
            "muster_convergence_subscribers",
            "muster_blocking_queries_total",
            "muster_checker_endpoints",
            "muster_dns_queries_total",
            "muster_commit_latency_seconds_count",
        ] {
            assert_ne!(sample.name, over_every_tenant, "a figure over every tenant");
        }
    }
}

#[tokio::test]
async fn checker_transitions_are_counted_by_the_state_found_and_the_state_proposed() {
    let server = TestServer::start().await;
    let mut spec = endpoint("10.0.0.1");
    spec["checks"] = json!([{"ttl_ms": 60000}]);
    server
        .call(
            Method::PUT,
            &instance_path("batch", "b-0"),
            Some(json!({"incarnation": 1, "endpoint": spec})),
        )
        .await
        .expect(StatusCode::OK);
    let check = format!("{}/check", instance_path("batch", "b-0"));
    for (status, serving) in [("pass", "ready"), ("warn", "degraded")] {
        let reply = server
            .call(Method::PUT, &check, Some(json!({"incarnation": 1, "status": status})))
            .await
            .expect(StatusCode::OK);
        assert_eq!(reply.body["serving"], serving);
    }
    let samples = scrape(&server).await;
    assert_eq!(
        value(&samples, "muster_health_transitions_total", &[("to", "ready")]),
        1.0
    );
    assert_eq!(
        value(
            &samples,
            "muster_health_transitions_total",
            &[("from", "ready"), ("to", "degraded")]
        ),
        1.0
    );
    assert_eq!(value(&samples, "muster_checker_proposals_total", &[]), 2.0);
    assert_eq!(value(&samples, "muster_checker_endpoints", &[]), 1.0);
}
