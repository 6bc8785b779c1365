//! TLS on the HTTP API and mutual TLS between cluster members (SPEC S1), with certificates
//! made here (rcgen): a client with the CA is served, plain HTTP to a TLS port fails, a
//! listener requiring client certificates refuses a client without one, a cluster forms
//! over mutual TLS, and a node whose certificate another CA signed is refused.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::StatusCode;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use muster_server::{ClientCertPolicy, ServerConfig};
use muster_testkit::fixed_tcp_port as free_port;
use muster_testkit::pki::{Leaf, TestCa};
use muster_tls::{Connector, Identity, Roots};
use tempfile::TempDir;

use crate::support::{STEP, TestServer, poll};

const SECRET: &str = "a-cluster-secret-of-some-length";

fn localhost() -> IpAddr {
    IpAddr::from([127, 0, 0, 1])
}

/// An HTTP client verifying servers against `ca`, presenting `identity` when given.
pub(crate) fn tls_client(ca: &TestCa, identity: Option<&Leaf>) -> Client<Connector, Full<Bytes>> {
    let roots = Roots::from_pem(ca.pem().as_bytes()).unwrap();
    let identity = identity.map(|leaf| Identity::from_pem(leaf.cert.as_bytes(), leaf.key.as_bytes()).unwrap());
    let config = muster_tls::client_config(&roots, identity.as_ref()).unwrap();
    Client::builder(TokioExecutor::new()).build(Connector::new(Some(config), Duration::from_secs(5)))
}

/// `GET url` (or a `POST` with `body` and `headers`): the status and body, or why no reply
/// came.
pub(crate) async fn request(
    client: &Client<Connector, Full<Bytes>>,
    url: &str,
    body: Option<&'static [u8]>,
    headers: &[(&str, &str)],
) -> Result<(StatusCode, String), String> {
    let mut builder = hyper::Request::builder().uri(url);
    if body.is_some() {
        builder = builder
            .method(hyper::Method::POST)
            .header("content-type", "application/json");
    }
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let request = builder
        .body(Full::new(Bytes::from_static(body.unwrap_or_default())))
        .unwrap();
    let response = tokio::time::timeout(STEP, client.request(request))
        .await
        .expect("an answer or an error in time")
        .map_err(|e| format!("{e:?}"))?;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// A server whose API speaks TLS with a `localhost` certificate of `ca`; `client_ca` turns
/// on mutual TLS.
async fn tls_server(dir: &TempDir, ca: &TestCa, client_ca: Option<(&TestCa, ClientCertPolicy)>) -> TestServer {
    let server = ca.localhost().write(dir.path(), "server");
    let client_ca = client_ca.map(|(ca, policy)| (ca.write(dir.path(), "client-ca.pem"), policy));
    TestServer::start_with(move |config| {
        config.tls.cert = Some(server.cert);
        config.tls.key = Some(server.key);
        if let Some((path, policy)) = client_ca {
            config.tls.client_ca = Some(path);
            config.tls.client_cert = policy;
        }
    })
    .await
}

fn https(server: &TestServer, path: &str) -> String {
    server.url(path).replacen("http://", "https://", 1)
}

#[tokio::test]
async fn a_client_with_the_ca_is_served_over_tls_and_one_with_another_ca_is_not() {
    let dir = TempDir::new().unwrap();
    let ca = TestCa::new("muster test CA");
    let mut server = tls_server(&dir, &ca, None).await;
    let (status, body) = request(&tls_client(&ca, None), &https(&server, "/v1/status"), None, &[])
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("\"ready\":true"), "{body}");
    // By host name too: the certificate names localhost.
    let by_name = https(&server, "/v1/status").replacen("127.0.0.1", "localhost", 1);
    assert_eq!(
        request(&tls_client(&ca, None), &by_name, None, &[]).await.unwrap().0,
        StatusCode::OK
    );

    let stranger = TestCa::new("another CA");
    let refused = request(&tls_client(&stranger, None), &https(&server, "/v1/status"), None, &[]).await;
    let error = refused.expect_err("a server certificate the client's CA did not sign is refused");
    assert!(error.contains("UnknownIssuer"), "{error}");
    server.stop().await;
}

