//! The DNS view of a real server (SPEC D2): registered through the HTTP API, asked by a real
//! resolver over UDP/TCP. Tests use tenant `acme`, like the rest of this suite.

use hickory_resolver::TokioResolver;
use hickory_resolver::net::{DnsError, NetError};
use hickory_resolver::proto::op::ResponseCode;
use hickory_resolver::proto::rr::{RData, RecordType};
use hyper::{Method, StatusCode};
use muster_core::Label;
use muster_server::{ServerConfig, ServerError};
use serde_json::json;

use crate::support::{TestServer, instance_path, test_config};

#[path = "../../../dns/tests/it/resolver.rs"]
pub(crate) mod resolver;

async fn acme_server() -> TestServer {
    TestServer::start_with(|config| config.dns_zone.tenant = Label::new("tenant", "acme").unwrap()).await
}

pub(crate) async fn addresses(dns: &TokioResolver, name: &str) -> Result<Vec<String>, NetError> {
    let lookup = dns.lookup(name, RecordType::A).await?;
    let mut addresses: Vec<String> = lookup
        .answers()
        .iter()
        .filter_map(|record| match &record.data {
            RData::A(a) => Some(a.0.to_string()),
            _ => None,
        })
        .collect();
    addresses.sort();
    Ok(addresses)
}

fn response_code(err: NetError) -> ResponseCode {
    match err {
        NetError::Dns(DnsError::NoRecordsFound(no_records)) => no_records.response_code,
        other => panic!("expected a negative answer, got {other}"),
    }
}

#[tokio::test]
async fn a_registration_is_answered_and_a_drain_disappears_at_the_next_query() {
    let mut server = acme_server().await;
    let dns = resolver::resolver(server.dns_addr(), true);
    server.register("api", "a", "10.0.0.1").await.expect(StatusCode::OK);
    server.register("api", "b", "10.0.0.2").await.expect(StatusCode::OK);
    assert_eq!(
        addresses(&dns, "api.prod.muster.").await.unwrap(),
        ["10.0.0.1", "10.0.0.2"]
    );
    let srv = dns
        .lookup("_http._tcp.api.prod.muster.", RecordType::SRV)
        .await
        .unwrap();
    assert_eq!(srv.answers().len(), 2);

    server
        .call(
            Method::POST,
            &format!("{}/drain", instance_path("api", "b")),
            Some(json!({"incarnation": 1, "reason": "deploy"})),
        )
        .await
        .expect(StatusCode::OK);
    assert_eq!(addresses(&dns, "api.prod.muster.").await.unwrap(), ["10.0.0.1"]);

    server.deregister("api", "a").await.expect(StatusCode::OK);
    let nothing = addresses(&dns, "api.prod.muster.").await.unwrap_err();
    assert_eq!(
        response_code(nothing),
        ResponseCode::NoError,
        "a known service with nothing eligible is NODATA"
    );
    let unknown = addresses(&dns, "web.prod.muster.").await.unwrap_err();
    assert_eq!(response_code(unknown), ResponseCode::NXDomain);
    server.stop().await;
}

