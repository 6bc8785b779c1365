use super::*;

fn plan() -> Plan {
    Plan {
        workloads: Workload::ALL.to_vec(),
        connections: 64,
        duration: Duration::from_secs(10),
        max_requests: 2_000_000,
        watchers: 10_000,
        changes: 20,
        change_interval: Duration::from_millis(100),
        leases: 1_000,
        services: 100,
        checks: 10_000,
        check_window: Duration::from_secs(30),
        detection_samples: 3,
        consul_services: 1_000,
        xds_streams: 1_000,
        xds_connections: None,
        watch_connections: None,
        storms: crate::storms::StormPlan::default(),
        endpoints: vec![10_000, 100_000],
        read_servers: Vec::new(),
        read_consistency: None,
    }
}

fn requests(system: System, ok: u64, errors: u64, secs: u64) -> SystemResult {
    let mut histogram = Histogram::new();
    for i in 0..ok {
        histogram.record(Duration::from_micros(1_000 + i % 1_000));
    }
    SystemResult::from_requests(system, ok + errors, errors, Duration::from_secs(secs), &histogram)
}

#[test]
fn throughput_counts_only_successful_requests() {
    let result = requests(System::Muster, 20_000, 5_000, 2);
    assert_eq!(result.requests, 25_000);
    assert_eq!(result.throughput_per_s, 10_000.0);
}

#[test]
fn the_ratio_divides_musters_figure_by_etcds() {
    let report = WorkloadReport::new(
        Workload::Register,
        vec![
            requests(System::Muster, 250_000, 0, 10),
            requests(System::Etcd, 66_000, 0, 10),
        ],
        vec![],
    );
    let ratio = report.ratio_muster_to_etcd.unwrap();
    assert!((ratio - 250_000.0 / 66_000.0).abs() < 1e-9, "{ratio}");
    assert_eq!(report.target_met, Some(true));
}

#[test]
fn a_throughput_below_target_is_reported_not_met() {
    let report = WorkloadReport::new(Workload::Renew, vec![requests(System::Muster, 100_000, 0, 10)], vec![]);
    assert_eq!(report.target_met, Some(false));
    assert_eq!(report.ratio_muster_to_etcd, None, "no etcd figure, no ratio");
}

#[test]
fn fanout_is_judged_on_p99_and_lower_is_better() {
    let fast = requests(System::Muster, 1_000, 0, 1); // p99 about 2 ms
    let report = WorkloadReport::new(Workload::Fanout, vec![fast], vec![]);
    assert_eq!(report.target_met, Some(true));
    assert!(Target::MaxP99 { ms: 50.0 }.is_met(50.0));
    assert!(!Target::MaxP99 { ms: 50.0 }.is_met(50.1));
}

#[test]
fn memory_per_watcher_is_rss_growth_over_watchers() {
    let m = MemorySummary::new(10_000, 100 << 20, (100 << 20) + 150_000_000);
    assert_eq!(m.per_watcher_bytes, 15_000.0);
    assert_eq!(
        MemorySummary::new(10, 500, 400).per_watcher_bytes,
        0.0,
        "shrinking RSS is not negative"
    );
    let mut muster = requests(System::Muster, 0, 0, 1);
    muster.memory = Some(m);
    let mut etcd = requests(System::Etcd, 0, 0, 1);
    etcd.memory = Some(MemorySummary::new(10_000, 0, 300_000_000));
    let report = WorkloadReport::new(Workload::Watchers, vec![muster, etcd], vec![]);
    assert_eq!(report.target_met, Some(true), "15,000 bytes ≤ 20 KiB");
    assert_eq!(report.ratio_muster_to_etcd, Some(0.5));
}

#[test]
fn a_workload_without_muster_figures_has_no_verdict() {
    let report = WorkloadReport::new(Workload::Read, vec![requests(System::Etcd, 10, 0, 1)], vec![]);
    assert_eq!(report.target_met, None);
}

#[test]
fn the_table_shows_figures_ratio_target_and_anchors() {
    let report = Report {
        plan: plan(),
        systems: vec![],
        cpus: 2,
        load_average_at_start: Some(0.5),
        workloads: vec![WorkloadReport::new(
            Workload::Register,
            vec![
                requests(System::Muster, 250_000, 3, 10),
                requests(System::Etcd, 66_000, 0, 10),
            ],
            vec!["nothing".into()],
        )],
    };
    let table = report.render_table();
    assert!(table.contains("register  muster"), "{table}");
    assert!(table.contains("25,000"), "{table}");
    assert!(table.contains("3.79×"), "{table}");
    assert!(table.contains("≥ 20,000/s: met"), "{table}");
    assert!(table.contains("6,600 puts/s"), "{table}");
    assert!(table.contains("register: skipped nothing"), "{table}");
}

