//! The client library over TLS (SPEC S1): `https://` with the server's CA, a client
//! certificate for a server that requires one, and clear refusals without them.

use muster_client::{Client, ClientTls};
use muster_server::ClientCertPolicy;
use muster_testkit::pki::TestCa;

use crate::inproc::Registry;

/// A registry whose API speaks TLS with a certificate of `ca`, requiring client
/// certificates of `clients` when given.
async fn tls_registry(dir: &tempfile::TempDir, ca: &TestCa, clients: Option<&TestCa>) -> (Registry, String) {
    let server = ca.localhost().write(dir.path(), "server");
    let clients = clients.map(|clients| clients.write(dir.path(), "clients.pem"));
    let registry = Registry::start_with(move |mut config| {
        config.tls.cert = Some(server.cert);
        config.tls.key = Some(server.key);
        config.tls.client_ca = clients;
        config.tls.client_cert = ClientCertPolicy::Required;
        config
    })
    .await;
    let url = registry.client().server().replacen("http://", "https://", 1);
    (registry, url)
}

#[tokio::test]
async fn an_https_server_is_read_with_its_ca_and_refused_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("muster test CA");
    let (mut registry, url) = tls_registry(&dir, &ca, None).await;
    let tls = ClientTls::builder(ca.pem().as_bytes()).unwrap().build().unwrap();
    let status = Client::builder(&url).tls(&tls).build().unwrap().status().await.unwrap();
    assert!(status.ready);

    let err = Client::new(&url).unwrap().status().await.unwrap_err();
    assert_eq!(err.code(), "cannot_connect");
    assert!(err.to_string().contains("https needs a CA certificate"), "{err}");

    let stranger = ClientTls::builder(TestCa::new("another CA").pem().as_bytes())
        .unwrap()
        .build()
        .unwrap();
    let err = Client::builder(&url)
        .tls(&stranger)
        .build()
        .unwrap()
        .status()
        .await
        .unwrap_err();
    assert_eq!(err.code(), "cannot_connect", "{err}");
    registry.stop().await;
}

#[tokio::test]
async fn a_server_requiring_client_certificates_serves_a_client_with_one_from_its_ca() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("muster test CA");
    let clients = TestCa::new("muster clients CA");
    let (mut registry, url) = tls_registry(&dir, &ca, Some(&clients)).await;
    let without = ClientTls::builder(ca.pem().as_bytes()).unwrap().build().unwrap();
    let err = Client::builder(&url)
        .tls(&without)
        .build()
        .unwrap()
        .status()
        .await
        .unwrap_err();
    assert_eq!(err.code(), "cannot_connect", "{err}");

    let leaf = clients.leaf(&["api.acme.internal"], &[], &["spiffe://acme.internal/ns/prod/sa/api"]);
    let files = leaf.write(dir.path(), "client");
    let ca_file = ca.write(dir.path(), "ca.pem");
    let with = ClientTls::from_files(&ca_file, Some(&files.cert), Some(&files.key)).unwrap();
    let status = Client::builder(&url)
        .tls(&with)
        .build()
        .unwrap()
        .status()
        .await
        .unwrap();
    assert!(status.ready);

    let half = ClientTls::from_files(&ca_file, Some(&files.cert), None).unwrap_err();
    assert_eq!(half.code(), "invalid_tls");
    let wrong_key = ClientTls::builder(ca.pem().as_bytes())
        .unwrap()
        .identity(leaf.cert.as_bytes(), clients.leaf(&[], &[], &[]).key.as_bytes())
        .and_then(muster_client::ClientTlsBuilder::build)
        .unwrap_err();
    assert_eq!(wrong_key.code(), "invalid_tls", "{wrong_key}");
    registry.stop().await;
}

#[tokio::test]
async fn over_tls_the_clients_watches_share_one_http2_connection_beside_its_calls() {
    // SPEC W3: a server that offers HTTP/2 carries all of a client's watches on one
    // connection. Two connections are all this server takes: over HTTP/1.1 the second watch
    // would already be refused `too_many_connections`.
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("muster test CA");
    let server = ca.localhost().write(dir.path(), "server");
    let mut registry = Registry::start_with(move |mut config| {
        config.tls.cert = Some(server.cert);
        config.tls.key = Some(server.key);
        config.limits.http.max_connections = Some(2);
        config
    })
    .await;
    let url = registry.client().server().replacen("http://", "https://", 1);
    let tls = ClientTls::builder(ca.pem().as_bytes()).unwrap().build().unwrap();
    let client = Client::builder(&url).tls(&tls).build().unwrap();
    assert!(client.status().await.unwrap().ready);
    let mut watches = Vec::new();
    for service in ["a", "b", "c", "d", "e"] {
        let key = muster_core::ServiceKey::new("acme", "prod", service).unwrap();
        let mut watch = client
            .watch_service(&key, None, std::time::Duration::from_secs(30))
            .await
            .unwrap();
        let (_, first) = watch.next_frame().await.unwrap().expect("a first frame");
        assert!(matches!(first, muster_core::api::Frame::Progress { .. }), "{first:?}");
        watches.push(watch);
    }
    // Calls still go through beside the five open watches.
    assert!(client.status().await.unwrap().ready);
    drop(watches);
    registry.stop().await;
}
