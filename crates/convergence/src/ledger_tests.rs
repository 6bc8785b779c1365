use std::collections::BTreeMap;

use muster_core::convergence::{AppliedRevision, ClientId, Cohort, ConvergenceReport, DeliveryPath};
use muster_core::{Revision, ServiceKey};

use super::*;
use crate::BUCKET_BOUNDS_MS;

fn api() -> ServiceKey {
    ServiceKey::new("prod", "default", "api").unwrap()
}

fn report(id: &str, cohort: Option<&str>, revision: u64, received: u64) -> ConvergenceReport {
    ConvergenceReport {
        client_id: ClientId::new(id).unwrap(),
        cohort: cohort.map(|c| Cohort::new(c).unwrap()),
        applied: vec![AppliedRevision {
            service: api(),
            revision: Revision(revision),
            received_unix_ms: received,
        }],
    }
}

fn config() -> LedgerConfig {
    LedgerConfig {
        silent_after_ms: 3_000,
        forget_after_ms: 60_000,
        ..LedgerConfig::default()
    }
}

/// Ten subscribers at revision 5; the service changes at 6 (t = 1,000); nine report it.
fn fleet() -> Ledger {
    let mut ledger = Ledger::new(config());
    for i in 0..10 {
        let cohort = if i < 5 { "zone=a" } else { "zone=b" };
        ledger
            .report(
                DeliveryPath::Watch,
                &report(&format!("c{i}"), Some(cohort), 5, 900),
                900,
            )
            .unwrap();
    }
    ledger.changed(&api(), Revision(6), 1_000);
    for i in 0..9 {
        let outcome = ledger
            .report(
                DeliveryPath::Watch,
                &report(
                    &format!("c{i}"),
                    Some(if i < 5 { "zone=a" } else { "zone=b" }),
                    6,
                    1_000 + 10 * (i + 1),
                ),
                1_200,
            )
            .unwrap();
        assert_eq!(outcome.latencies_ms, vec![10 * (i + 1)]);
    }
    ledger
}

#[test]
fn a_frozen_subscriber_is_a_straggler_and_the_gate_passes_below_its_share() {
    let ledger = fleet();
    let all = ledger.summary(&api(), Revision(6), &Query::default(), 1_500);
    assert_eq!((all.live, all.applied, all.converged), (10, 9, false));
    assert_eq!(all.stragglers_total, 1);
    assert_eq!(all.stragglers[0].client_id, "c9");
    assert_eq!(all.stragglers[0].revision, Revision(5));
    assert_eq!(all.stragglers[0].behind_ms, 500);
    let most = ledger.summary(
        &api(),
        Revision(6),
        &Query {
            fraction: Some(0.9),
            ..Query::default()
        },
        1_500,
    );
    assert!(most.converged);
    let too_many = ledger.summary(
        &api(),
        Revision(6),
        &Query {
            fraction: Some(0.95),
            ..Query::default()
        },
        1_500,
    );
    assert!(!too_many.converged, "ceil(0.95 × 10) = 10 are needed");
}

#[test]
fn a_copy_summarises_as_the_ledger_did_when_it_was_taken() {
    let mut ledger = fleet();
    let copy = ledger.copy(&api());
    let at_copy = ledger.summary(&api(), Revision(6), &Query::default(), 1_500);
    ledger
        .report(DeliveryPath::Watch, &report("c9", Some("zone=b"), 6, 1_400), 1_400)
        .unwrap();
    assert_eq!(copy.summary(Revision(6), &Query::default(), 1_500), at_copy);
    assert_eq!(
        ledger.summary(&api(), Revision(6), &Query::default(), 1_500).applied,
        10
    );
}

