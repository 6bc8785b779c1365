//! Snapshot reads, paging at one revision, past revisions, blocking queries and listings
//! (SPEC W2, W5).

use hyper::StatusCode;
use serde_json::json;

use crate::support::{STEP, TestServer};

#[tokio::test]
async fn pages_are_read_at_the_first_pages_revision_even_while_writes_continue() {
    // Trace (reference "Snapshots and Watch"): page one from 20 and page two from 22 would not
    // be one consistent set.
    let server = TestServer::start().await;
    for (i, instance) in ["a", "b", "c", "d", "e"].iter().enumerate() {
        server
            .register("api", instance, &format!("10.0.0.{}", i + 1))
            .await
            .expect(StatusCode::OK);
    }
    let first = server
        .get("/v1/registry/acme/prod/api?limit=2")
        .await
        .expect(StatusCode::OK);
    assert_eq!(first.revision(), 5);
    assert_eq!(first.headers.get("x-muster-index").unwrap(), "5");
    assert_eq!(first.body["total"], 5);
    let names = |reply: &crate::support::Reply| -> Vec<String> {
        reply.body["endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["instance"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(names(&first), ["a", "b"]);

    // Meanwhile: c leaves and f arrives.
    server.deregister("api", "c").await.expect(StatusCode::OK);
    server.register("api", "f", "10.0.0.6").await.expect(StatusCode::OK);

    let mut pages = vec![names(&first)];
    let mut token = first.body["next_page_token"].as_str().unwrap().to_owned();
    loop {
        let page = server
            .get(&format!("/v1/registry/acme/prod/api?limit=2&page_token={token}"))
            .await
            .expect(StatusCode::OK);
        assert_eq!(page.revision(), 5, "every page at the first page's revision");
        pages.push(names(&page));
        match page.body["next_page_token"].as_str() {
            Some(next) => token = next.to_owned(),
            None => break,
        }
    }
    assert_eq!(pages.concat(), ["a", "b", "c", "d", "e"]);
    let now = server.get("/v1/registry/acme/prod/api").await.expect(StatusCode::OK);
    assert_eq!(now.revision(), 7);
    assert_eq!(names(&now), ["a", "b", "d", "e", "f"]);
    assert!(now.body.get("next_page_token").is_none());
}

#[tokio::test]
async fn a_past_revision_reads_the_set_as_it_was() {
    // SPEC W2: replay of what a caller saw.
    let server = TestServer::start().await;
    server.register("api", "a", "10.0.0.1").await.expect(StatusCode::OK);
    server.register("api", "b", "10.0.0.2").await.expect(StatusCode::OK);
    let at_two = server.get("/v1/registry/acme/prod/api").await.expect(StatusCode::OK);
    server.deregister("api", "a").await.expect(StatusCode::OK);
    let past = server
        .get("/v1/registry/acme/prod/api?revision=2")
        .await
        .expect(StatusCode::OK);
    assert_eq!(past.body, at_two.body);
    let before = server
        .get("/v1/registry/acme/prod/api?revision=1")
        .await
        .expect(StatusCode::OK);
    assert_eq!(before.body["total"], 1);
    assert_eq!(before.body["service_revision"], 1);
    let unborn = server.get("/v1/registry/acme/prod/web?revision=1").await;
    assert_eq!((unborn.status, unborn.code()), (StatusCode::NOT_FOUND, "not_found"));
}

#[tokio::test]
async fn a_blocking_query_returns_when_the_service_changes() {
    let server = TestServer::start().await;
    server.register("api", "a", "10.0.0.1").await.expect(StatusCode::OK);
    let index = server
        .get("/v1/registry/acme/prod/api")
        .await
        .headers
        .get("x-muster-index")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let path = format!("/v1/registry/acme/prod/api?index={index}&wait=60s");
    let blocked = server.get(&path);
    let change = async {
        // Give the query a head start so it is usually parked when the change lands (if it
        // is not, it must still answer with the new set).
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        // Another service's change must not wake the query with an unchanged answer.
        server.register("web", "w", "10.0.1.1").await.expect(StatusCode::OK);
        server.register("api", "b", "10.0.0.2").await.expect(StatusCode::OK);
    };
    let (reply, ()) = tokio::time::timeout(STEP, async { tokio::join!(blocked, change) })
        .await
        .expect("the blocking query returns after the change");
    let reply = reply.expect(StatusCode::OK);
    assert_eq!(reply.body["total"], 2);
    assert_eq!(reply.revision(), 3);
    assert_eq!(reply.headers.get("x-muster-index").unwrap(), "3");
}

#[tokio::test]
async fn a_blocking_query_without_change_returns_the_same_set_after_its_wait() {
    let server = TestServer::start().await;
    server.register("api", "a", "10.0.0.1").await.expect(StatusCode::OK);
    let reply = tokio::time::timeout(STEP, server.get("/v1/registry/acme/prod/api?index=1&wait=300ms"))
        .await
        .expect("the wait is honoured")
        .expect(StatusCode::OK);
    assert_eq!(reply.revision(), 1);
    assert_eq!(reply.body["total"], 1);
    // An already-newer service answers at once.
    let reply = server
        .get("/v1/registry/acme/prod/api?index=0&wait=5m")
        .await
        .expect(StatusCode::OK);
    assert_eq!(reply.body["total"], 1);
}

#[tokio::test]
async fn a_namespace_lists_its_services_sorted_with_revisions_and_digests() {
    let server = TestServer::start().await;
    server.register("web", "w", "10.0.1.1").await.expect(StatusCode::OK);
    server.register("api", "a", "10.0.0.1").await.expect(StatusCode::OK);
    server.register("api", "b", "10.0.0.2").await.expect(StatusCode::OK);
    let reply = server.get("/v1/registry/acme/prod").await.expect(StatusCode::OK);
    assert_eq!(reply.revision(), 3);
    let services = reply.body["services"].as_array().unwrap();
    assert_eq!(services.len(), 2);
    assert_eq!(services[0]["service"], "api");
    assert_eq!(services[0]["revision"], 3);
    assert_eq!(services[0]["endpoints"], 2);
    assert_eq!(services[1]["service"], "web");
    let api = server.get("/v1/registry/acme/prod/api").await;
    assert_eq!(services[0]["digest"], api.body["digest"]);
    let empty = server.get("/v1/registry/acme/staging").await.expect(StatusCode::OK);
    assert_eq!(empty.body["services"], json!([]));
}

#[tokio::test]
async fn a_whole_set_read_encoded_once_per_service_revision_stays_current() {
    // SPEC K1: the whole current set's endpoints are encoded once per service revision and
    // reused; the reply must still carry the global revision of each read and follow every
    // change of the service, exactly as the paged path (which never reuses) says.
    let server = TestServer::start().await;
    server.register("api", "a", "10.0.0.1").await.expect(StatusCode::OK);
    server.register("api", "b", "10.0.0.2").await.expect(StatusCode::OK);
    let whole = || async { server.get("/v1/registry/acme/prod/api").await.expect(StatusCode::OK) };
    let paged = || async {
        server
            .get("/v1/registry/acme/prod/api?limit=1000")
            .await
            .expect(StatusCode::OK)
    };
    let first = whole().await;
    assert_eq!(first.body, paged().await.body);
    assert_eq!(whole().await.body, first.body, "a second read of the same set");

    // Another service moves the global revision, not this service's.
    server.register("web", "w", "10.0.1.1").await.expect(StatusCode::OK);
    let moved = whole().await;
    assert_eq!(moved.revision(), 3);
    assert_eq!(moved.headers.get("x-muster-index").unwrap(), "3");
    assert_eq!(moved.body["service_revision"], 2);
    assert_eq!(moved.body["endpoints"], first.body["endpoints"]);
    assert_eq!(moved.body, paged().await.body);

    // A change of the service itself is seen at once.
    server.register("api", "a", "10.0.0.9").await.expect(StatusCode::OK);
    server.deregister("api", "b").await.expect(StatusCode::OK);
    let changed = whole().await;
    assert_eq!(changed.body["total"], 1);
    assert_eq!(changed.body["endpoints"][0]["addresses"][0]["ip"], "10.0.0.9");
    assert_eq!(changed.body, paged().await.body);
}
