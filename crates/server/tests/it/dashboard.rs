//! The web dashboard (SPEC U2) and the routes it reads: its files at `/ui/`, the overview
//! (contents and filtering by token), lease deadlines, the change streams' first lines, and
//! lab runs (typed refusals, no runner, one at a time).

use std::sync::{Arc, Mutex, mpsc};

use hyper::{Method, StatusCode};
use muster_server::{Hooks, LabPlot, LabRequest, LabRun, LabRunner};
use serde_json::{Value, json};

use crate::support::{Lines, TestServer, as_token, bootstrap, endpoint, instance_path, poll};

/// A GET's status, headers and the body up to its first newline (a stream's first line) or
/// its end (a file).
async fn head_and_first_line(server: &TestServer, path: &str) -> (StatusCode, hyper::HeaderMap, String) {
    let mut lines = Lines::open(server, path).await;
    let first = lines.next().await;
    (lines.status, lines.headers, first)
}

fn header<'a>(headers: &'a hyper::HeaderMap, name: &str) -> &'a str {
    headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
}

#[tokio::test]
async fn the_page_and_its_files_are_served_with_their_types_and_no_cache() {
    let server = TestServer::start().await;
    let (status, headers, _) = head_and_first_line(&server, "/ui/").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(header(&headers, "content-type"), "text/html; charset=utf-8");
    assert_eq!(header(&headers, "cache-control"), "no-cache");
    assert!(header(&headers, "content-security-policy").contains("frame-ancestors 'none'"));
    let (_, page) = server.get_text("/ui/").await;
    assert!(page.contains(r#"<main id="view" data-test="view">"#), "{page}");
    assert!(page.contains(r#"data-auth="off""#));
    for (file, kind) in [
        ("/ui/app.js", "text/javascript; charset=utf-8"),
        ("/ui/style.css", "text/css; charset=utf-8"),
        ("/ui/index.html", "text/html; charset=utf-8"),
    ] {
        assert_eq!(server.content_type(file).await.as_deref(), Some(kind), "{file}");
    }
    let (status, headers, _) = head_and_first_line(&server, "/ui").await;
    assert_eq!(status, StatusCode::PERMANENT_REDIRECT);
    assert_eq!(header(&headers, "location"), "/ui/");
    let missing = server.get("/ui/secrets.txt").await.expect(StatusCode::NOT_FOUND);
    assert_eq!(missing.code(), "not_found");
}

#[tokio::test]
async fn with_auth_on_the_page_needs_no_token_and_says_it_will_ask_for_one() {
    let server = TestServer::start_with(|config| config.auth.enabled = true).await;
    let (status, page) = server.get_text("/ui/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains(r#"data-auth="on""#), "{page}");
    // The data is not open: the overview needs a token.
    assert_eq!(server.get("/v1/overview").await.code(), "unauthenticated");
}

#[tokio::test]
async fn a_page_on_another_origin_still_cannot_read_the_overview() {
    // The dashboard changes nothing in the browser guard (SPEC S6).
    let server = TestServer::start().await;
    let refused = server
        .send(Method::GET, "/v1/overview", None, &[("origin", "http://evil.example")])
        .await;
    assert_eq!(refused.code(), "forbidden_origin");
}

fn drain_body() -> Value {
    json!({"incarnation": 1, "reason": "deploy"})
}

#[tokio::test]
async fn the_overview_counts_endpoints_per_state_with_revisions_and_watchers() {
    let server = TestServer::start().await;
    server.register("api", "api-0", "10.0.0.1").await.expect(StatusCode::OK);
    server.register("api", "api-1", "10.0.0.2").await.expect(StatusCode::OK);
    let drained = server
        .call(
            Method::POST,
            &format!("{}/drain", instance_path("api", "api-1")),
            Some(drain_body()),
        )
        .await
        .expect(StatusCode::OK)
        .revision();
    server
        .call(
            Method::PUT,
            "/v1/registry/acme/staging/web/web-0",
            Some(json!({"incarnation": 1, "endpoint": endpoint("10.0.1.1")})),
        )
        .await
        .expect(StatusCode::OK);
    let _watch = server.watch("/v1/watch/acme/prod/api").await;

    let overview = poll(std::time::Duration::from_millis(50), || async {
        let reply = server.get("/v1/overview").await.expect(StatusCode::OK);
        (reply.body["namespaces"][0]["services"][0]["watchers"] == 1).then_some(reply)
    })
    .await
    .expect("the watch is counted");
    let namespaces = overview.body["namespaces"].as_array().unwrap();
    let names: Vec<String> = namespaces
        .iter()
        .map(|ns| {
            format!(
                "{}/{}",
                ns["tenant"].as_str().unwrap(),
                ns["namespace"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(names, ["acme/prod", "acme/staging"]);
    let api = &namespaces[0]["services"][0];
    assert_eq!(api["service"], "api");
    assert_eq!(api["endpoints"], 2);
    assert_eq!(api["revision"], drained);
    assert_eq!(api["protection_active"], false);
    assert_eq!(
        api["states"],
        json!({"ready": 1, "draining": 1, "degraded": 0, "starting": 0, "not_serving": 0, "unknown": 0})
    );
    assert_eq!(namespaces[0]["watchers"], 0, "a service watch is not a namespace watch");
    assert_eq!(overview.body["revision"], server.revision().await);
}

#[tokio::test]
async fn the_overview_shows_a_token_only_the_services_it_may_read() {
    let server = TestServer::start_with(|config| config.auth.enabled = true).await;
    let operator = bootstrap(&server).await;
    for (tenant, namespace, service) in [
        ("acme", "prod", "api"),
        ("acme", "prod", "payroll"),
        ("acme", "staging", "web"),
        ("other", "prod", "api"),
    ] {
        as_token(
            &server,
            &operator,
            Method::PUT,
            &format!("/v1/registry/{tenant}/{namespace}/{service}/i-0"),
            Some(json!({"incarnation": 1, "endpoint": endpoint("10.0.0.1")})),
        )
        .await
        .expect(StatusCode::OK);
    }
    let reader = as_token(
        &server,
        &operator,
        Method::POST,
        "/v1/acl/tokens",
        Some(json!({"tenant": "acme", "allow": ["prod/*=read"], "deny": ["prod/payroll=read"]})),
    )
    .await
    .expect(StatusCode::CREATED);
    let reader = reader.body["secret"].as_str().unwrap().to_owned();

    let seen = as_token(&server, &reader, Method::GET, "/v1/overview", None)
        .await
        .expect(StatusCode::OK);
    let services: Vec<String> = seen.body["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|ns| {
            ns["services"].as_array().unwrap().iter().map(move |s| {
                format!(
                    "{}/{}/{}",
                    ns["tenant"].as_str().unwrap(),
                    ns["namespace"].as_str().unwrap(),
                    s["service"].as_str().unwrap()
                )
            })
        })
        .collect();
    assert_eq!(services, ["acme/prod/api"], "no payroll, no staging, no other tenant");
    let all = as_token(&server, &operator, Method::GET, "/v1/overview", None)
        .await
        .expect(StatusCode::OK);
    assert_eq!(all.body["namespaces"].as_array().unwrap().len(), 3);
    // The deadlines of a service follow the service's read right.
    let denied = as_token(&server, &reader, Method::GET, "/v1/deadlines/acme/prod/payroll", None).await;
    assert_eq!(denied.code(), "permission_denied");
}

#[tokio::test]
async fn the_overview_stream_starts_with_the_whole_overview_at_once() {
    let server = TestServer::start().await;
    server.register("api", "api-0", "10.0.0.1").await.expect(StatusCode::OK);
    let (status, headers, line) = head_and_first_line(&server, "/v1/overview?stream=true").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(header(&headers, "content-type"), "application/x-ndjson");
    let first: Value = serde_json::from_str(line.trim_end()).expect("one JSON object on the first line");
    assert_eq!(first["namespaces"][0]["services"][0]["endpoints"], 1);
    assert_eq!(first["revision"], 1);
}

#[tokio::test]
async fn the_overview_stream_sends_a_line_when_the_overview_changes_and_not_before() {
    let server = TestServer::start().await;
    server.register("api", "api-0", "10.0.0.1").await.expect(StatusCode::OK);
    let mut lines = Lines::open(&server, "/v1/overview?stream=true").await;
    let first: Value = serde_json::from_str(&lines.next().await).unwrap();
    assert_eq!(first["revision"], 1);
    server.register("api", "api-1", "10.0.0.2").await.expect(StatusCode::OK);
    // The next line with content is the changed overview: nothing was repeated in between
    // (a keep-alive is a bare newline, 15 s apart).
    let mut next = lines.next().await;
    while next.is_empty() {
        next = lines.next().await;
    }
    let second: Value = serde_json::from_str(&next).unwrap();
    assert_eq!(second["revision"], 2);
    assert_eq!(second["namespaces"][0]["services"][0]["endpoints"], 2);
}

#[tokio::test]
async fn the_cluster_stream_adds_the_applied_index_to_the_members() {
    let server = TestServer::start().await;
    let (status, _, line) = head_and_first_line(&server, "/v1/cluster?stream=true").await;
    assert_eq!(status, StatusCode::OK);
    let first: Value = serde_json::from_str(line.trim_end()).unwrap();
    assert_eq!(first["members"].as_array().unwrap().len(), 1);
    assert_eq!(first["leader"], first["node_id"]);
    assert!(first["applied_index"].is_u64(), "{first}");
    // Without the flag the reply is as before.
    let plain = server.get("/v1/cluster").await.expect(StatusCode::OK);
    assert!(plain.body.get("applied_index").is_none());
}

#[tokio::test]
async fn a_leased_endpoint_has_its_deadline_and_an_unleased_one_none() {
    let server = TestServer::start().await;
    let granted = server
        .call(
            Method::PUT,
            &instance_path("api", "api-0"),
            Some(json!({"incarnation": 1, "endpoint": endpoint("10.0.0.1"), "lease": {"ttl_ms": 60000}})),
        )
        .await
        .expect(StatusCode::OK);
    server.register("api", "api-1", "10.0.0.2").await.expect(StatusCode::OK);
    let deadline = granted.body["lease"]["deadline_unix_ms"].as_u64().unwrap();
    let reply = server.get("/v1/deadlines/acme/prod/api").await.expect(StatusCode::OK);
    assert_eq!(reply.body["leader"], true);
    let endpoints = reply.body["endpoints"].as_array().unwrap();
    assert_eq!(endpoints.len(), 1, "only the leased endpoint: {}", reply.body);
    assert_eq!(endpoints[0]["instance"], "api-0");
    assert_eq!(endpoints[0]["ttl_ms"], 60000);
    assert_eq!(endpoints[0]["lease"], granted.body["lease"]["id"]);
    assert_eq!(
        endpoints[0]["deadline_unix_ms"], deadline,
        "the deadline the write reported"
    );
    // An unknown service has no leased endpoints, not an error.
    let none = server
        .get("/v1/deadlines/acme/prod/nothing")
        .await
        .expect(StatusCode::OK);
    assert_eq!(none.body["endpoints"], json!([]));
}

#[tokio::test]
async fn a_lab_run_without_a_runner_is_unavailable_and_bad_parameters_are_refused_by_name() {
    let server = TestServer::start().await;
    let unavailable = server.get("/v1/lab/run?scenario=reference").await;
    assert_eq!(unavailable.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(unavailable.code(), "lab_unavailable");
    for (query, named) in [
        ("instances=0", "instances"),
        ("duration_ms=500", "duration_ms"),
        ("scenario=Not_A_Name", "scenario"),
        ("instances=many", "query"),
        ("colour=blue", "query"),
    ] {
        let refused = server.get(&format!("/v1/lab/run?{query}")).await;
        assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{query}: {}", refused.body);
        assert_eq!(refused.code(), "invalid_lab_request", "{query}");
        assert!(refused.message().starts_with(named), "{query}: {}", refused.message());
    }
    // Another site's page (an `<img src>` sends no Origin) may not start one (SPEC S6).
    let path = "/v1/lab/run?scenario=reference";
    for site in ["cross-site", "same-site"] {
        let refused = server.send(Method::GET, path, None, &[("sec-fetch-site", site)]).await;
        assert_eq!(
            (refused.status, refused.code()),
            (StatusCode::FORBIDDEN, "forbidden_origin"),
            "{site}"
        );
    }
    let own = server
        .send(Method::GET, path, None, &[("sec-fetch-site", "same-origin")])
        .await;
    assert_eq!(
        own.code(),
        "lab_unavailable",
        "the dashboard's own page passes the check"
    );
}

/// A runner that records its requests and waits for the test's word before answering.
struct Gated {
    seen: Mutex<Vec<LabRequest>>,
    release: Mutex<mpsc::Receiver<()>>,
}

impl LabRunner for Gated {
    fn run(&self, request: &LabRequest) -> Result<LabRun, String> {
        self.seen.lock().unwrap().push(request.clone());
        if request.setups == ["nope"] {
            return Err("setup: 'nope' is not in the catalogue".into());
        }
        let _ = self.release.lock().unwrap().recv();
        Ok(LabRun {
            report: json!({"setups": [{"name": "ttl-2s", "failed": 7}]}),
            plots: vec![LabPlot {
                name: "failed_per_second".into(),
                svg: "<svg/>".into(),
            }],
        })
    }
}

#[tokio::test]
async fn a_lab_run_goes_to_the_runner_one_at_a_time() {
    let (release, gate) = mpsc::channel();
    let runner = Arc::new(Gated {
        seen: Mutex::new(Vec::new()),
        release: Mutex::new(gate),
    });
    let server = Arc::new(TestServer::start_hooked(|_| {}, Hooks::default().with_lab(runner.clone())).await);
    let first = tokio::spawn({
        let server = Arc::clone(&server);
        async move {
            server
                .get("/v1/lab/run?scenario=ttl-2s&instances=40&duration_ms=5000")
                .await
        }
    });
    poll(std::time::Duration::from_millis(20), || async {
        (!runner.seen.lock().unwrap().is_empty()).then_some(())
    })
    .await
    .expect("the first run reaches the runner");
    let busy = server.get("/v1/lab/run").await;
    assert_eq!(busy.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(busy.code(), "lab_busy");
    release.send(()).unwrap();
    let done = first.await.unwrap().expect(StatusCode::OK);
    assert_eq!(done.body["plots"][0]["name"], "failed_per_second");
    assert_eq!(done.body["report"]["setups"][0]["failed"], 7);
    let seen = runner.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "the busy request never reached the runner");
    assert_eq!(
        (seen[0].setups.clone(), seen[0].instances),
        (vec!["ttl-2s".to_owned()], Some(40))
    );
    // The slot is free again; a refusal from the runner is a typed 400.
    let refused = server.get("/v1/lab/run?scenario=nope").await;
    assert_eq!(refused.code(), "invalid_lab_request");
    assert!(refused.message().contains("nope"));
}
