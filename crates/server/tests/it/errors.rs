//! Every error code the API returns, each with its status, and each changing nothing: the
//! revision in `/v1/status` does not move (SPEC S5, D1).

use std::future::Future;

use hyper::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{Reply, TestServer, endpoint, instance_path};

/// Runs a request that must be refused with `status` and `code`, and checks the revision did
/// not move.
async fn refused(server: &TestServer, status: StatusCode, code: &str, request: impl Future<Output = Reply>) -> Reply {
    let before = server.revision().await;
    let reply = request.await;
    assert_eq!(reply.status, status, "body: {}", reply.body);
    assert_eq!(reply.code(), code, "body: {}", reply.body);
    assert!(!reply.message().is_empty());
    assert_eq!(server.revision().await, before, "a refused request changes nothing");
    reply
}

fn register_body(extra: Value) -> Value {
    let mut body = json!({"incarnation": 1, "endpoint": endpoint("10.0.0.1")});
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    body
}

async fn register_with(server: &TestServer, instance: &str, body: Value) -> Reply {
    server
        .call(Method::PUT, &instance_path("api", instance), Some(body))
        .await
}

#[tokio::test]
async fn malformed_json_and_unknown_fields_are_400_bad_request_naming_the_field() {
    let server = TestServer::start().await;
    server.register("api", "a", "10.0.0.1").await.expect(StatusCode::OK);

    let path = instance_path("api", "b");
    let reply = refused(
        &server,
        StatusCode::BAD_REQUEST,
        "bad_request",
        server.send(Method::PUT, &path, Some(b"{\"incarnation\": 1,".to_vec()), &[]),
    )
    .await;
    assert!(reply.message().contains("line 1 column"), "{}", reply.message());

    let reply = refused(
        &server,
        StatusCode::BAD_REQUEST,
        "bad_request",
        register_with(&server, "b", register_body(json!({"colour": "red"}))),
    )
    .await;
    assert!(reply.message().contains("colour"), "{}", reply.message());

    let mut nested = register_body(json!({}));
    nested["endpoint"]["flavour"] = json!("x");
    let reply = refused(
        &server,
        StatusCode::BAD_REQUEST,
        "bad_request",
        register_with(&server, "b", nested),
    )
    .await;
    assert!(reply.message().contains("flavour"), "{}", reply.message());

    let reply = refused(
        &server,
        StatusCode::BAD_REQUEST,
        "bad_request",
        server.call(Method::POST, "/v1/leases/acme", Some(json!({"ttl_ms": "soon"}))),
    )
    .await;
    assert!(
        reply.message().contains("ttl_ms") || reply.message().contains("string"),
        "{}",
        reply.message()
    );
}

#[tokio::test]
async fn a_body_over_the_limit_is_413_payload_too_large() {
    let server = TestServer::start_with(|config| config.max_body_bytes = 512).await;
    let mut body = register_body(json!({}));
    body["endpoint"]["labels"] = json!({"note": "x".repeat(600)});
    refused(
        &server,
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        register_with(&server, "a", body),
    )
    .await;
}

#[tokio::test]
async fn a_bad_path_segment_is_400_invalid_name_naming_the_segment() {
    let server = TestServer::start().await;
    let body = Some(register_body(json!({})));
    let reply = refused(
        &server,
        StatusCode::BAD_REQUEST,
        "invalid_name",
        server.call(Method::PUT, "/v1/registry/acme/Prod/api/a", body.clone()),
    )
    .await;
    assert!(reply.message().starts_with("namespace:"), "{}", reply.message());
    assert!(reply.message().contains("Prod"), "{}", reply.message());

    let reply = refused(
        &server,
        StatusCode::BAD_REQUEST,
        "invalid_name",
        server.call(Method::PUT, "/v1/registry/acme/prod/api/a_1", body),
    )
    .await;
    assert!(reply.message().starts_with("instance:"), "{}", reply.message());

    let reply = refused(
        &server,
        StatusCode::BAD_REQUEST,
        "invalid_name",
        server.get("/v1/watch/-acme/prod"),
    )
    .await;
    assert!(reply.message().starts_with("tenant:"), "{}", reply.message());

    refused(
        &server,
        StatusCode::BAD_REQUEST,
        "bad_request",
        server.call(Method::PUT, "/v1/leases/acme/seven/renew", None),
    )
    .await;
}

