//! Real probes against real listeners on loopback: an HTTP server that starts answering
//! 503, a TCP port that closes, a wedged server that accepts and never answers, a gRPC
//! health server that flips to NOT_SERVING — and, through the hysteresis, detection within
//! `fall` probes.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{Full, StreamBody};
use hyper::body::Frame;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use muster_core::ServingState;
use tokio::net::TcpListener;

use super::*;
use crate::hysteresis::{Hysteresis, Thresholds};
use muster_core::CheckSpec;

/// Every probe in these tests gets this long: far beyond a loopback answer, short enough
/// that the wedged case ends quickly.
const TIMEOUT: Duration = Duration::from_millis(500);

/// An HTTP/1 server answering every request with the status in `status` and body "ok".
async fn http_server(status: Arc<AtomicU16>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let status = Arc::clone(&status);
            tokio::spawn(async move {
                let service = service_fn(move |_request: Request<hyper::body::Incoming>| {
                    let code = status.load(Ordering::SeqCst);
                    async move {
                        Ok::<_, Infallible>(
                            Response::builder()
                                .status(code)
                                .body(Full::new(Bytes::from_static(b"ok")))
                                .unwrap(),
                        )
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), service)
                    .await;
            });
        }
    });
    addr
}

/// A gRPC health server (HTTP/2, hand-encoded) whose status is `status`.
async fn grpc_server(status: Arc<AtomicU64>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let status = Arc::clone(&status);
            tokio::spawn(async move {
                let service = service_fn(move |request: Request<hyper::body::Incoming>| {
                    let code = status.load(Ordering::SeqCst);
                    async move {
                        assert_eq!(request.uri().path(), "/grpc.health.v1.Health/Check");
                        let mut message = vec![0x08];
                        put_varint(&mut message, code);
                        let mut trailers = hyper::HeaderMap::new();
                        trailers.insert("grpc-status", "0".parse().unwrap());
                        let frames = vec![
                            Ok::<_, Infallible>(Frame::data(grpc_frame(&message))),
                            Ok(Frame::trailers(trailers)),
                        ];
                        let body = StreamBody::new(futures_util::stream::iter(frames));
                        Ok::<_, Infallible>(
                            Response::builder()
                                .header("content-type", "application/grpc")
                                .body(body)
                                .unwrap(),
                        )
                    }
                });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tcp), service)
                    .await;
            });
        }
    });
    addr
}

fn kind(url: &str) -> CheckKind {
    CheckSpec {
        url: Some(url.into()),
        ..CheckSpec::default()
    }
    .validate("check")
    .unwrap()
    .kind
}

#[tokio::test]
async fn an_http_check_passes_on_its_status_range_and_fails_on_503() {
    let status = Arc::new(AtomicU16::new(200));
    let addr = http_server(Arc::clone(&status)).await;
    let check = kind(&format!("http://{addr}/healthz"));
    assert_eq!(probe(&check, TIMEOUT).await, ProbeResult::Pass);
    status.store(503, Ordering::SeqCst);
    assert_eq!(probe(&check, TIMEOUT).await, ProbeResult::Fail);
    status.store(200, Ordering::SeqCst);
    let wants_text = CheckKind::Http {
        authority: addr,
        path: "/".into(),
        status: (200, 399),
        body_contains: Some("healthy".into()),
    };
    assert_eq!(
        probe(&wants_text, TIMEOUT).await,
        ProbeResult::Fail,
        "the body must hold the text"
    );
}

#[tokio::test]
async fn a_tcp_check_fails_once_the_port_closes() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let check = kind(&format!("tcp://{}", listener.local_addr().unwrap()));
    assert_eq!(probe(&check, TIMEOUT).await, ProbeResult::Pass);
    drop(listener);
    assert_eq!(
        probe(&check, TIMEOUT).await,
        ProbeResult::Refused,
        "a failure: nothing listens"
    );
}

/// A wedged instance accepts TCP and never answers HTTP: its HTTP check fails by timeout,
/// while a TCP check of the same port would pass.
#[tokio::test]
async fn a_wedged_instance_fails_its_http_check_by_timeout() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let held = tokio::spawn(async move {
        let mut held = Vec::new();
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            held.push(tcp);
        }
    });
    assert_eq!(probe(&kind(&format!("tcp://{addr}")), TIMEOUT).await, ProbeResult::Pass);
    assert_eq!(
        probe(&kind(&format!("http://{addr}/healthz")), Duration::from_millis(200)).await,
        ProbeResult::Fail
    );
    held.abort();
}

#[tokio::test]
async fn a_grpc_check_follows_the_health_service() {
    let status = Arc::new(AtomicU64::new(GRPC_SERVING));
    let addr = grpc_server(Arc::clone(&status)).await;
    let check = kind(&format!("grpc://{addr}/pay.v1.Pay"));
    assert_eq!(probe(&check, TIMEOUT).await, ProbeResult::Pass);
    status.store(2, Ordering::SeqCst); // NOT_SERVING
    assert_eq!(probe(&check, TIMEOUT).await, ProbeResult::Fail);
}

