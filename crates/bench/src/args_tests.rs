use clap::Parser;

use super::*;

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    bench: BenchArgs,
}

/// The `muster` CLI's shape: a global `--json` and `bench` as a subcommand.
#[derive(Debug, Parser)]
struct Muster {
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Subcommand,
}

#[derive(Debug, clap::Subcommand)]
enum Subcommand {
    Bench(BenchArgs),
}

#[test]
fn embeds_as_a_subcommand_next_to_a_global_json_flag() {
    use clap::CommandFactory;
    Muster::command().debug_assert();
    let cli = Muster::try_parse_from(["muster", "bench", "--spawn", "--quick", "--json"]).unwrap();
    let Subcommand::Bench(args) = cli.command;
    assert!(cli.json && args.spawn && args.quick);
}

fn plan(args: &[&str]) -> Result<Plan, BenchError> {
    let cli = Cli::try_parse_from(std::iter::once("bench").chain(args.iter().copied())).unwrap();
    cli.bench.plan()
}

#[test]
fn defaults_match_the_issue() {
    let plan = plan(&["--spawn"]).unwrap();
    assert_eq!(plan.workloads, Workload::ALL);
    assert_eq!(plan.connections, 64);
    assert_eq!(plan.duration, Duration::from_secs(10));
    assert_eq!(plan.watchers, 10_000);
    assert_eq!(plan.changes, 20);
    assert_eq!(plan.leases, 1_000);
}

#[test]
fn quick_shortens_everything_but_explicit_flags_win() {
    let plan = plan(&["--spawn", "--quick", "--watchers", "300"]).unwrap();
    assert_eq!(plan.duration, Duration::from_secs(2));
    assert_eq!(plan.watchers, 300);
    assert_eq!(plan.changes, 5);
}

#[test]
fn workloads_run_in_a_fixed_order_once_each() {
    let plan = plan(&["--workloads", "read,register,read"]).unwrap();
    assert_eq!(plan.workloads, [Workload::Register, Workload::Read]);
}

#[test]
fn tls_adds_the_handshake_rate_to_the_default_set_and_needs_spawn() {
    assert_eq!(
        plan(&["--spawn", "--tls"]).unwrap().workloads.last(),
        Some(&Workload::Handshake)
    );
    assert!(!plan(&["--spawn"]).unwrap().workloads.contains(&Workload::Handshake));
    assert!(matches!(
        plan(&["--server", "http://127.0.0.1:1", "--tls"]),
        Err(BenchError::Usage(_))
    ));
}

#[test]
fn the_consul_workload_runs_only_when_named() {
    assert!(!plan(&["--spawn"]).unwrap().workloads.contains(&Workload::Consul));
    let plan = plan(&["--spawn", "--workloads", "consul"]).unwrap();
    assert_eq!(plan.workloads, [Workload::Consul]);
    assert_eq!(plan.consul_services, 1_000);
}

#[test]
fn the_xds_workload_runs_only_when_named_with_a_stream_per_connection() {
    assert!(!plan(&["--spawn"]).unwrap().workloads.contains(&Workload::Xds));
    let plan_xds = plan(&["--spawn", "--workloads", "xds"]).unwrap();
    assert_eq!(plan_xds.workloads, [Workload::Xds]);
    assert_eq!((plan_xds.xds_streams, plan_xds.xds_connections), (1_000, None));
    assert_eq!(plan_xds.changes, 20);
    assert!(matches!(plan(&["--xds-streams", "0"]), Err(BenchError::Usage(_))));
    assert!(matches!(plan(&["--xds-connections", "0"]), Err(BenchError::Usage(_))));
}

#[test]
fn the_convergence_workload_runs_only_when_named_and_takes_the_servers_dns_address() {
    assert!(!plan(&["--spawn"]).unwrap().workloads.contains(&Workload::Convergence));
    let quick = plan(&["--spawn", "--quick", "--workloads", "convergence"]).unwrap();
    assert_eq!(quick.workloads, [Workload::Convergence]);
    assert_eq!((quick.watchers, quick.changes), (1_000, 5));
    let cli = Cli::try_parse_from([
        "bench",
        "--server",
        "http://127.0.0.1:1",
        "--dns",
        "127.0.0.1:8600",
        "--workloads",
        "convergence",
    ])
    .unwrap();
    assert_eq!(cli.bench.dns, Some("127.0.0.1:8600".parse().unwrap()));
}