#[tokio::test]
async fn a_client_offering_http2_gets_it_over_tls_watches_included_and_an_http1_client_keeps_http1() {
    // SPEC W3: the server offers `h2` by ALPN; a client that speaks it multiplexes its
    // requests and watch streams over one connection.
    let dir = TempDir::new().unwrap();
    let ca = TestCa::new("muster test CA");
    let mut server = tls_server(&dir, &ca, None).await;
    let roots = Roots::from_pem(ca.pem().as_bytes()).unwrap();
    let mut config = std::sync::Arc::unwrap_or_clone(muster_tls::client_config(&roots, None).unwrap());
    config.alpn_protocols.insert(0, b"h2".to_vec());
    let h2: Client<Connector, Full<Bytes>> = Client::builder(TokioExecutor::new()).build(Connector::new(
        Some(std::sync::Arc::new(config)),
        Duration::from_secs(5),
    ));
    let status = h2.get(https(&server, "/v1/status").parse().unwrap()).await.unwrap();
    assert_eq!(
        (status.status(), status.version()),
        (StatusCode::OK, hyper::Version::HTTP_2)
    );

    let watch = h2
        .get(https(&server, "/v1/watch/acme/prod/api").parse().unwrap())
        .await
        .unwrap();
    assert_eq!(
        (watch.status(), watch.version()),
        (StatusCode::OK, hyper::Version::HTTP_2)
    );
    let mut body = watch.into_body();
    let first = tokio::time::timeout(STEP, body.frame())
        .await
        .expect("a first frame in time")
        .unwrap()
        .unwrap()
        .into_data()
        .unwrap();
    assert!(String::from_utf8_lossy(&first).contains("\"progress\""), "{first:?}");

    let h1 = tls_client(&ca, None)
        .get(https(&server, "/v1/status").parse().unwrap())
        .await
        .unwrap();
    assert_eq!(h1.version(), hyper::Version::HTTP_11);
    drop(body);
    server.stop().await;
}

#[tokio::test]
async fn plain_http_to_the_tls_port_fails() {
    let dir = TempDir::new().unwrap();
    let ca = TestCa::new("muster test CA");
    let mut server = tls_server(&dir, &ca, None).await;
    let plain = Client::builder(TokioExecutor::new()).build(Connector::new(None, Duration::from_secs(5)));
    let refused = request(&plain, &server.url("/v1/status"), None, &[]).await;
    assert!(refused.is_err(), "plain HTTP was answered: {refused:?}");
    // And the server still serves TLS clients afterwards.
    let served = request(&tls_client(&ca, None), &https(&server, "/v1/status"), None, &[]).await;
    assert_eq!(served.unwrap().0, StatusCode::OK);
    server.stop().await;
}

#[tokio::test]
async fn with_client_certificates_required_a_client_without_one_is_refused_and_one_with_one_is_served() {
    let dir = TempDir::new().unwrap();
    let ca = TestCa::new("muster test CA");
    let clients = TestCa::new("muster clients CA");
    let mut server = tls_server(&dir, &ca, Some((&clients, ClientCertPolicy::Required))).await;
    let url = https(&server, "/v1/status");

    let refused = request(&tls_client(&ca, None), &url, None, &[]).await;
    assert!(refused.is_err(), "served without a client certificate: {refused:?}");

    let api = clients.leaf(&["api.acme.internal"], &[], &["spiffe://acme.internal/ns/prod/sa/api"]);
    let (status, _) = request(&tls_client(&ca, Some(&api)), &url, None, &[]).await.unwrap();
    assert_eq!(status, StatusCode::OK);

    // A client certificate some other CA signed is no better than none.
    let forged = TestCa::new("a forger").leaf(&["api.acme.internal"], &[], &[]);
    let refused = request(&tls_client(&ca, Some(&forged)), &url, None, &[]).await;
    assert!(refused.is_err(), "served with a certificate of another CA: {refused:?}");
    server.stop().await;
}

