//! `GET /v1/openapi.json` (SPEC S5): the document cannot drift from the router, and real
//! replies validate against its schemas.
//!
//! Drift is caught two ways. The routes of the one route table (`muster_server::api_routes`,
//! which the router is built from) and the document's operations must be the same sets of
//! (method, path). Then every documented operation is sent to a live server, which must not
//! answer with its `no such route` or wrong-method fallback: that checks the table against
//! the real router.

use std::collections::BTreeSet;

use hyper::{Method, StatusCode};
use serde_json::{Value, json};

use crate::schema_check::{resolve, violations};
use crate::support::{TestServer, endpoint, instance_path};

/// The methods an axum `MethodRouter` can be built from.
const METHODS: &[&str] = &["get", "put", "post", "delete", "patch", "head", "options"];

/// The document, fetched from the server.
async fn document(server: &TestServer) -> Value {
    let reply = server.get("/v1/openapi.json").await.expect(StatusCode::OK);
    assert_eq!(
        reply.headers.get("content-type").unwrap(),
        "application/json",
        "the document is JSON"
    );
    reply.body
}

/// Every (METHOD, path) the document describes.
fn documented(document: &Value) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for (path, item) in document["paths"].as_object().expect("paths") {
        for method in item.as_object().expect("a path item").keys() {
            if METHODS.contains(&method.as_str()) {
                out.insert((method.to_uppercase(), path.clone()));
            }
        }
    }
    out
}

/// Every (METHOD, path) the API router registers, from its one route table.
fn routed() -> BTreeSet<(String, String)> {
    muster_server::api_routes()
        .into_iter()
        .map(|(method, path)| (method, path.to_owned()))
        .collect()
}

/// A documented path with every parameter filled in with a valid value.
fn concrete(path: &str) -> String {
    path.replace("{tenant}", "acme")
        .replace("{namespace}", "prod")
        .replace("{service}", "web")
        .replace("{instance}", "web-1")
        .replace("{id}", "999")
        .replace("{asset}", "app.js")
}

#[tokio::test]
async fn every_route_is_documented_and_every_documented_route_is_routed() {
    let server = TestServer::start().await;
    let document = document(&server).await;
    let documented = documented(&document);
    let routed = routed();
    let undocumented: Vec<_> = routed.difference(&documented).collect();
    let unrouted: Vec<_> = documented.difference(&routed).collect();
    assert!(
        undocumented.is_empty(),
        "routes missing from /v1/openapi.json (add an operation to crates/server/src/openapi.rs): {undocumented:?}"
    );
    assert!(
        unrouted.is_empty(),
        "documented operations with no route in routes.rs: {unrouted:?}"
    );
    // The reading of the source against the real router: every operation reaches a handler.
    // Bodies are `{}` (refused with 400 before anything happens); the member id is unknown.
    for (method, path) in &documented {
        let url = concrete(path);
        if path.starts_with("/v1/watch/") {
            server.watch(&url).await;
            continue;
        }
        if path == "/v1/metrics" || path == "/metrics" {
            assert_eq!(server.get_text(&url).await.0, StatusCode::OK, "GET {url}");
            continue;
        }
        // The dashboard's files are text (a redirect, HTML, scripts), not JSON.
        if path == "/ui" || path.starts_with("/ui/") {
            let (status, text) = server.get_text(&url).await;
            assert!(!text.contains("no such route"), "GET {url}: {status} {text}");
            continue;
        }
        let method: Method = method.parse().unwrap();
        let has_body = document["paths"][path][method.as_str().to_lowercase()]
            .get("requestBody")
            .is_some();
        let reply = server.call(method.clone(), &url, has_body.then(|| json!({}))).await;
        let fallback = (reply.status == StatusCode::NOT_FOUND && reply.message().contains("no such route"))
            || reply.status == StatusCode::METHOD_NOT_ALLOWED;
        assert!(!fallback, "{method} {url} is documented but not routed: {}", reply.body);
        // And a method the path does not document is the wrong-method fallback, not a
        // missing route: the path itself is routed.
        let other = server.call(Method::PATCH, &url, None).await;
        assert_eq!(
            other.status,
            StatusCode::METHOD_NOT_ALLOWED,
            "PATCH {url}: {}",
            other.body
        );
    }
}

/// The schema of the `status` reply of `method path`, with its content type.
fn reply_schema<'a>(document: &'a Value, method: &str, path: &str, status: u16) -> &'a Value {
    let content = &document["paths"][path][method]["responses"][status.to_string()]["content"];
    let (_, media) = content
        .as_object()
        .and_then(|c| c.iter().next())
        .unwrap_or_else(|| panic!("{method} {path} documents no {status} reply"));
    &media["schema"]
}

#[track_caller]
fn assert_conforms(document: &Value, schema: &Value, value: &Value, what: &str) {
    let found = violations(document, schema, value);
    assert!(found.is_empty(), "{what}: {value}\nviolates the document: {found:#?}");
}