#[test]
fn cohorts_are_counted_apart_and_a_cohort_query_sees_only_its_own() {
    let ledger = fleet();
    let all = ledger.summary(&api(), Revision(6), &Query::default(), 1_500);
    let counts: Vec<_> = all
        .cohorts
        .iter()
        .map(|c| (c.cohort.as_deref(), c.live, c.applied))
        .collect();
    assert_eq!(counts, [(Some("zone=a"), 5, 5), (Some("zone=b"), 5, 4)]);
    let a = Query {
        cohort: Some(Cohort::new("zone=a").unwrap()),
        ..Query::default()
    };
    let zone_a = ledger.summary(&api(), Revision(6), &a, 1_500);
    assert_eq!((zone_a.live, zone_a.applied, zone_a.converged), (5, 5, true));
    assert_eq!(zone_a.cohort.as_deref(), Some("zone=a"));
}

#[test]
fn latency_is_measured_once_per_change_from_commit_to_receipt() {
    let mut ledger = fleet();
    // A keep-alive of the same revision adds no sample.
    let again = ledger
        .report(DeliveryPath::Watch, &report("c0", Some("zone=a"), 6, 1_900), 2_000)
        .unwrap();
    assert!(again.latencies_ms.is_empty());
    let reply = ledger.summary(&api(), Revision(6), &Query::default(), 2_000);
    assert_eq!(reply.latency.samples, 9);
    assert_eq!((reply.latency.p50_ms, reply.latency.max_ms), (50, 90));
    assert_eq!(reply.latency.p99_ms, 90);
    assert_eq!(reply.changes.len(), 1);
    assert_eq!((reply.changes[0].revision, reply.changes[0].applied), (Revision(6), 9));
    assert_eq!(reply.latency.buckets.len(), BUCKET_BOUNDS_MS.len() + 1);
    let counted: usize = reply.latency.buckets.iter().map(|b| b.count).sum();
    assert_eq!(counted, 9);
    // 10 ms lands at or under 10, 20 at or under 20, 30..50 at or under 50, 60..90 under 100.
    let at = |le: u64| {
        reply
            .latency
            .buckets
            .iter()
            .find(|b| b.le_ms == Some(le))
            .unwrap()
            .count
    };
    assert_eq!((at(10), at(20), at(50), at(100)), (1, 1, 3, 4));
}

#[test]
fn a_first_report_measures_nothing_and_a_skewed_clock_counts_zero() {
    let mut ledger = Ledger::new(config());
    ledger.changed(&api(), Revision(3), 100);
    let first = ledger
        .report(DeliveryPath::Watch, &report("late", None, 3, 5_000), 5_000)
        .unwrap();
    assert!(
        first.latencies_ms.is_empty(),
        "it read the state; it was not sent the change"
    );
    ledger.changed(&api(), Revision(4), 6_000);
    let skewed = ledger
        .report(DeliveryPath::Watch, &report("late", None, 4, 5_990), 6_010)
        .unwrap();
    assert_eq!(skewed.latencies_ms, vec![0]);
}

#[test]
fn a_silent_subscriber_stops_counting_then_is_forgotten() {
    let mut ledger = fleet();
    // Everyone but c0 keeps reporting; c0 falls silent after its report at 1,200.
    for i in 1..10 {
        ledger
            .report(DeliveryPath::Watch, &report(&format!("c{i}"), None, 6, 3_900), 4_000)
            .unwrap();
    }
    let reply = ledger.summary(&api(), Revision(6), &Query::default(), 4_300);
    assert_eq!((reply.live, reply.silent_total), (9, 1));
    assert_eq!(reply.silent[0].client_id, "c0");
    assert_eq!(reply.silent[0].silent_ms, 3_100);
    assert_eq!(ledger.totals(4_300, |_| Some(Revision(6))).silent, 1);
    ledger.sweep(61_300);
    let reply = ledger.summary(&api(), Revision(6), &Query::default(), 61_300);
    assert_eq!(
        (reply.live, reply.silent_total),
        (0, 9),
        "c0 is forgotten, the rest silent"
    );
    ledger.sweep(70_000);
    assert_eq!(ledger.totals(70_000, |_| None), Totals::default());
}

