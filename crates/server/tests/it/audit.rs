//! The audit trail (SPEC S4) over HTTP: committed mutations with their outcomes, the same on
//! every node of a cluster, denials with their source address, paging and filters; denials
//! kept apart from mutations and a flood of them counted (SPEC S8), guard refusals and
//! revoked watches on record, and a token shown only what its rules let it administer.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hyper::{Method, StatusCode};
use muster_testkit::fixed_tcp_port as free_port;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{TestServer, as_token, bootstrap, endpoint, instance_path, poll};

const SECRET: &str = "a-cluster-secret-of-some-length";

#[allow(
    clippy::disallowed_methods,
    reason = "the records' times come from the server's wall clock; the test brackets them"
)]
fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

/// The records of one audit page.
async fn records(server: &TestServer, query: &str) -> Vec<Value> {
    let reply = server.get(&format!("/v1/audit?{query}")).await.expect(StatusCode::OK);
    reply.body["records"].as_array().expect("records").clone()
}

/// The records without the node's own numbering: what every node must agree on.
fn replicated(records: &[Value]) -> Vec<Value> {
    records
        .iter()
        .map(|record| {
            let mut record = record.clone();
            record.as_object_mut().unwrap().remove("seq");
            record
        })
        .collect()
}

async fn register(server: &TestServer, service: &str, instance: &str, incarnation: u64) -> u64 {
    server
        .call(
            Method::PUT,
            &instance_path(service, instance),
            Some(json!({"incarnation": incarnation, "endpoint": endpoint("10.0.0.1")})),
        )
        .await
        .expect(StatusCode::OK)
        .revision()
}

#[tokio::test]
async fn a_register_a_refused_stale_deregister_and_a_deregister_are_recorded_with_their_outcomes() {
    let server = TestServer::start().await;
    let before = unix_ms();
    let registered = register(&server, "api", "api-0", 2).await;
    let stale = server
        .call(
            Method::DELETE,
            &format!("{}?incarnation=1", instance_path("api", "api-0")),
            None,
        )
        .await
        .expect(StatusCode::CONFLICT);
    assert_eq!(stale.code(), "stale_incarnation");
    let removed = server
        .call(
            Method::DELETE,
            &format!("{}?incarnation=2", instance_path("api", "api-0")),
            None,
        )
        .await
        .expect(StatusCode::OK)
        .revision();
    let after = unix_ms();

    let records = records(&server, "key=acme/prod/api").await;
    let summary: Vec<_> = records
        .iter()
        .map(|r| {
            (
                r["verb"].as_str().unwrap(),
                r["incarnation"].as_u64(),
                r["revision"].as_u64(),
                r["outcome"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("deregister", Some(2), Some(removed), "applied"),
            ("deregister", Some(1), None, "refused:stale_incarnation"),
            ("register", Some(2), Some(registered), "applied"),
        ],
        "newest first: {records:?}"
    );
    for record in &records {
        assert_eq!(record["kind"], "mutation");
        assert_eq!(record["principal"], "anonymous");
        assert_eq!(record["actor"], "app");
        assert_eq!(record["tenant"], "acme");
        assert_eq!(record["key"], "acme/prod/api");
        assert_eq!(record["instance"], "api-0");
        assert_eq!(record["origin"], 1, "proposed by node 1");
        assert!(record["log_index"].as_u64().is_some(), "{record}");
        let at = record["at_ms"].as_u64().unwrap();
        assert!((before..=after).contains(&at), "{at} not within {before}..={after}");
    }
    assert!(
        records[1]["reason"].as_str().unwrap().contains("incarnation 1"),
        "the refusal says why: {}",
        records[1]
    );
    let seqs: Vec<u64> = records.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] > w[1]), "{seqs:?}");
}

