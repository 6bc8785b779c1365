use std::time::Duration;

use clap::Parser;

use super::*;
use crate::report::{Report, System, SystemResult, WorkloadReport};
use crate::{BenchArgs, BenchError, Histogram, Plan, Workload};

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    bench: BenchArgs,
}

fn plan(args: &[&str]) -> Result<Plan, BenchError> {
    let cli = Cli::try_parse_from(std::iter::once("bench").chain(args.iter().copied())).unwrap();
    cli.bench.plan()
}

#[test]
fn sizes_are_a_comma_list_with_k_and_m_suffixes() {
    assert_eq!(
        parse_sizes("10000,100000,1000000"),
        Ok(vec![10_000, 100_000, 1_000_000])
    );
    assert_eq!(parse_sizes(" 2k, 10_000 ,1M"), Ok(vec![2_000, 10_000, 1_000_000]));
    assert_eq!(parse_sizes("1"), Ok(vec![1]));
}

#[test]
fn bad_sizes_are_refused_with_what_is_wrong() {
    assert_eq!(parse_sizes(""), Err(SizesError::Empty));
    assert_eq!(parse_sizes("  "), Err(SizesError::Empty));
    assert_eq!(parse_sizes("10000,,20000"), Err(SizesError::NotANumber(String::new())));
    assert_eq!(parse_sizes("ten"), Err(SizesError::NotANumber("ten".into())));
    assert_eq!(parse_sizes("-5"), Err(SizesError::NotANumber("-5".into())));
    assert_eq!(parse_sizes("1.5m"), Err(SizesError::NotANumber("1.5m".into())));
    assert_eq!(parse_sizes("k"), Err(SizesError::NotANumber("k".into())));
    assert_eq!(parse_sizes("0,10"), Err(SizesError::Zero));
    assert_eq!(
        parse_sizes("100000,10000"),
        Err(SizesError::NotAscending {
            previous: 100_000,
            next: 10_000
        })
    );
    assert_eq!(
        parse_sizes("5000,5000"),
        Err(SizesError::NotAscending {
            previous: 5_000,
            next: 5_000
        }),
        "a size measured twice is not a curve"
    );
    assert_eq!(parse_sizes("11m"), Err(SizesError::TooLarge(11_000_000)));
    assert_eq!(parse_sizes("99999999999999999999"), Err(SizesError::TooLarge(u64::MAX)));
}

#[test]
fn the_scale_workload_is_opt_in_needs_spawn_and_quick_shrinks_its_sizes() {
    assert!(!plan(&["--spawn"]).unwrap().workloads.contains(&Workload::Scale));
    let full = plan(&["--spawn", "--workloads", "scale"]).unwrap();
    assert_eq!(full.workloads, [Workload::Scale]);
    assert_eq!(full.endpoints, [10_000, 100_000]);
    let quick = plan(&["--spawn", "--quick", "--workloads", "scale"]).unwrap();
    assert_eq!(quick.endpoints, [2_000, 10_000]);
    let asked = plan(&["--spawn", "--quick", "--workloads", "scale", "--endpoints", "1k,1m"]).unwrap();
    assert_eq!(
        asked.endpoints,
        [1_000, 1_000_000],
        "an explicit list wins over --quick"
    );
    assert!(matches!(
        plan(&["--server", "http://127.0.0.1:1", "--workloads", "scale"]),
        Err(BenchError::Usage(_))
    ));
    let bad = plan(&["--spawn", "--workloads", "scale", "--endpoints", "100,10"]).unwrap_err();
    assert!(matches!(bad, BenchError::Sizes(SizesError::NotAscending { .. })));
    assert_eq!(bad.code(), "usage");
}

#[test]
fn the_probe_and_the_quota_leave_room_at_the_largest_size() {
    assert_eq!(probe_budget(2_000), 1_000, "at least a thousand samples");
    assert_eq!(probe_budget(1_000_000), 100_000, "a tenth of the size");
    // The default quota (1,000,000) would refuse the probe at a million endpoints.
    let quota = tenant_quota(1_000_000);
    assert!(quota >= 1_000_000 + probe_budget(1_000_000), "{quota}");
    let config = server_config(1_000_000);
    assert!(config.contains(&format!("endpoints_per_tenant = {quota}")), "{config}");
    assert!(config.contains("snapshot_every = 1000"), "{config}");
    assert!(config.contains("services_per_tenant = 10000"), "{config}");
}