#[test]
fn reports_past_the_bounds_are_refused_whole() {
    let mut ledger = Ledger::new(LedgerConfig {
        max_subscribers: 2,
        max_cohorts: 1,
        ..config()
    });
    ledger
        .report(DeliveryPath::Watch, &report("a", Some("zone=a"), 1, 0), 0)
        .unwrap();
    let cohort = ledger.report(DeliveryPath::Watch, &report("b", Some("zone=b"), 1, 0), 0);
    assert!(matches!(cohort, Err(ReportError::TooManyCohorts { max: 1, .. })));
    ledger.report(DeliveryPath::Xds, &report("b", None, 1, 0), 0).unwrap();
    // The DNS listener (one per server) is not counted against the bound.
    ledger.report(DeliveryPath::Dns, &report("dns", None, 1, 0), 0).unwrap();
    let full = ledger.report(DeliveryPath::Watch, &report("c", None, 1, 0), 0);
    assert_eq!(full, Err(ReportError::TooManySubscribers { max: 2 }));
    let reply = ledger.summary(&api(), Revision(1), &Query::default(), 0);
    assert_eq!(reply.live, 2, "the refused reports changed nothing");
    let paths: Vec<_> = reply.paths.iter().map(|p| (p.path, p.live)).collect();
    assert_eq!(
        paths,
        [(DeliveryPath::Watch, 1), (DeliveryPath::Xds, 1), (DeliveryPath::Dns, 1)]
    );
}

/// A report naming `service` of `tenant` as applied at revision 1.
fn report_in(id: &str, tenant: &str, service: &str) -> ConvergenceReport {
    ConvergenceReport {
        client_id: ClientId::new(id).unwrap(),
        cohort: None,
        applied: vec![AppliedRevision {
            service: ServiceKey::new(tenant, "prod", service).unwrap(),
            revision: Revision(1),
            received_unix_ms: 0,
        }],
    }
}

#[test]
fn made_up_clients_of_one_tenant_fill_its_own_bound_and_never_another_tenants_room() {
    let mut ledger = Ledger::new(LedgerConfig {
        max_subscribers: 10,
        max_subscribers_per_tenant: 3,
        ..config()
    });
    // Tenant b's real subscriber, before and after the flood.
    ledger
        .report(DeliveryPath::Xds, &report_in("xds:b-0", "b", "db"), 0)
        .unwrap();
    for i in 0..3 {
        ledger
            .report(DeliveryPath::Watch, &report_in(&format!("fake-{i}"), "a", "api"), 0)
            .unwrap();
    }
    for i in 3..20 {
        let refused = ledger.report(DeliveryPath::Watch, &report_in(&format!("fake-{i}"), "a", "api"), 0);
        assert_eq!(
            refused,
            Err(ReportError::TooManySubscribersInTenant {
                tenant: "a".to_owned(),
                max: 3
            })
        );
    }
    // A report naming both tenants is refused whole: b's entry is not recorded either.
    let mixed = ConvergenceReport {
        applied: [report_in("mixed", "a", "api"), report_in("mixed", "b", "db")]
            .into_iter()
            .flat_map(|r| r.applied)
            .collect(),
        ..report_in("mixed", "a", "api")
    };
    assert!(matches!(
        ledger.report(DeliveryPath::Watch, &mixed, 0),
        Err(ReportError::TooManySubscribersInTenant { .. })
    ));
    // Tenant a's known subscribers still report; b's new ones are accepted.
    ledger
        .report(DeliveryPath::Watch, &report_in("fake-0", "a", "api"), 10)
        .unwrap();
    ledger
        .report(DeliveryPath::Xds, &report_in("xds:b-1", "b", "db"), 0)
        .unwrap();
    let b = ServiceKey::new("b", "prod", "db").unwrap();
    assert_eq!(ledger.summary(&b, Revision(1), &Query::default(), 0).live, 2);
    let a = ServiceKey::new("a", "prod", "api").unwrap();
    assert_eq!(ledger.summary(&a, Revision(1), &Query::default(), 0).live, 3);
    // Forgotten subscribers give their tenant its room back.
    ledger.sweep(60_000);
    ledger
        .report(DeliveryPath::Watch, &report_in("fresh", "a", "api"), 60_000)
        .unwrap();
}

