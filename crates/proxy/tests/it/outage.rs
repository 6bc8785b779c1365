//! Registry outage (SPEC C1, C2, D3): the proxy keeps serving its last known good set and
//! reports the age; started with only a last-known-good file it serves from it; with neither
//! it refuses connections; after a restart its watch resumes.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use muster_client::Protocol;
use muster_proxy::config::ListenerProtocol;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use crate::support::{Backend, Registry, get, http_client, proxy, proxy_with, until, until_eligible};

#[tokio::test]
async fn a_stopped_registry_leaves_the_proxy_serving_and_a_restart_resumes_its_watch() {
    let mut registry = Registry::start().await;
    let a = Backend::http("a").await;
    registry.register("a", a.addr, Protocol::Http).await;
    let proxy = proxy(&registry, ListenerProtocol::Http).await;
    until_eligible(&proxy, 1).await;
    let target = Arc::clone(&proxy.targets()[0]);
    let revision = target.resolver().status().active.unwrap();
    // Load through the whole outage and the restart: 4 callers until told to stop (each
    // bounded to 2,000 requests).
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(AtomicU64::new(0));
    let sent = Arc::new(AtomicU64::new(0));
    let mut load = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let (stop, failures, sent) = (Arc::clone(&stop), Arc::clone(&failures), Arc::clone(&sent));
        let addr = proxy.listeners()[0];
        load.spawn(async move {
            let client = http_client(false);
            for _ in 0..2_000 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                if !matches!(get(&client, addr, "/slow?ms=2").await, Ok((200, _))) {
                    failures.fetch_add(1, Ordering::Relaxed);
                }
                sent.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    registry.stop().await;
    let during = sent.load(Ordering::Relaxed);
    until("requests flow while the registry is down", || {
        sent.load(Ordering::Relaxed) >= during + 50
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        target.resolver().status().age_ms.unwrap() >= 300,
        "the age grows through the outage"
    );
    registry.restart().await;
    let b = Backend::http("b").await;
    registry.register("b", b.addr, Protocol::Http).await;
    until_eligible(&proxy, 2).await;
    stop.store(true, Ordering::Relaxed);
    while load.join_next().await.is_some() {}
    assert_eq!(
        failures.load(Ordering::Relaxed),
        0,
        "no request failed through the outage"
    );
    let client = http_client(false);
    let status = target.resolver().status();
    assert!(status.active.unwrap() > revision);
    assert!(!status.resnapshot_pending);
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..30 {
        seen.insert(get(&client, proxy.listeners()[0], "/").await.unwrap().1);
    }
    assert_eq!(seen.len(), 2, "the endpoint registered after the restart gets traffic");
}

#[tokio::test]
async fn started_during_an_outage_it_serves_its_last_known_good_set_and_without_one_refuses() {
    let mut registry = Registry::start().await;
    let a = Backend::http("a").await;
    registry.register("a", a.addr, Protocol::Http).await;
    let dir = tempfile::tempdir().unwrap();
    let with_lkg = |config: muster_proxy::config::ProxyConfig| muster_proxy::config::ProxyConfig {
        lkg_dir: Some(dir.path().to_path_buf()),
        ..config
    };
    let first = proxy_with(&registry, ListenerProtocol::Http, with_lkg).await;
    until_eligible(&first, 1).await;
    let file = muster_proxy::lkg_path(dir.path(), &crate::support::key());
    until("the last-known-good set is saved", || file.exists()).await;
    first.shutdown().await;
    registry.stop().await;

    let second = proxy_with(&registry, ListenerProtocol::Http, with_lkg).await;
    let (status, body) = get(&http_client(false), second.listeners()[0], "/").await.unwrap();
    assert_eq!(
        (status, body.as_str()),
        (200, "a"),
        "served from the last-known-good file"
    );
    assert!(second.targets()[0].resolver().status().age_ms.is_some());

    let blind = proxy(&registry, ListenerProtocol::Http).await;
    let mut stream = TcpStream::connect(blind.listeners()[0]).await.unwrap();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(crate::support::STEP, stream.read_to_end(&mut buf)).await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "the connection is refused (closed at once)"
    );
    assert_eq!(blind.targets()[0].stats.refused.load(Ordering::Relaxed), 1);
}
