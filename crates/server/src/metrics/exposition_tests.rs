//! The encoder's output for the families built per scrape, exactly: names with the
//! `_total` suffix on counters, labels in the order given, zero rows left out.

use super::*;

fn tenant(name: &str) -> Label {
    Label::new("tenant", name).unwrap()
}

#[test]
fn tenant_rows_encode_as_one_counter_family_with_tenant_and_outcome_labels() {
    let counters = TenantCounters::new(renewal::NAMES);
    counters.add(Some(&tenant("acme")), renewal::OK, 3);
    counters.add(Some(&tenant("acme")), renewal::LEASE_NOT_FOUND, 1);
    counters.add(Some(&tenant("beta")), renewal::OK, 7);
    let rows = |all| {
        let family = Rows::default();
        for (tenant, outcome, count) in counters.rows(|t| all || t.as_str() == "acme", all) {
            family
                .get_or_create(&vec![("tenant", tenant), ("outcome", outcome.to_owned())])
                .inc_by(count);
        }
        let mut registry = Registry::with_prefix("muster");
        registry.register("renewals", "Renewals", family);
        let mut out = String::new();
        prometheus_text::encode(&mut out, &registry).unwrap();
        let mut samples: Vec<String> = out.lines().filter(|l| !l.starts_with('#')).map(str::to_owned).collect();
        samples.sort();
        (out, samples)
    };
    let (text, samples) = rows(true);
    assert!(
        text.starts_with("# HELP muster_renewals_total Renewals.\n# TYPE muster_renewals_total counter\n"),
        "{text}"
    );
    assert_eq!(
        samples,
        [
            r#"muster_renewals_total{tenant="acme",outcome="lease_not_found"} 1"#,
            r#"muster_renewals_total{tenant="acme",outcome="ok"} 3"#,
            r#"muster_renewals_total{tenant="beta",outcome="ok"} 7"#,
        ]
    );
    let (_, confined) = rows(false);
    assert!(confined.iter().all(|line| !line.contains("beta")), "{confined:?}");
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
