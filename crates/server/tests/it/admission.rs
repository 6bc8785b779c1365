//! One admission table for every way in (SPEC W4, S6): watches, dashboard live views,
//! native and Consul blocking queries take their slots from the same budgets, a refusal
//! names the budget and is on the audit trail, and one principal's flood leaves the others
//! their room. (xDS streams and names: `xds.rs`.)

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

use crate::support::{STEP, TestServer, as_token, bootstrap, poll, slow_watch};

/// A `GET` of `url` (any listener) whose reply head arrived: its status and the body, held
/// open when it streams.
async fn open(url: &str, secret: Option<&str>) -> (StatusCode, hyper::body::Incoming) {
    let client: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut request = Request::builder().method(Method::GET).uri(url);
    if let Some(secret) = secret {
        request = request.header("authorization", format!("Bearer {secret}"));
    }
    let response = tokio::time::timeout(STEP, client.request(request.body(Full::new(Bytes::new())).unwrap()))
        .await
        .expect("a reply head in time")
        .expect("a reply");
    (response.status(), response.into_body())
}

async fn text(body: hyper::body::Incoming) -> String {
    let bytes = tokio::time::timeout(STEP, body.collect())
        .await
        .expect("the body in time")
        .unwrap()
        .to_bytes();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// `/v1/status`'s `admission`, as `secret` (or anonymous) sees it.
async fn admission(server: &TestServer, secret: Option<&str>) -> Value {
    let reply = match secret {
        Some(secret) => as_token(server, secret, Method::GET, "/v1/status", None).await,
        None => server.get("/v1/status").await,
    };
    reply.expect(StatusCode::OK).body["admission"].clone()
}

/// Waits until `secret`'s view of the table shows `n` held of `kind`.
async fn until_held(server: &TestServer, secret: Option<&str>, kind: &str, n: u64) {
    poll(std::time::Duration::from_millis(20), || async {
        (admission(server, secret).await["held"][kind].as_u64() == Some(n)).then_some(())
    })
    .await
    .unwrap_or_else(|| panic!("{n} {kind} held"));
}

/// Trace (one front door): Consul and native blocking queries had no cap per principal.
/// Now a watch stream, a parked native query and a parked Consul query all hold slots of
/// the one `max_watches_per_principal`: with two held, the third is refused 429 on either
/// API, the refusal is audited, and nothing else changes.
#[tokio::test]
async fn one_principal_budget_spans_watches_and_blocking_queries_on_both_apis() {
    let server = TestServer::start_with(|config| config.max_watches_per_principal = 2).await;
    let _watch = slow_watch(&server, "/v1/watch/default/default/api").await;
    let native = server.url("/v1/registry/default/default/api?index=1000000&wait=60s");
    let parked = tokio::spawn({
        let native = native.clone();
        async move { open(&native, None).await }
    });
    until_held(&server, None, "parked", 1).await;

    let consul = format!(
        "http://{}/v1/health/service/api?index=1000000&wait=60s",
        server.consul_addr()
    );
    let (status, body) = open(&consul, None).await;
    let refused = text(body).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{refused}");
    assert!(
        refused.starts_with("too_many_watches") && refused.contains("max_watches_per_principal"),
        "{refused}"
    );
    let (status, body) = open(&native, None).await;
    let refused: Value = serde_json::from_str(&text(body).await).unwrap();
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{refused}");
    assert_eq!(refused["error"]["code"], "too_many_watches", "{refused}");
    // A read that does not park takes no slot.
    server
        .get("/v1/registry/default/default/api")
        .await
        .expect(StatusCode::NOT_FOUND);

    let table = admission(&server, None).await;
    assert_eq!(
        (table["held"]["watch"].as_u64(), table["held"]["parked"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(table["refused"]["max_watches_per_principal"], 2, "{table}");
    let audit = server.get("/v1/audit?limit=100").await.expect(StatusCode::OK).body;
    // Counted in one aggregate when they come alike within its window.
    let denials: u64 = audit["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|record| record["outcome"] == "denied:too_many_watches")
        .map(|record| record["count"].as_u64().unwrap_or(1))
        .sum();
    assert_eq!(denials, 2, "the refusals are on the audit trail: {audit}");
    parked.abort();
}

/// Trace (one front door): 1,024 `/v1/overview?stream=true` streams from one tenant's token
/// took every dashboard slot on the node, and the operator's own dashboard was refused. Now
/// a principal streams at most 64 live views; its 65th is refused naming the budget, while
/// the operator (another principal) still gets its view.
#[tokio::test]
async fn one_principals_live_views_leave_the_operators_dashboard_its_room() {
    let server = TestServer::start_with(|config| config.auth.enabled = true).await;
    let operator = bootstrap(&server).await;
    let tenant = as_token(
        &server,
        &operator,
        Method::POST,
        "/v1/acl/tokens",
        Some(json!({"tenant": "acme", "allow": ["*/*=*"]})),
    )
    .await
    .expect(StatusCode::CREATED)
    .body["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    let overview = server.url("/v1/overview?stream=true");
    let mut held = Vec::new();
    for _ in 0..64 {
        let (status, body) = open(&overview, Some(&tenant)).await;
        assert_eq!(status, StatusCode::OK);
        held.push(body);
    }
    let (status, body) = open(&overview, Some(&tenant)).await;
    let refused: Value = serde_json::from_str(&text(body).await).unwrap();
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{refused}");
    assert_eq!(refused["error"]["code"], "too_many_watches", "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("64 live views") && message.contains("acme"),
        "{message}"
    );

    let (status, _operators) = open(&overview, Some(&operator)).await;
    assert_eq!(status, StatusCode::OK, "the operator's dashboard is not refused");
    until_held(&server, Some(&operator), "live", 65).await;
    // The totals are the operator's to see, not a tenant's.
    assert_eq!(admission(&server, Some(&tenant)).await, Value::Null);
}

/// A Consul-API write as `secret` (`X-Consul-Token`): the status, the `Retry-After` header
/// and the body.
async fn consul_put(
    server: &TestServer,
    path: &str,
    secret: &str,
    body: Value,
) -> (StatusCode, Option<String>, String) {
    let client: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let request = Request::builder()
        .method(Method::PUT)
        .uri(format!("http://{}{path}", server.consul_addr()))
        .header("x-consul-token", secret)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(serde_json::to_vec(&body).unwrap())))
        .unwrap();
    let response = tokio::time::timeout(STEP, client.request(request))
        .await
        .expect("a reply head in time")
        .expect("a reply");
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|value| value.to_str().unwrap().to_owned());
    (response.status(), retry_after, text(response.into_body()).await)
}

/// SPEC W4, S6 (one front door, rates): with authentication on, one principal's writes are
/// paced by `write_rate_per_principal` / `write_burst_per_principal`. Past them a write is
/// refused `429 rate_limited` with `Retry-After`, on the native and the Consul API alike;
/// the refused write changes nothing, is counted and audited, and another principal's
/// writes are untouched.
#[tokio::test]
async fn one_principals_writes_are_paced_and_the_others_are_not() {
    let server = TestServer::start_with(|config| {
        config.auth.enabled = true;
        config.write_rate_per_principal = 1;
        config.write_burst_per_principal = 2;
    })
    .await;
    let operator = bootstrap(&server).await;
    let registrar = as_token(
        &server,
        &operator,
        Method::POST,
        "/v1/acl/tokens",
        Some(json!({"tenant": "acme", "allow": ["*/*=*"]})),
    )
    .await
    .expect(StatusCode::CREATED)
    .body["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    let body = || Some(json!({"incarnation": 1, "endpoint": crate::support::endpoint("10.0.0.1")}));
    // Two at once are the burst; one a second after. Ten in a row meet the limit.
    let mut refused = None;
    let mut accepted = 0;
    for i in 0..10 {
        let reply = as_token(
            &server,
            &registrar,
            Method::PUT,
            &crate::support::instance_path("api", &format!("api-{i}")),
            body(),
        )
        .await;
        if reply.status == StatusCode::TOO_MANY_REQUESTS {
            refused = Some((i, reply));
            break;
        }
        reply.expect(StatusCode::OK);
        accepted += 1;
    }
    let (i, refused) = refused.expect("ten writes in a row meet a rate of one a second");
    assert!(accepted >= 2, "the burst is taken whole");
    assert_eq!(refused.code(), "rate_limited", "{}", refused.body);
    assert!(
        refused.message().contains("write_rate_per_principal"),
        "the refusal names the setting: {}",
        refused.body
    );
    let retry_after: u64 = refused.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(retry_after >= 1, "Retry-After in whole seconds");
    let set = as_token(&server, &operator, Method::GET, "/v1/registry/acme/prod/api", None)
        .await
        .expect(StatusCode::OK)
        .body
        .to_string();
    assert!(set.contains("\"api-0\""), "{set}");
    assert!(
        !set.contains(&format!("\"api-{i}\"")),
        "the refused write changed nothing: {set}"
    );

    // The same principal through the Consul API: its rate is the same one.
    let (status, retry_after, text) = consul_put(
        &server,
        "/v1/agent/service/register?partition=acme&ns=prod",
        &registrar,
        json!({"Name": "web", "ID": "web-1", "Port": 80, "Address": "10.0.0.2"}),
    )
    .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{text}");
    assert!(text.starts_with("rate_limited"), "{text}");
    assert!(retry_after.is_some(), "Retry-After on the Consul API too");

    // Another principal writes at once.
    as_token(
        &server,
        &operator,
        Method::PUT,
        &crate::support::instance_path("api", "api-operator"),
        body(),
    )
    .await
    .expect(StatusCode::OK);
    let (status, metrics) = server
        .get_text_with("/v1/metrics", &[("authorization", &format!("Bearer {operator}"))])
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        metrics.contains("muster_write_rate_refused_total 2"),
        "both refusals counted: {}",
        metrics
            .lines()
            .filter(|line| line.contains("write_rate"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let audit = as_token(&server, &operator, Method::GET, "/v1/audit?limit=100", None)
        .await
        .expect(StatusCode::OK)
        .body;
    let denials: u64 = audit["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|record| record["outcome"] == "denied:rate_limited")
        .map(|record| record["count"].as_u64().unwrap_or(1))
        .sum();
    assert_eq!(denials, 2, "the refusals are on the audit trail: {audit}");
}