/// Through the hysteresis: after the server starts failing, the endpoint is marked not
/// serving at exactly the `fall`-th probe, and back after `rise` passes — counted in probes,
/// so the bound interval × fall + timeout follows from the probe schedule.
#[tokio::test]
async fn detection_takes_fall_probes_and_recovery_rise_probes() {
    let status = Arc::new(AtomicU16::new(200));
    let addr = http_server(Arc::clone(&status)).await;
    let check = kind(&format!("http://{addr}/"));
    let mut health = Hysteresis::new(Thresholds {
        rise: 2,
        fall: 3,
        ..Thresholds::default()
    });
    health.observe(probe(&check, TIMEOUT).await, 0);
    assert_eq!(health.serving(), ServingState::Ready);
    status.store(503, Ordering::SeqCst);
    let mut probes = 0;
    while health.serving() == ServingState::Ready {
        probes += 1;
        health.observe(probe(&check, TIMEOUT).await, probes * 1_000);
        assert!(probes <= 3, "still ready after {probes} failing probes");
    }
    assert_eq!((probes, health.serving()), (3, ServingState::NotServing));
    status.store(200, Ordering::SeqCst);
    let mut rising = 0;
    while health.serving() != ServingState::Ready {
        rising += 1;
        health.observe(probe(&check, TIMEOUT).await, 10_000 + rising * 1_000);
        assert!(rising <= 2);
    }
    assert_eq!(rising, 2);
}

/// Probes `check` through a fresh hysteresis (rise 2, fall 3) one virtual second apart until
/// it leaves `starting`; returns how many probes that took and the state it reached.
async fn from_first_probe(check: &CheckKind, timeout: Duration) -> (u64, ServingState) {
    let mut health = Hysteresis::new(Thresholds {
        rise: 2,
        fall: 3,
        ..Thresholds::default()
    });
    let mut probes = 0;
    while health.serving() == ServingState::Starting {
        probes += 1;
        health.observe(probe(check, timeout).await, probes * 1_000);
        assert!(probes <= 3, "still starting after {probes} probes");
    }
    (probes, health.serving())
}

/// Trace: `--check http://.../healthz` against a backend answering 500 from the start stayed
/// `starting` until its lease ran out (H2).
#[tokio::test]
async fn a_backend_answering_500_from_the_first_probe_is_not_serving_at_the_fall_th() {
    let addr = http_server(Arc::new(AtomicU16::new(500))).await;
    let check = kind(&format!("http://{addr}/healthz"));
    assert_eq!(from_first_probe(&check, TIMEOUT).await, (3, ServingState::NotServing));
}

/// Trace: the same check with nothing listening on the port (connection refused).
#[tokio::test]
async fn a_refused_connection_from_the_first_probe_is_not_serving_at_the_fall_th() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    for url in [format!("http://{addr}/healthz"), format!("tcp://{addr}")] {
        assert_eq!(
            from_first_probe(&kind(&url), TIMEOUT).await,
            (3, ServingState::NotServing),
            "{url}"
        );
    }
}

/// SPEC H5's direct evidence: a port nothing listens on answers `Refused` for every probe
/// kind (a killed process), while a listener that answers 500 is a plain `Fail` (it is
/// alive, and may share its failing dependency with the rest of the fleet).
#[tokio::test]
async fn a_closed_port_is_refused_and_an_answering_failure_is_not() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    for url in [
        format!("http://{addr}/healthz"),
        format!("tcp://{addr}"),
        format!("grpc://{addr}"),
    ] {
        assert_eq!(probe(&kind(&url), TIMEOUT).await, ProbeResult::Refused, "{url}");
    }
    let answering = http_server(Arc::new(AtomicU16::new(500))).await;
    assert_eq!(
        probe(&kind(&format!("http://{answering}/healthz")), TIMEOUT).await,
        ProbeResult::Fail
    );
}

/// Trace: a backend that accepts and never answers, from its first probe: each probe fails
/// by its timeout.
#[tokio::test]
async fn a_timeout_from_the_first_probe_is_not_serving_at_the_fall_th() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let held = tokio::spawn(async move {
        let mut held = Vec::new();
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            held.push(tcp);
        }
    });
    let check = kind(&format!("http://{addr}/healthz"));
    assert_eq!(
        from_first_probe(&check, Duration::from_millis(100)).await,
        (3, ServingState::NotServing)
    );
    held.abort();
}

#[test]
fn health_messages_encode_and_decode_by_hand() {
    assert_eq!(health_request("ab"), [0x0a, 2, b'a', b'b']);
    assert!(health_request("").is_empty(), "an empty service is the default message");
    assert_eq!(serving_status(grpc_frame(&[0x08, 1])), Some(1));
    assert_eq!(serving_status(grpc_frame(&[])), Some(0), "absent means UNKNOWN");
    assert_eq!(
        serving_status(grpc_frame(&[0x12, 1, b'x', 0x08, 2])),
        Some(2),
        "unknown fields are skipped"
    );
    assert_eq!(serving_status(Bytes::from_static(&[0, 0, 0])), None);
}