#[tokio::test]
async fn with_client_certificates_optional_a_client_without_one_is_served_and_a_forged_one_is_not() {
    let dir = TempDir::new().unwrap();
    let ca = TestCa::new("muster test CA");
    let clients = TestCa::new("muster clients CA");
    let mut server = tls_server(&dir, &ca, Some((&clients, ClientCertPolicy::Optional))).await;
    let url = https(&server, "/v1/status");
    assert_eq!(
        request(&tls_client(&ca, None), &url, None, &[]).await.unwrap().0,
        StatusCode::OK
    );
    let api = clients.leaf(&["api.acme.internal"], &[], &[]);
    assert_eq!(
        request(&tls_client(&ca, Some(&api)), &url, None, &[]).await.unwrap().0,
        StatusCode::OK
    );
    let forged = TestCa::new("a forger").leaf(&["api.acme.internal"], &[], &[]);
    assert!(request(&tls_client(&ca, Some(&forged)), &url, None, &[]).await.is_err());
    server.stop().await;
}

#[tokio::test]
async fn incomplete_or_unreadable_tls_settings_are_refused_naming_the_setting() {
    let dir = TempDir::new().unwrap();
    let ca = TestCa::new("muster test CA");
    let files = ca.localhost().write(dir.path(), "server");
    let other = ca.localhost().write(dir.path(), "other");
    type Spoil = Box<dyn Fn(&mut ServerConfig)>;
    let cert = files.cert.clone();
    let key = files.key.clone();
    let other_key = other.key.clone();
    let cases: Vec<(Spoil, &str)> = vec![
        (Box::new(move |c| c.tls.cert = Some(cert.clone())), "tls: cert and key"),
        (
            Box::new(move |c| c.tls.client_ca = Some(key.clone())),
            "tls: cert and key",
        ),
        (
            Box::new(move |c| {
                c.tls.cert = Some(files.cert.clone());
                c.tls.key = Some(other_key.clone());
            }),
            "tls: ",
        ),
        (
            Box::new(|c| {
                c.tls.cert = Some("/nonexistent/cert.pem".into());
                c.tls.key = Some("/nonexistent/key.pem".into());
            }),
            "tls: /nonexistent/cert.pem",
        ),
        (Box::new(|c| c.limits.http.tls_handshake_timeout_ms = 0), "limits.http"),
    ];
    for (spoil, setting) in cases {
        let mut config = crate::support::test_config(&dir);
        spoil(&mut config);
        let Err(muster_server::ServerError::Config(message)) = muster_server::start(config).await else {
            panic!("{setting}: must be refused");
        };
        assert!(message.starts_with(setting), "{setting}: {message}");
    }
}

/// Three (or more) members on loopback whose cluster listeners speak mutual TLS; node `i`'s
/// certificate is signed by `cas[i]`.
async fn tls_cluster(dir: &TempDir, cas: &[&TestCa]) -> Vec<TestServer> {
    let ports: Vec<u16> = cas.iter().map(|_| free_port()).collect();
    let peers: BTreeMap<u64, String> = ports
        .iter()
        .enumerate()
        .map(|(i, port)| (i as u64 + 1, format!("127.0.0.1:{port}")))
        .collect();
    let mut nodes = Vec::new();
    for (i, ca) in cas.iter().enumerate() {
        let id = i as u64 + 1;
        let leaf = ca
            .leaf(&[], &[localhost()], &[])
            .write(dir.path(), &format!("node-{id}"));
        let ca_file = ca.write(dir.path(), &format!("ca-{id}.pem"));
        let peers = peers.clone();
        let port = ports[i];
        nodes.push(
            TestServer::start_with(move |config| {
                config.node_id = id;
                config.cluster_addr = Some(format!("127.0.0.1:{port}").parse().unwrap());
                config.peers = peers;
                config.cluster_secret = Some(SECRET.into());
                config.cluster_tls.cert = Some(leaf.cert);
                config.cluster_tls.key = Some(leaf.key);
                config.cluster_tls.ca = Some(ca_file);
            })
            .await,
        );
    }
    nodes
}

