//! [`Watch`] as a `futures_core::Stream` against an in-process registry (SPEC C7, W1): frames
//! in order, kept alive by the server's progress frames for longer than the idle timeout,
//! and a silent stream ended as lost, then fused.

use std::pin::Pin;
use std::time::Duration;

use futures_core::Stream;
use muster_client::api::Frame;
use muster_client::{ClientError, ClientErrorCode, ServiceKey, Watch};

use crate::inproc::{Registry, STEP, register};

fn key() -> ServiceKey {
    ServiceKey::new("acme", "prod", "stream").unwrap()
}

/// The stream's next item, bounded by [`STEP`].
async fn next(watch: &mut Watch) -> Option<Result<Frame, ClientError>> {
    let item = std::future::poll_fn(|cx| Pin::new(&mut *watch).poll_next(cx));
    tokio::time::timeout(STEP, item)
        .await
        .expect("the stream yields in time")
}

/// The registry sends `progress` every 200 ms (see `inproc`); an idle timeout of 1 s is
/// passed several times over while the stream stays alive, so the idle timer must be reset
/// by every chunk rather than run from the opening.
#[tokio::test]
async fn a_watch_streams_snapshot_progress_and_updates_and_progress_keeps_it_alive() {
    let registry = Registry::start().await;
    let client = registry.client();
    register(&client, &key(), "a", 1, "10.0.0.1").await;
    let idle = Duration::from_secs(1);
    let mut watch = client.watch_service(&key(), None, idle).await.unwrap();

    let Some(Ok(Frame::Snapshot { snapshot, .. })) = next(&mut watch).await else {
        panic!("a watch without from_revision starts with the snapshot");
    };
    assert_eq!(snapshot.len(), 1);
    assert!(matches!(next(&mut watch).await, Some(Ok(Frame::Progress { .. }))));

    register(&client, &key(), "b", 1, "10.0.0.2").await;
    loop {
        match next(&mut watch).await {
            Some(Ok(Frame::Update(update))) => {
                assert_eq!(update.events.len(), 1);
                break;
            }
            Some(Ok(Frame::Progress { .. })) => {}
            other => panic!("expected the update, got {other:?}"),
        }
    }

    // Eight progress frames at 200 ms are 1.6 s of stream: past the 1 s idle timeout, which
    // only a per-chunk reset survives.
    let mut progress = 0;
    while progress < 8 {
        match next(&mut watch).await {
            Some(Ok(Frame::Progress { .. })) => progress += 1,
            other => panic!("the stream was lost while the server kept it alive: {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_silent_watch_ends_as_lost_and_then_the_stream_is_over() {
    // Progress once a minute: after the opening frames the stream is silent.
    let registry = Registry::start_with(|config| muster_server::ServerConfig {
        progress_interval_ms: 60_000,
        ..config
    })
    .await;
    let client = registry.client();
    let mut watch = client
        .watch_service(&key(), None, Duration::from_millis(300))
        .await
        .unwrap();
    let lost = loop {
        match next(&mut watch).await {
            Some(Ok(_)) => {}
            Some(Err(err)) => break err,
            None => panic!("the stream ended without the idle timeout firing"),
        }
    };
    assert_eq!(lost.code(), ClientErrorCode::StreamLost);
    assert!(lost.to_string().contains("nothing arrived for 300ms"), "{lost}");
    assert!(next(&mut watch).await.is_none(), "a lost stream is fused");
}
