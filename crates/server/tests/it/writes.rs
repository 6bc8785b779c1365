//! Registry writes over HTTP: every reply carries the committed revision (SPEC L1–L3, L5, L7).

use hyper::{Method, StatusCode};
use serde_json::json;

use crate::support::{TestServer, endpoint, instance_path};

#[tokio::test]
async fn register_replies_with_the_committed_revision_and_the_record_is_readable() {
    let server = TestServer::start().await;
    let reply = server.register("api", "a", "10.0.0.1").await.expect(StatusCode::OK);
    assert_eq!(reply.revision(), 1);
    assert!(reply.body.get("unchanged").is_none());
    assert_eq!(server.revision().await, 1);
    let read = server.get("/v1/registry/acme/prod/api").await.expect(StatusCode::OK);
    assert_eq!(read.body["endpoints"][0]["instance"], "a");
    assert_eq!(read.body["endpoints"][0]["provenance"]["registrar"], "anonymous");
}

#[tokio::test]
async fn a_retry_after_a_lost_reply_returns_the_committed_result_not_a_second_endpoint() {
    // Trace (SPEC L1): the reply to a registration is lost; the registrar retries.
    let server = TestServer::start().await;
    let first = server.register("api", "a", "10.0.0.1").await.expect(StatusCode::OK);
    let retry = server.register("api", "a", "10.0.0.1").await.expect(StatusCode::OK);
    assert_eq!(retry.revision(), first.revision());
    assert_eq!(retry.body["unchanged"], "already_committed");
    assert_eq!(server.revision().await, first.revision());
    let read = server.get("/v1/registry/acme/prod/api").await;
    assert_eq!(read.body["total"], 1);
}

#[tokio::test]
async fn register_with_a_lease_replies_with_the_renewal_deadline() {
    // SPEC L3: record and lease in one revision; the reply carries the deadline.
    let server = TestServer::start().await;
    let reply = server
        .call(
            Method::PUT,
            &instance_path("api", "a"),
            Some(json!({"incarnation": 1, "endpoint": endpoint("10.0.0.1"), "lease": {"ttl_ms": 30000}})),
        )
        .await
        .expect(StatusCode::OK);
    assert_eq!(reply.revision(), 1);
    let lease = &reply.body["lease"];
    assert_eq!(lease["ttl_ms"], 30000);
    assert!(lease["id"].as_u64().is_some());
    assert!(
        lease["deadline_unix_ms"].as_u64().unwrap() > 1_600_000_000_000,
        "{lease}"
    );
    let read = server.get("/v1/registry/acme/prod/api").await;
    assert_eq!(read.body["endpoints"][0]["lease"], lease["id"]);

    // A second record attaches to the same lease.
    let attach = server
        .call(
            Method::PUT,
            &instance_path("api", "b"),
            Some(json!({"incarnation": 1, "endpoint": endpoint("10.0.0.2"), "lease": {"id": lease["id"]}})),
        )
        .await
        .expect(StatusCode::OK);
    assert_eq!(attach.body["lease"]["id"], lease["id"]);
    assert_eq!(attach.body["lease"]["deadline_unix_ms"], lease["deadline_unix_ms"]);
}

#[tokio::test]
async fn set_serving_and_drain_change_the_state_and_an_app_ready_never_lifts_an_owner_drain() {
    // SPEC L5: the owner drains; the app's later "ready" is held; the owner may lift it.
    let server = TestServer::start().await;
    server.register("api", "a", "10.0.0.1").await.expect(StatusCode::OK);
    let serving = format!("{}/serving", instance_path("api", "a"));
    let reply = server
        .call(
            Method::PUT,
            &serving,
            Some(json!({"incarnation": 1, "state": "not_serving", "reason": "warming cache"})),
        )
        .await
        .expect(StatusCode::OK);
    assert_eq!(reply.revision(), 2);
    let read = server.get("/v1/registry/acme/prod/api").await;
    assert_eq!(read.body["endpoints"][0]["serving"], "not_serving");
    assert_eq!(read.body["endpoints"][0]["observation"]["actor"], "app");

    let drain = format!("{}/drain", instance_path("api", "a"));
    let reply = server
        .call(
            Method::POST,
            &drain,
            Some(json!({"incarnation": 1, "reason": "deploy"})),
        )
        .await
        .expect(StatusCode::OK);
    assert_eq!(reply.revision(), 3);
    let read = server.get("/v1/registry/acme/prod/api").await;
    assert_eq!(read.body["endpoints"][0]["serving"], "draining");
    assert_eq!(read.body["endpoints"][0]["observation"]["actor"], "owner");

    let ready = json!({"incarnation": 1, "state": "ready"});
    let held = server
        .call(Method::PUT, &serving, Some(ready.clone()))
        .await
        .expect(StatusCode::OK);
    assert_eq!(held.body["unchanged"], "drain_held");
    assert_eq!(held.revision(), 3);
    assert_eq!(server.revision().await, 3);

    let lifted = server
        .send(
            Method::PUT,
            &serving,
            Some(serde_json::to_vec(&ready).unwrap()),
            &[("X-Muster-Actor", "owner")],
        )
        .await
        .expect(StatusCode::OK);
    assert_eq!(lifted.revision(), 4);
    let read = server.get("/v1/registry/acme/prod/api").await;
    assert_eq!(read.body["endpoints"][0]["serving"], "ready");
}

#[tokio::test]
async fn deregister_removes_the_endpoint_and_leaves_an_empty_set() {
    let server = TestServer::start().await;
    server.register("api", "a", "10.0.0.1").await.expect(StatusCode::OK);
    let reply = server.deregister("api", "a").await.expect(StatusCode::OK);
    assert_eq!(reply.revision(), 2);
    // SPEC W5: a known service with no endpoints is an empty answer, not "unknown".
    let read = server.get("/v1/registry/acme/prod/api").await.expect(StatusCode::OK);
    assert_eq!(read.body["total"], 0);
    assert_eq!(read.body["endpoints"], json!([]));
}

#[tokio::test]
async fn deregister_with_a_matching_expected_revision_succeeds() {
    let server = TestServer::start().await;
    let registered = server.register("api", "a", "10.0.0.1").await.expect(StatusCode::OK);
    let path = format!(
        "{}?incarnation=1&expected_revision={}",
        instance_path("api", "a"),
        registered.revision()
    );
    let reply = server.call(Method::DELETE, &path, None).await.expect(StatusCode::OK);
    assert_eq!(reply.revision(), 2);
}