#[tokio::test]
async fn the_servers_max_answers_bounds_udp_answers_with_tc_clear_and_tcp_has_them_all() {
    let mut server = TestServer::start_with(|config| {
        config.dns_zone.tenant = Label::new("tenant", "acme").unwrap();
        config.dns_zone.max_answers = 3;
    })
    .await;
    for i in 0..10 {
        server
            .register("api", &format!("a{i}"), &format!("10.0.0.{i}"))
            .await
            .expect(StatusCode::OK);
    }
    let udp = resolver::resolver(server.dns_addr(), true);
    let lookup = udp.lookup("api.prod.muster.", RecordType::A).await.unwrap();
    assert_eq!(lookup.answers().len(), 3);
    assert!(!lookup.message().metadata.truncation);
    // Over TCP (a client that must see every address asks that way) all ten.
    let mut stream = tokio::net::TcpStream::connect(server.dns_addr()).await.unwrap();
    let mut query = hickory_resolver::proto::op::Message::query();
    query.add_query(hickory_resolver::proto::op::Query::query(
        hickory_resolver::proto::rr::Name::from_ascii("api.prod.muster.").unwrap(),
        RecordType::A,
    ));
    let packet = query.to_vec().unwrap();
    let mut framed = (packet.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(&packet);
    tokio::io::AsyncWriteExt::write_all(&mut stream, &framed).await.unwrap();
    let len = tokio::io::AsyncReadExt::read_u16(&mut stream).await.unwrap();
    let mut reply = vec![0; usize::from(len)];
    tokio::io::AsyncReadExt::read_exact(&mut stream, &mut reply)
        .await
        .unwrap();
    let reply = hickory_resolver::proto::op::Message::from_vec(&reply).unwrap();
    assert_eq!(reply.answers.len(), 10);
    server.stop().await;
}

#[tokio::test]
async fn the_view_is_rebuilt_from_the_log_after_a_restart() {
    let mut server = acme_server().await;
    server.register("api", "a", "10.0.0.1").await.expect(StatusCode::OK);
    server.restart().await;
    let dns = resolver::resolver(server.dns_addr(), true);
    assert_eq!(addresses(&dns, "api.prod.muster.").await.unwrap(), ["10.0.0.1"]);
    server.stop().await;
}

#[tokio::test]
async fn the_default_tenants_view_does_not_show_another_tenant() {
    let mut server = TestServer::start().await;
    server.register("api", "a", "10.0.0.1").await.expect(StatusCode::OK);
    let dns = resolver::resolver(server.dns_addr(), true);
    let err = addresses(&dns, "api.prod.muster.").await.unwrap_err();
    assert_eq!(response_code(err), ResponseCode::NXDomain);
    server.stop().await;
}

#[tokio::test]
async fn dns_can_be_disabled_and_bad_dns_settings_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = muster_server::start(ServerConfig {
        dns_enabled: false,
        ..test_config(&dir)
    })
    .await
    .unwrap();
    assert_eq!(server.dns_addr(), None);
    server.stop().await.unwrap();

    let mut bad_domain = test_config(&dir);
    bad_domain.dns_zone.domain = "no spaces.".into();
    let Err(ServerError::Config(message)) = muster_server::start(bad_domain).await else {
        panic!("a bad domain must be refused")
    };
    assert!(message.contains("dns domain"), "{message}");
    let mut no_answers = test_config(&dir);
    no_answers.dns_zone.max_answers = 0;
    let Err(ServerError::Config(message)) = muster_server::start(no_answers).await else {
        panic!("max_answers 0 must be refused")
    };
    assert!(message.contains("dns max_answers"), "{message}");
    let public = ServerConfig {
        dns: "0.0.0.0:0".parse().unwrap(),
        ..test_config(&dir)
    };
    let Err(ServerError::Config(message)) = muster_server::start(public).await else {
        panic!("a non-loopback DNS address must be refused")
    };
    assert!(message.contains("loopback"), "{message}");
}

/// SPEC W5 (unknown is not empty) past a release: a service left empty for the history
/// window is released, but while its removals are fenced it is still known, so HTTP answers
/// an empty set and DNS NODATA; a service never held is 404 and NXDOMAIN.
#[tokio::test]
async fn a_released_service_whose_removals_are_fenced_is_known_and_empty() {
    let mut server = TestServer::start_with(|config| {
        config.dns_zone.tenant = Label::new("tenant", "acme").unwrap();
        config.registry.history_revisions = 2;
    })
    .await;
    let dns = resolver::resolver(server.dns_addr(), true);
    server.register("old", "o", "10.0.0.9").await.expect(StatusCode::OK);
    server.deregister("old", "o").await.expect(StatusCode::OK);
    for (n, ip) in ["10.0.0.1", "10.0.0.2", "10.0.0.3"].iter().enumerate() {
        server
            .register("api", &format!("a{n}"), ip)
            .await
            .expect(StatusCode::OK);
    }
    let listing = server.get("/v1/registry/acme/prod").await.expect(StatusCode::OK);
    assert_eq!(listing.body["services"].as_array().unwrap().len(), 1, "old is released");
    let read = server.get("/v1/registry/acme/prod/old").await.expect(StatusCode::OK);
    assert_eq!(
        (read.body["total"].clone(), read.body["endpoints"].clone()),
        (json!(0), json!([]))
    );
    let paged = server
        .get("/v1/registry/acme/prod/old?limit=10")
        .await
        .expect(StatusCode::OK);
    assert_eq!(paged.body["total"], 0);
    server
        .get("/v1/registry/acme/prod/never")
        .await
        .expect(StatusCode::NOT_FOUND);
    let nothing = addresses(&dns, "old.prod.muster.").await.unwrap_err();
    assert_eq!(response_code(nothing), ResponseCode::NoError, "known and empty: NODATA");
    let unknown = addresses(&dns, "never.prod.muster.").await.unwrap_err();
    assert_eq!(response_code(unknown), ResponseCode::NXDomain);
    // A restart rebuilds the zone from the registry: still known by its fences.
    server.restart().await;
    let dns = resolver::resolver(server.dns_addr(), true);
    let nothing = addresses(&dns, "old.prod.muster.").await.unwrap_err();
    assert_eq!(
        response_code(nothing),
        ResponseCode::NoError,
        "known and empty after a restart"
    );
    server.stop().await;
}