#[test]
fn zero_connections_is_refused() {
    assert!(matches!(plan(&["--connections", "0"]), Err(BenchError::Usage(_))));
}

#[test]
fn server_and_spawn_conflict() {
    assert!(Cli::try_parse_from(["bench", "--spawn", "--server", "http://127.0.0.1:1"]).is_err());
}

#[test]
fn durations_take_the_cli_units() {
    assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
    assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
    assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
    assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1_500)));
    assert!(parse_duration("10h").is_err());
    assert!(parse_duration("fast").is_err());
}

#[test]
fn every_flag_keeps_its_name_with_the_storm_and_scale_flags_flattened_in() {
    use clap::CommandFactory;
    let command = Cli::command();
    let longs: Vec<&str> = command.get_arguments().filter_map(|arg| arg.get_long()).collect();
    let expected = [
        "server",
        "servers",
        "consistency",
        "spawn",
        "muster-bin",
        "server-pid",
        "etcd",
        "spawn-etcd",
        "etcd-bin",
        "etcd-pid",
        "workloads",
        "connections",
        "duration",
        "max-requests",
        "watchers",
        "changes",
        "change-interval",
        "leases",
        "services",
        "checks",
        "check-window",
        "detection-samples",
        "consul-services",
        "consul",
        "xds-streams",
        "xds-connections",
        "watch-connections",
        "xds",
        "dns",
        "tls",
        "fleet",
        "cold-services",
        "endpoints",
        "mirror-endpoints",
        "mirror-rate",
        "quick",
        "report-file",
    ];
    assert_eq!(longs, expected);
    let plan = plan(&[
        "--spawn",
        "--fleet",
        "3000",
        "--cold-services",
        "40",
        "--endpoints",
        "2k,20k",
    ])
    .unwrap();
    assert_eq!((plan.storms.fleet, plan.storms.cold_services), (3_000, 40));
    assert_eq!(plan.endpoints, [2_000, 20_000]);
}

#[test]
fn servers_spread_the_reads_over_a_cluster_with_a_consistency_level() {
    let plan_3 = plan(&[
        "--servers",
        "http://127.0.0.1:1,http://127.0.0.1:2,http://127.0.0.1:3",
        "--consistency",
        "stale",
        "--workloads",
        "read",
    ])
    .unwrap();
    assert_eq!(plan_3.read_servers.len(), 3);
    assert_eq!(plan_3.read_consistency, Some(ReadConsistency::Stale));
    let one = plan(&["--servers", "http://127.0.0.1:1", "--workloads", "read"]).unwrap();
    assert!(one.read_servers.is_empty(), "one node: the plain path");
    assert_eq!(one.read_consistency, None);
    assert!(Cli::try_parse_from(["bench", "--server", "http://a:1", "--servers", "http://b:1"]).is_err());
    assert!(Cli::try_parse_from(["bench", "--servers", "http://b:1", "--server-pid", "7"]).is_ok());
}

#[test]
fn the_mirror_workload_needs_spawn_and_a_rate_in_range() {
    let err = plan(&["--server", "http://127.0.0.1:1", "--workloads", "mirror"]).unwrap_err();
    assert!(err.to_string().contains("needs --spawn"), "{err}");
    let err = plan(&["--spawn", "--workloads", "mirror", "--mirror-rate", "0"]).unwrap_err();
    assert!(err.to_string().contains("--mirror-rate"), "{err}");
    assert_eq!(
        plan(&["--spawn", "--workloads", "mirror"]).unwrap().workloads,
        [Workload::Mirror]
    );
}

#[test]
fn the_soak_workload_needs_spawn_and_takes_its_length_from_duration() {
    let err = plan(&["--server", "http://127.0.0.1:1", "--workloads", "soak"]).unwrap_err();
    assert!(err.to_string().contains("needs --spawn"), "{err}");
    let soak = plan(&["--spawn", "--workloads", "soak", "--duration", "30m"]).unwrap();
    assert_eq!(soak.workloads, [Workload::Soak]);
    assert_eq!(soak.duration, Duration::from_secs(30 * 60));
}