#[tokio::test]
async fn real_replies_validate_against_the_document() {
    let server = TestServer::start().await;
    let document = document(&server).await;
    let instance = "/v1/registry/{tenant}/{namespace}/{service}/{instance}";

    // A registration with a lease, labels and a TTL check: the request conforms too.
    let request = json!({
        "incarnation": 1,
        "endpoint": {
            "addresses": [{"ip": "10.0.0.1", "scope": "lan"}],
            "ports": [{"name": "http", "port": 8080, "protocol": "http"}],
            "locality": {"region": "eu", "zone": "eu-1"},
            "labels": {"team": "core", "app.kubernetes.io/name": "web"},
            "checks": [{"ttl_ms": 10000}]
        },
        "lease": {"ttl_ms": 30000}
    });
    let body_schema = &document["paths"][instance]["put"]["requestBody"]["content"]["application/json"]["schema"];
    assert_conforms(&document, body_schema, &request, "the register request");
    let reply = server
        .call(Method::PUT, &instance_path("web", "web-1"), Some(request))
        .await
        .expect(StatusCode::OK);
    assert_conforms(
        &document,
        reply_schema(&document, "put", instance, 200),
        &reply.body,
        "register",
    );

    let status = server.get("/v1/status").await.expect(StatusCode::OK);
    assert_conforms(
        &document,
        reply_schema(&document, "get", "/v1/status", 200),
        &status.body,
        "status",
    );

    let service = "/v1/registry/{tenant}/{namespace}/{service}";
    let snapshot = server.get("/v1/registry/acme/prod/web").await.expect(StatusCode::OK);
    assert_eq!(snapshot.body["endpoints"].as_array().unwrap().len(), 1);
    assert_conforms(
        &document,
        reply_schema(&document, "get", service, 200),
        &snapshot.body,
        "snapshot",
    );

    let services = server.get("/v1/registry/acme/prod").await.expect(StatusCode::OK);
    let listing = reply_schema(&document, "get", "/v1/registry/{tenant}/{namespace}", 200);
    assert_conforms(&document, listing, &services.body, "services");

    let policy = server.get("/v1/policy").await.expect(StatusCode::OK);
    assert_conforms(
        &document,
        reply_schema(&document, "get", "/v1/policy", 200),
        &policy.body,
        "policy",
    );

    let cluster = server.get("/v1/cluster").await.expect(StatusCode::OK);
    assert_conforms(
        &document,
        reply_schema(&document, "get", "/v1/cluster", 200),
        &cluster.body,
        "cluster",
    );

    // Errors: a stale incarnation (409) and a bad name in the path (400).
    let stale = server
        .call(
            Method::PUT,
            &instance_path("web", "web-1"),
            Some(json!({"incarnation": 0, "endpoint": endpoint("10.0.0.1")})),
        )
        .await
        .expect(StatusCode::CONFLICT);
    assert_eq!(stale.code(), "stale_incarnation");
    assert_conforms(
        &document,
        reply_schema(&document, "put", instance, 409),
        &stale.body,
        "409",
    );
    let bad_name = server
        .get("/v1/registry/acme/prod/Not_A_Label")
        .await
        .expect(StatusCode::BAD_REQUEST);
    assert_conforms(
        &document,
        reply_schema(&document, "get", service, 400),
        &bad_name.body,
        "400",
    );

    // Watch frames: the snapshot and progress frames, then an update.
    let frame_schema = reply_schema(&document, "get", "/v1/watch/{tenant}/{namespace}/{service}", 200);
    let mut watch = server.watch("/v1/watch/acme/prod/web").await;
    for _ in 0..2 {
        let frame = serde_json::to_value(watch.next().await.expect("a frame")).unwrap();
        assert_conforms(&document, frame_schema, &frame, "a watch frame");
    }
    server.register("web", "web-2", "10.0.0.2").await.expect(StatusCode::OK);
    let update = serde_json::to_value(watch.next_event().await.expect("an update")).unwrap();
    assert_eq!(update["type"], "update");
    assert_conforms(&document, frame_schema, &update, "an update frame");
}

#[tokio::test]
async fn the_schemas_refuse_what_the_server_refuses() {
    // The schemas are not vacuous: what serde refuses, they refuse.
    let server = TestServer::start().await;
    let document = document(&server).await;
    let label = resolve(&document, "#/components/schemas/Label");
    for bad in ["", "Web", "-web", "web-", &"a".repeat(64)] {
        assert!(!violations(&document, label, &json!(bad)).is_empty(), "{bad:?} passed");
    }
    let register = resolve(&document, "#/components/schemas/RegisterRequest");
    let unknown_field = json!({"incarnation": 1, "endpoint": endpoint("10.0.0.1"), "extra": true});
    assert!(!violations(&document, register, &unknown_field).is_empty());
    let reply = server
        .call(Method::PUT, &instance_path("web", "web-1"), Some(unknown_field))
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
}

// Server bugs schemathesis found, each with its regression test.

#[tokio::test]
async fn a_body_that_is_not_a_json_object_is_refused_and_changes_nothing() {
    // Found by schemathesis: serde reads a struct from an array of its fields, so
    // `PUT /v1/policy` with `[]` was accepted and reset the policy to its defaults.
    let server = TestServer::start().await;
    let before = server.get("/v1/policy").await.expect(StatusCode::OK).body;
    let revision = server.revision().await;
    for body in [&b"[]"[..], b" []", b"null", b"7", b"\"policy\""] {
        let reply = server.send(Method::PUT, "/v1/policy", Some(body.to_vec()), &[]).await;
        assert_eq!(
            reply.status,
            StatusCode::BAD_REQUEST,
            "{:?}: {}",
            String::from_utf8_lossy(body),
            reply.body
        );
        assert_eq!(reply.code(), "bad_request");
    }
    let array = json!([1, endpoint("10.0.0.1")]);
    let reply = server
        .call(Method::PUT, &instance_path("web", "web-1"), Some(array))
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.body);
    assert_eq!(server.get("/v1/policy").await.body, before);
    assert_eq!(server.revision().await, revision, "nothing was written");
}
