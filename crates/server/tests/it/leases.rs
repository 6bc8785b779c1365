//! Leases over HTTP: grant, renew (no log write), revoke, expiry and restart (SPEC L4,
//! DESIGN "Leases off the log").

use hyper::{Method, StatusCode};
use muster_core::api::Frame;
use muster_core::{DeleteReason, Event};
use serde_json::json;

use crate::support::{TestServer, endpoint, instance_path};

#[tokio::test]
async fn grant_renew_and_revoke_a_lease() {
    let server = TestServer::start().await;
    let grant = server
        .call(Method::POST, "/v1/leases/acme", Some(json!({"ttl_ms": 30000})))
        .await
        .expect(StatusCode::OK);
    assert_eq!(grant.revision(), 1);
    let lease = grant.body["lease"].clone();
    let id = lease["id"].as_u64().unwrap();
    assert_eq!(lease["ttl_ms"], 30000);

    let renewed = server
        .call(Method::PUT, &format!("/v1/leases/acme/{id}/renew"), None)
        .await
        .expect(StatusCode::OK);
    assert_eq!(renewed.body["id"], id);
    assert_eq!(renewed.body["ttl_ms"], 30000);
    assert!(renewed.body["deadline_unix_ms"].as_u64() >= lease["deadline_unix_ms"].as_u64());
    assert_eq!(server.revision().await, 1, "a renewal writes nothing to the log");

    server
        .call(
            Method::PUT,
            &instance_path("api", "a"),
            Some(json!({"incarnation": 1, "endpoint": endpoint("10.0.0.1"), "lease": {"id": id}})),
        )
        .await
        .expect(StatusCode::OK);
    let revoked = server
        .call(Method::DELETE, &format!("/v1/leases/acme/{id}"), None)
        .await
        .expect(StatusCode::OK);
    assert_eq!(revoked.revision(), 3);
    let read = server.get("/v1/registry/acme/prod/api").await.expect(StatusCode::OK);
    assert_eq!(read.body["total"], 0, "revoking removes the lease's endpoints");
    let again = server
        .call(Method::PUT, &format!("/v1/leases/acme/{id}/renew"), None)
        .await;
    assert_eq!((again.status, again.code()), (StatusCode::NOT_FOUND, "lease_not_found"));
}

#[tokio::test]
async fn a_crashed_holder_that_stays_silent_expires_and_watchers_see_lease_expired() {
    // Trace (SPEC L4): the instance dies without deregistering; nobody renews its lease.
    let server = TestServer::start().await;
    server.register("api", "stays", "10.0.0.1").await.expect(StatusCode::OK);
    server
        .call(
            Method::PUT,
            &instance_path("api", "crashed"),
            Some(json!({"incarnation": 1, "endpoint": endpoint("10.0.0.2"), "lease": {"ttl_ms": 1000}})),
        )
        .await
        .expect(StatusCode::OK);
    let mut watch = server.watch("/v1/watch/acme/prod/api?from_revision=2").await;
    let Some(Frame::Update(update)) = watch.next_event().await else {
        panic!("expected the expiry update");
    };
    assert_eq!(update.events.len(), 1);
    let Event::Delete { instance, reason, .. } = &update.events[0] else {
        panic!("expected a delete, got {:?}", update.events[0]);
    };
    assert_eq!(instance.as_str(), "crashed");
    assert_eq!(*reason, DeleteReason::LeaseExpired);
    let read = server.get("/v1/registry/acme/prod/api").await.expect(StatusCode::OK);
    assert_eq!(read.body["total"], 1);
    assert_eq!(read.body["endpoints"][0]["instance"], "stays");
}

#[tokio::test]
async fn restart_does_not_mass_expire_leases() {
    // Trace: the server stops and comes back; its in-memory deadlines are gone. Every lease
    // must get now + TTL, not expire at boot.
    let mut server = TestServer::start().await;
    let reply = server
        .call(
            Method::PUT,
            &instance_path("api", "a"),
            Some(json!({"incarnation": 1, "endpoint": endpoint("10.0.0.1"), "lease": {"ttl_ms": 60000}})),
        )
        .await
        .expect(StatusCode::OK);
    let id = reply.body["lease"]["id"].as_u64().unwrap();
    server.restart().await;
    // Let the keeper run a few ticks after the restart.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let read = server.get("/v1/registry/acme/prod/api").await.expect(StatusCode::OK);
    assert_eq!(read.body["total"], 1, "the leased endpoint survived the restart");
    let renewed = server
        .call(Method::PUT, &format!("/v1/leases/acme/{id}/renew"), None)
        .await;
    assert_eq!(renewed.status, StatusCode::OK, "{}", renewed.body);
    assert_eq!(server.revision().await, 1, "nothing expired");
}
