//! A caller's failover tier against two federated regions in process (SPEC G1): the
//! picker balances over the admitted region's endpoints beside its own while the region's
//! decision spills, in the spilled share, and only over its own once the local set recovers.
//!
//! Trace: reference/control-plane-state.txt "Multi-Region and Failure Domains" (failover is
//! a policy transition with capacity admission, not "try every region").

use std::collections::BTreeMap;
use std::time::Duration;

use muster_client::{EligibilityConfig, FailoverTier, OutlierDetector, Picker, Risk, Strategy};
use muster_core::Label;
use muster_core::federation::FailoverPolicy;
use muster_server::{FederationConfig, PeerConfig};

use crate::inproc::{Registry, key, until};

/// Region a with `a-1` and `a-2`; region b, federated with it under a policy of at least two
/// eligible endpoints, with `b-0` and `b-1`.
async fn regions() -> (Registry, Registry) {
    let a = Registry::start().await;
    a.register("api", "a-1", 1001).await;
    a.register("api", "a-2", 1002).await;
    let url = format!("http://{}", a.addr());
    let b = Registry::start_with(|config| {
        config.federation = FederationConfig {
            region: Some("b".into()),
            heartbeat_ms: 100,
            peer: vec![PeerConfig {
                name: "a".into(),
                url,
                import: vec!["prod/*".into()],
                tenant: "acme".into(),
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
    b.register("api", "b-0", 2000).await;
    b.register("api", "b-1", 2001).await;
    (a, b)
}

/// How many of `picks` picks went to each instance.
fn spread(picker: &Picker, picks: usize) -> BTreeMap<String, usize> {
    let mut seen = BTreeMap::new();
    for _ in 0..picks {
        let pick = picker.pick(Risk::ReadOnly, 0).expect("an endpoint");
        *seen.entry(pick.endpoint.instance.to_string()).or_default() += 1;
    }
    seen
}

#[tokio::test]
async fn the_picker_spills_the_decided_share_to_the_admitted_region_and_comes_home() {
    let (_a, b) = regions().await;
    let tier = FailoverTier::start(b.client(), key("api"), Duration::from_millis(50));
    let picker = Picker::new(
        b.resolver("api").await,
        EligibilityConfig::default(),
        Strategy::Weighted,
        OutlierDetector::default(),
    )
    .unwrap()
    .with_failover(tier.clone());
    until("the view holds both local endpoints", || {
        spread(&picker, 10).len() == 2 && tier.members().is_empty()
    })
    .await;
    // One of two local endpoints drains: below the minimum, half the traffic leaves.
    b.drain("api", "b-0").await;
    until("the tier holds region a's endpoints", || tier.members().len() == 2).await;
    until("the view no longer offers b-0", || {
        !spread(&picker, 10).contains_key("b-0")
    })
    .await;
    let seen = spread(&picker, 400);
    let local = seen.get("b-1").copied().unwrap_or_default();
    let spilled: usize = seen
        .iter()
        .filter(|(name, _)| name.starts_with("a-a-"))
        .map(|(_, n)| n)
        .sum();
    assert_eq!((local, spilled), (200, 200), "half of the weight spills: {seen:?}");
    // A second local endpoint: the minimum is met again and the tier goes.
    b.register("api", "b-2", 2002).await;
    until("the tier is withdrawn", || tier.members().is_empty()).await;
    until("only local endpoints are picked", || {
        spread(&picker, 50).keys().all(|name| name.starts_with("b-"))
    })
    .await;
}