#[tokio::test]
async fn revoking_a_lease_records_every_endpoint_it_removed() {
    let server = TestServer::start().await;
    let grant = server
        .call(Method::POST, "/v1/leases/acme", Some(json!({"ttl_ms": 60_000})))
        .await
        .expect(StatusCode::OK);
    let lease = grant.body["lease"]["id"].as_u64().unwrap();
    for (service, instance) in [("api", "api-0"), ("web", "web-0")] {
        server
            .call(
                Method::PUT,
                &instance_path(service, instance),
                Some(json!({"incarnation": 1, "endpoint": endpoint("10.0.0.1"), "lease": {"id": lease}})),
            )
            .await
            .expect(StatusCode::OK);
    }
    let revoked = server
        .call(Method::DELETE, &format!("/v1/leases/acme/{lease}"), None)
        .await
        .expect(StatusCode::OK)
        .revision();
    let records = records(&server, "tenant=acme").await;
    let revokes: Vec<_> = records
        .iter()
        .filter(|r| r["verb"] == "revoke_lease")
        .map(|r| {
            (
                r["key"].as_str().unwrap(),
                r["instance"].as_str().unwrap(),
                r["revision"].as_u64(),
            )
        })
        .collect();
    assert_eq!(
        revokes,
        [
            ("acme/prod/web", "web-0", Some(revoked)),
            ("acme/prod/api", "api-0", Some(revoked))
        ],
        "one record per endpoint removed, at the revocation's revision (newest first)"
    );
    let granted = records.iter().find(|r| r["verb"] == "grant_lease").expect("the grant");
    assert_eq!(granted["lease"].as_u64(), Some(lease));
    assert!(
        records
            .iter()
            .filter(|r| r["verb"] == "register")
            .all(|r| r["lease"].as_u64() == Some(lease))
    );
}

#[tokio::test]
async fn pages_filters_and_bad_queries() {
    let server = TestServer::start().await;
    for i in 0..5 {
        register(&server, "api", &format!("api-{i}"), 1).await;
    }
    register(&server, "web", "web-0", 1).await;
    let split = unix_ms();
    // Written after `split` by a clock that only goes forward.
    poll(Duration::from_millis(5), || async { (unix_ms() > split).then_some(()) }).await;
    server
        .call(
            Method::PUT,
            "/v1/registry/globex/prod/api/api-0",
            Some(json!({"incarnation": 1, "endpoint": endpoint("10.0.0.2")})),
        )
        .await
        .expect(StatusCode::OK);

    // Paging: newest first, every record once, to the end.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let query = match &cursor {
            None => "key=acme/prod/api&limit=2".to_owned(),
            Some(cursor) => format!("key=acme/prod/api&limit=2&cursor={cursor}"),
        };
        let reply = server.get(&format!("/v1/audit?{query}")).await.expect(StatusCode::OK);
        let page = reply.body["records"].as_array().unwrap().clone();
        assert!(page.len() <= 2);
        seen.extend(page.iter().map(|r| r["instance"].as_str().unwrap().to_owned()));
        match reply.body["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen, ["api-4", "api-3", "api-2", "api-1", "api-0"]);

    let keys = |records: Vec<Value>| -> Vec<String> {
        records
            .iter()
            .map(|r| r["key"].as_str().unwrap_or("-").to_owned())
            .collect()
    };
    assert_eq!(keys(records(&server, "tenant=globex").await), ["globex/prod/api"]);
    assert_eq!(keys(records(&server, "key=acme/prod/web").await), ["acme/prod/web"]);
    assert_eq!(
        keys(records(&server, "key=acme/prod").await).len(),
        6,
        "the namespace's services"
    );
    assert_eq!(
        keys(records(&server, &format!("since_ms={split}")).await),
        ["globex/prod/api"]
    );
    assert!(
        records(&server, &format!("until_ms={split}&tenant=globex"))
            .await
            .is_empty(),
        "until is exclusive of what came later"
    );
    assert!(records(&server, "principal=someone-else").await.is_empty());
    assert_eq!(records(&server, "principal=anonymous&tenant=acme").await.len(), 6);
    assert!(records(&server, "outcome=refused").await.is_empty());
    let reply = server.get("/v1/audit?limit=1").await.expect(StatusCode::OK);
    assert_eq!(reply.body["retention"], 10_000);
    assert_eq!(reply.body["evicted"], 0);

    for (query, says) in [
        ("colour=blue", "colour"),
        ("key=acme", "key"),
        ("tenant=Acme", "tenant"),
        ("outcome=maybe", "outcome"),
        ("limit=0", "limit"),
        ("limit=many", "limit"),
        ("cursor=nonsense", "cursor"),
        ("cursor=1.2", "cursor"),
        ("since_ms=10&until_ms=5", "until_ms"),
    ] {
        let reply = server
            .get(&format!("/v1/audit?{query}"))
            .await
            .expect(StatusCode::BAD_REQUEST);
        assert_eq!(reply.code(), "bad_request", "{query}");
        assert!(reply.message().contains(says), "{query}: {}", reply.message());
    }
}