#[test]
fn the_server_wide_bound_still_holds_across_tenants() {
    let mut ledger = Ledger::new(LedgerConfig {
        max_subscribers: 2,
        max_subscribers_per_tenant: 2,
        ..config()
    });
    ledger
        .report(DeliveryPath::Watch, &report_in("a-0", "a", "api"), 0)
        .unwrap();
    ledger
        .report(DeliveryPath::Watch, &report_in("b-0", "b", "api"), 0)
        .unwrap();
    assert_eq!(
        ledger.report(DeliveryPath::Watch, &report_in("c-0", "c", "api"), 0),
        Err(ReportError::TooManySubscribers { max: 2 })
    );
    // The DNS listener is counted against neither bound.
    ledger
        .report(DeliveryPath::Dns, &report_in("dns", "a", "api"), 0)
        .unwrap();
}

#[test]
fn only_the_last_changes_are_kept() {
    let mut ledger = Ledger::new(LedgerConfig {
        changes_kept: 2,
        ..config()
    });
    ledger.report(DeliveryPath::Watch, &report("a", None, 1, 0), 0).unwrap();
    for revision in 2..=5 {
        ledger.changed(&api(), Revision(revision), revision * 100);
    }
    // An older or repeated revision (a replay of the apply path) is not a new change.
    ledger.changed(&api(), Revision(4), 900);
    let reply = ledger.summary(&api(), Revision(5), &Query::default(), 1_000);
    let kept: Vec<_> = reply.changes.iter().map(|c| c.revision).collect();
    assert_eq!(kept, [Revision(5), Revision(4)]);
    assert_eq!(
        reply.stragglers[0].behind_ms, 600,
        "behind since the oldest change it lacks that is kept"
    );
}

#[test]
fn the_dns_listener_is_shown_by_its_path_but_never_makes_a_service_look_followed() {
    let mut ledger = Ledger::new(config());
    ledger
        .report(DeliveryPath::Dns, &report("dns:127.0.0.1:53", None, 1, 0), 0)
        .unwrap();
    ledger.changed(&api(), Revision(2), 100);
    let outcome = ledger
        .report(DeliveryPath::Dns, &report("dns:127.0.0.1:53", None, 2, 100), 100)
        .unwrap();
    assert!(
        outcome.latencies_ms.is_empty(),
        "it applies at commit: no latency to measure"
    );
    let reply = ledger.summary(&api(), Revision(2), &Query::default(), 200);
    assert_eq!((reply.live, reply.applied, reply.latency.samples), (0, 0, 0));
    assert_eq!(reply.paths.len(), 1);
    assert_eq!(
        (reply.paths[0].path, reply.paths[0].live, reply.paths[0].applied),
        (DeliveryPath::Dns, 1, 1)
    );
    assert_eq!(ledger.totals(200, |_| Some(Revision(2))).live, 0);
    // In the server itself, it never goes silent; it goes when the service is released.
    ledger.sweep(10_000_000);
    assert!(ledger.tracks(&api()));
    ledger.released(&api());
    assert!(!ledger.tracks(&api()));
}

#[test]
fn a_client_going_back_and_forth_measures_each_change_once_and_cannot_report_the_future() {
    let mut ledger = Ledger::new(config());
    ledger.report(DeliveryPath::Watch, &report("a", None, 1, 0), 0).unwrap();
    ledger.changed(&api(), Revision(2), 1_000);
    let first = ledger
        .report(DeliveryPath::Watch, &report("a", None, 2, 9_999_999), 1_050)
        .unwrap();
    assert_eq!(first.latencies_ms, vec![50], "a receipt in the future counts as now");
    ledger
        .report(DeliveryPath::Watch, &report("a", None, 1, 1_100), 1_100)
        .unwrap();
    let again = ledger
        .report(DeliveryPath::Watch, &report("a", None, 2, 1_200), 1_200)
        .unwrap();
    assert!(again.latencies_ms.is_empty(), "the change was measured already");
    assert_eq!(
        ledger
            .summary(&api(), Revision(2), &Query::default(), 1_200)
            .latency
            .samples,
        1
    );
}

