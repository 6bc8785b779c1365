//! Regions as separate clusters on loopback (SPEC G1, G2): mirrors with provenance and
//! digests intact, local writes to mirrored endpoints refused, failover with capacity
//! admission and hysteresis, and a partition between regions that loses nothing.
//!
//! Traces: reference/control-plane-state.txt "Multi-Region and Failure Domains" (endpoint
//! churn stays regional; clients keep a bounded last-known-good regional view; failover is a
//! policy transition with capacity admission, not "try every region") and its stale-view
//! trace ("region A cannot reach authority -> keeps last-known-good").

use std::time::Duration;

use hyper::{Method, StatusCode};
use muster_server::{FederationConfig, PeerConfig, ServerConfig};
use serde_json::{Value, json};

use crate::cluster::{Cluster, Link};
use crate::support::{TestServer, endpoint, instance_path, poll};

const EVERY: Duration = Duration::from_millis(50);
const READ: &str = "/v1/registry/acme/prod/api?federation=true";

/// A peer importing `prod/*` of tenant `acme` from `url`.
fn peer(name: &str, url: &str) -> PeerConfig {
    PeerConfig {
        name: name.into(),
        url: url.into(),
        import: vec!["prod/*".into()],
        tenant: "acme".into(),
        token: None,
    }
}

fn region(name: &str) -> muster_core::Label {
    muster_core::Label::new("region", name).unwrap()
}

fn federate(config: &mut ServerConfig, region: &str, peers: Vec<PeerConfig>) {
    config.federation = FederationConfig {
        region: Some(region.into()),
        stale_budget_ms: 1_500,
        heartbeat_ms: 100,
        peer: peers,
        ..FederationConfig::default()
    };
}

/// Registers `instance` of acme/prod/api with a capacity hint.
async fn register(server: &TestServer, instance: &str, ip: &str, capacity: u32) {
    let mut spec = endpoint(ip);
    spec["capacity"] = json!(capacity);
    server
        .call(
            Method::PUT,
            &instance_path("api", instance),
            Some(json!({"incarnation": 1, "endpoint": spec})),
        )
        .await
        .expect(StatusCode::OK);
}

async fn set_state(server: &TestServer, instance: &str, state: &str) {
    server
        .call(
            Method::PUT,
            &format!("{}/serving", instance_path("api", instance)),
            Some(json!({"incarnation": 1, "state": state, "reason": "test"})),
        )
        .await
        .expect(StatusCode::OK);
}

/// The mirrored set from `region` in a federated read, once `ready` says it is what the test
/// waits for.
async fn mirror_of(server: &TestServer, region: &str, ready: impl Fn(&Value) -> bool) -> Value {
    let found = poll(EVERY, || async {
        let read = server.get(READ).await;
        read.body["mirrors"]
            .as_array()
            .and_then(|m| m.iter().find(|m| m["source_region"] == region).cloned())
            .filter(|m| ready(m))
    })
    .await;
    match found {
        Some(set) => set,
        None => panic!(
            "the mirror of region {region} did not get there: {}",
            server.get(READ).await.body
        ),
    }
}

