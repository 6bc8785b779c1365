//! The registry policy as replicated state over HTTP (SPEC L2): `GET`/`PUT /v1/policy`,
//! and a restart under a different config file that keeps every acknowledged endpoint and
//! says the file disagrees.

use hyper::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::TestServer;

/// The `[registry]` section with only 10/8 permitted (network policy revision 2).
fn ten_slash_eight() -> Value {
    json!({"network": {"permitted": ["10.0.0.0/8"], "revision": 2}})
}

async fn policy(server: &TestServer) -> Value {
    server.get("/v1/policy").await.expect(StatusCode::OK).body
}

/// The trace: endpoints are acknowledged under a wide policy, the node restarts with a
/// config file that permits only 10/8. The log is replayed under the replicated policy, so
/// every acknowledged endpoint is still there (it used to be dropped on replay), and
/// `/v1/status` names the setting the file disagrees on.
#[tokio::test]
async fn a_restart_with_a_narrower_config_file_keeps_every_acknowledged_endpoint() {
    let mut server = TestServer::start().await;
    server
        .register("api", "api-0", "192.168.0.1")
        .await
        .expect(StatusCode::OK);
    server
        .register("api", "api-1", "172.16.0.1")
        .await
        .expect(StatusCode::OK);
    server.register("api", "api-2", "10.0.0.1").await.expect(StatusCode::OK);
    let before = server.get("/v1/registry/acme/prod/api").await.expect(StatusCode::OK);
    let status = server.get("/v1/status").await.expect(StatusCode::OK);
    assert_eq!(
        status.body["policy"],
        json!({"revision": 0, "matches_config": true, "differences": []})
    );

    server
        .restart_with(|config| {
            config.registry.network.permitted = vec!["10.0.0.0/8".parse().unwrap()];
        })
        .await;
    let after = server.get("/v1/registry/acme/prod/api").await.expect(StatusCode::OK);
    assert_eq!(after.body["total"], 3, "{}", after.body);
    assert_eq!(after.body, before.body);
    let status = server.get("/v1/status").await.expect(StatusCode::OK);
    assert_eq!(
        status.body["policy"],
        json!({"revision": 0, "matches_config": false, "differences": ["network.permitted"]})
    );
    assert_eq!(status.body["ready"], true, "existing status fields are kept");
    // The replicated policy still judges new writes, not the file.
    server
        .register("api", "api-3", "192.168.0.3")
        .await
        .expect(StatusCode::OK);
}

#[tokio::test]
async fn put_policy_judges_later_writes_only_and_get_reads_it_back() {
    let server = TestServer::start().await;
    server
        .register("api", "api-0", "192.168.0.1")
        .await
        .expect(StatusCode::OK);
    let set = server
        .call(Method::PUT, "/v1/policy", Some(ten_slash_eight()))
        .await
        .expect(StatusCode::OK);
    assert_eq!(set.body, json!({"revision": 2}));
    let read = policy(&server).await;
    assert_eq!(read["revision"], 2);
    assert_eq!(
        read["policy"]["network"],
        json!({"permitted": ["10.0.0.0/8"], "revision": 2})
    );
    assert_eq!(
        read["policy"]["quotas"]["max_tenants"], 10_000,
        "omitted settings take defaults"
    );

    let listing = server.get("/v1/registry/acme/prod/api").await.expect(StatusCode::OK);
    assert_eq!(listing.body["total"], 1, "committed before the policy: kept");
    let refused = server.register("api", "api-1", "192.168.0.2").await;
    assert_eq!(
        (refused.status, refused.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "address_out_of_scope")
    );
    server.register("api", "api-1", "10.0.0.2").await.expect(StatusCode::OK);

    let status = server.get("/v1/status").await.expect(StatusCode::OK);
    assert_eq!(
        status.body["policy"],
        json!({"revision": 2, "matches_config": false, "differences": ["network.permitted", "network.revision"]})
    );
    let again = server
        .call(Method::PUT, "/v1/policy", Some(ten_slash_eight()))
        .await
        .expect(StatusCode::OK);
    assert_eq!(
        again.body,
        json!({"revision": 2}),
        "the same policy again changes nothing"
    );
}

/// Bad input gets a clear code and changes nothing (SPEC S5).
#[tokio::test]
async fn a_bad_policy_is_refused_with_a_clear_code_and_changes_nothing() {
    let server = TestServer::start().await;
    server.register("api", "api-0", "10.0.0.1").await.expect(StatusCode::OK);
    let before = policy(&server).await;
    let revision = server.revision().await;

    let malformed = server
        .send(Method::PUT, "/v1/policy", Some(b"{\"quotas\": ".to_vec()), &[])
        .await;
    assert_eq!(
        (malformed.status, malformed.code()),
        (StatusCode::BAD_REQUEST, "bad_request")
    );

    let unknown = server
        .call(
            Method::PUT,
            "/v1/policy",
            Some(json!({"quotas": {"services_per_tenat": 5}})),
        )
        .await;
    assert_eq!(
        (unknown.status, unknown.code()),
        (StatusCode::BAD_REQUEST, "bad_request")
    );
    assert!(
        unknown.message().contains("services_per_tenat"),
        "{}",
        unknown.message()
    );

    let upside_down = server
        .call(
            Method::PUT,
            "/v1/policy",
            Some(json!({"min_lease_ttl_ms": 60_000, "max_lease_ttl_ms": 1_000})),
        )
        .await;
    assert_eq!(
        (upside_down.status, upside_down.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_field")
    );
    assert!(
        upside_down.message().starts_with("min_lease_ttl_ms:"),
        "{}",
        upside_down.message()
    );

    assert_eq!(policy(&server).await, before);
    assert_eq!(server.revision().await, revision);
}
