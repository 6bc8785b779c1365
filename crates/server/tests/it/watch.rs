//! Watches over HTTP (SPEC W3, W4): snapshot, replay, progress, compaction, resync, closing.

use std::sync::Arc;

use hyper::StatusCode;
use muster_core::api::Frame;
use muster_core::{DeleteReason, Endpoint, Event, Revision, ServiceKey, ServiceSnapshot};
use serde_json::json;

use crate::support::{Reply, STEP, TestServer, Watch};

fn api() -> ServiceKey {
    ServiceKey::new("acme", "prod", "api").unwrap()
}

/// A snapshot read as a typed set.
fn snapshot_of(reply: &Reply) -> ServiceSnapshot {
    let endpoints: Vec<Endpoint> = serde_json::from_value(reply.body["endpoints"].clone()).unwrap();
    let snapshot = ServiceSnapshot::from_endpoints(
        api(),
        Revision(reply.body["service_revision"].as_u64().unwrap()),
        endpoints.into_iter().map(Arc::new),
    );
    assert_eq!(serde_json::to_value(snapshot.digest()).unwrap(), reply.body["digest"]);
    snapshot
}

fn instances(snapshot: &ServiceSnapshot) -> Vec<&str> {
    snapshot.iter().map(|e| e.instance.as_str()).collect()
}

/// Writes to another service until the global revision is `target`.
async fn advance_to(server: &TestServer, target: u64) {
    let mut i = 0;
    while server.revision().await < target {
        i += 1;
        server
            .register("filler", &format!("f{i}"), "10.9.0.1")
            .await
            .expect(StatusCode::OK);
    }
    assert_eq!(server.revision().await, target);
}

#[tokio::test]
async fn a_watch_without_a_revision_starts_with_the_snapshot_then_streams_updates() {
    let server = TestServer::start().await;
    server.register("api", "a", "10.0.0.1").await.expect(StatusCode::OK);
    let mut watch = server.watch("/v1/watch/acme/prod/api").await;
    let Some(Frame::Snapshot { revision, snapshot }) = watch.next().await else {
        panic!("a snapshot first");
    };
    assert_eq!(revision, Revision(1));
    assert_eq!(instances(&snapshot), ["a"]);
    assert_eq!(watch.next().await, Some(Frame::Progress { revision: Revision(1) }));

    server.register("api", "b", "10.0.0.2").await.expect(StatusCode::OK);
    let Some(Frame::Update(update)) = watch.next_event().await else {
        panic!("an update");
    };
    assert_eq!((update.revision, update.prev_revision), (Revision(2), Revision(1)));
    let mut view = snapshot;
    assert_eq!(view.apply(&update), Ok(true), "contiguous, and the digest matches");
    assert_eq!(instances(&view), ["a", "b"]);

    // An unknown service: no snapshot frame, only progress (SPEC W5: unknown is not empty).
    let mut unknown = server.watch("/v1/watch/acme/prod/ghost").await;
    assert_eq!(unknown.next().await, Some(Frame::Progress { revision: Revision(2) }));
}

#[tokio::test]
async fn revision_20_21_22_a_watch_from_the_snapshot_revision_sees_the_delete_and_the_add() {
    // Trace (reference "Snapshots and Watch"): read {A,B} at 20; A is deleted at 21 and C
    // added at 22 before the watch is set up. Watching "from now" would keep A and miss C;
    // watching from 20 replays both.
    let server = TestServer::start().await;
    advance_to(&server, 18).await;
    server.register("api", "a", "10.0.0.1").await.expect(StatusCode::OK);
    server.register("api", "b", "10.0.0.2").await.expect(StatusCode::OK);
    let read = server.get("/v1/registry/acme/prod/api").await.expect(StatusCode::OK);
    assert_eq!(read.revision(), 20);
    let mut view = snapshot_of(&read);
    assert_eq!(instances(&view), ["a", "b"]);

    server.deregister("api", "a").await.expect(StatusCode::OK);
    server.register("api", "c", "10.0.0.3").await.expect(StatusCode::OK);

    let mut watch = server.watch("/v1/watch/acme/prod/api?from_revision=20").await;
    let Some(Frame::Update(delete)) = watch.next().await else {
        panic!("the delete at 21");
    };
    assert_eq!((delete.revision, delete.prev_revision), (Revision(21), Revision(20)));
    assert!(matches!(
        &delete.events[..],
        [Event::Delete { instance, reason: DeleteReason::Deregistered, .. }] if instance.as_str() == "a"
    ));
    let Some(Frame::Update(add)) = watch.next().await else {
        panic!("the add at 22");
    };
    assert_eq!((add.revision, add.prev_revision), (Revision(22), Revision(21)));
    assert_eq!(watch.next().await, Some(Frame::Progress { revision: Revision(22) }));
    assert_eq!(view.apply(&delete), Ok(true));
    assert_eq!(view.apply(&add), Ok(true));
    assert_eq!(instances(&view), ["b", "c"]);
    let now = server.get("/v1/registry/acme/prod/api").await.expect(StatusCode::OK);
    assert_eq!(view, snapshot_of(&now));

    // Live updates continue after the replay.
    server.deregister("api", "b").await.expect(StatusCode::OK);
    let Some(Frame::Update(live)) = watch.next_event().await else {
        panic!("a live update");
    };
    assert_eq!((live.revision, live.prev_revision), (Revision(23), Revision(22)));
}