#[tokio::test]
async fn a_wrong_method_is_405_and_an_unknown_route_is_404() {
    let server = TestServer::start().await;
    let reply = refused(
        &server,
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        server.call(Method::POST, &instance_path("api", "a"), Some(register_body(json!({})))),
    )
    .await;
    assert!(reply.message().contains("POST"), "{}", reply.message());
    refused(
        &server,
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        server.call(Method::DELETE, "/v1/status", None),
    )
    .await;
    refused(
        &server,
        StatusCode::NOT_FOUND,
        "not_found",
        server.get("/v1/nothing/here"),
    )
    .await;
    refused(&server, StatusCode::NOT_FOUND, "not_found", server.get("/")).await;
}

#[tokio::test]
async fn bad_queries_and_headers_are_400_bad_request() {
    let server = TestServer::start().await;
    server.register("api", "a", "10.0.0.1").await.expect(StatusCode::OK);
    for path in [
        "/v1/registry/acme/prod/api?colour=red",
        "/v1/registry/acme/prod/api?revision=soon",
        "/v1/registry/acme/prod/api?limit=0",
        "/v1/registry/acme/prod/api?page_token=garbage",
        "/v1/registry/acme/prod/api?index=1&wait=forever",
        "/v1/registry/acme/prod/api?wait=5s",
        "/v1/registry/acme/prod/api?index=1&revision=1",
        "/v1/watch/acme/prod/api?from=3",
    ] {
        refused(&server, StatusCode::BAD_REQUEST, "bad_request", server.get(path)).await;
    }
    // Deregistration without the incarnation it speaks for.
    refused(
        &server,
        StatusCode::BAD_REQUEST,
        "bad_request",
        server.call(Method::DELETE, &instance_path("api", "a"), None),
    )
    .await;
    let reply = refused(
        &server,
        StatusCode::BAD_REQUEST,
        "bad_request",
        server.send(
            Method::PUT,
            &instance_path("api", "b"),
            Some(serde_json::to_vec(&register_body(json!({}))).unwrap()),
            &[("X-Muster-Actor", "root")],
        ),
    )
    .await;
    assert!(reply.message().contains("X-Muster-Actor"), "{}", reply.message());
}

#[tokio::test]
async fn refused_record_content_is_422_with_the_registry_code() {
    let server = TestServer::start_with(|config| {
        config.registry.network.permitted = vec!["10.0.0.0/8".parse().unwrap()];
    })
    .await;
    server.register("api", "a", "10.0.0.1").await.expect(StatusCode::OK);
    let cases = [
        ("invalid_address", json!({"addresses": [{"ip": "not-an-ip"}]})),
        ("address_out_of_scope", json!({"addresses": [{"ip": "192.168.1.1"}]})),
        (
            "invalid_name",
            json!({"addresses": [{"ip": "10.0.0.2"}], "ports": [{"name": "HTTP", "port": 80}]}),
        ),
        ("invalid_field", json!({"addresses": [{"ip": "10.0.0.2"}], "weight": 0})),
        (
            "label_limit",
            json!({"addresses": [{"ip": "10.0.0.2"}], "labels": {"Bad Key": "v"}}),
        ),
        // The failover tier's own label (SPEC G1) is not a registrant's.
        (
            "label_limit",
            json!({"addresses": [{"ip": "10.0.0.2"}], "labels": {"muster/spilled-from": "a"}}),
        ),
        (
            "record_too_large",
            json!({"addresses": (1..=9).map(|i| json!({"ip": format!("10.0.0.{i}")})).collect::<Vec<_>>()}),
        ),
    ];
    for (code, endpoint) in cases {
        let reply = refused(
            &server,
            StatusCode::UNPROCESSABLE_ENTITY,
            code,
            register_with(&server, "b", json!({"incarnation": 1, "endpoint": endpoint})),
        )
        .await;
        assert!(!reply.message().is_empty());
    }
    // A lease TTL under the minimum.
    refused(
        &server,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_field",
        server.call(Method::POST, "/v1/leases/acme", Some(json!({"ttl_ms": 10}))),
    )
    .await;
}

