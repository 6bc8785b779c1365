//! Status, readiness, binding rules and restart (SPEC D1, U1 item 6; SPEC S1).

use std::time::Duration;

use hyper::StatusCode;
use muster_server::{ServerConfig, ServerError};

use crate::support::{TestServer, poll, test_config};

#[tokio::test]
async fn status_reports_node_leader_revision_and_readiness() {
    let server = TestServer::start().await;
    let status = server.get("/v1/status").await.expect(StatusCode::OK);
    assert_eq!(status.body["ready"], true);
    assert_eq!(status.revision(), 0);
    let node = status.body["node_id"].as_u64().unwrap();
    assert_eq!(
        status.body["leader"].as_u64(),
        Some(node),
        "a group of one leads itself"
    );
    assert!(status.body["applied_index"].as_u64().is_some());
    assert!(status.body["uptime_ms"].as_u64().is_some());
    server.register("api", "a", "10.0.0.1").await.expect(StatusCode::OK);
    let after = server.get("/v1/status").await.expect(StatusCode::OK);
    assert_eq!(after.revision(), 1);
    assert!(after.body["applied_index"].as_u64() > status.body["applied_index"].as_u64());
}

#[tokio::test]
async fn a_non_loopback_http_address_is_refused_because_auth_is_not_configured() {
    // SPEC S1: without configured authentication the server binds loopback only.
    let dir = tempfile::tempdir().unwrap();
    let config = ServerConfig {
        http: "0.0.0.0:0".parse().unwrap(),
        ..test_config(&dir)
    };
    let Err(ServerError::Config(message)) = muster_server::start(config).await else {
        panic!("a non-loopback address must be refused");
    };
    assert!(message.contains("0.0.0.0"), "{message}");
    assert!(message.contains("auth"), "{message}");
}

#[tokio::test]
async fn bad_health_settings_are_refused_naming_the_setting() {
    let dir = tempfile::tempdir().unwrap();
    type Spoil = fn(&mut muster_server::HealthConfig);
    let cases: [(Spoil, &str); 3] = [
        (|h| h.preservation_percent = 101, "health.preservation_percent"),
        (|h| h.jitter_percent = 80, "health.jitter_percent"),
        (
            |h| {
                h.floors.insert("prod/api".into(), 2);
            },
            "health.floors: 'prod/api'",
        ),
    ];
    for (spoil, setting) in cases {
        let mut config = test_config(&dir);
        spoil(&mut config.health);
        let Err(ServerError::Config(message)) = muster_server::start(config).await else {
            panic!("{setting}: must be refused");
        };
        assert!(message.starts_with(setting), "{message}");
    }
}

/// SPEC D1: `run` serves (a real `200` from the running node) until its shutdown future
/// resolves, then returns `Ok` and the port no longer accepts.
#[tokio::test]
async fn run_serves_until_shutdown_resolves_then_returns_ok() {
    use http_body_util::{BodyExt, Empty};
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;

    let dir = tempfile::tempdir().unwrap();
    // A known port: `run` does not hand back the address it bound.
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", muster_testkit::fixed_tcp_port())
        .parse()
        .unwrap();
    let config = ServerConfig {
        http: addr,
        ..test_config(&dir)
    };
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(muster_server::run(config, async move {
        let _ = rx.await;
    }));
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<bytes::Bytes>>();
    let url: hyper::Uri = format!("http://{addr}/v1/status").parse().unwrap();
    // A bounded poll for the event "the node answers 200 and is ready": `run` binds and
    // starts in its own task.
    let status = poll(Duration::from_millis(20), || {
        let (client, url) = (client.clone(), url.clone());
        async move {
            let reply = client.get(url).await.ok()?;
            if reply.status() != StatusCode::OK {
                return None;
            }
            let body = reply.into_body().collect().await.ok()?.to_bytes();
            let body: serde_json::Value = serde_json::from_slice(&body).ok()?;
            (body["ready"] == true).then_some(body)
        }
    })
    .await;
    assert!(status.is_some(), "run serves a ready 200 before shutdown");
    assert!(!running.is_finished(), "still serving until shutdown resolves");

    tx.send(()).unwrap();
    let result = tokio::time::timeout(crate::support::STEP, running)
        .await
        .expect("run returns in time")
        .unwrap();
    assert!(result.is_ok(), "{result:?}");
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "nothing listens once run has returned"
    );
}

#[tokio::test]
async fn committed_writes_survive_a_restart_and_the_revision_keeps_increasing() {
    let mut server = TestServer::start().await;
    server.register("api", "a", "10.0.0.1").await.expect(StatusCode::OK);
    server.register("api", "b", "10.0.0.2").await.expect(StatusCode::OK);
    server.restart().await;
    let read = server.get("/v1/registry/acme/prod/api").await.expect(StatusCode::OK);
    assert_eq!(read.revision(), 2);
    assert_eq!(read.body["total"], 2);
    let next = server.register("api", "c", "10.0.0.3").await.expect(StatusCode::OK);
    assert_eq!(next.revision(), 3);
}

#[tokio::test]
async fn a_connection_still_open_after_the_grace_is_closed_when_stop_returns() {
    // Trace: a client sends a request head promising a body and never sends it. Graceful
    // shutdown waits for it up to the grace, then `stop` returns; the connection must not
    // outlive the server (it would go on serving requests against a node that is shut down).
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut server = TestServer::start_with(|config| config.shutdown_grace_ms = 200).await;
    let mut stalled = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    stalled
        .write_all(b"PUT /v1/registry/acme/prod/api/a HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{")
        .await
        .unwrap();
    // Let the server read the head and start waiting for the body.
    server.get("/v1/status").await.expect(StatusCode::OK);
    server.stop().await;
    let mut buf = [0u8; 1024];
    let read = tokio::time::timeout(crate::support::STEP / 4, stalled.read(&mut buf))
        .await
        .expect("the stalled connection is closed once stop has returned");
    assert!(matches!(read, Ok(0) | Err(_)), "no reply expected, got {read:?}");
}