async fn total(node: &TestServer) -> u64 {
    node.get("/v1/registry/acme/prod/api").await.body["total"]
        .as_u64()
        .unwrap_or(0)
}

/// Polls until `node` serves `want` endpoints of `prod/api`.
async fn until_total(node: &TestServer, want: u64) {
    let reached = poll(Duration::from_millis(25), || async move {
        (total(node).await == want).then_some(())
    })
    .await;
    assert!(reached.is_some(), "never {want} endpoints, still {}", total(node).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_node_cluster_forms_over_mutual_tls_and_commits_a_write() {
    let dir = TempDir::new().unwrap();
    let ca = TestCa::new("muster cluster CA");
    let mut nodes = tls_cluster(&dir, &[&ca, &ca, &ca]).await;
    // A write to any member commits through the leader (forwarded over mutual TLS when the
    // member follows) and reaches every member.
    let written = poll(Duration::from_millis(100), || async {
        (nodes[1].register("api", "a-0", "10.0.0.1").await.status == StatusCode::OK).then_some(())
    })
    .await;
    assert!(written.is_some(), "the cluster never committed a write");
    for node in &nodes {
        until_total(node, 1).await;
    }
    let leader = nodes[0].get("/v1/status").await.body["leader"].as_u64();
    assert!(leader.is_some(), "the members agree on a leader");

    // The cluster listener speaks TLS only, and wants the secret on top of a certificate.
    let listener = format!("https://{}", nodes[0].cluster_addr());
    let member = ca.leaf(&[], &[localhost()], &[]);
    let vote = format!("{listener}/raft/vote");
    let no_secret = request(&tls_client(&ca, Some(&member)), &vote, Some(b"{}"), &[]).await;
    assert_eq!(
        no_secret.unwrap().0,
        StatusCode::UNAUTHORIZED,
        "the secret stays a second factor"
    );
    let no_certificate = request(
        &tls_client(&ca, None),
        &vote,
        Some(b"{}"),
        &[("x-muster-cluster-secret", SECRET)],
    )
    .await;
    assert!(
        no_certificate.is_err(),
        "served without a client certificate: {no_certificate:?}"
    );
    for node in &mut nodes {
        node.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_a_certificate_from_another_ca_is_refused_by_the_cluster() {
    let dir = TempDir::new().unwrap();
    let ca = TestCa::new("muster cluster CA");
    let stranger = TestCa::new("another CA");
    // Node 3 holds the secret and is listed as a member, but its certificate (and the CA it
    // trusts) is another CA's.
    let mut nodes = tls_cluster(&dir, &[&ca, &ca, &stranger]).await;
    let written = poll(Duration::from_millis(100), || async {
        (nodes[0].register("api", "a-0", "10.0.0.1").await.status == StatusCode::OK).then_some(())
    })
    .await;
    assert!(written.is_some(), "the two members of the CA never committed a write");
    until_total(&nodes[1], 1).await;
    // Nodes 1 and 2 have committed with each other, so a leader sent node 3 its entries (and
    // heartbeats) too — over connections that fail the handshake: it has learnt nothing.
    let outsider = nodes[2].get("/v1/status").await.body;
    assert_eq!(total(&nodes[2]).await, 0, "the outsider received the write: {outsider}");
    assert!(outsider["leader"].is_null(), "the outsider found a leader: {outsider}");

    // The same certificate, presented directly with the secret, is refused at the handshake.
    let outsider_leaf = stranger.leaf(&[], &[localhost()], &[]);
    let vote = format!("https://{}/raft/vote", nodes[0].cluster_addr());
    let refused = request(
        &tls_client(&ca, Some(&outsider_leaf)),
        &vote,
        Some(b"{}"),
        &[("x-muster-cluster-secret", SECRET)],
    )
    .await;
    assert!(refused.is_err(), "a certificate of another CA was served: {refused:?}");
    for node in &mut nodes {
        node.stop().await;
    }
}