#[tokio::test]
async fn a_watch_from_a_compacted_revision_gets_compacted_and_a_fresh_snapshot_recovers() {
    // Trace (SPEC W3): the watcher was away too long; revision 20 has left the history.
    // Compaction must be an explicit error, never silence.
    let server = TestServer::start_with(|config| config.registry.history_revisions = 5).await;
    advance_to(&server, 18).await;
    server.register("api", "a", "10.0.0.1").await.expect(StatusCode::OK);
    server.register("api", "b", "10.0.0.2").await.expect(StatusCode::OK);
    server.deregister("api", "a").await.expect(StatusCode::OK);
    server.register("api", "c", "10.0.0.3").await.expect(StatusCode::OK);
    advance_to(&server, 30).await;

    let mut watch = server.watch("/v1/watch/acme/prod/api?from_revision=20").await;
    let Some(Frame::Error { error, revision }) = watch.next().await else {
        panic!("a compacted error");
    };
    assert_eq!(error.code, "compacted");
    assert_eq!(revision, Revision(30), "the current revision, to snapshot at");
    watch.expect_end().await;

    // Recovery: a fresh snapshot, then a watch from its revision.
    let read = server.get("/v1/registry/acme/prod/api").await.expect(StatusCode::OK);
    assert_eq!(read.revision(), 30);
    let mut view = snapshot_of(&read);
    assert_eq!(instances(&view), ["b", "c"]);
    let mut watch = server.watch("/v1/watch/acme/prod/api?from_revision=30").await;
    assert_eq!(watch.next().await, Some(Frame::Progress { revision: Revision(30) }));
    server.register("api", "d", "10.0.0.4").await.expect(StatusCode::OK);
    let Some(Frame::Update(update)) = watch.next_event().await else {
        panic!("a live update");
    };
    assert_eq!(view.apply(&update), Ok(true));
    assert_eq!(instances(&view), ["b", "c", "d"]);
}

#[tokio::test]
async fn a_namespace_watch_gets_one_snapshot_per_service_then_every_services_updates() {
    let server = TestServer::start().await;
    server.register("api", "a", "10.0.0.1").await.expect(StatusCode::OK);
    server.register("web", "w", "10.0.1.1").await.expect(StatusCode::OK);
    let mut watch = server.watch("/v1/watch/acme/prod").await;
    let mut services = Vec::new();
    for _ in 0..2 {
        let Some(Frame::Snapshot { revision, snapshot }) = watch.next().await else {
            panic!("one snapshot per service");
        };
        assert_eq!(revision, Revision(2));
        services.push(snapshot.key().service.to_string());
    }
    assert_eq!(services, ["api", "web"]);
    assert_eq!(watch.next().await, Some(Frame::Progress { revision: Revision(2) }));

    // Another namespace's change is not this watch's business.
    server
        .call(
            hyper::Method::PUT,
            "/v1/registry/acme/staging/api/s",
            Some(json!({"incarnation": 1, "endpoint": crate::support::endpoint("10.0.2.1")})),
        )
        .await
        .expect(StatusCode::OK);
    server.register("web", "x", "10.0.1.2").await.expect(StatusCode::OK);
    let Some(Frame::Update(update)) = watch.next_event().await else {
        panic!("the web update");
    };
    assert_eq!(update.key.service.as_str(), "web");
    assert_eq!(update.revision, Revision(4));

    // From a revision: the replay of the whole namespace, in revision order.
    let mut replay = server.watch("/v1/watch/acme/prod?from_revision=0").await;
    let mut seen = Vec::new();
    while let Some(Frame::Update(update)) = replay.next().await {
        seen.push((update.revision.0, update.key.service.to_string()));
    }
    assert_eq!(seen, [(1, "api".into()), (2, "web".into()), (4, "web".into())]);
}

#[tokio::test]
async fn an_idle_watch_gets_progress_frames_with_the_current_revision() {
    let server = TestServer::start().await;
    server.register("api", "a", "10.0.0.1").await.expect(StatusCode::OK);
    let mut watch = server.watch("/v1/watch/acme/prod/api?from_revision=1").await;
    assert_eq!(watch.next().await, Some(Frame::Progress { revision: Revision(1) }));
    server.register("web", "w", "10.0.1.1").await.expect(StatusCode::OK);
    // Progress frames keep coming; one soon carries revision 2 (progress_interval_ms = 200).
    for _ in 0..100 {
        match watch.next().await {
            Some(Frame::Progress { revision: Revision(2) }) => return,
            Some(Frame::Progress { revision }) => assert_eq!(revision, Revision(1)),
            other => panic!("only progress expected, got {other:?}"),
        }
    }
    panic!("no progress frame with revision 2");
}

