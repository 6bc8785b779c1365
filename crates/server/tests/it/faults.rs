//! A node whose disk fails (SPEC R2, R6). openraft stops Raft on the first failed log write;
//! the node must then stop answering as if it could persist: status not ready and naming the
//! error, writes and reads refused with `storage_failed`, watchers told `closing`, and the
//! run ends with the error (so `muster serve` exits non-zero). What was acknowledged before
//! the failure is there after a restart on a healed disk.

use hyper::{Method, StatusCode};
use muster_consensus::fault_injection;
use muster_core::api::Frame;
use muster_server::ServerError;

use crate::support::{STEP, TestServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_log_write_makes_the_node_say_so_refuse_everything_and_stop_with_the_error() {
    let mut server = TestServer::start().await;
    server.register("api", "kept", "10.0.0.1").await.expect(StatusCode::OK);
    let mut watch = server.watch("/v1/watch/acme/prod/api").await;
    assert!(matches!(watch.next().await, Some(Frame::Snapshot { .. })));
    let running = server.serve_in_background();

    fault_injection::fail_log_writes(server.data_dir());
    let refused = server.register("api", "lost", "10.0.0.2").await;
    assert_eq!(
        (refused.status, refused.code()),
        (StatusCode::SERVICE_UNAVAILABLE, "storage_failed"),
        "{}",
        refused.body
    );
    assert!(refused.message().contains("injected fault"), "{}", refused.message());

    let status = server.get("/v1/status").await.expect(StatusCode::OK);
    assert_eq!(status.body["ready"], false, "{}", status.body);
    let fatal = status.body["fatal"].as_str().unwrap_or_default();
    assert!(
        fatal.starts_with("storage: ") && fatal.contains("injected fault"),
        "{}",
        status.body
    );
    // Frozen state is not passed off as current: reads are refused too.
    let read = server.get("/v1/registry/acme/prod/api").await;
    assert_eq!(
        (read.status, read.code()),
        (StatusCode::SERVICE_UNAVAILABLE, "storage_failed")
    );
    // Every other way in says so too (each route's auth layer and the fallbacks ask first),
    // and metrics stay readable.
    for (method, path) in [
        (Method::GET, "/v1/nope"),
        (Method::POST, "/v1/registry/acme/prod/api"),
        (Method::GET, "/v1/openapi.json"),
    ] {
        let refused = server.call(method.clone(), path, None).await;
        assert_eq!(
            (refused.status, refused.code()),
            (StatusCode::SERVICE_UNAVAILABLE, "storage_failed"),
            "{method} {path}: {}",
            refused.body
        );
    }
    assert_eq!(server.get_text("/v1/metrics").await.0, StatusCode::OK);
    // Watchers are drained, as for a shutdown.
    // (Frames before it — progress — are skipped; each wait is bounded by STEP.)
    let mut closing = false;
    for _ in 0..100 {
        match watch.next().await {
            Some(Frame::Closing { .. }) => {
                closing = true;
                break;
            }
            Some(_) => {}
            None => break,
        }
    }
    assert!(closing, "the watcher is told `closing`");

    let ended = tokio::time::timeout(STEP, running)
        .await
        .expect("the server stops in time after the failure")
        .expect("the server task did not panic");
    let Err(ServerError::Consensus(error)) = ended else {
        panic!("the run must end with the storage failure, got {ended:?}");
    };
    assert!(error.to_string().contains("injected fault"), "{error}");

    // Healed and restarted: everything acknowledged before the failure is there.
    fault_injection::heal(server.data_dir());
    server.start_again().await;
    let read = server.get("/v1/registry/acme/prod/api").await.expect(StatusCode::OK);
    let instances: Vec<&str> = read.body["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["instance"].as_str())
        .collect();
    assert!(instances.contains(&"kept"), "{}", read.body);
    let status = server.get("/v1/status").await.expect(StatusCode::OK);
    assert_eq!(status.body["ready"], true);
    assert!(status.body.get("fatal").is_none(), "{}", status.body);
    server.stop().await;
}