#[test]
fn an_xds_stream_that_stays_connected_stays_live() {
    let mut ledger = Ledger::new(config());
    ledger
        .report(DeliveryPath::Xds, &report("xds:envoy", None, 1, 0), 0)
        .unwrap();
    ledger.touch(&ClientId::new("xds:envoy").unwrap(), DeliveryPath::Xds, [&api()], 2_500);
    let reply = ledger.summary(&api(), Revision(1), &Query::default(), 5_000);
    assert_eq!((reply.live, reply.silent_total), (1, 0));
}

#[test]
fn the_needed_count_is_the_smallest_share_at_or_above_the_fraction() {
    use crate::needed;
    assert_eq!(needed(0.07, 100), 7);
    assert_eq!(needed(0.9, 100), 90);
    assert_eq!(needed(0.95, 100), 95);
    assert_eq!(needed(0.99, 101), 100);
    assert_eq!(needed(1.0, 10), 10);
    assert_eq!(needed(0.5, 0), 0);
}

/// The subscribers a ledger holds, as (service, client, path).
type LiveSet = BTreeSet<(ServiceKey, String, DeliveryPath)>;

/// Every subscriber the ledger holds, as (service, client, path), and how many of them
/// count (all but the DNS listener's) in all and per tenant.
fn live_set(ledger: &Ledger) -> (LiveSet, usize, HashMap<Label, usize>) {
    let mut set = BTreeSet::new();
    let mut per_tenant: HashMap<Label, usize> = HashMap::new();
    for (key, service) in &ledger.services {
        for (client, path) in service.subscribers.keys() {
            set.insert((key.clone(), client.to_string(), *path));
            if *path != DeliveryPath::Dns {
                *per_tenant.entry(key.tenant.clone()).or_default() += 1;
            }
        }
    }
    let all = per_tenant.values().sum();
    (set, all, per_tenant)
}

/// Trace (who may do what): a report under the DNS listener's client id (`dns:<addr>`) over
/// the watch path moved that id to another path; the subscriber count then wrapped below
/// zero (release) when the sweep forgot it, and the cap no longer held (a debug build
/// panicked and ended the sweeper). The same id over another path is another subscriber.
#[test]
fn a_report_under_the_dns_listeners_id_is_another_subscriber_and_counts_stay_right() {
    let mut ledger = Ledger::new(config());
    let dns = report("dns:127.0.0.1:7053", None, 1, 0);
    ledger.report(DeliveryPath::Dns, &dns, 0).unwrap();
    assert_eq!(ledger.census.all, 0, "the DNS listener is not counted");
    ledger
        .report(DeliveryPath::Watch, &report("dns:127.0.0.1:7053", None, 1, 0), 0)
        .unwrap();
    assert_eq!(ledger.census.all, 1);
    let (set, all, _) = live_set(&ledger);
    assert_eq!(set.len(), 2, "two subscribers: {set:?}");
    assert_eq!(all, 1);
    // The watch subscriber is forgotten; the DNS listener's record stays, uncounted.
    ledger.sweep(1_000_000);
    assert_eq!(ledger.census.all, 0);
    assert!(ledger.census.per_tenant.is_empty());
    assert_eq!(live_set(&ledger).0.len(), 1);
    ledger.released(&api());
    assert!(!ledger.tracks(&api()));
    assert_eq!(ledger.census.all, 0);
}

#[derive(Debug, Clone)]
enum Op {
    Report {
        client: usize,
        path: DeliveryPath,
        services: Vec<usize>,
        revision: u64,
    },
    Released {
        service: usize,
    },
    Touch {
        client: usize,
        service: usize,
    },
    Sweep,
    Advance {
        ms: u64,
    },
}

