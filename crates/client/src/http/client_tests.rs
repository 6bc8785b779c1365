//! The builder's checks and the pluggable transport, against a mock `tower::Service` and a
//! refused loopback connection (no server needed).

use std::error::Error as _;
use std::sync::Mutex;

use http_body_util::Full;
use muster_core::{Incarnation, ServiceKey};

use super::*;
use crate::http::error::ClientErrorCode;

/// What a mock transport saw of one request.
#[derive(Debug, Clone)]
struct Seen {
    method: Method,
    uri: String,
    authorization: Option<String>,
    actor: Option<String>,
    body: serde_json::Value,
}

/// A transport answering every request with `reply` (status 200), recording what it saw.
fn mock(reply: &'static str) -> (ClientBuilder, Arc<Mutex<Vec<Seen>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    let service = tower::service_fn(move |request: Request<Body>| {
        let log = Arc::clone(&log);
        async move {
            let (parts, body) = request.into_parts();
            let bytes = body.collect().await?.to_bytes();
            let header = |name: &str| parts.headers.get(name).map(|value| value.to_str().unwrap().to_owned());
            log.lock().unwrap().push(Seen {
                method: parts.method.clone(),
                uri: parts.uri.to_string(),
                authorization: header("authorization"),
                actor: header(ACTOR_HEADER),
                body: serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
            });
            Ok::<_, BoxError>(Response::new(Full::new(Bytes::from_static(reply.as_bytes()))))
        }
    });
    (Client::builder("http://registry.test:7070").service(service), seen)
}

#[test]
fn a_token_that_cannot_be_a_header_is_refused_with_its_own_code() {
    let err = Client::builder("http://a:1").token("line\nbreak").build().unwrap_err();
    assert_eq!(err.code(), ClientErrorCode::InvalidToken);
    assert_eq!(err.code().as_str(), "invalid_token");
    // The message never quotes the secret.
    assert!(!err.to_string().contains("break"), "{err}");
    assert!(Client::builder("http://a:1").token("s3cret").build().is_ok());
}

#[test]
fn an_invalid_url_is_refused_by_build_with_its_code() {
    let err = Client::builder("http://a:1/?x=1").token("fine").build().unwrap_err();
    assert_eq!(err.code(), ClientErrorCode::InvalidUrl);
}

/// A base with a path (`/v1`) was accepted and every call then failed `not_found: no such
/// route`; a query or another scheme are refused too, each saying what to write instead.
#[test]
fn a_server_url_with_a_path_query_or_other_scheme_is_refused_saying_what_to_write() {
    for (url, says) in [
        ("http://127.0.0.1:7070/v1", "write http://127.0.0.1:7070"),
        (
            "http://127.0.0.1:7070/v1/registry/",
            "must not hold a path ('/v1/registry')",
        ),
        ("https://muster.internal:7070?x=1", "write https://muster.internal:7070"),
        ("ftp://muster:7070", "e.g. http://127.0.0.1:7070"),
        ("127.0.0.1:7070", "http://"),
    ] {
        let err = Client::builder(url).build().unwrap_err();
        assert_eq!(err.code(), ClientErrorCode::InvalidUrl, "{url}");
        assert!(err.to_string().contains(says), "{url}: {err}");
    }
    for good in [
        "http://127.0.0.1:7070",
        "http://127.0.0.1:7070/",
        "https://muster.internal:7070",
    ] {
        assert!(Client::builder(good).build().is_ok(), "{good}");
    }
}

#[test]
fn tls_with_a_custom_transport_is_refused_rather_than_ignored() {
    let pem = muster_testkit::pki::TestCa::new("muster-test-ca").pem();
    let tls = ClientTls::builder(pem.as_bytes()).unwrap().build().unwrap();
    let (builder, _) = mock("{}");
    let err = builder.tls(&tls).build().unwrap_err();
    assert_eq!(err.code(), ClientErrorCode::InvalidTls);
}

#[test]
fn the_debug_form_of_a_builder_hides_the_token() {
    let builder = Client::builder("http://a:1").token("s3cret");
    assert!(!format!("{builder:?}").contains("s3cret"));
}

#[tokio::test]
async fn a_mock_service_sees_the_wire_request_and_answers_the_typed_call() {
    let (builder, seen) = mock(r#"{"revision": 12}"#);
    let client = builder.token("s3cret").actor(Actor::Owner).build().unwrap();
    let key = ServiceKey::new("acme", "prod", "api").unwrap();
    let instance = InstanceId::new("api-1").unwrap();
    let registration = Registration::new(Incarnation(3)).address("10.0.0.1").port("http", 8080);
    let reply = client.register(&key, &instance, registration).await.unwrap();
    assert_eq!(reply.revision, Revision(12));
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    let request = &seen[0];
    assert_eq!(request.method, Method::PUT);
    assert_eq!(request.uri, "http://registry.test:7070/v1/registry/acme/prod/api/api-1");
    assert_eq!(request.authorization.as_deref(), Some("Bearer s3cret"));
    assert_eq!(request.actor.as_deref(), Some("owner"));
    assert_eq!(
        request.body,
        serde_json::json!({
            "incarnation": 3,
            "endpoint": {
                "addresses": [{"ip": "10.0.0.1"}],
                "ports": [{"name": "http", "port": 8080, "protocol": "tcp"}],
                "locality": {"priority": 0},
                "labels": {}
            }
        })
    );
}

#[tokio::test]
async fn a_deregistration_carries_its_fence_in_the_query() {
    let (builder, seen) = mock(r#"{"revision": 13}"#);
    let client = builder.build().unwrap();
    let key = ServiceKey::new("acme", "prod", "api").unwrap();
    let instance = InstanceId::new("api-1").unwrap();
    let gone = Deregistration::new(Incarnation(3)).expected_revision(Revision(12));
    client.deregister(&key, &instance, gone).await.unwrap();
    let uri = seen.lock().unwrap()[0].uri.clone();
    assert_eq!(
        uri,
        "http://registry.test:7070/v1/registry/acme/prod/api/api-1?incarnation=3&expected_revision=12"
    );
}

#[tokio::test]
async fn a_refused_connection_keeps_the_io_error_in_its_source_chain() {
    // Port 1 on loopback: nothing listens there, so the connection is refused at once.
    let client = Client::builder("http://127.0.0.1:1").build().unwrap();
    let err = client.status().await.unwrap_err();
    assert_eq!(err.code(), ClientErrorCode::CannotConnect);
    let mut chain = Vec::new();
    let mut next = err.source();
    while let Some(cause) = next {
        chain.push(cause);
        next = cause.source();
    }
    let io = chain
        .iter()
        .find_map(|e| e.downcast_ref::<std::io::Error>())
        .unwrap_or_else(|| panic!("no io::Error in {chain:?}"));
    assert_eq!(io.kind(), std::io::ErrorKind::ConnectionRefused);
}
