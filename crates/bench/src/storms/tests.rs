//! The storm workloads' pure parts: flags and their checks, the shared figure math, the
//! report's shape.

use clap::Parser;

use super::*;
use crate::Histogram;
use crate::report::Report;

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    bench: BenchArgs,
}

fn plan(args: &[&str]) -> Result<Plan, BenchError> {
    let cli = Cli::try_parse_from(std::iter::once("bench").chain(args.iter().copied())).unwrap();
    cli.bench.plan()
}

fn usage(args: &[&str]) -> String {
    match plan(args) {
        Err(BenchError::Usage(message)) => message,
        other => panic!("{args:?}: expected a usage error, got {other:?}"),
    }
}

#[test]
fn storm_workloads_run_only_when_named_at_the_issues_sizes() {
    let all = plan(&["--spawn"]).unwrap();
    assert!(WORKLOADS.iter().all(|w| !all.workloads.contains(w)));
    let full = plan(&["--spawn", "--workloads", "hotcold,expiry,evacuation,reconnect"]).unwrap();
    assert_eq!(full.workloads, WORKLOADS, "in a fixed order");
    assert_eq!(full.storms, StormPlan::default());
    assert_eq!(
        (full.storms.fleet, full.storms.evacuation_watchers),
        (100_000, 1_000),
        "one watcher per service of 100"
    );
    assert_eq!((full.storms.expiry_leases, full.storms.expiry_ttl_ms), (50_000, 20_000));
    assert_eq!((full.storms.cold_services, full.storms.cold_changes), (1_000, 50));
    assert_eq!(
        (full.watchers, full.services),
        (10_000, 100),
        "reconnect reuses the flags"
    );
    assert_eq!(full.leases, 1_000, "the renew workload keeps its own default");
}

#[test]
fn quick_shrinks_every_storm_and_explicit_flags_win() {
    let quick = plan(&["--spawn", "--quick", "--workloads", "evacuation"]).unwrap();
    assert_eq!(
        quick.storms,
        StormPlan {
            fleet: 5_000,
            evacuation_watchers: 50,
            expiry_leases: 2_000,
            expiry_ttl_ms: 5_000,
            cold_services: 200,
            cold_changes: 20,
        }
    );
    let explicit = plan(&[
        "--spawn",
        "--quick",
        "--fleet",
        "3000",
        "--leases",
        "10",
        "--cold-services",
        "7",
    ])
    .unwrap();
    assert_eq!(explicit.storms.fleet, 3_000);
    assert_eq!(explicit.storms.evacuation_watchers, 30, "follows the fleet");
    assert_eq!(
        (explicit.storms.expiry_leases, explicit.leases),
        (10, 10),
        "one --leases for both"
    );
    assert_eq!(explicit.storms.cold_services, 7);
    let watchers = plan(&["--spawn", "--watchers", "7"]).unwrap();
    assert_eq!(watchers.storms.evacuation_watchers, 7);
}

#[test]
fn a_storm_without_spawn_is_a_usage_error_naming_it() {
    let message = usage(&["--server", "http://127.0.0.1:1", "--workloads", "read,expiry,hotcold"]);
    assert!(message.contains("expiry,hotcold needs --spawn"), "{message}");
    // The same flags without a storm workload make a run.
    plan(&["--server", "http://127.0.0.1:1", "--workloads", "read"]).unwrap();
}

#[test]
fn sizes_past_the_servers_quotas_are_refused_before_anything_starts() {
    assert!(usage(&["--spawn", "--fleet", "0"]).contains("--fleet must be 1 to 900000"));
    assert!(usage(&["--spawn", "--fleet", "900001"]).contains("got 900001"));
    assert!(usage(&["--spawn", "--cold-services", "9001"]).contains("--cold-services"));
    let reconnect = usage(&["--spawn", "--workloads", "reconnect", "--watchers", "20000"]);
    assert!(reconnect.contains("at most 16384"), "{reconnect}");
    assert!(usage(&["--spawn", "--workloads", "evacuation", "--watchers", "20000"]).contains("evacuation"));
    assert!(usage(&["--spawn", "--workloads", "expiry", "--leases", "250001"]).contains("250000"));
    // Caps bind only the workloads they protect: fanout may open 20,000 streams.
    plan(&["--spawn", "--workloads", "fanout", "--watchers", "20000"]).unwrap();
    plan(&["--spawn", "--leases", "250001"]).unwrap();
}

fn expiry_summary() -> ExpirySummary {
    let mut lateness = Histogram::new();
    lateness.record(Duration::from_millis(80));
    lateness.record(Duration::from_millis(130));
    ExpirySummary {
        leases: 2_000,
        services: 67,
        leased_per_service: 30,
        durable_per_service: 80,
        ttl_ms: 5_000,
        deadline_spread_ms: 202.0,
        expired_before_burst: 0,
        gone: 2_000,
        first_gone_ms: Some(126.0),
        all_gone_ms: Some(36.0),
        after_deadline: crate::LatencySummary::of(&lateness),
        revision_before: 11_456,
        revision_after: Some(11_900),
        unrelated_in_range: 442,
        expiry_revisions: Some(2),
        expiry_update_revisions: 2,
        unrelated_before: None,
        unrelated_during: None,
        unrelated_before_per_s: 900.0,
        unrelated_during_per_s: 760.0,
        unrelated_errors: 0,
        load: crate::LoadSpan {
            load_average_at_start: Some(0.5),
            load_average_at_end: Some(0.75),
        },
    }
}

#[test]
fn a_storm_summary_renders_in_the_table_and_under_its_name_in_json() {
    let mut lateness = Histogram::new();
    lateness.record(Duration::from_millis(130));
    let result = row(
        2_000,
        0,
        Duration::from_millis(500),
        &lateness,
        StormSummary::Expiry(expiry_summary()),
    );
    assert_eq!(result.throughput_per_s, 2.0, "one success over half a second");
    let mut workload = WorkloadReport::new(Workload::Expiry, vec![result], vec![]);
    workload.load_average_at_end = Some(0.75);
    let report = Report {
        plan: plan(&["--spawn", "--workloads", "expiry"]).unwrap(),
        systems: vec![],
        cpus: 2,
        load_average_at_start: Some(0.5),
        workloads: vec![workload],
    };
    let table = report.render_table();
    let row = table.lines().find(|line| line.starts_with("expiry ")).unwrap();
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells[..5], ["expiry", "muster", "2,000", "0", "2"], "{table}");
    assert!(table.contains("reported, no target"), "{table}");
    assert!(
        table.contains("expiry: revisions 11456 → 11900: 442 unrelated, 2 for the expiry"),
        "{table}"
    );
    assert!(table.contains("load average 0.50 at start, 0.75 at end"), "{table}");
    let json: serde_json::Value = serde_json::from_str(&report.render_json()).unwrap();
    let storm = &json["workloads"][0]["results"][0]["storm"]["expiry"];
    assert_eq!(storm["expiry_revisions"], 2);
    assert_eq!(storm["load_average_at_end"], 0.75);
    assert_eq!(json["plan"]["storms"]["expiry_leases"], 50_000);
}
