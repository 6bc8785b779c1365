//! The Consul-compatible API over real HTTP (SPEC E1): every reply decodes into structs that
//! mirror the Go `api` package's (required fields present, integers as integers), blocking
//! queries return on their own service's changes only, `X-Consul-Index` is never below 1,
//! tokens resolve as the native API's and denials are Consul's plain-text 403s.

use std::collections::BTreeMap;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{HeaderMap, Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::support::{STEP, TestServer, instance_path, poll};

/// A Consul reply: status, headers, body bytes.
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Answer {
    fn index(&self) -> u64 {
        self.headers
            .get("x-consul-index")
            .expect("every answer carries X-Consul-Index")
            .to_str()
            .unwrap()
            .parse()
            .unwrap()
    }

    fn json<T: serde::de::DeserializeOwned>(&self) -> T {
        assert_eq!(self.status, StatusCode::OK, "{}", self.text());
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("not the Go api's shape ({e}): {}", self.text()))
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// GET `path` from the server's Consul listener with `headers`.
async fn consul(server: &TestServer, path: &str, headers: &[(&str, &str)]) -> Answer {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut request = Request::builder()
        .method(Method::GET)
        .uri(format!("http://{}{path}", server.consul_addr()));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(Full::new(Bytes::new())).unwrap();
    let response = tokio::time::timeout(STEP, client.request(request))
        .await
        .expect("a Consul answer in time")
        .expect("a Consul answer");
    let status = response.status();
    let headers = response.headers().clone();
    let body = tokio::time::timeout(STEP, response.into_body().collect())
        .await
        .expect("the body in time")
        .unwrap()
        .to_bytes();
    Answer { status, headers, body }
}

async fn get(server: &TestServer, path: &str) -> Answer {
    consul(server, path, &[]).await
}

// The Go `api` package's types, as far as these tests read them. Unknown fields are
// allowed (as Go allows them); every field named here must be present and of its type.

#[allow(dead_code)]
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Node {
    #[serde(rename = "ID")]
    id: String,
    node: String,
    address: String,
    datacenter: String,
    tagged_addresses: BTreeMap<String, String>,
    meta: BTreeMap<String, String>,
    create_index: u64,
    modify_index: u64,
}

#[allow(dead_code)]
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ServiceAddress {
    address: String,
    port: i64,
}

#[derive(Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "PascalCase")]
struct Weights {
    passing: i64,
    warning: i64,
}

#[allow(dead_code)]
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct AgentService {
    #[serde(rename = "ID")]
    id: String,
    service: String,
    tags: Vec<String>,
    meta: BTreeMap<String, String>,
    port: i64,
    address: String,
    tagged_addresses: BTreeMap<String, ServiceAddress>,
    weights: Weights,
    enable_tag_override: bool,
    create_index: u64,
    modify_index: u64,
}

#[allow(dead_code)]
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct HealthCheckDefinition {
    #[serde(rename = "HTTP")]
    http: String,
    #[serde(rename = "TCP")]
    tcp: String,
    interval: String,
    timeout: String,
}

#[allow(dead_code)]
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct HealthCheck {
    node: String,
    #[serde(rename = "CheckID")]
    check_id: String,
    name: String,
    status: String,
    notes: String,
    output: String,
    #[serde(rename = "ServiceID")]
    service_id: String,
    service_name: String,
    service_tags: Vec<String>,
    #[serde(rename = "Type")]
    kind: String,
    exposed_port: i64,
    definition: Value,
    create_index: u64,
    modify_index: u64,
}

#[allow(dead_code)]
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ServiceEntry {
    node: Node,
    service: AgentService,
    checks: Vec<HealthCheck>,
}

#[allow(dead_code)]
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct CatalogService {
    #[serde(rename = "ID")]
    id: String,
    node: String,
    address: String,
    datacenter: String,
    tagged_addresses: BTreeMap<String, String>,
    node_meta: BTreeMap<String, String>,
    #[serde(rename = "ServiceID")]
    service_id: String,
    service_name: String,
    service_address: String,
    service_tagged_addresses: BTreeMap<String, ServiceAddress>,
    service_tags: Vec<String>,
    service_meta: BTreeMap<String, String>,
    service_port: i64,
    service_weights: Weights,
    service_enable_tag_override: bool,
    create_index: u64,
    modify_index: u64,
}

/// A server whose Consul view is tenant `acme`, namespace `prod` (where `support` registers).
async fn server() -> TestServer {
    TestServer::start_with(|config| {
        config.consul.tenant = muster_core::Label::new("tenant", "acme").unwrap();
        config.consul.namespace = muster_core::Label::new("namespace", "prod").unwrap();
    })
    .await
}

/// Registers `instance` of `acme/prod/{service}` at `ip` with `record` merged into a
/// minimal record (a port named `default`, as a Consul registration's).
async fn register(server: &TestServer, service: &str, instance: &str, ip: &str, record: Value) -> u64 {
    let mut endpoint = json!({
        "addresses": [{"ip": ip}],
        "ports": [{"name": "default", "port": 8080, "protocol": "tcp"}],
    });
    for (k, v) in record.as_object().unwrap() {
        endpoint[k] = v.clone();
    }
    server
        .call(
            Method::PUT,
            &instance_path(service, instance),
            Some(json!({"incarnation": 1, "endpoint": endpoint})),
        )
        .await
        .expect(StatusCode::OK)
        .revision()
}

async fn set_state(server: &TestServer, service: &str, instance: &str, state: &str) -> u64 {
    let path = format!("{}/serving", instance_path(service, instance));
    server
        .call(
            Method::PUT,
            &path,
            Some(json!({"incarnation": 1, "state": state, "reason": "load shedding"})),
        )
        .await
        .expect(StatusCode::OK)
        .revision()
}

async fn drain(server: &TestServer, service: &str, instance: &str) -> u64 {
    let path = format!("{}/drain", instance_path(service, instance));
    server
        .call(Method::POST, &path, Some(json!({"incarnation": 1, "reason": "deploy"})))
        .await
        .expect(StatusCode::OK)
        .revision()
}

#[tokio::test]
async fn catalog_and_health_answer_in_the_go_api_s_shapes() {
    let server = server().await;
    let labels =
        json!({"consul.tag.0": "v1", "consul.tag.1": "urlprefix-/web", "consul.tag.10": "last", "version": "1.2"});
    register(&server, "web", "a", "10.0.0.1", json!({"labels": labels, "weight": 3})).await;
    let revision = register(&server, "web", "b", "10.0.0.2", json!({})).await;

    let services = get(&server, "/v1/catalog/services").await;
    let listing: BTreeMap<String, Vec<String>> = services.json();
    assert_eq!(
        listing["web"],
        ["last", "urlprefix-/web", "v1"],
        "tags, the union, sorted"
    );
    assert_eq!(
        services.index(),
        revision + 1,
        "the namespace's newest change, plus one"
    );
    assert_eq!(services.headers["content-type"], "application/json");
    assert_eq!(services.headers["x-consul-knownleader"], "true");
    assert!(services.headers.contains_key("x-consul-lastcontact"));

    let catalog: Vec<CatalogService> = get(&server, "/v1/catalog/service/web").await.json();
    assert_eq!(catalog.len(), 2);
    let a = &catalog[0];
    assert_eq!((a.service_id.as_str(), a.service_name.as_str()), ("a", "web"));
    assert_eq!(a.service_address, "10.0.0.1");
    assert_eq!(a.service_port, 8080);
    assert_eq!(
        a.service_tags,
        ["v1", "urlprefix-/web", "last"],
        "in their numeric order"
    );
    assert_eq!(
        a.service_meta,
        BTreeMap::from([("version".to_owned(), "1.2".to_owned())])
    );
    assert_eq!(a.service_weights, Weights { passing: 3, warning: 1 });
    assert_eq!(a.service_tagged_addresses["lan_ipv4"].port, 8080);
    assert_eq!(a.datacenter, "dc1");
    assert_eq!(a.node, "muster-1");
    assert_eq!(a.tagged_addresses["lan"], "127.0.0.1");

    let health = get(&server, "/v1/health/service/web").await;
    assert_eq!(health.index(), revision + 1, "the service's revision, plus one");
    let entries: Vec<ServiceEntry> = health.json();
    assert_eq!(entries.len(), 2);
    let checks: Vec<(&str, &str)> = entries[0]
        .checks
        .iter()
        .map(|c| (c.check_id.as_str(), c.status.as_str()))
        .collect();
    assert_eq!(checks, [("serfHealth", "passing"), ("service:a", "passing")]);
    assert_eq!(entries[0].service.port, 8080);
    assert_eq!(entries[0].node.datacenter, "dc1");

    let checks: Vec<HealthCheck> = get(&server, "/v1/health/checks/web").await.json();
    assert_eq!(checks.len(), 2, "the service's own checks, no node check");
    assert!(checks.iter().all(|c| c.service_name == "web"));
    let any: Vec<HealthCheck> = get(&server, "/v1/health/state/any").await.json();
    assert_eq!(any.len(), 3, "serfHealth and both service checks");
}

#[tokio::test]
async fn states_map_to_consul_statuses_and_passing_keeps_only_the_ready() {
    let server = server().await;
    register(
        &server,
        "web",
        "ready",
        "10.0.0.1",
        json!({"labels": {"consul.tag.0": "blue"}}),
    )
    .await;
    register(&server, "web", "degraded", "10.0.0.2", json!({})).await;
    register(&server, "web", "down", "10.0.0.3", json!({})).await;
    register(&server, "web", "leaving", "10.0.0.4", json!({})).await;
    set_state(&server, "web", "degraded", "degraded").await;
    set_state(&server, "web", "down", "not_serving").await;
    drain(&server, "web", "leaving").await;

    let entries: Vec<ServiceEntry> = get(&server, "/v1/health/service/web").await.json();
    let statuses: BTreeMap<String, Vec<(String, String)>> = entries
        .iter()
        .map(|e| {
            let checks = e
                .checks
                .iter()
                .map(|c| (c.check_id.clone(), c.status.clone()))
                .collect();
            (e.service.id.clone(), checks)
        })
        .collect();
    let pair = |id: &str, status: &str| (id.to_owned(), status.to_owned());
    let serf = pair("serfHealth", "passing");
    assert_eq!(statuses["ready"], [serf.clone(), pair("service:ready", "passing")]);
    assert_eq!(
        statuses["degraded"],
        [serf.clone(), pair("service:degraded", "warning")]
    );
    assert_eq!(statuses["down"], [serf.clone(), pair("service:down", "critical")]);
    assert_eq!(
        statuses["leaving"],
        [
            serf,
            pair("service:leaving", "passing"),
            pair("_service_maintenance:leaving", "critical")
        ]
    );
    let maintenance = entries
        .iter()
        .flat_map(|e| &e.checks)
        .find(|c| c.check_id.starts_with("_service_maintenance:"))
        .unwrap();
    assert_eq!(maintenance.notes, "deploy", "the drain's reason");

    let passing: Vec<ServiceEntry> = get(&server, "/v1/health/service/web?passing=1").await.json();
    let ids: Vec<&str> = passing.iter().map(|e| e.service.id.as_str()).collect();
    assert_eq!(ids, ["ready"]);
    let tagged: Vec<ServiceEntry> = get(&server, "/v1/health/service/web?tag=blue&near=_agent&dc=dc1")
        .await
        .json();
    assert_eq!(tagged.len(), 1);
    let none: Vec<ServiceEntry> = get(&server, "/v1/health/service/web?tag=blue&tag=green").await.json();
    assert!(none.is_empty(), "every tag named is required");

    let critical: Vec<HealthCheck> = get(&server, "/v1/health/state/critical").await.json();
    let ids: Vec<&str> = critical.iter().map(|c| c.check_id.as_str()).collect();
    assert_eq!(ids, ["service:down", "_service_maintenance:leaving"]);
    let warning: Vec<HealthCheck> = get(&server, "/v1/health/state/warning").await.json();
    assert_eq!(warning.len(), 1);
    let bad = get(&server, "/v1/health/state/maintenance").await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST, "{}", bad.text());
}

#[tokio::test]
async fn a_blocking_query_returns_after_its_wait_with_the_same_index_when_nothing_changes() {
    let server = server().await;
    register(&server, "web", "a", "10.0.0.1", json!({})).await;
    let first = get(&server, "/v1/health/service/web").await;
    let index = first.index();
    let before = server.consul_counts();
    let again = get(&server, &format!("/v1/health/service/web?index={index}&wait=300ms")).await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(again.index(), index, "nothing changed: the same index");
    let after = server.consul_counts();
    assert_eq!(after.blocking_queries, before.blocking_queries + 1);
    assert_eq!(after.wakeups, before.wakeups, "timed out, never woken");
    let (_, metrics) = server.get_text("/v1/metrics").await;
    let timed_out = metrics
        .lines()
        .find(|line| {
            line.contains("blocking_queries")
                && line.contains(r#"api="consul""#)
                && line.contains(r#"outcome="timeout""#)
        })
        .unwrap_or_else(|| panic!("no Consul blocking-query row:\n{metrics}"));
    assert!(timed_out.ends_with(" 1"), "{timed_out}");
}

#[tokio::test]
async fn a_blocking_query_returns_early_with_a_higher_index_when_its_service_changes() {
    let server = std::sync::Arc::new(server().await);
    register(&server, "web", "a", "10.0.0.1", json!({})).await;
    let index = get(&server, "/v1/health/service/web").await.index();
    let before = server.consul_counts();
    let waiting = {
        let server = std::sync::Arc::clone(&server);
        // Ten minutes: only a change can end it within the test's bound.
        tokio::spawn(
            async move { consul(&server, &format!("/v1/health/service/web?index={index}&wait=10m"), &[]).await },
        )
    };
    poll(std::time::Duration::from_millis(10), || {
        let counts = server.consul_counts();
        async move { (counts.blocking_queries > before.blocking_queries).then_some(()) }
    })
    .await
    .expect("the query is waiting");
    let changed = register(&server, "web", "b", "10.0.0.2", json!({})).await;
    let answer = tokio::time::timeout(STEP, waiting).await.expect("woken").unwrap();
    assert_eq!(answer.index(), changed + 1, "the revision of the change, plus one");
    let entries: Vec<ServiceEntry> = answer.json();
    assert_eq!(entries.len(), 2, "the answer holds the change");
}

/// Consul wakes every blocking query of a datacenter on any write; Muster wakes only the
/// queries on the service that changed.
#[tokio::test]
async fn a_blocking_query_on_one_service_is_not_woken_by_a_change_of_another() {
    let server = std::sync::Arc::new(server().await);
    register(&server, "web", "a", "10.0.0.1", json!({})).await;
    let index = get(&server, "/v1/health/service/web").await.index();
    let before = server.consul_counts();
    let waiting = {
        let server = std::sync::Arc::clone(&server);
        tokio::spawn(
            async move { consul(&server, &format!("/v1/health/service/web?index={index}&wait=1s"), &[]).await },
        )
    };
    poll(std::time::Duration::from_millis(10), || {
        let counts = server.consul_counts();
        async move { (counts.blocking_queries > before.blocking_queries).then_some(()) }
    })
    .await
    .expect("the query is waiting");
    for i in 0..5 {
        register(&server, "api", &format!("a{i}"), "10.0.0.9", json!({})).await;
    }
    let answer = tokio::time::timeout(STEP, waiting).await.expect("answered").unwrap();
    assert_eq!(answer.index(), index, "timed out on web's own index");
    assert_eq!(
        server.consul_counts().wakeups,
        before.wakeups,
        "five writes to api woke no query on web"
    );
}

#[tokio::test]
async fn a_namespace_wide_query_wakes_on_any_service_of_its_namespace() {
    let server = std::sync::Arc::new(server().await);
    register(&server, "web", "a", "10.0.0.1", json!({})).await;
    let index = get(&server, "/v1/catalog/services").await.index();
    let before = server.consul_counts();
    let waiting = {
        let server = std::sync::Arc::clone(&server);
        tokio::spawn(async move {
            consul(
                &server,
                &format!("/v1/catalog/services?index={index}&wait=10m&stale"),
                &[],
            )
            .await
        })
    };
    poll(std::time::Duration::from_millis(10), || {
        let counts = server.consul_counts();
        async move { (counts.blocking_queries > before.blocking_queries).then_some(()) }
    })
    .await
    .expect("the query is waiting");
    let changed = register(&server, "api", "a", "10.0.0.2", json!({})).await;
    let answer = tokio::time::timeout(STEP, waiting).await.expect("woken").unwrap();
    assert_eq!(answer.index(), changed + 1);
    let listing: BTreeMap<String, Vec<String>> = answer.json();
    assert!(listing.contains_key("api"));
}

/// Prometheus's first look at a fresh registry: it blocks on the empty catalog's index, and
/// the very first write (revision 1) must wake it with a different index, or it never sees
/// the service (an index of "revision, at least 1" gave both the index 1).
#[tokio::test]
async fn the_first_write_to_a_fresh_registry_wakes_a_query_blocked_on_the_empty_answer() {
    let server = std::sync::Arc::new(server().await);
    let empty = get(&server, "/v1/catalog/services").await;
    let index = empty.index();
    let service_index = get(&server, "/v1/health/service/web").await.index();
    let ask = |path: String| {
        let server = std::sync::Arc::clone(&server);
        tokio::spawn(async move { consul(&server, &path, &[]).await })
    };
    let catalog = ask(format!("/v1/catalog/services?index={index}&wait=10m"));
    let health = ask(format!("/v1/health/service/web?index={service_index}&wait=10m"));
    poll(std::time::Duration::from_millis(10), || {
        let counts = server.consul_counts();
        async move { (counts.blocking_queries >= 2).then_some(()) }
    })
    .await
    .expect("both queries are waiting");
    let first = register(&server, "web", "a", "10.0.0.1", json!({})).await;
    assert_eq!(first, 1, "the registry's first write");
    let catalog = tokio::time::timeout(STEP, catalog)
        .await
        .expect("catalog woken")
        .unwrap();
    assert!(catalog.index() > index, "{} after {index}", catalog.index());
    let listing: BTreeMap<String, Vec<String>> = catalog.json();
    assert!(listing.contains_key("web"));
    let health = tokio::time::timeout(STEP, health).await.expect("health woken").unwrap();
    assert!(health.index() > service_index);
    let entries: Vec<ServiceEntry> = health.json();
    assert_eq!(entries.len(), 1);
}

#[tokio::test]
async fn the_index_is_at_least_one_on_an_empty_registry_and_a_kv_miss_blocks_with_it() {
    let server = server().await;
    for path in [
        "/v1/catalog/services",
        "/v1/catalog/service/nothing",
        "/v1/health/service/nothing",
        "/v1/health/service/Not_A_Muster_Name",
        "/v1/health/state/any",
        "/v1/status/leader",
    ] {
        let answer = get(&server, path).await;
        assert_eq!(answer.status, StatusCode::OK, "{path}: {}", answer.text());
        assert!(answer.index() >= 1, "{path}");
    }
    let empty: Vec<ServiceEntry> = get(&server, "/v1/health/service/nothing").await.json();
    assert!(empty.is_empty());

    let miss = get(&server, "/v1/kv/fabio/config").await;
    assert_eq!(miss.status, StatusCode::NOT_FOUND);
    assert_eq!(miss.index(), 1);
    let before = server.consul_counts();
    let blocked = get(&server, "/v1/kv/fabio/config?index=1&wait=200ms").await;
    assert_eq!(blocked.status, StatusCode::NOT_FOUND);
    assert_eq!(blocked.index(), 1);
    assert_eq!(
        server.consul_counts().blocking_queries,
        before.blocking_queries + 1,
        "the miss blocked rather than answering at once"
    );
}

#[tokio::test]
async fn ns_and_partition_name_the_namespace_and_the_tenant() {
    let server = server().await;
    register(&server, "web", "a", "10.0.0.1", json!({})).await;
    server
        .call(
            Method::PUT,
            "/v1/registry/other/staging/web/z",
            Some(json!({"incarnation": 1, "endpoint": {"addresses": [{"ip": "10.9.9.9"}]}})),
        )
        .await
        .expect(StatusCode::OK);
    let view: Vec<CatalogService> = get(&server, "/v1/catalog/service/web").await.json();
    assert_eq!(view[0].service_id, "a");
    let other: Vec<CatalogService> = get(&server, "/v1/catalog/service/web?partition=other&ns=staging")
        .await
        .json();
    assert_eq!(other.len(), 1);
    assert_eq!(other[0].service_id, "z");
    assert_eq!(other[0].service_port, 0, "no port: 0");
    let nothing: Vec<CatalogService> = get(&server, "/v1/catalog/service/web?ns=staging").await.json();
    assert!(nothing.is_empty(), "acme has no staging namespace");
    let bad = get(&server, "/v1/catalog/services?ns=Not_Valid").await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert_eq!(bad.headers["content-type"], "text/plain; charset=utf-8");
}

#[tokio::test]
async fn status_names_the_leader_and_peers_and_unknown_routes_are_plain_404s() {
    let server = server().await;
    let leader: String = get(&server, "/v1/status/leader").await.json();
    assert_eq!(leader, server.consul_addr().to_string(), "a single node leads itself");
    let peers: Vec<String> = get(&server, "/v1/status/peers").await.json();
    assert_eq!(peers, [leader]);
    let unknown = get(&server, "/v1/acl/policies").await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    assert_eq!(unknown.text(), "404 page not found");
    let filter = get(&server, "/v1/health/service/web?filter=Service.Port%3D%3D80").await;
    assert_eq!(filter.status, StatusCode::BAD_REQUEST, "a filter is never ignored");
}

async fn operator_token(server: &TestServer) -> String {
    let reply = server
        .call(Method::POST, "/v1/acl/bootstrap", None)
        .await
        .expect(StatusCode::CREATED);
    reply.body["secret"].as_str().unwrap().to_owned()
}

async fn tenant_token(server: &TestServer, operator: &str, allow: &[&str]) -> String {
    let auth = format!("Bearer {operator}");
    let reply = server
        .send(
            Method::POST,
            "/v1/acl/tokens",
            Some(serde_json::to_vec(&json!({"tenant": "acme", "allow": allow, "deny": []})).unwrap()),
            &[("authorization", auth.as_str())],
        )
        .await
        .expect(StatusCode::CREATED);
    reply.body["secret"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn tokens_come_from_the_consul_header_a_bearer_or_the_query_and_denials_are_consul_403s() {
    let server = TestServer::start_with(|config| {
        config.auth.enabled = true;
        config.consul.tenant = muster_core::Label::new("tenant", "acme").unwrap();
        config.consul.namespace = muster_core::Label::new("namespace", "prod").unwrap();
    })
    .await;
    let operator = operator_token(&server).await;
    let auth = format!("Bearer {operator}");
    server
        .send(
            Method::PUT,
            &instance_path("web", "a"),
            Some(
                serde_json::to_vec(&json!({"incarnation": 1, "endpoint": {"addresses": [{"ip": "10.0.0.1"}]}}))
                    .unwrap(),
            ),
            &[("authorization", auth.as_str())],
        )
        .await
        .expect(StatusCode::OK);
    let reader = tenant_token(&server, &operator, &["prod/web=read,watch"]).await;
    let stranger = tenant_token(&server, &operator, &["prod/api=read"]).await;

    let bearer = format!("Bearer {reader}");
    for headers in [
        vec![("x-consul-token", reader.as_str())],
        vec![("authorization", bearer.as_str())],
        vec![],
    ] {
        let path = if headers.is_empty() {
            format!("/v1/health/service/web?token={reader}")
        } else {
            "/v1/health/service/web".to_owned()
        };
        let answer = consul(&server, &path, &headers).await;
        let entries: Vec<ServiceEntry> = answer.json();
        assert_eq!(entries.len(), 1, "{headers:?}");
        assert!(!answer.headers.contains_key("x-consul-results-filtered-by-acl"));
    }

    let hidden = consul(
        &server,
        "/v1/health/service/web",
        &[("x-consul-token", stranger.as_str())],
    )
    .await;
    let entries: Vec<ServiceEntry> = hidden.json();
    assert!(entries.is_empty(), "a service the token may not read is left out");
    assert_eq!(hidden.headers["x-consul-results-filtered-by-acl"], "true");
    let listing: BTreeMap<String, Vec<String>> = consul(
        &server,
        "/v1/catalog/services",
        &[("x-consul-token", stranger.as_str())],
    )
    .await
    .json();
    assert!(listing.is_empty());
    let anonymous: Vec<ServiceEntry> = get(&server, "/v1/health/service/web").await.json();
    assert!(anonymous.is_empty(), "no token reads nothing");

    let unknown = consul(&server, "/v1/health/service/web", &[("x-consul-token", "not-a-token")]).await;
    assert_eq!(unknown.status, StatusCode::FORBIDDEN);
    assert_eq!(unknown.text(), "ACL not found");
    assert_eq!(unknown.headers["content-type"], "text/plain; charset=utf-8");
}

#[tokio::test]
async fn the_listener_can_be_off_and_a_public_address_needs_authentication() {
    let off = TestServer::start_with(|config| config.consul.enabled = false).await;
    assert_eq!(off.consul_listener(), None);
    let dir = tempfile::tempdir().unwrap();
    let mut public = crate::support::test_config(&dir);
    public.consul.addr = "0.0.0.0:0".parse().unwrap();
    let Err(muster_server::ServerError::Config(message)) = muster_server::start(public).await else {
        panic!("a non-loopback Consul address without auth must be refused");
    };
    assert!(message.starts_with("consul.addr:"), "{message}");
}

/// Trace (who may do what): a Consul blocking query parked up to 10 minutes answered after
/// its token was revoked. It now ends at once with Consul's answer to a revoked token, 403
/// `ACL not found`, as a native one ends with 401.
#[tokio::test]
async fn a_parked_consul_query_ends_with_acl_not_found_when_its_token_is_revoked() {
    let server = TestServer::start_with(|config| {
        config.auth.enabled = true;
        config.consul.tenant = muster_core::Label::new("tenant", "acme").unwrap();
        config.consul.namespace = muster_core::Label::new("namespace", "prod").unwrap();
    })
    .await;
    let operator = operator_token(&server).await;
    let auth = format!("Bearer {operator}");
    let created = server
        .send(
            Method::POST,
            "/v1/acl/tokens",
            Some(serde_json::to_vec(&json!({"tenant": "acme", "allow": ["prod/web=read,watch"], "deny": []})).unwrap()),
            &[("authorization", auth.as_str())],
        )
        .await
        .expect(StatusCode::CREATED);
    let accessor = created.body["accessor"].as_str().unwrap().to_owned();
    let reader = created.body["secret"].as_str().unwrap().to_owned();
    let index = consul(
        &server,
        "/v1/health/service/web",
        &[("x-consul-token", reader.as_str())],
    )
    .await
    .index();
    // Parked far longer than the helper waits for an answer: only the revocation answers.
    let path = format!("/v1/health/service/web?index={index}&wait=60s");
    let headers = [("x-consul-token", reader.as_str())];
    let parked = consul(&server, &path, &headers);
    let revoke = async {
        let waiting = crate::support::poll(std::time::Duration::from_millis(20), || async {
            let (_, text) = server
                .get_text_with("/v1/metrics", &[("authorization", auth.as_str())])
                .await;
            text.contains("muster_blocking_queries_waiting{api=\"consul\"} 1")
                .then_some(())
        })
        .await;
        assert!(waiting.is_some(), "the query never parked");
        server
            .send(
                Method::DELETE,
                &format!("/v1/acl/tokens/{accessor}"),
                None,
                &[("authorization", auth.as_str())],
            )
            .await
            .expect(StatusCode::OK);
    };
    let (answer, ()) = tokio::join!(parked, revoke);
    assert_eq!(answer.status, StatusCode::FORBIDDEN, "{}", answer.text());
    assert_eq!(answer.text(), "ACL not found");
}