#[tokio::test]
async fn after_a_restart_the_replayed_log_records_its_mutations_again_once_each() {
    let mut server = TestServer::start().await;
    register(&server, "api", "api-0", 1).await;
    server.deregister("api", "api-0").await.expect(StatusCode::OK);
    let before = replicated(&records(&server, "tenant=acme").await);
    assert_eq!(before.len(), 2);
    server.restart().await;
    // The whole log is after the newest snapshot (there is none yet): replayed at open.
    let after = replicated(&records(&server, "tenant=acme").await);
    assert_eq!(after, before, "the same records, once each");
}

/// Three nodes of a static cluster on loopback.
async fn cluster() -> Vec<TestServer> {
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let peers: BTreeMap<u64, String> = ports
        .iter()
        .enumerate()
        .map(|(i, port)| (i as u64 + 1, format!("127.0.0.1:{port}")))
        .collect();
    let mut nodes = Vec::new();
    for (i, port) in ports.into_iter().enumerate() {
        let peers = peers.clone();
        nodes.push(
            TestServer::start_with(move |config| {
                config.node_id = i as u64 + 1;
                config.cluster_addr = Some(format!("127.0.0.1:{port}").parse().unwrap());
                config.peers = peers;
                config.cluster_secret = Some(SECRET.into());
            })
            .await,
        );
    }
    nodes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_of_a_cluster_records_the_same_mutations() {
    let mut nodes = cluster().await;
    // A write through every node (followers forward to the leader), and a refusal.
    for (i, node) in nodes.iter().enumerate() {
        let written = poll(Duration::from_millis(50), || async move {
            let reply = node
                .call(
                    Method::PUT,
                    &instance_path("api", &format!("api-{i}")),
                    Some(json!({"incarnation": 2, "endpoint": endpoint("10.0.0.1")})),
                )
                .await;
            (reply.status == StatusCode::OK).then_some(())
        })
        .await;
        assert!(written.is_some(), "node {} accepts writes", i + 1);
    }
    nodes[1]
        .call(
            Method::DELETE,
            &format!("{}?incarnation=1", instance_path("api", "api-0")),
            None,
        )
        .await
        .expect(StatusCode::CONFLICT);

    let first = &nodes[0];
    let expected = poll(Duration::from_millis(50), || async move {
        let records = records(first, "tenant=acme").await;
        (records.len() >= 4).then_some(replicated(&records))
    })
    .await
    .expect("node 1 records every write");
    assert_eq!(expected.len(), 4, "{expected:?}");
    assert_eq!(expected[0]["outcome"], "refused:stale_incarnation");
    assert_eq!(expected[0]["origin"], 2, "proposed through node 2");
    for node in &nodes[1..] {
        let expected = &expected;
        let same = poll(Duration::from_millis(50), || async move {
            (replicated(&records(node, "tenant=acme").await) == *expected).then_some(())
        })
        .await;
        assert!(
            same.is_some(),
            "a node's records differ: {:?} vs {expected:?}",
            replicated(&records(node, "tenant=acme").await)
        );
    }
    for node in &mut nodes {
        node.stop().await;
    }
}

/// Sends one request with a wrong cluster secret from a socket whose address the test knows.
async fn wrong_secret(node: &TestServer) -> (std::net::SocketAddr, String) {
    let addr = node.cluster_url().trim_start_matches("http://").to_owned();
    let mut tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let source = tcp.local_addr().unwrap();
    let request = format!(
        "POST /raft/vote HTTP/1.1\r\nhost: {addr}\r\nx-muster-cluster-secret: wrong\r\n\
         content-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{{}}"
    );
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(crate::support::STEP, tcp.read_to_string(&mut answer))
        .await
        .expect("an answer in time")
        .unwrap();
    (source, answer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_cluster_secret_is_recorded_as_a_denial_with_its_source_address() {
    let mut nodes = cluster().await;
    let (source, answer) = wrong_secret(&nodes[0]).await;
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    let denials = records(&nodes[0], "outcome=denied").await;
    assert_eq!(denials.len(), 1, "{denials:?}");
    let denial = &denials[0];
    assert_eq!(denial["kind"], "denial");
    assert_eq!(denial["outcome"], "denied:unauthenticated");
    assert_eq!(denial["source"], source.to_string());
    assert_eq!(denial["verb"], "cluster");
    assert_eq!(denial["resource"], "POST /raft/vote");
    assert!(
        denial["reason"].as_str().unwrap().contains("wrong cluster secret"),
        "{denial}"
    );
    assert!(denial.get("principal").is_none(), "nobody was authenticated: {denial}");
    // Seen by the node that refused it only.
    assert!(records(&nodes[1], "outcome=denied").await.is_empty());
    for node in &mut nodes {
        node.stop().await;
    }
}

/// Makes a token with `body` (`POST /v1/acl/tokens`) as `operator`; its secret.
async fn token(server: &TestServer, operator: &str, body: Value) -> String {
    let bearer = format!("Bearer {operator}");
    let reply = server
        .send(
            Method::POST,
            "/v1/acl/tokens",
            Some(serde_json::to_vec(&body).unwrap()),
            &[("authorization", &bearer)],
        )
        .await
        .expect(StatusCode::CREATED);
    reply.body["secret"].as_str().unwrap().to_owned()
}

async fn audit_as(server: &TestServer, secret: &str, query: &str) -> crate::support::Reply {
    let bearer = format!("Bearer {secret}");
    server
        .send(
            Method::GET,
            &format!("/v1/audit?{query}"),
            None,
            &[("authorization", &bearer)],
        )
        .await
}

#[tokio::test]
async fn with_auth_on_denials_are_recorded_and_a_tenant_admin_sees_only_its_tenant() {
    let server = TestServer::start_with(|config| config.auth.enabled = true).await;
    let operator = server
        .call(Method::POST, "/v1/acl/bootstrap", None)
        .await
        .expect(StatusCode::CREATED)
        .body["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    let reader = token(&server, &operator, json!({"tenant": "acme", "allow": ["prod/*=read"]})).await;
    let admin = token(&server, &operator, json!({"tenant": "acme", "allow": ["*/*=admin"]})).await;

    // A write the reader may not make, and a request without credentials.
    let bearer = format!("Bearer {reader}");
    let refused = server
        .send(
            Method::PUT,
            &instance_path("api", "api-0"),
            Some(serde_json::to_vec(&json!({"incarnation": 1, "endpoint": endpoint("10.0.0.1")})).unwrap()),
            &[("authorization", &bearer)],
        )
        .await
        .expect(StatusCode::FORBIDDEN);
    assert_eq!(refused.code(), "permission_denied");
    server.get("/v1/audit").await.expect(StatusCode::UNAUTHORIZED);

    let denials = audit_as(&server, &operator, "outcome=denied")
        .await
        .expect(StatusCode::OK);
    let denials = denials.body["records"].as_array().unwrap().clone();
    let outcomes: Vec<&str> = denials.iter().map(|d| d["outcome"].as_str().unwrap()).collect();
    assert_eq!(
        outcomes,
        ["denied:unauthenticated", "denied:permission_denied"],
        "{denials:?}"
    );
    let (unauthenticated, forbidden) = (&denials[0], &denials[1]);
    assert_eq!(unauthenticated["resource"], "/v1/audit");
    assert!(unauthenticated.get("principal").is_none());
    assert_eq!(forbidden["verb"], "register");
    assert_eq!(forbidden["key"], "acme/prod/api");
    assert_eq!(forbidden["tenant"], "acme");
    assert!(forbidden["principal"].as_str().is_some(), "{forbidden}");
    for denial in &denials {
        assert!(denial["source"].as_str().unwrap().starts_with("127.0.0.1:"), "{denial}");
        assert_eq!(denial["kind"], "denial");
    }

    // The tenant's admin sees its tenant's records (the token made for it, the denial of
    // its reader), not the cluster's own (the bootstrap, the unauthenticated request).
    let own = audit_as(&server, &admin, "").await.expect(StatusCode::OK);
    let own = own.body["records"].as_array().unwrap().clone();
    assert!(!own.is_empty());
    assert!(own.iter().all(|r| r["tenant"] == "acme"), "{own:?}");
    assert!(
        own.iter()
            .any(|r| r["verb"] == "create_token" && r["accessor"].is_string())
    );
    let other = audit_as(&server, &admin, "tenant=globex")
        .await
        .expect(StatusCode::FORBIDDEN);
    assert_eq!(other.code(), "permission_denied");
    // A token without admin may not read the trail at all; both refusals are on record.
    audit_as(&server, &reader, "").await.expect(StatusCode::FORBIDDEN);
    let later = audit_as(&server, &operator, "outcome=denied:permission_denied")
        .await
        .expect(StatusCode::OK);
    assert_eq!(later.body["records"].as_array().unwrap().len(), 3, "{}", later.body);
}

/// The records of every page of `query`, as `secret`.
async fn all_records(server: &TestServer, secret: &str, query: &str) -> Vec<Value> {
    let mut records = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = match &cursor {
            None => format!("{query}&limit=1000"),
            Some(cursor) => format!("{query}&limit=1000&cursor={cursor}"),
        };
        let reply = audit_as(server, secret, &page).await.expect(StatusCode::OK);
        records.extend(reply.body["records"].as_array().unwrap().iter().cloned());
        match reply.body["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return records,
        }
    }
}

/// Trace: 60 requests with made-up tokens evicted every mutation from the trail (one ring for
/// mutations and denials). Now the denials have a ring of their own, and a flood from one
/// address is counted into a record per 10 s.
#[tokio::test]
async fn a_flood_of_made_up_tokens_leaves_every_mutation_on_record_and_is_counted_in_a_few_records() {
    let server = TestServer::start_with(|config| {
        config.auth.enabled = true;
        config.audit.retention = 50;
        config.audit.denial_retention = 50;
    })
    .await;
    let operator = bootstrap(&server).await;
    for n in 0..10 {
        as_token(
            &server,
            &operator,
            Method::PUT,
            &instance_path("api", &format!("api-{n}")),
            Some(json!({"incarnation": 1, "endpoint": endpoint("10.0.0.1")})),
        )
        .await
        .expect(StatusCode::OK);
    }
    token(&server, &operator, json!({"tenant": "acme", "allow": ["prod/*=read"]})).await;
    let mutations =
        |records: &[Value]| -> Vec<Value> { records.iter().filter(|r| r["kind"] == "mutation").cloned().collect() };
    let before = mutations(&all_records(&server, &operator, "").await);
    assert_eq!(
        before.len(),
        14,
        "the policy adopted, the format raised, the bootstrap, 10 registrations, a token: {before:?}"
    );

    let flood_started = unix_ms();
    for n in 0..120 {
        let reply = server
            .send(
                Method::GET,
                "/v1/registry/acme/prod/api",
                None,
                &[("authorization", &format!("Bearer made-up-{n}"))],
            )
            .await
            .expect(StatusCode::UNAUTHORIZED);
        assert_eq!(reply.code(), "unauthenticated");
    }
    let flood_seconds = unix_ms().saturating_sub(flood_started) / 1000;

    let reply = audit_as(&server, &operator, "limit=1000").await.expect(StatusCode::OK);
    assert_eq!(reply.body["retention"], 50);
    assert_eq!(reply.body["evicted"], 0, "{}", reply.body);
    assert_eq!(reply.body["denial_retention"], 50);
    let after = all_records(&server, &operator, "").await;
    assert_eq!(
        mutations(&after),
        before,
        "every mutation made before the flood is still listed"
    );
    let flood: Vec<&Value> = after
        .iter()
        .filter(|r| r["kind"] == "denial" && r["reason"] == "unknown or revoked token")
        .collect();
    let counted: u64 = flood.iter().map(|r| r["count"].as_u64().unwrap()).sum();
    assert_eq!(counted, 120, "{flood:?}");
    // One record per 10 s that the flood lasted (it takes well under one).
    assert!(
        flood.len() as u64 <= 1 + flood_seconds / 10 + 1,
        "{} records for a flood of {flood_seconds} s: {flood:?}",
        flood.len()
    );
    for record in &flood {
        assert!(record["source"].as_str().unwrap().starts_with("127.0.0.1:"), "{record}");
        assert_eq!(record["outcome"], "denied:unauthenticated");
        assert!(record["last_at_ms"].as_u64().unwrap() >= record["at_ms"].as_u64().unwrap());
    }
}

/// One request with exactly these headers (no defaults added) to `addr`: its status.
async fn raw_status(
    addr: std::net::SocketAddr,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> StatusCode {
    use http_body_util::Full;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<bytes::Bytes>>();
    let mut request = hyper::Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(Full::new(bytes::Bytes::from(body.to_owned()))).unwrap();
    tokio::time::timeout(crate::support::STEP, client.request(request))
        .await
        .expect("a reply in time")
        .expect("a reply")
        .status()
}

#[tokio::test]
async fn the_browser_guards_refusals_are_recorded_as_denials_with_their_codes() {
    let server = TestServer::start_with(|config| {
        config.allowed_origins = vec!["https://console.example".into()];
    })
    .await;
    let registration = json!({"incarnation": 1, "endpoint": endpoint("10.0.0.1")}).to_string();
    let put = instance_path("api", "api-0");
    let status = raw_status(
        server.addr(),
        Method::PUT,
        &put,
        &[("content-type", "text/plain")],
        &registration,
    )
    .await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let evil = [("origin", "https://evil.example")];
    let status = raw_status(server.addr(), Method::GET, "/v1/registry/acme/prod/api", &evil, "").await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // The Consul-compatible API's guard, the same Origin: counted into the same record.
    let status = raw_status(server.consul_addr(), Method::GET, "/v1/catalog/services", &evil, "").await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let rebound = format!("evil.example:{}", server.addr().port());
    let status = raw_status(server.addr(), Method::GET, "/v1/status", &[("host", &rebound)], "").await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    let denials = records(&server, "outcome=denied").await;
    let by_outcome: BTreeMap<&str, &Value> = denials.iter().map(|d| (d["outcome"].as_str().unwrap(), d)).collect();
    assert_eq!(
        by_outcome.keys().copied().collect::<Vec<_>>(),
        [
            "denied:forbidden_host",
            "denied:forbidden_origin",
            "denied:unsupported_media_type"
        ],
        "{denials:?}"
    );
    let media = by_outcome["denied:unsupported_media_type"];
    assert_eq!(media["resource"], format!("PUT {put}"));
    assert!(media["reason"].as_str().unwrap().contains("text/plain"), "{media}");
    assert_eq!(by_outcome["denied:forbidden_origin"]["count"], 2);
    assert_eq!(by_outcome["denied:forbidden_host"]["resource"], "GET /v1/status");
    for denial in &denials {
        assert_eq!(denial["verb"], "guard");
        assert!(denial.get("principal").is_none(), "{denial}");
        assert!(denial["source"].as_str().unwrap().starts_with("127.0.0.1:"), "{denial}");
    }
    assert_eq!(server.revision().await, 0, "nothing was committed");
}

#[tokio::test]
async fn a_watch_ended_by_its_tokens_revocation_is_recorded_as_a_denial() {
    let server = TestServer::start_with(|config| config.auth.enabled = true).await;
    let operator = bootstrap(&server).await;
    let made = as_token(
        &server,
        &operator,
        Method::POST,
        "/v1/acl/tokens",
        Some(json!({"tenant": "acme", "allow": ["prod/*=read,watch"]})),
    )
    .await
    .expect(StatusCode::CREATED);
    let accessor = made.body["accessor"].as_str().unwrap().to_owned();
    let bearer = format!("Bearer {}", made.body["secret"].as_str().unwrap());
    let mut watch = server
        .watch_with("/v1/watch/acme/prod/api", &[("authorization", bearer.as_str())])
        .await;
    assert!(matches!(
        watch.next().await,
        Some(muster_core::api::Frame::Progress { .. })
    ));
    as_token(
        &server,
        &operator,
        Method::DELETE,
        &format!("/v1/acl/tokens/{accessor}"),
        None,
    )
    .await
    .expect(StatusCode::OK);
    match watch.next_event().await {
        Some(muster_core::api::Frame::Error { error, .. }) => assert_eq!(error.code, "unauthenticated"),
        other => panic!("expected an error frame, got {other:?}"),
    }
    let denials = audit_as(&server, &operator, "outcome=denied:unauthenticated")
        .await
        .expect(StatusCode::OK);
    let denials = denials.body["records"].as_array().unwrap().clone();
    assert_eq!(denials.len(), 1, "{denials:?}");
    let ended = &denials[0];
    assert_eq!(ended["reason"], "the token was revoked");
    assert_eq!(ended["principal"], format!("token:{accessor}"));
    assert_eq!(ended["tenant"], "acme");
    assert_eq!(ended["verb"], "watch");
    assert_eq!(ended["resource"], "GET /v1/watch/acme/prod/api");
    assert!(ended["source"].as_str().unwrap().starts_with("127.0.0.1:"), "{ended}");
}

#[tokio::test]
async fn the_trail_shows_a_token_only_the_services_its_rules_let_it_administer() {
    let server = TestServer::start_with(|config| config.auth.enabled = true).await;
    let operator = bootstrap(&server).await;
    for service in ["api", "x", "payroll"] {
        as_token(
            &server,
            &operator,
            Method::PUT,
            &instance_path(service, &format!("{service}-0")),
            Some(json!({"incarnation": 1, "endpoint": endpoint("10.0.0.1")})),
        )
        .await
        .expect(StatusCode::OK);
    }
    // A reader of one service may not read the trail at all.
    let reader = token(&server, &operator, json!({"tenant": "acme", "allow": ["prod/x=read"]})).await;
    let refused = audit_as(&server, &reader, "").await.expect(StatusCode::FORBIDDEN);
    assert_eq!(refused.code(), "permission_denied");
    // The tenant's admin but for payroll sees the tenant's records but payroll's.
    let admin = token(
        &server,
        &operator,
        json!({"tenant": "acme", "allow": ["*/*=admin"], "deny": ["prod/payroll=admin"]}),
    )
    .await;
    let keys = |records: &[Value]| -> Vec<String> {
        let mut keys: Vec<String> = records
            .iter()
            .filter_map(|r| r["key"].as_str().map(str::to_owned))
            .collect();
        keys.sort();
        keys.dedup();
        keys
    };
    let seen = all_records(&server, &admin, "").await;
    assert_eq!(keys(&seen), ["acme/prod/api", "acme/prod/x"], "{seen:?}");
    assert!(seen.iter().all(|r| r["tenant"] == "acme"), "{seen:?}");
    // Asking for payroll's records by name finds none either.
    let asked = all_records(&server, &admin, "key=acme/prod/payroll").await;
    assert!(asked.is_empty(), "{asked:?}");
    let all = all_records(&server, &operator, "").await;
    assert_eq!(keys(&all), ["acme/prod/api", "acme/prod/payroll", "acme/prod/x"]);
}
