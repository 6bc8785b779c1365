//! A `failover` proxy in a federated region (SPEC G1): while the region's decision spills,
//! requests reach the admitted region's endpoints too; once the local set is back at its
//! minimum, only local ones.
//!
//! Trace: reference/control-plane-state.txt "Multi-Region and Failure Domains" (failover is
//! a policy transition with capacity admission, not "try every region").

use std::collections::BTreeSet;

use muster_client::Protocol;
use muster_core::Label;
use muster_core::federation::FailoverPolicy;
use muster_proxy::config::ListenerProtocol;
use muster_server::{FederationConfig, PeerConfig};

use crate::support::{Backend, Registry, get, http_client, proxy_with, until_eligible};

/// The backends' names answered by `requests` GETs through `proxy`.
async fn answered(proxy: std::net::SocketAddr, requests: usize) -> BTreeSet<String> {
    let client = http_client(false);
    let mut seen = BTreeSet::new();
    for _ in 0..requests {
        let (status, body) = get(&client, proxy, "/").await.expect("answered");
        assert_eq!(status, 200);
        seen.insert(body);
    }
    seen
}

/// Region b, federated with `a` (at `url`) under a policy of at least two eligible
/// endpoints of `prod/api`.
async fn region_b(url: String) -> Registry {
    Registry::start_with(|config| {
        config.federation = FederationConfig {
            region: Some("b".into()),
            heartbeat_ms: 100,
            peer: vec![PeerConfig {
                name: "a".into(),
                url,
                import: vec!["prod/*".into()],
                tenant: "default".into(),
                token: None,
            }],
            policy: vec![FailoverPolicy {
                service: "prod/api".into(),
                failover: vec![Label::new("region", "a").unwrap()],
                min_eligible: 2,
                min_eligible_percent: 0,
                max_spill_percent: 100,
                recover_margin: 0,
            }],
            ..FederationConfig::default()
        };
    })
    .await
}

#[tokio::test]
async fn requests_spill_to_the_admitted_region_while_the_local_set_is_short_and_come_home() {
    let a = Registry::start().await;
    let away = Backend::http("away").await;
    a.register("away", away.addr, Protocol::Http).await;
    let b = region_b(format!("http://{}", a.addr())).await;
    // One local endpoint of the two the policy asks for: half the traffic spills to a.
    let home = Backend::http("home").await;
    b.register("home", home.addr, Protocol::Http).await;
    let proxy = proxy_with(&b, ListenerProtocol::Http, |mut config| {
        config.failover = true;
        config
    })
    .await;
    until_eligible(&proxy, 1).await;
    let addr = proxy.listeners()[0];
    let mut seen = BTreeSet::new();
    for _ in 0..100 {
        seen.extend(answered(addr, 10).await);
        if seen.contains("away") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(seen, BTreeSet::from(["away".to_owned(), "home".to_owned()]));
    // A second local endpoint: the minimum is met and traffic stays home.
    let second = Backend::http("second").await;
    b.register("second", second.addr, Protocol::Http).await;
    until_eligible(&proxy, 2).await;
    let mut settled = false;
    for _ in 0..100 {
        if !answered(addr, 20).await.contains("away") {
            settled = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(settled, "requests stay in the region once the tier is withdrawn");
    let before = away.count();
    assert_eq!(
        answered(addr, 40).await,
        BTreeSet::from(["home".to_owned(), "second".to_owned()])
    );
    assert_eq!(away.count(), before);
}

/// A TCP stream to a tier's endpoint is not "departed": it runs past a drain grace (a local
/// stream cut after its grace proves one ran out) while the tier holds the endpoint, and is
/// cut after the grace once the tier is withdrawn.
#[tokio::test]
async fn a_tcp_stream_to_a_tier_endpoint_lives_while_the_tier_holds_it() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let a = Registry::start().await;
    let away = Backend::echo("away").await;
    a.register("away", away.addr, Protocol::Tcp).await;
    let b = region_b(format!("http://{}", a.addr())).await;
    // Nothing local is eligible: all of the traffic goes to a.
    let home = Backend::echo("home").await;
    b.register("home", home.addr, Protocol::Tcp).await;
    b.drain("home").await;
    let proxy = proxy_with(&b, ListenerProtocol::Tcp, |mut config| {
        config.failover = true;
        config.drain_grace = std::time::Duration::from_millis(200);
        config
    })
    .await;
    let addr = proxy.listeners()[0];
    let mut stream = None;
    for _ in 0..200 {
        if let Ok(mut s) = tokio::net::TcpStream::connect(addr).await {
            let mut greeting = [0u8; 5];
            if s.read_exact(&mut greeting).await.is_ok() && &greeting == b"away\n" {
                stream = Some(s);
                break;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let mut stream = stream.expect("a stream reaches region a's endpoint");
    // Proof by order, not by a wait: a control stream to a local endpoint that is then
    // drained is cut after the grace. By then the local view has changed twice (the change
    // that used to make the proxy take a tier's endpoint for departed) and a whole grace has
    // run out since; the tier's stream still flows after that.
    let control_backend = Backend::echo("ctrl").await;
    b.register("ctrl", control_backend.addr, Protocol::Tcp).await;
    until_eligible(&proxy, 1).await;
    let mut control = None;
    for _ in 0..200 {
        if let Ok(mut s) = tokio::net::TcpStream::connect(addr).await {
            let mut greeting = [0u8; 5];
            if s.read_exact(&mut greeting).await.is_ok() && &greeting == b"ctrl\n" {
                control = Some(s);
                break;
            }
        }
    }
    let mut control = control.expect("a stream reaches the local control endpoint");
    b.drain("ctrl").await;
    let mut rest = Vec::new();
    let cut = tokio::time::timeout(crate::support::STEP, control.read_to_end(&mut rest)).await;
    assert!(cut.is_ok(), "the control stream was cut after the grace");
    stream.write_all(b"ping").await.unwrap();
    let mut pong = [0u8; 4];
    stream.read_exact(&mut pong).await.expect("the stream still flows");
    assert_eq!(&pong, b"ping");
    // Two local endpoints: the tier goes, and the stream is cut after the grace.
    let mut locals = Vec::new();
    for name in ["local-1", "local-2"] {
        let backend = Backend::echo("local").await;
        b.register(name, backend.addr, Protocol::Tcp).await;
        locals.push(backend);
    }
    let mut rest = Vec::new();
    let read = tokio::time::timeout(crate::support::STEP, stream.read_to_end(&mut rest)).await;
    assert!(read.is_ok(), "the stream was cut once the tier was withdrawn");
}
