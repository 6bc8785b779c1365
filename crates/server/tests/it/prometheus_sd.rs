//! `GET /v1/prometheus/sd` (SPEC E1): the http_sd target groups, their labels and order, the
//! filters, typed 400s, and bearer-token auth filtered per service.

use hyper::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{TestServer, instance_path};

fn record(ip: &str, state: Option<&str>) -> Value {
    let mut endpoint = json!({
        "addresses": [{"ip": ip}],
        "ports": [
            {"name": "http", "port": 8080, "protocol": "http"},
            {"name": "metrics", "port": 9100, "protocol": "http"},
        ],
        "locality": {"region": "eu", "zone": "eu-1"},
        "labels": {"team": "core", "app.kubernetes.io/name": "api"},
    });
    if let Some(state) = state {
        endpoint["serving"] = json!(state);
    }
    json!({"incarnation": 7, "endpoint": endpoint})
}

async fn put(server: &TestServer, service: &str, instance: &str, ip: &str, state: Option<&str>) {
    server
        .call(Method::PUT, &instance_path(service, instance), Some(record(ip, state)))
        .await
        .expect(StatusCode::OK);
}

fn targets(reply: &Value) -> Vec<String> {
    reply
        .as_array()
        .expect("a JSON list")
        .iter()
        .map(|group| {
            let targets = group["targets"].as_array().unwrap();
            assert_eq!(targets.len(), 1, "{group}");
            targets[0].as_str().unwrap().to_owned()
        })
        .collect()
}

#[tokio::test]
async fn ready_endpoints_are_listed_once_per_port_with_their_labels_in_a_stable_order() {
    let server = TestServer::start().await;
    put(&server, "api", "b", "10.0.0.2", Some("ready")).await;
    put(&server, "api", "a", "10.0.0.1", Some("ready")).await;
    put(&server, "api", "c", "10.0.0.3", Some("draining")).await;
    put(&server, "web", "a", "::1", Some("ready")).await;

    let reply = server.send(Method::GET, "/v1/prometheus/sd", None, &[]).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.headers.get("content-type").unwrap(), "application/json");
    assert_eq!(
        targets(&reply.body),
        [
            "10.0.0.1:8080",
            "10.0.0.1:9100",
            "10.0.0.2:8080",
            "10.0.0.2:9100",
            "[::1]:8080",
            "[::1]:9100"
        ],
        "ready only, by service then instance, a group per port"
    );
    assert_eq!(
        reply.body[1]["labels"],
        json!({
            "__meta_muster_tenant": "acme",
            "__meta_muster_namespace": "prod",
            "__meta_muster_service": "api",
            "__meta_muster_port": "metrics",
            "__meta_muster_state": "ready",
            "__meta_muster_instance": "a",
            "__meta_muster_incarnation": "7",
            "__meta_muster_region": "eu",
            "__meta_muster_zone": "eu-1",
            "__meta_muster_label_team": "core",
            "__meta_muster_label_app_kubernetes_io_name": "api",
        })
    );
    let again = server.get("/v1/prometheus/sd").await;
    assert_eq!(again.body, reply.body, "the full list, the same every time");
}

#[tokio::test]
async fn filters_pick_service_port_and_states() {
    let server = TestServer::start().await;
    put(&server, "api", "a", "10.0.0.1", Some("ready")).await;
    put(&server, "api", "c", "10.0.0.3", Some("draining")).await;
    put(&server, "web", "a", "10.0.1.1", Some("ready")).await;
    let get = |query: &'static str| {
        let server = &server;
        async move {
            server
                .get(&format!("/v1/prometheus/sd?{query}"))
                .await
                .expect(StatusCode::OK)
                .body
        }
    };
    assert_eq!(targets(&get("service=api&port=metrics").await), ["10.0.0.1:9100"]);
    assert_eq!(
        targets(&get("service=api&port=metrics&state=any").await),
        ["10.0.0.1:9100", "10.0.0.3:9100"]
    );
    assert_eq!(targets(&get("port=http&state=draining").await), ["10.0.0.3:8080"]);
    assert_eq!(
        targets(&get("tenant=acme&namespace=prod&service=web&port=http").await),
        ["10.0.1.1:8080"]
    );
    assert!(targets(&get("tenant=other").await).is_empty());
    assert!(targets(&get("port=grpc").await).is_empty(), "no endpoint has that port");
}

#[tokio::test]
async fn bad_parameters_are_typed_400s() {
    let server = TestServer::start().await;
    for (query, code) in [
        ("state=up", "bad_request"),
        ("tenant=Acme", "invalid_name"),
        ("port=-x", "invalid_name"),
        ("colour=blue", "bad_request"),
    ] {
        let reply = server.get(&format!("/v1/prometheus/sd?{query}")).await;
        assert_eq!((reply.status, reply.code()), (StatusCode::BAD_REQUEST, code), "{query}");
    }
}

#[tokio::test]
async fn a_token_needs_read_and_sees_only_the_services_it_may_read() {
    let server = TestServer::start_with(|config| config.auth.enabled = true).await;
    let refused = server.get("/v1/prometheus/sd").await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
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
    for service in ["api", "web"] {
        let body = serde_json::to_vec(&record("10.0.0.1", Some("ready"))).unwrap();
        server
            .send(Method::PUT, &instance_path(service, "a"), Some(body), &operator_header)
            .await
            .expect(StatusCode::OK);
    }
    let body = serde_json::to_vec(&json!({"tenant": "acme", "allow": ["prod/api=read"]})).unwrap();
    let reader = server
        .send(Method::POST, "/v1/acl/tokens", Some(body), &operator_header)
        .await
        .expect(StatusCode::CREATED);
    let reader = format!("Bearer {}", reader.body["secret"].as_str().unwrap());
    let seen = server
        .send(
            Method::GET,
            "/v1/prometheus/sd?port=http",
            None,
            &[("authorization", reader.as_str())],
        )
        .await
        .expect(StatusCode::OK);
    assert_eq!(targets(&seen.body), ["10.0.0.1:8080"]);
    assert_eq!(seen.body[0]["labels"]["__meta_muster_service"], "api");
    let all = server
        .send(Method::GET, "/v1/prometheus/sd?port=http", None, &operator_header)
        .await
        .expect(StatusCode::OK);
    assert_eq!(targets(&all.body).len(), 2);
}
