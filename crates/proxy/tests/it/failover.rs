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

#[tokio::test]
async fn requests_spill_to_the_admitted_region_while_the_local_set_is_short_and_come_home() {
    let a = Registry::start().await;
    let away = Backend::http("away").await;
    a.register("away", away.addr, Protocol::Http).await;
    let url = format!("http://{}", a.addr());
    let b = Registry::start_with(|config| {
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
    .await;
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