const CLIENTS: [&str; 4] = ["app-1", "app-2", "xds:envoy", "dns:127.0.0.1:7053"];
const PATHS: [DeliveryPath; 3] = [DeliveryPath::Watch, DeliveryPath::Xds, DeliveryPath::Dns];

fn service(i: usize) -> ServiceKey {
    let (tenant, name) = [("acme", "api"), ("acme", "db"), ("beta", "api")][i];
    ServiceKey::new(tenant, "prod", name).unwrap()
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    prop_oneof![
        4 => (0..CLIENTS.len(), 0..PATHS.len(), proptest::collection::vec(0..3_usize, 1..3), 1..6_u64)
            .prop_map(|(client, path, services, revision)| Op::Report { client, path: PATHS[path], services, revision }),
        1 => (0..3_usize).prop_map(|service| Op::Released { service }),
        1 => (0..CLIENTS.len(), 0..3_usize).prop_map(|(client, service)| Op::Touch { client, service }),
        1 => Just(Op::Sweep),
        2 => (0..40_000_u64).prop_map(|ms| Op::Advance { ms }),
    ]
}

proptest::proptest! {
    /// The census is the size of the live set, in all and per tenant, after any sequence
    /// of reports (over any path, under any id, the DNS listener's included), releases,
    /// touches and sweeps; the live set is the model's; and the caps always hold.
    #[test]
    fn the_census_is_the_live_set_and_the_caps_hold(ops in proptest::collection::vec(op(), 1..60)) {
        let config = LedgerConfig {
            max_subscribers: 5,
            max_subscribers_per_tenant: 3,
            ..config()
        };
        let mut ledger = Ledger::new(config);
        // The model: every subscriber, with when it last reported.
        let mut model: BTreeMap<(ServiceKey, String, DeliveryPath), u64> = BTreeMap::new();
        let mut now = 0_u64;
        for op in ops {
            match op {
                Op::Report { client, path, services, revision } => {
                    let report = ConvergenceReport {
                        client_id: ClientId::new(CLIENTS[client]).unwrap(),
                        cohort: None,
                        applied: services.iter().map(|&s| AppliedRevision {
                            service: service(s),
                            revision: Revision(revision),
                            received_unix_ms: now,
                        }).collect(),
                    };
                    if ledger.report(path, &report, now).is_ok() {
                        for &s in &services {
                            model.insert((service(s), CLIENTS[client].to_owned(), path), now);
                        }
                    }
                }
                Op::Released { service: s } => {
                    ledger.released(&service(s));
                    model.retain(|(key, _, path), _| !(*key == service(s) && *path == DeliveryPath::Dns));
                }
                Op::Touch { client, service: s } => {
                    ledger.touch(&ClientId::new(CLIENTS[client]).unwrap(), DeliveryPath::Xds, [&service(s)], now);
                    if let Some(last) = model.get_mut(&(service(s), CLIENTS[client].to_owned(), DeliveryPath::Xds)) {
                        *last = now;
                    }
                }
                Op::Sweep => {
                    ledger.sweep(now);
                    model.retain(|(_, _, path), last| {
                        *path == DeliveryPath::Dns || now.saturating_sub(*last) < config.forget_after_ms
                    });
                }
                Op::Advance { ms } => now += ms,
            }
            let (set, all, per_tenant) = live_set(&ledger);
            let expected: BTreeSet<_> = model.keys().cloned().collect();
            proptest::prop_assert_eq!(&set, &expected);
            proptest::prop_assert_eq!(ledger.census.all, all);
            proptest::prop_assert_eq!(&ledger.census.per_tenant, &per_tenant);
            proptest::prop_assert!(all <= config.max_subscribers);
            proptest::prop_assert!(per_tenant.values().all(|n| *n <= config.max_subscribers_per_tenant));
        }
    }
}