#[test]
fn the_scale_config_is_one_muster_serve_accepts() {
    // Parsed as `muster serve --config` parses it: the server's type refuses unknown keys.
    let config: muster_server::ServerConfig = toml::from_str(&server_config(10_000_000)).unwrap();
    assert_eq!(config.snapshot_every, SNAPSHOT_EVERY);
    assert!(!config.dns_enabled && !config.consul.enabled);
    let quotas = &config.registry.quotas;
    assert_eq!(quotas.endpoints_per_tenant, 12_000_000);
    assert_eq!(
        quotas.services_per_tenant, 12_000,
        "ten million at a thousand a service, and the probes"
    );
    assert_eq!(quotas.endpoints_per_service, 50_000, "the rest stays the default");
}

#[test]
fn endpoints_fill_services_a_thousand_at_a_time() {
    assert_eq!(service_of(0), "svc-0");
    assert_eq!(service_of(999), "svc-0");
    assert_eq!(service_of(1_000), "svc-1");
    assert_eq!(service_of(999_999), "svc-999");
}

#[test]
fn the_snapshot_index_is_read_from_the_files_head() {
    let head = r#"{"meta":{"last_log_id":{"leader_id":{"term":3,"node_id":1},"index":20417},"last_membership":"#;
    assert_eq!(snapshot_index(head), Some(20_417));
    assert_eq!(snapshot_index(r#"{"meta":{"last_log_id":null,"#), None);
    assert_eq!(
        snapshot_index(r#"{"meta":{"last_log_id":{"leader_id":{"#),
        None,
        "cut short"
    );
}

#[test]
fn a_new_member_needs_the_snapshot_once_the_logs_start_is_purged() {
    assert_eq!(CatchUpPath::of(None), CatchUpPath::Log);
    assert_eq!(
        CatchUpPath::of(Some(KEPT_BEFORE_SNAPSHOT)),
        CatchUpPath::Log,
        "purged up to 0: the whole log is still there"
    );
    assert_eq!(CatchUpPath::of(Some(KEPT_BEFORE_SNAPSHOT + 1)), CatchUpPath::Snapshot);
}

#[test]
fn fill_rate_and_bytes_per_endpoint_come_from_the_raw_figures() {
    let mut size = ScaleSize::new(100_000);
    size.set_fill(100_000, 500, Duration::from_secs(4));
    assert_eq!(size.fill_per_s, 24_875.0, "only successful registrations count");
    size.endpoints = 100_000;
    size.set_memory(30 << 20, Some(10 << 20));
    assert_eq!(size.bytes_per_endpoint, Some(f64::from(20 << 20) / 100_000.0));
    size.set_memory(5 << 20, Some(10 << 20));
    assert_eq!(size.bytes_per_endpoint, Some(0.0), "shrinking RSS is not negative");
    size.set_memory(5 << 20, None);
    assert_eq!((size.rss_bytes, size.bytes_per_endpoint), (Some(5 << 20), None));
    let mut empty = ScaleSize::new(10);
    empty.set_fill(0, 0, Duration::ZERO);
    empty.set_memory(1 << 20, Some(1 << 20));
    assert_eq!((empty.fill_per_s, empty.bytes_per_endpoint), (0.0, None));
}

fn measured(size: u64) -> ScaleSize {
    let mut row = ScaleSize::new(size);
    row.endpoints = size + size / 10;
    row.services = row.endpoints.div_ceil(ENDPOINTS_PER_SERVICE);
    row.set_fill(size, 0, Duration::from_millis(size / 20));
    let mut probe = Histogram::new();
    for i in 0..1_000 {
        probe.record(Duration::from_micros(2_000 + i));
    }
    row.registration = LatencySummary::of_closed_loop(&probe);
    row.set_memory(10 * size * 300, Some(0));
    row.stop_ms = Some(45.0);
    row.restart_after_stop_ms = Some(812.0);
    row.restart_after_kill_ms = Some(1_230.0);
    row.catch_up_ms = Some(2_400.0);
    row.catch_up_path = Some(CatchUpPath::of(Some(size / 40)));
    row.snapshot_bytes = Some(size * 400);
    row.snapshot_index = Some(size / 40);
    row.load = crate::LoadSpan {
        load_average_at_start: Some(0.5),
        load_average_at_end: Some(1.25),
    };
    row
}

fn report(sizes: Vec<ScaleSize>) -> Report {
    let mut result = SystemResult::from_requests(System::Muster, 1, 0, Duration::from_secs(1), &Histogram::new());
    result.scale = Some(ScaleSummary {
        url: "http://127.0.0.1:4000".into(),
        pid: 42,
        endpoints_per_service: ENDPOINTS_PER_SERVICE,
        snapshot_every: SNAPSHOT_EVERY,
        fill_connections: 128,
        probe_connections: 64,
        probe_seconds: 2.0,
        baseline_rss_bytes: Some(8 << 20),
        sizes,
        stopped: None,
    });
    let mut plan = plan(&["--spawn", "--workloads", "scale"]).unwrap();
    plan.endpoints = vec![10_000, 100_000];
    Report {
        plan,
        systems: Vec::new(),
        cpus: 2,
        load_average_at_start: None,
        workloads: vec![WorkloadReport::new(Workload::Scale, vec![result], Vec::new())],
    }
}

#[test]
fn the_table_has_a_row_per_size_with_every_figure() {
    let mut big = measured(100_000);
    big.notes.push("fill: first error: HTTP 429".into());
    let table = report(vec![measured(10_000), big]).render_table();
    let lines: Vec<&str> = table.lines().filter(|l| l.starts_with("scale:   ")).collect();
    assert_eq!(lines.len(), 3, "a header and two sizes:\n{table}");
    assert!(
        lines[0].contains("restart (kill -9)") && lines[0].contains("p99 CO"),
        "{table}"
    );
    let row = lines[2];
    for figure in [
        "110,000",
        "20,000",
        "2.50 ms",
        "286.1 MiB",
        "2,727",
        "45.0 ms",
        "812.0 ms",
        "1.23 s",
        "2.40 s",
        "snapshot",
        "0.50→1.25",
    ] {
        assert!(row.contains(figure), "{figure} missing from {row}\n{table}");
    }
    assert!(lines[1].contains("log"), "250 entries: the whole log is sent\n{table}");
    assert!(
        table.contains("scale: at 100,000: fill: first error: HTTP 429"),
        "{table}"
    );
    assert!(table.contains("snapshot every 1,000 log entries"), "{table}");
    assert!(table.contains("at index 2,500"), "{table}");
    assert!(
        table.contains("scale: issue anchors: how cost grows with size"),
        "{table}"
    );
    let mut passed = measured(2_000);
    passed.set_fill(0, 0, Duration::ZERO);
    let table = report(vec![passed]).render_table();
    let row = table.lines().filter(|l| l.starts_with("scale:   ")).nth(1).unwrap();
    assert!(row.contains("2,200       -  "), "nothing filled, no rate: {row}");
}

#[test]
fn the_json_carries_typed_figures_per_size() {
    let json: serde_json::Value = serde_json::from_str(&report(vec![measured(10_000)]).render_json()).unwrap();
    assert_eq!(json["plan"]["endpoints"], serde_json::json!([10_000, 100_000]));
    let workload = &json["workloads"][0];
    assert_eq!(workload["workload"], "scale");
    assert_eq!(workload["target"], "reported");
    let scale = &workload["results"][0]["scale"];
    assert_eq!(scale["snapshot_every"], 1_000);
    let size = &scale["sizes"][0];
    assert_eq!(size["size"], 10_000);
    assert_eq!(size["endpoints"], 11_000);
    assert_eq!(size["fill_per_s"], 20_000.0);
    assert_eq!(size["restart_after_kill_ms"], 1_230.0);
    assert_eq!(size["catch_up_path"], "log");
    assert!(
        size["registration"]["p99_corrected_ms"].as_f64().unwrap() >= size["registration"]["p99_ms"].as_f64().unwrap()
    );
    let per_endpoint = size["bytes_per_endpoint"].as_f64().unwrap();
    assert!((per_endpoint - 30_000_000.0 / 11_000.0).abs() < 1e-6, "{per_endpoint}");
    assert!(size.get("notes").is_none(), "no notes, no field");
}