#[tokio::test]
async fn fencing_and_cas_refusals_are_409() {
    // Trace (SPEC L2): a delayed renewal of incarnation 7 cannot overwrite incarnation 8, and
    // an old shutdown hook cannot delete the replacement.
    let server = TestServer::start().await;
    let path = instance_path("api", "a");
    server
        .call(
            Method::PUT,
            &path,
            Some(json!({"incarnation": 8, "endpoint": endpoint("10.0.0.8")})),
        )
        .await
        .expect(StatusCode::OK);
    let reply = refused(
        &server,
        StatusCode::CONFLICT,
        "stale_incarnation",
        server.call(
            Method::PUT,
            &path,
            Some(json!({"incarnation": 7, "endpoint": endpoint("10.0.0.7")})),
        ),
    )
    .await;
    assert!(
        reply.message().contains('7') && reply.message().contains('8'),
        "{}",
        reply.message()
    );
    refused(
        &server,
        StatusCode::CONFLICT,
        "stale_incarnation",
        server.call(Method::DELETE, &format!("{path}?incarnation=7"), None),
    )
    .await;
    refused(
        &server,
        StatusCode::CONFLICT,
        "revision_mismatch",
        server.call(
            Method::PUT,
            &format!("{path}/serving"),
            Some(json!({"incarnation": 8, "state": "degraded", "expected_revision": 99})),
        ),
    )
    .await;
    refused(
        &server,
        StatusCode::CONFLICT,
        "revision_mismatch",
        server.call(
            Method::PUT,
            &instance_path("api", "b"),
            Some(json!({"incarnation": 1, "endpoint": endpoint("10.0.0.9"), "expected_revision": 5})),
        ),
    )
    .await;
}

#[tokio::test]
async fn missing_things_are_404() {
    let server = TestServer::start().await;
    server.register("api", "a", "10.0.0.1").await.expect(StatusCode::OK);
    refused(
        &server,
        StatusCode::NOT_FOUND,
        "not_found",
        server.call(
            Method::PUT,
            &format!("{}/serving", instance_path("api", "ghost")),
            Some(json!({"incarnation": 1, "state": "ready"})),
        ),
    )
    .await;
    refused(
        &server,
        StatusCode::NOT_FOUND,
        "not_found",
        server.call(
            Method::POST,
            &format!("{}/drain", instance_path("api", "ghost")),
            Some(json!({"incarnation": 1})),
        ),
    )
    .await;
    refused(
        &server,
        StatusCode::NOT_FOUND,
        "not_found",
        server.get("/v1/registry/acme/prod/ghost"),
    )
    .await;
    refused(
        &server,
        StatusCode::NOT_FOUND,
        "lease_not_found",
        register_with(&server, "b", register_body(json!({"lease": {"id": 99}}))),
    )
    .await;
    refused(
        &server,
        StatusCode::NOT_FOUND,
        "lease_not_found",
        server.call(Method::PUT, "/v1/leases/acme/99/renew", None),
    )
    .await;
    refused(
        &server,
        StatusCode::NOT_FOUND,
        "lease_not_found",
        server.call(Method::DELETE, "/v1/leases/acme/99", None),
    )
    .await;
}

#[tokio::test]
async fn a_lease_of_another_tenant_is_not_found() {
    // SPEC S3: a key never crosses a tenant boundary, leases included.
    let server = TestServer::start().await;
    let grant = server
        .call(Method::POST, "/v1/leases/acme", Some(json!({"ttl_ms": 30000})))
        .await
        .expect(StatusCode::OK);
    let id = grant.body["lease"]["id"].as_u64().unwrap();
    refused(
        &server,
        StatusCode::NOT_FOUND,
        "lease_not_found",
        server.call(Method::PUT, &format!("/v1/leases/globex/{id}/renew"), None),
    )
    .await;
    refused(
        &server,
        StatusCode::NOT_FOUND,
        "lease_not_found",
        server.call(Method::DELETE, &format!("/v1/leases/globex/{id}"), None),
    )
    .await;
}

#[tokio::test]
async fn quota_excess_is_403_quota_exceeded() {
    let server = TestServer::start_with(|config| config.registry.quotas.endpoints_per_service = 1).await;
    server.register("api", "a", "10.0.0.1").await.expect(StatusCode::OK);
    refused(
        &server,
        StatusCode::FORBIDDEN,
        "quota_exceeded",
        server.register("api", "b", "10.0.0.2"),
    )
    .await;
}

#[tokio::test]
async fn reads_outside_history_are_410_compacted_or_400_future_revision() {
    let server = TestServer::start_with(|config| config.registry.history_revisions = 2).await;
    for (i, instance) in ["a", "b", "c", "d", "e"].iter().enumerate() {
        server
            .register("api", instance, &format!("10.0.0.{}", i + 1))
            .await
            .expect(StatusCode::OK);
    }
    let reply = refused(
        &server,
        StatusCode::GONE,
        "compacted",
        server.get("/v1/registry/acme/prod/api?revision=1"),
    )
    .await;
    assert!(reply.message().contains("current revision is 5"), "{}", reply.message());
    refused(
        &server,
        StatusCode::BAD_REQUEST,
        "future_revision",
        server.get("/v1/registry/acme/prod/api?revision=99"),
    )
    .await;
    refused(
        &server,
        StatusCode::BAD_REQUEST,
        "future_revision",
        server.get("/v1/watch/acme/prod/api?from_revision=99"),
    )
    .await;
}