#[test]
fn the_json_carries_every_figure() {
    let report = Report {
        plan: plan(),
        systems: vec![],
        cpus: 2,
        load_average_at_start: Some(0.5),
        workloads: vec![WorkloadReport::new(
            Workload::Read,
            vec![requests(System::Muster, 1_000, 0, 1)],
            vec![],
        )],
    };
    let json: serde_json::Value = serde_json::from_str(&report.render_json()).unwrap();
    let result = &json["workloads"][0]["results"][0];
    assert_eq!(json["workloads"][0]["workload"], "read");
    assert_eq!(result["system"], "muster");
    assert_eq!(result["throughput_per_s"], 1_000.0);
    assert!(result["latency"]["p99_ms"].as_f64().unwrap() >= 1.0);
    assert_eq!(json["workloads"][0]["target"]["min_throughput"]["per_second"], 60_000.0);
    assert_eq!(json["plan"]["duration"], 10.0);
}

fn checks_result(max_deviation: f64, cores: Option<f64>) -> SystemResult {
    let mut result = requests(System::Muster, 0, 0, 30);
    result.server_cores = cores;
    result.checks = Some(crate::ChecksSummary {
        endpoints: 10_000,
        interval_s: 10.0,
        expected_per_s: 1_000.0,
        per_second: vec![990, 1_010, 1_000],
        max_deviation,
        detection: vec![crate::DetectionSummary {
            kind: "http",
            latencies_ms: vec![2_100.0, 2_900.0],
            failed: 0,
            bound_ms: 3_800.0,
        }],
    });
    result
}

#[test]
fn the_probe_schedule_is_judged_on_both_its_rate_and_the_servers_cpu() {
    let met = WorkloadReport::new(Workload::Checks, vec![checks_result(0.05, Some(0.2))], vec![]);
    assert_eq!(met.target_met, Some(true));
    let bunched = WorkloadReport::new(Workload::Checks, vec![checks_result(0.3, Some(0.2))], vec![]);
    assert_eq!(bunched.target_met, Some(false));
    let busy = WorkloadReport::new(Workload::Checks, vec![checks_result(0.05, Some(0.6))], vec![]);
    assert_eq!(busy.target_met, Some(false));
    let unmetered = WorkloadReport::new(Workload::Checks, vec![checks_result(0.05, None)], vec![]);
    assert_eq!(unmetered.target_met, None, "no CPU figure, no verdict");
    let report = Report {
        plan: plan(),
        systems: Vec::new(),
        cpus: 2,
        load_average_at_start: None,
        workloads: vec![met],
    };
    let table = report.render_table();
    assert!(table.contains("min 990, median 1000, max 1010"), "{table}");
    assert!(
        table.contains("detection http: median 2900 ms, max 2900 ms over 2 samples: within its bound 3800 ms"),
        "{table}"
    );
}

/// One xds run's result with these figures (milliseconds; `kib`: per stream).
fn xds_result(push_ms: u64, ack_ms: u64, kib: Option<u64>) -> SystemResult {
    let mut change = crate::xds::ChangeFigures {
        revision: 2,
        all_acked: true,
        ..crate::xds::ChangeFigures::default()
    };
    change.push.record(Duration::from_millis(push_ms));
    change.ack.record(Duration::from_millis(ack_ms));
    let rss = kib.map(|kib| (0, kib * 1024 * 10));
    let mut result = requests(System::Muster, 1, 0, 1);
    result.xds = Some(crate::XdsSummary::new(10, 10, 10, &[change], rss));
    result
}

#[test]
fn the_xds_target_needs_push_ack_and_memory_each_within_its_limit() {
    let met = WorkloadReport::new(Workload::Xds, vec![xds_result(40, 90, Some(20))], vec![]);
    assert_eq!(met.target_met, Some(true));
    for (push, ack, kib) in [(60, 90, Some(20)), (40, 120, Some(20)), (40, 90, Some(40))] {
        let report = WorkloadReport::new(Workload::Xds, vec![xds_result(push, ack, kib)], vec![]);
        assert_eq!(report.target_met, Some(false), "push {push}, ack {ack}, {kib:?} KiB");
    }
    let no_pid = WorkloadReport::new(Workload::Xds, vec![xds_result(40, 90, None)], vec![]);
    assert_eq!(no_pid.target_met, Some(true), "memory unknown: judged on latency");
}
