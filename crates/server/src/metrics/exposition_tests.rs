//! The encoder's output for the families built per scrape, exactly: names with the
//! `_total` suffix on counters, labels in the order given, zero rows left out.

use muster_core::{Label, Rejection, ServingState};
use prometheus_client::registry::Registry;

use super::sorted::Sorted;
use std::sync::Arc;

use prometheus_client::encoding::prometheus_text;

use super::counters::{Metrics, registration_outcomes, registration_refused, renewal};
use super::sorted::Row;
use super::tenants::TenantCounters;

fn tenant(name: &str) -> Label {
    Label::new("tenant", name).unwrap()
}

#[test]
fn tenant_rows_encode_as_one_counter_family_sorted_by_tenant_and_outcome() {
    let counters = TenantCounters::new(renewal::NAMES);
    counters.add(Some(&tenant("beta")), renewal::OK, 7);
    counters.add(Some(&tenant("acme")), renewal::LEASE_NOT_FOUND, 1);
    counters.add(Some(&tenant("acme")), renewal::OK, 3);
    let encode = |all: bool| {
        let rows = counters
            .rows(|t| all || t.as_str() == "acme", all)
            .into_iter()
            .map(|(tenant, outcome, count)| (vec![("tenant", tenant), ("outcome", outcome.to_owned())], count))
            .collect();
        let mut registry = Registry::with_prefix("muster");
        registry.register_collector(Sorted::counter("renewals", "Renewals", rows));
        let mut out = String::new();
        prometheus_text::encode(&mut out, &registry).unwrap();
        out
    };
    assert_eq!(
        encode(true),
        "# HELP muster_renewals_total Renewals.\n\
         # TYPE muster_renewals_total counter\n\
         muster_renewals_total{tenant=\"acme\",outcome=\"ok\"} 3\n\
         muster_renewals_total{tenant=\"acme\",outcome=\"lease_not_found\"} 1\n\
         muster_renewals_total{tenant=\"beta\",outcome=\"ok\"} 7\n"
    );
    assert!(!encode(false).contains("beta"));
}

#[test]
fn an_empty_family_is_left_out_and_gauges_encode_as_gauges() {
    let mut registry = Registry::with_prefix("muster");
    registry.register_collector(Sorted::counter("nothing", "Nothing", Vec::new()));
    registry.register_collector(Sorted::gauge(
        "protection_active",
        "Protected",
        vec![(vec![("service", "acme/prod/api".to_owned())], 1)],
    ));
    let mut out = String::new();
    prometheus_text::encode(&mut out, &registry).unwrap();
    assert_eq!(
        out,
        "# HELP muster_protection_active Protected.\n\
         # TYPE muster_protection_active gauge\n\
         muster_protection_active{service=\"acme/prod/api\"} 1\n"
    );
}

#[test]
fn transitions_are_counted_from_the_state_found_or_absent() {
    let metrics = Metrics::new(Arc::new(muster_dns::LiveZone::new(
        muster_dns::Zone::new(muster_dns::ZoneConfig::default()).unwrap(),
    )));
    metrics.transition(Some(ServingState::Ready), ServingState::NotServing);
    metrics.transition(Some(ServingState::Ready), ServingState::NotServing);
    metrics.transition(None, ServingState::Ready);
    let rows = metrics.transition_rows();
    let text = |row: &Row| format!("{:?} {}", row.0, row.1);
    assert_eq!(
        rows.iter().map(text).collect::<Vec<_>>(),
        [
            r#"[("from", "ready"), ("to", "not_serving")] 2"#,
            r#"[("from", "absent"), ("to", "ready")] 1"#,
        ]
    );
}

#[test]
fn registration_outcomes_name_every_refusal_code() {
    let outcomes: Vec<_> = registration_outcomes().collect();
    let stale = Rejection::StaleIncarnation {
        instance: muster_core::InstanceId::new("a").unwrap(),
        presented: muster_core::Incarnation(1),
        current: muster_core::Incarnation(2),
    };
    assert_eq!(outcomes[registration_refused(&stale)], "stale_incarnation");
    assert_eq!(&outcomes[..2], ["ok", "unchanged"]);
}