fn instances(set: &Value) -> Vec<String> {
    let mut names: Vec<String> = set["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["instance"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_mirrored_set_keeps_its_records_revision_and_digest_and_follows_a_drain() {
    let a = TestServer::start().await;
    register(&a, "a-1", "10.0.0.1", 1).await;
    register(&a, "a-2", "10.0.0.2", 1).await;
    let a_url = format!("http://{}", a.addr());
    let b = TestServer::start_with(|c| federate(c, "b", vec![peer("a", &a_url)])).await;
    let source = a.get("/v1/registry/acme/prod/api").await.expect(StatusCode::OK).body;
    let mirrored = mirror_of(&b, "a", |m| m["total"] == 2).await;
    // Provenance: the records exactly as region a committed them, its revision and digest.
    assert_eq!(mirrored["endpoints"], source["endpoints"]);
    assert_eq!(mirrored["digest"], source["digest"]);
    assert_eq!(mirrored["source_revision"], source["service_revision"]);
    assert_eq!(mirrored["state"], "available");
    // Not mixed into b's own set: b has none of its own.
    let read = b.get(READ).await.expect(StatusCode::OK).body;
    assert_eq!(read["total"], 0);
    // A drain in region a is visible in region b.
    a.call(
        Method::POST,
        &format!("{}/drain", instance_path("api", "a-1")),
        Some(json!({"incarnation": 1, "reason": "zone maintenance"})),
    )
    .await
    .expect(StatusCode::OK);
    let drained = mirror_of(&b, "a", |m| {
        m["endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["serving"] == "draining")
    })
    .await;
    let source = a.get("/v1/registry/acme/prod/api").await.body;
    assert_eq!(drained["digest"], source["digest"]);
    assert_eq!(drained["endpoints"], source["endpoints"]);
    // Region b cannot change region a's endpoints.
    let refused = b.deregister("api", "a-2").await.expect(StatusCode::CONFLICT);
    assert_eq!(refused.code(), "mirrored_read_only");
    let refused = b
        .call(
            Method::PUT,
            &format!("{}/serving", instance_path("api", "a-2")),
            Some(json!({"incarnation": 1, "state": "not_serving", "reason": "from b"})),
        )
        .await
        .expect(StatusCode::CONFLICT);
    assert_eq!(refused.code(), "mirrored_read_only");
    let untouched = mirror_of(&b, "a", |_| true).await;
    assert_eq!(instances(&untouched), ["a-1", "a-2"]);
    assert_eq!(untouched["digest"], source["digest"]);
    // A local instance of its own beside the mirror is b's to write.
    register(&b, "b-1", "10.1.0.1", 1).await;
    let read = b.get(READ).await.expect(StatusCode::OK).body;
    assert_eq!(
        (read["total"].as_u64(), read["mirrors"][0]["total"].as_u64()),
        (Some(1), Some(2))
    );
}

#[tokio::test]
async fn three_regions_each_see_the_others_under_their_own_names() {
    let a = TestServer::start().await;
    let b = TestServer::start().await;
    register(&a, "a-1", "10.0.0.1", 1).await;
    register(&b, "b-1", "10.1.0.1", 1).await;
    register(&b, "b-2", "10.1.0.2", 1).await;
    let (a_url, b_url) = (format!("http://{}", a.addr()), format!("http://{}", b.addr()));
    let c = TestServer::start_with(|cfg| federate(cfg, "c", vec![peer("a", &a_url), peer("b", &b_url)])).await;
    assert_eq!(instances(&mirror_of(&c, "a", |m| m["total"] == 1).await), ["a-1"]);
    assert_eq!(
        instances(&mirror_of(&c, "b", |m| m["total"] == 2).await),
        ["b-1", "b-2"]
    );
    // Churn in one region reaches the third without touching the other's mirror.
    b.deregister("api", "b-1").await.expect(StatusCode::OK);
    assert_eq!(instances(&mirror_of(&c, "b", |m| m["total"] == 1).await), ["b-2"]);
    assert_eq!(instances(&mirror_of(&c, "a", |_| true).await), ["a-1"]);
    let status = c.get("/v1/federation/status").await.expect(StatusCode::OK).body;
    assert_eq!(status["region"], "c");
    assert_eq!(status["peers"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn failover_spills_to_the_first_region_with_capacity_and_comes_back_with_hysteresis() {
    // Region a can take little (one endpoint of capacity 1), region c a lot.
    let a = TestServer::start().await;
    let c = TestServer::start().await;
    register(&a, "a-1", "10.0.0.1", 1).await;
    for i in 0..4 {
        register(&c, &format!("c-{i}"), &format!("10.2.0.{i}"), 100).await;
    }
    let (a_url, c_url) = (format!("http://{}", a.addr()), format!("http://{}", c.addr()));
    let b = TestServer::start_with(|cfg| {
        federate(cfg, "b", vec![peer("a", &a_url), peer("c", &c_url)]);
        cfg.federation.policy = vec![muster_core::federation::FailoverPolicy {
            service: "prod/api".into(),
            failover: vec![region("a"), region("c")],
            min_eligible: 2,
            min_eligible_percent: 0,
            max_spill_percent: 100,
            recover_margin: 1,
        }];
    })
    .await;
    for i in 0..3 {
        register(&b, &format!("b-{i}"), &format!("10.1.0.{i}"), 100).await;
    }
    mirror_of(&b, "a", |m| m["total"] == 1).await;
    mirror_of(&b, "c", |m| m["total"] == 4).await;
    let decision = |body: &Value| body["failover"].clone();
    let home = decision(&b.get(READ).await.body);
    assert_eq!(
        (home["spill"].as_bool(), home["reason"].as_str()),
        (Some(false), Some("local_sufficient"))
    );
    // Two of three local endpoints stop serving: below the minimum of 2.
    set_state(&b, "b-0", "not_serving").await;
    set_state(&b, "b-1", "not_serving").await;
    let spilled = decision(&b.get(READ).await.body);
    assert_eq!(spilled["spill"], true, "{spilled}");
    assert_eq!(spilled["region"], "c", "a cannot take the spill: {spilled}");
    assert_eq!(spilled["reason"], "local_below_minimum");
    assert_eq!(spilled["candidates"][0]["verdict"], "insufficient_capacity");
    assert_eq!(spilled["candidates"][1]["verdict"], "admitted");
    // Back at the minimum: the spill holds (no flapping at the edge).
    set_state(&b, "b-0", "ready").await;
    let held = decision(&b.get(READ).await.body);
    assert_eq!(
        (held["spill"].as_bool(), held["reason"].as_str()),
        (Some(true), Some("recovering"))
    );
    assert_eq!(held["region"], "c");
    // Above it by the margin: traffic comes home.
    set_state(&b, "b-1", "ready").await;
    let back = decision(&b.get(READ).await.body);
    assert_eq!(
        (back["spill"].as_bool(), back["reason"].as_str()),
        (Some(false), Some("local_sufficient"))
    );
    // The decisions are in the status too.
    let status = b.get("/v1/federation/status").await.expect(StatusCode::OK).body;
    assert_eq!(status["decisions"][0]["service"]["service"], "api");
}

#[tokio::test]
async fn a_partition_between_regions_loses_nothing_and_the_mirror_resumes_by_revision() {
    let a = TestServer::start().await;
    register(&a, "a-1", "10.0.0.1", 1).await;
    register(&a, "a-2", "10.0.0.2", 1).await;
    let link = Link::start(a.addr().to_string()).await;
    let b = TestServer::start_with(|c| federate(c, "b", vec![peer("a", &format!("http://{}", link.addr))])).await;
    mirror_of(&b, "a", |m| m["total"] == 2).await;
    link.set_cut(true);
    // Both regions keep taking their own writes.
    register(&a, "a-3", "10.0.0.3", 1).await;
    a.deregister("api", "a-1").await.expect(StatusCode::OK);
    register(&b, "b-1", "10.1.0.1", 1).await;
    // Region b keeps the last known good set, reports its age, and past the budget marks it
    // unavailable: kept, not emptied.
    let unavailable = mirror_of(&b, "a", |m| m["state"] == "unavailable").await;
    assert_eq!(instances(&unavailable), ["a-1", "a-2"]);
    assert!(unavailable["age_ms"].as_u64().unwrap() > 1_500, "{unavailable}");
    let status = b.get("/v1/federation/status").await.body;
    assert_eq!(status["peers"][0]["imports"][0]["state"], "unavailable");
    assert_eq!(status["peers"][0]["imports"][0]["connected"], false);
    // Healed: the mirror resumes from its cursor, with nothing lost and nothing resurrected.
    link.set_cut(false);
    let healed = mirror_of(&b, "a", |m| m["state"] == "available" && m["total"] == 2).await;
    let source = a.get("/v1/registry/acme/prod/api").await.body;
    assert_eq!(instances(&healed), ["a-2", "a-3"]);
    assert_eq!(healed["digest"], source["digest"]);
    let status = b.get("/v1/federation/status").await.body;
    let import = &status["peers"][0]["imports"][0];
    assert_eq!(import["resnapshots"], 0, "resumed by revision, no re-list: {import}");
    assert_eq!(b.get(READ).await.body["total"], 1, "b's own write survived");
}

/// A peer taken out of the configuration is forgotten by the region's next leader (its
/// mirrored sets go, by a committed command); nothing else ever drops a mirrored set.
#[tokio::test]
async fn a_peer_removed_from_the_configuration_is_forgotten() {
    let a = TestServer::start().await;
    register(&a, "a-1", "10.0.0.1", 1).await;
    let url = format!("http://{}", a.addr());
    let mut b = TestServer::start_with(|c| federate(c, "b", vec![peer("a", &url)])).await;
    register(&b, "b-1", "10.1.0.1", 1).await;
    mirror_of(&b, "a", |m| m["total"] == 1).await;
    b.restart_with(|c| c.federation.peer.clear()).await;
    let gone = poll(EVERY, || async {
        let read = b.get(READ).await.body;
        read["mirrors"].as_array().is_none_or(Vec::is_empty).then_some(read)
    })
    .await
    .expect("the mirror is forgotten");
    assert_eq!(gone["total"], 1, "the region's own endpoint stays");
    let status = b.get("/v1/federation/status").await.expect(StatusCode::OK).body;
    assert_eq!(status["peers"], json!([]));
}

/// A region of three nodes (SPEC G2): every node serves the mirror its leader commits; when
/// the leader stops, the new one resumes the mirror from the replicated cursor (no re-list)
/// and a change in the source region reaches the surviving nodes with its digest intact.
#[tokio::test]
async fn a_three_node_region_mirrors_on_every_node_and_a_new_leader_resumes_by_revision() {
    let a = TestServer::start().await;
    register(&a, "a-1", "10.0.0.1", 1).await;
    register(&a, "a-2", "10.0.0.2", 1).await;
    let url = format!("http://{}", a.addr());
    let mut b = Cluster::start_with(move |c| federate(c, "b", vec![peer("a", &url)])).await;
    for i in 0..3 {
        mirror_of(b.node(i), "a", |m| m["total"] == 2).await;
    }
    let resumes_before = resumes(&a).await;
    let leader = b.leader().await;
    b.stop(leader).await;
    register(&a, "a-3", "10.0.0.3", 1).await;
    let source = a.get("/v1/registry/acme/prod/api").await.body;
    let survivors: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    for i in &survivors {
        let mirrored = mirror_of(b.node(*i), "a", |m| m["total"] == 3).await;
        assert_eq!(mirrored["digest"], source["digest"], "node {i}");
        assert_eq!(instances(&mirrored), ["a-1", "a-2", "a-3"]);
    }
    let new_leader = b.leader().await;
    let status = b.node(new_leader).get("/v1/federation/status").await.body;
    let import = &status["peers"][0]["imports"][0];
    assert_eq!(status["leader"], true, "{status}");
    assert_eq!(import["resnapshots"], 0, "resumed from the replicated cursor: {import}");
    // Region a saw the new leader's watch resume from a revision, not start from a list.
    assert!(resumes(&a).await > resumes_before, "the new leader's watch is a resume");
}

/// The watch streams `server` has seen resume from a revision.
async fn resumes(server: &TestServer) -> u64 {
    let (_, metrics) = server.get_text("/v1/metrics").await;
    metrics
        .lines()
        .find(|line| !line.starts_with('#') && line.contains("watch_resumes"))
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no watch_resumes row:\n{metrics}"))
}

/// Region b's `prod/api` with a failover policy to `a`: two local endpoints, a minimum of
/// two, DNS and xDS on; region a with two endpoints.
async fn spilling_regions() -> (TestServer, TestServer, Link) {
    let a = TestServer::start().await;
    register(&a, "a-1", "10.0.0.1", 100).await;
    register(&a, "a-2", "10.0.0.2", 100).await;
    let link = Link::start(a.addr().to_string()).await;
    let a_url = format!("http://{}", link.addr);
    let b = TestServer::start_with(|cfg| {
        federate(cfg, "b", vec![peer("a", &a_url)]);
        cfg.federation.policy = vec![muster_core::federation::FailoverPolicy {
            service: "prod/api".into(),
            failover: vec![region("a")],
            min_eligible: 2,
            min_eligible_percent: 0,
            max_spill_percent: 100,
            recover_margin: 1,
        }];
        cfg.dns_zone.tenant = muster_core::Label::new("tenant", "acme").unwrap();
        cfg.xds.tenant = muster_core::Label::new("tenant", "acme").unwrap();
        if cfg!(feature = "xds") {
            cfg.xds.addr = Some("127.0.0.1:0".parse().unwrap());
        }
    })
    .await;
    register(&b, "b-0", "10.1.0.0", 100).await;
    register(&b, "b-1", "10.1.0.1", 100).await;
    mirror_of(&b, "a", |m| m["total"] == 2).await;
    (a, b, link)
}

/// The addresses DNS answers for `api.prod.muster.`, sorted (none for a negative answer).
/// A query that got no answer at all (a datagram lost or late on a loaded machine) is asked
/// again: it says nothing about what the zone holds.
async fn dns_addresses(dns: &hickory_resolver::TokioResolver) -> Vec<String> {
    use hickory_resolver::net::NetError;
    for _ in 0..3 {
        match crate::dns::addresses(dns, "api.prod.muster.").await {
            Ok(found) => return found,
            Err(NetError::Timeout | NetError::Io(_) | NetError::Busy | NetError::NoConnections) => continue,
            Err(_) => return Vec::new(),
        }
    }
    panic!("DNS never answered api.prod.muster.")
}

use crate::dns::resolver;

/// SPEC G1 through DNS: while the local set is below its minimum, `api.prod` answers the
/// admitted region's endpoints beside the local eligible one; once it recovers, only its own.
#[tokio::test]
async fn dns_answers_the_failover_tier_while_the_decision_spills_and_only_local_after() {
    let (_a, b, _link) = spilling_regions().await;
    let dns = resolver::resolver(b.dns_addr(), true);
    assert_eq!(dns_addresses(&dns).await, ["10.1.0.0", "10.1.0.1"]);
    set_state(&b, "b-0", "not_serving").await;
    let spilled = poll(EVERY, || async {
        let found = dns_addresses(&dns).await;
        (found.len() == 3).then_some(found)
    })
    .await
    .expect("DNS answers the failover tier");
    assert_eq!(spilled, ["10.0.0.1", "10.0.0.2", "10.1.0.1"]);
    set_state(&b, "b-0", "ready").await;
    assert_eq!(
        dns_addresses(&dns).await,
        ["10.1.0.0", "10.1.0.1"],
        "home again at the next query"
    );
}

/// SPEC G1, trace "region A cannot reach authority": a partition takes the failover tier
/// away once its mirror passes the stale budget, with no command committed anywhere (the
/// tier ticker); the local endpoint left is served alone.
#[tokio::test]
async fn a_failover_tier_past_its_stale_budget_leaves_dns_without_a_command() {
    let (_a, b, link) = spilling_regions().await;
    let dns = resolver::resolver(b.dns_addr(), true);
    set_state(&b, "b-0", "not_serving").await;
    let spilled = poll(EVERY, || async { (dns_addresses(&dns).await.len() == 3).then_some(()) }).await;
    assert!(spilled.is_some(), "DNS answers the failover tier");
    link.set_cut(true);
    mirror_of(&b, "a", |m| m["state"] == "unavailable").await;
    let alone = poll(EVERY, || async {
        let found = dns_addresses(&dns).await;
        (found.len() == 1).then_some(found)
    })
    .await;
    assert_eq!(alone.expect("the tier is withdrawn"), ["10.1.0.1"]);
    let decision = b.get(READ).await.body["failover"].clone();
    assert_eq!(decision["reason"], "no_region_admitted", "{decision}");
}

/// SPEC G1 through xDS: the spilled endpoints come in their own region's locality, weighted
/// to the spilled share (here half: as much weight as the one local eligible endpoint), at a
/// new version; recovery pushes the local set alone, at a version of its own.
#[cfg(feature = "xds")]
#[tokio::test]
async fn xds_pushes_the_failover_tier_weighted_to_its_share_and_takes_it_back() {
    use muster_xds::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;

    use crate::xds::{API, ENDPOINT, Sotw, assignment, node};

    fn by_region(cla: &ClusterLoadAssignment) -> Vec<(String, u32, usize)> {
        cla.endpoints
            .iter()
            .map(|l| {
                let region = l.locality.as_ref().map(|l| l.region.clone()).unwrap_or_default();
                let weight: u32 = l
                    .lb_endpoints
                    .iter()
                    .filter(|e| {
                        e.health_status == muster_xds::pb::envoy::config::core::v3::HealthStatus::Healthy as i32
                    })
                    .filter_map(|e| e.load_balancing_weight.as_ref().map(|w| w.value))
                    .sum();
                (region, weight, l.lb_endpoints.len())
            })
            .collect()
    }

    let (_a, b, _link) = spilling_regions().await;
    let mut ads = Sotw::connect(b.xds_addr(), node("caller", None, None)).await;
    let home = ads.fetch(ENDPOINT, &[API]).await;
    assert_eq!(by_region(&assignment(&home)), [(String::new(), 200, 2)]);
    set_state(&b, "b-0", "not_serving").await;
    let spilled = loop {
        let pushed = ads.next().await;
        ads.ack(&pushed, &[API]);
        if assignment(&pushed).endpoints.len() == 2 {
            break pushed;
        }
    };
    let mut regions = by_region(&assignment(&spilled));
    regions.sort();
    assert_eq!(
        regions,
        [(String::new(), 100, 2), ("a".into(), 100, 2)],
        "half the weight spills"
    );
    set_state(&b, "b-0", "ready").await;
    let back = ads.next().await;
    assert_eq!(by_region(&assignment(&back)), [(String::new(), 200, 2)]);
    assert_ne!(back.version_info, spilled.version_info);
    assert_ne!(back.version_info, home.version_info);
}