#[tokio::test]
async fn graceful_shutdown_tells_every_watcher_closing() {
    let mut server = TestServer::start().await;
    server.register("api", "a", "10.0.0.1").await.expect(StatusCode::OK);
    let mut service = server.watch("/v1/watch/acme/prod/api").await;
    let mut namespace = server.watch("/v1/watch/acme/prod?from_revision=1").await;
    assert!(matches!(service.next().await, Some(Frame::Snapshot { .. })));
    server.stop().await;
    assert_eq!(last_frame(&mut service).await, Frame::Closing { revision: Revision(1) });
    assert_eq!(
        last_frame(&mut namespace).await,
        Frame::Closing { revision: Revision(1) }
    );
}

/// Reads to the end of the stream and returns its last frame.
async fn last_frame(watch: &mut Watch) -> Frame {
    let mut last = None;
    while let Some(frame) = watch.next().await {
        last = Some(frame);
    }
    last.expect("at least one frame")
}

#[tokio::test]
async fn a_slow_watcher_is_cut_off_with_resync_and_the_hub_stays_bounded() {
    // Trace (SPEC W4): a consumer stops reading while writes keep coming. The server must
    // not buffer without bound: it drops the watcher's queue and tells it to resync.
    const QUEUE: usize = 8;
    let server = TestServer::start_with(|config| config.watch_queue_frames = QUEUE).await;
    server.register("api", "seed", "10.0.0.1").await.expect(StatusCode::OK);
    let mut slow = crate::support::slow_watch(&server, "/v1/watch/acme/prod/api").await;

    // Big records fill the socket buffers quickly; several writers at once let the log batch.
    let labels: serde_json::Map<String, serde_json::Value> =
        (0..10).map(|i| (format!("k{i}"), json!("v".repeat(190)))).collect();
    let server = &server;
    let labels = &labels;
    let resynced = tokio::time::timeout(STEP * 6, async {
        for round in 0..2_000 {
            let writes = (0..16).map(|w| async move {
                let body = json!({
                    "incarnation": 1,
                    "endpoint": {"addresses": [{"ip": "10.0.0.2"}], "labels": labels},
                });
                server
                    .call(
                        hyper::Method::PUT,
                        &crate::support::instance_path("api", &format!("i{round}-{w}")),
                        Some(body),
                    )
                    .await
                    .expect(StatusCode::OK);
            });
            futures_util::future::join_all(writes).await;
            let stats = server.watch_stats();
            assert!(stats.max_queued_frames <= QUEUE, "{stats:?}");
            if stats.resyncs > 0 {
                return stats;
            }
        }
        panic!("the slow watcher was never cut off");
    })
    .await
    .expect("the slow watcher is cut off in time");
    assert_eq!(resynced.resyncs, 1);
    assert_eq!(resynced.watchers, 0, "the hub let go of the slow watcher");

    // When the watcher reads again: what was already sent, then resync, then the end.
    let mut last = None;
    while let Some(frame) = slow.next().await {
        last = Some(frame);
    }
    assert!(matches!(last, Some(Frame::Resync { .. })), "last frame: {last:?}");
}

#[tokio::test]
async fn a_watcher_that_disconnects_mid_stream_leaves_the_hub() {
    // Trace: a client goes away with frames still queued for it. Its subscription must be
    // dropped with the connection, releasing its unread frames; the server goes on serving.
    let server = TestServer::start().await;
    server.register("api", "a", "10.0.0.1").await.expect(StatusCode::OK);
    let mut gone = server.watch("/v1/watch/acme/prod/api").await;
    let mut stays = server.watch("/v1/watch/acme/prod/api?from_revision=1").await;
    assert!(matches!(gone.next().await, Some(Frame::Snapshot { .. })));
    assert_eq!(stays.next().await, Some(Frame::Progress { revision: Revision(1) }));
    assert_eq!(server.watch_stats().watchers, 2);
    drop(gone);
    server.register("api", "b", "10.0.0.2").await.expect(StatusCode::OK);
    let left = tokio::time::timeout(STEP, async {
        while server.watch_stats().watchers > 1 {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        left.is_ok(),
        "the hub let go of the watcher: {:?}",
        server.watch_stats()
    );
    let Some(Frame::Update(update)) = stays.next_event().await else {
        panic!("the other watcher still gets updates");
    };
    assert_eq!(update.revision, Revision(2));
    assert_eq!(server.watch_stats().queued_frames, 0);
}
