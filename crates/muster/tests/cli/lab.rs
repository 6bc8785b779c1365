//! `muster lab` through the real binary: the JSON shape SPEC X fixes, the files of `--out`,
//! the live lab's two setups (SPEC X2, D3), and bad input refused with exit 2 before anything
//! runs.

use crate::support::run;

/// A small scenario, quick in a debug build: 100 instances, 10 crash at 5 s of 20 s.
const SMALL: [&str; 8] = [
    "--instances",
    "100",
    "--crash-at",
    "5s",
    "--duration",
    "20s",
    "--callers",
    "5",
];

#[test]
fn json_has_the_issues_fields_for_each_reference_setup() {
    let mut args = vec!["lab", "--json"];
    args.extend(SMALL);
    let output = run(&args);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let setups = report["setups"].as_array().unwrap();
    let names: Vec<_> = setups.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["hard-coded", "ttl-10s", "ttl-2s"]);
    for setup in setups {
        for field in [
            "failed",
            "stale_window_s",
            "heartbeats_per_s",
            "lookups_per_s",
            "failed_per_window",
        ] {
            assert!(!setup[field].is_null(), "{field} in {setup}");
        }
        assert_eq!(
            setup["failed_per_window"].as_array().unwrap().len(),
            4,
            "20 s in 5 s windows"
        );
    }
    assert!(setups[0]["ttl_s"].is_null() && setups[0]["heartbeat_interval_s"].is_null());
    assert_eq!(setups[1]["ttl_s"], 10.0);
    assert_eq!(setups[2]["heartbeat_interval_s"], 0.5);
    // 5 callers × 100 req/s × 10% dead × 15 s.
    assert_eq!(setups[0]["failed"], 750);
}

#[test]
fn out_writes_a_markdown_report_and_two_svg_plots() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("report");
    let mut args = vec!["lab", "--setup", "ttl-2s,watch", "--out", out.to_str().unwrap()];
    args.extend(SMALL);
    let output = run(&args);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let table = String::from_utf8(output.stdout).unwrap();
    assert!(table.contains("stale window") && table.contains("watch"), "{table}");
    let markdown = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        markdown.contains("| ttl-2s |") && markdown.contains("failed-per-second.svg"),
        "{markdown}"
    );
    for plot in ["failed-per-second.svg", "stale-window.svg"] {
        let svg = std::fs::read_to_string(out.join(plot)).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("watch"), "{plot}");
    }
}

#[test]
fn bad_input_exits_2_with_a_typed_error_and_runs_nothing() {
    for (args, code) in [
        (vec!["lab", "--ttl", "2"], "invalid_scenario"),
        (vec!["lab", "--setup", "nope"], "unknown_setup"),
        (vec!["lab", "--kill", "200%"], "invalid_scenario"),
        (vec!["lab", "--scenario", "/nonexistent/lab.toml"], "scenario_file"),
        (vec!["lab", "--live", "--eject", "30s"], "invalid_scenario"),
        (vec!["lab", "--live", "--drain", "1h"], "invalid_scenario"),
    ] {
        let output = run(&args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(&format!("error: {code}:")), "{args:?}: {stderr}");
        assert!(output.stdout.is_empty(), "{args:?} printed a report");
    }
}

#[test]
fn live_with_drain_reports_the_library_then_the_proxy_setup_and_no_failure_through_the_proxy() {
    let output = run(&[
        "lab",
        "--live",
        "--instances",
        "10",
        "--kill",
        "2",
        "--crash-at",
        "1s",
        "--duration",
        "3s",
        "--callers",
        "2",
        "--ttl",
        "1s",
        "--drain",
        "200ms",
        "--json",
    ]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["mode"], "live");
    let setups = report["setups"].as_array().unwrap();
    let names: Vec<_> = setups.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["live-ttl-1s-drain", "muster-proxy-ttl-1s-drain"]);
    assert_eq!(setups[0]["live"]["via"], "client-library");
    let proxied = &setups[1];
    assert_eq!(proxied["live"]["via"], "muster-proxy");
    assert_eq!(proxied["live"]["stop"], "drain");
    assert_eq!(proxied["live"]["drain_grace_s"], 0.2);
    for field in ["retries", "budget_exhausted", "in_flight_at_stop"] {
        assert!(proxied["live"][field].is_u64(), "{field} in {proxied}");
    }
    assert!(proxied["requests"].as_u64().unwrap() > 0);
    assert_eq!(proxied["failed"], 0, "{proxied}");
    assert_eq!(proxied["expected"]["failed"], 0.0);
}

/// SPEC U4, quiet when healthy: a lab run logs nothing at WARN or above, even the setup whose
/// simulated registry holds expiries by self-preservation (its own simulation's state, not
/// this process's health; it used to print an ERROR line in the middle of the report).
#[test]
fn a_run_with_self_preservation_logs_nothing_at_warn_or_above() {
    let mut args = vec!["lab", "--setup", "preservation"];
    args.extend(SMALL);
    let output = run(&args);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stdout.contains("self-preservation held expiries"), "{stdout}");
    assert!(!stderr.contains("WARN") && !stderr.contains("ERROR"), "{stderr}");
}
