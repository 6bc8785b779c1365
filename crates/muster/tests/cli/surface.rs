//! The command-line surface of SPEC D1, U1, exactly: acceptance checks type these.

use clap::{CommandFactory, Parser};
use muster_cli::cli::{Cli, Command, LeaseCommand};
use muster_cli::commands::endpoint_spec;
use muster_core::{LeaseId, Protocol, ServingState};

fn parse(line: &str) -> Result<Cli, clap::Error> {
    Cli::try_parse_from(line.split_whitespace())
}

#[test]
fn the_clap_definition_is_consistent() {
    Cli::command().debug_assert();
}

#[test]
fn every_command_has_help() {
    for line in [
        "muster --help",
        "muster serve --help",
        "muster register --help",
        "muster set-state --help",
        "muster drain --help",
        "muster deregister --help",
        "muster check --help",
        "muster cluster --help",
        "muster cluster status --help",
        "muster cluster add --help",
        "muster cluster remove --help",
        "muster resolve --help",
        "muster watch --help",
        "muster services --help",
        "muster status --help",
        "muster lease --help",
        "muster lease grant --help",
        "muster lease renew --help",
        "muster lease revoke --help",
        "muster policy --help",
        "muster policy show --help",
        "muster policy set --help",
    ] {
        let err = parse(line).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::DisplayHelp, "{line}");
    }
}

#[test]
fn serve_takes_data_dir_http_dns_and_config() {
    let cli =
        parse("muster serve --data-dir /tmp/d --http 127.0.0.1:7070 --dns 127.0.0.1:7053 --config m.toml").unwrap();
    let Command::Serve(args) = cli.command else {
        panic!("not serve")
    };
    assert_eq!(args.data_dir.unwrap().to_str(), Some("/tmp/d"));
    assert_eq!(args.http.unwrap().to_string(), "127.0.0.1:7070");
    assert_eq!(
        args.dns,
        Some(muster_cli::args::Listen::At("127.0.0.1:7053".parse().unwrap()))
    );
    assert_eq!(args.config.unwrap().to_str(), Some("m.toml"));
}

#[test]
fn serve_takes_a_consul_address_or_off_and_the_config_follows() {
    use muster_cli::args::Listen;
    let serve = |line: &str| match parse(line).unwrap().command {
        Command::Serve(args) => args,
        _ => panic!("not serve"),
    };
    let at = serve("muster serve --consul 127.0.0.1:18500");
    assert_eq!(at.consul, Some(Listen::At("127.0.0.1:18500".parse().unwrap())));
    let config = muster_cli::serve::load_config(&at).unwrap();
    assert!(config.consul.enabled);
    assert_eq!(config.consul.addr.to_string(), "127.0.0.1:18500");

    let off = serve("muster serve --consul off");
    assert_eq!(off.consul, Some(Listen::Off));
    assert!(!muster_cli::serve::load_config(&off).unwrap().consul.enabled);

    let default = muster_cli::serve::load_config(&serve("muster serve")).unwrap();
    assert!(default.consul.enabled, "on by default");
    assert_eq!(default.consul.addr.to_string(), "127.0.0.1:8500");
    assert!(parse("muster serve --consul nowhere").is_err());

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("muster.toml");
    std::fs::write(
        &file,
        "[consul]\nenabled = false\ndatacenter = \"eu-west\"\nnode = \"edge-1\"\n",
    )
    .unwrap();
    let from_file = muster_cli::serve::read_config(&file).unwrap();
    assert!(!from_file.consul.enabled);
    assert_eq!(from_file.consul.datacenter, "eu-west");
    assert_eq!(from_file.consul.node.as_deref(), Some("edge-1"));
}

#[test]
fn register_takes_the_whole_surface_and_builds_the_spec() {
    let cli = parse(
        "muster register prod/api api-0 --addr 10.0.0.1:8080 --addr [fd00::1]:8080 --port-name http \
         --incarnation 7 --ttl 10s --state starting --zone a --region eu --weight 5 \
         --label team=core --label tier=web --server http://127.0.0.1:9 --tenant acme --json",
    )
    .unwrap();
    assert!(cli.json);
    let Command::Register(args) = cli.command else {
        panic!("not register")
    };
    assert_eq!((args.service.as_str(), args.instance.as_str()), ("prod/api", "api-0"));
    assert_eq!(args.incarnation, 7);
    assert_eq!(args.ttl, Some(std::time::Duration::from_secs(10)));
    assert_eq!(
        (args.client.server.as_str(), args.client.tenant.as_str()),
        ("http://127.0.0.1:9", "acme")
    );
    let spec = endpoint_spec(&args).unwrap();
    assert_eq!(
        spec.addresses.iter().map(|a| a.ip.as_str()).collect::<Vec<_>>(),
        ["10.0.0.1", "fd00::1"]
    );
    assert_eq!(spec.ports[0].port, 8080);
    assert_eq!(
        spec.ports[0].protocol,
        Protocol::Http,
        "the protocol follows the port name"
    );
    assert_eq!(spec.serving, Some(ServingState::Starting));
    assert_eq!(spec.locality.zone.as_deref(), Some("a"));
    assert_eq!(spec.locality.region.as_deref(), Some("eu"));
    assert_eq!(spec.weight, Some(5));
    assert_eq!(spec.labels.get("team").map(String::as_str), Some("core"));
    assert_eq!(spec.labels.len(), 2);
}

#[test]
fn register_defaults_to_ready_on_a_port_named_http() {
    let cli = parse("muster register prod/api api-0 --addr 10.0.0.1:8080 --incarnation 1 --ttl 10s").unwrap();
    let Command::Register(args) = cli.command else {
        panic!("not register")
    };
    assert_eq!(args.state, None);
    assert_eq!(args.client.tenant, "default");
    let spec = endpoint_spec(&args).unwrap();
    assert_eq!(spec.ports[0].name, "http");
    assert_eq!(
        spec.serving, None,
        "the server decides: ready without checks, starting with"
    );
    assert!(spec.checks.is_empty());
}

#[test]
fn register_needs_an_address_an_incarnation_and_a_lease() {
    for line in [
        "muster register prod/api api-0 --incarnation 1 --ttl 10s",
        "muster register prod/api api-0 --addr 10.0.0.1:8080 --ttl 10s",
        "muster register prod/api api-0 --addr 10.0.0.1:8080 --incarnation 1",
        "muster register prod/api api-0 --addr 10.0.0.1:8080 --incarnation 1 --ttl 10",
        "muster register prod/api api-0 --addr 10.0.0.1:8080 --incarnation 1 --ttl 10s --lease 4",
        "muster register prod/api api-0 --addr 10.0.0.1 --incarnation 1 --ttl 10s",
        "muster register prod/api api-0 --addr 10.0.0.1:8080 --incarnation 1 --ttl 10s --label team",
    ] {
        let err = parse(line).unwrap_err();
        assert_eq!(err.exit_code(), 2, "{line}");
    }
    let attach = parse("muster register prod/api api-0 --addr 10.0.0.1:8080 --incarnation 1 --lease 4").unwrap();
    let Command::Register(args) = attach.command else {
        panic!("not register")
    };
    assert_eq!(args.lease, Some(LeaseId(4)));
}

#[test]
fn addresses_of_one_endpoint_share_its_port() {
    let cli =
        parse("muster register prod/api api-0 --addr 10.0.0.1:8080 --addr 10.0.0.2:9090 --incarnation 1 --ttl 1m")
            .unwrap();
    let Command::Register(args) = cli.command else {
        panic!("not register")
    };
    let err = endpoint_spec(&args).unwrap_err();
    assert_eq!((err.code(), err.exit_code()), ("invalid_address", 2));
}

#[test]
fn set_state_drain_deregister_resolve_watch_services_parse() {
    let cli = parse("muster set-state prod/api api-0 --incarnation 2 --state not_serving --reason oom").unwrap();
    let Command::SetState(args) = cli.command else {
        panic!("not set-state")
    };
    assert_eq!(
        (ServingState::from(args.state), args.reason.as_str()),
        (ServingState::NotServing, "oom")
    );
    assert!(parse("muster set-state prod/api api-0 --incarnation 2 --state not-serving").is_ok());
    assert!(parse("muster set-state prod/api api-0 --incarnation 2 --state sleepy").is_err());
    assert!(parse("muster set-state prod/api api-0 --incarnation 2").is_err());

    let cli = parse("muster drain prod/api api-0 --incarnation 2 --reason deploy").unwrap();
    assert!(matches!(cli.command, Command::Drain(args) if args.reason == "deploy" && args.incarnation == 2));
    let cli = parse("muster deregister prod/api api-0 --incarnation 2").unwrap();
    assert!(matches!(cli.command, Command::Deregister(args) if args.incarnation == 2));
    assert!(
        parse("muster deregister prod/api api-0").is_err(),
        "deregistration is fenced"
    );

    let cli = parse("muster resolve prod/api --all --json").unwrap();
    assert!(cli.json);
    assert!(matches!(cli.command, Command::Resolve(args) if args.all));
    let cli = parse("muster watch prod/api --from-revision 20 --json").unwrap();
    assert!(matches!(cli.command, Command::Watch(args) if args.from_revision == Some(20)));
    let cli = parse("muster services prod --json --tenant acme").unwrap();
    assert!(matches!(cli.command, Command::Services(args) if args.namespace == "prod" && args.client.tenant == "acme"));
}

#[test]
fn lease_subcommands_parse() {
    let cli = parse("muster lease grant --ttl 30s").unwrap();
    assert!(matches!(cli.command, Command::Lease(LeaseCommand::Grant(args)) if args.ttl.as_secs() == 30));
    let cli = parse("muster lease renew 7").unwrap();
    assert!(matches!(cli.command, Command::Lease(LeaseCommand::Renew(args)) if args.id == LeaseId(7)));
    let cli = parse("muster lease revoke 7").unwrap();
    assert!(matches!(cli.command, Command::Lease(LeaseCommand::Revoke(args)) if args.id == LeaseId(7)));
    assert!(parse("muster lease renew seven").is_err());
}

fn register_line(extra: &str) -> Result<muster_core::EndpointSpec, (String, i32)> {
    let line = format!("muster register prod/api api-0 --addr 10.0.0.1:8080 --incarnation 1 --ttl 10s {extra}");
    let cli = parse(&line).map_err(|err| (err.kind().to_string(), err.exit_code()))?;
    let Command::Register(args) = cli.command else {
        panic!("not register")
    };
    endpoint_spec(&args).map_err(|err| (err.code().to_owned(), i32::from(err.exit_code())))
}

/// The SPEC H surface: `--check URL` (the scheme picks the kind) with its timing flags, or
/// `--check-ttl`; validated with the server's rules before any request.
#[test]
fn register_takes_a_check_and_validates_it_with_the_servers_codes() {
    let spec = register_line(
        "--check http://127.0.0.1:8080/healthz --check-interval 1s --check-timeout 300ms --check-rise 1 --check-fall 2",
    )
    .unwrap();
    let check = spec.checks[0].validate("c").unwrap();
    assert_eq!(check.target(), "http://127.0.0.1:8080/healthz");
    assert_eq!(
        (
            check.interval.as_millis(),
            check.timeout.as_millis(),
            check.rise,
            check.fall
        ),
        (1_000, 300, 1, 2)
    );
    assert_eq!(spec.serving, None, "the server starts a checked endpoint in starting");
    let ttl = register_line("--check-ttl 15s").unwrap();
    assert_eq!(ttl.checks[0].ttl_ms, Some(15_000));
    assert!(register_line("--check tcp://127.0.0.1:5432").is_ok());
    assert!(register_line("--check grpc://127.0.0.1:50051/pay.v1.Pay").is_ok());

    for (extra, code) in [
        ("--check tcp://a:1 --check-interval 0s", "invalid_field"),
        (
            "--check tcp://a:1 --check-interval 1s --check-timeout 2s",
            "invalid_field",
        ),
        ("--check ftp://a:21", "invalid_field"),
        ("--check https://a:443/", "invalid_field"),
        ("--check localhost:80", "invalid_field"),
        ("--check-rise 2", "usage"),
    ] {
        let (got, exit) = register_line(extra).unwrap_err();
        assert_eq!((got.as_str(), exit), (code, 2), "{extra}");
    }
    for extra in [
        "--check tcp://a:1 --check-interval -1s",
        "--check tcp://a:1 --check-ttl 5s",
        "--check-interval 5s",
    ] {
        assert!(register_line(extra).is_err(), "{extra}");
    }
}

#[test]
fn check_reports_and_drain_with_a_grace_parse() {
    let cli = parse("muster check pass prod/api api-0 --incarnation 3").unwrap();
    let Command::Check(args) = cli.command else {
        panic!("not check")
    };
    assert_eq!(
        (muster_core::check::CheckStatus::from(args.status), args.incarnation),
        (muster_core::check::CheckStatus::Pass, 3)
    );
    assert!(parse("muster check warn prod/api api-0 --incarnation 3").is_ok());
    assert!(parse("muster check fail prod/api api-0 --incarnation 3").is_ok());
    assert!(parse("muster check maybe prod/api api-0 --incarnation 3").is_err());
    assert!(parse("muster check pass prod/api api-0").is_err(), "reports are fenced");

    let cli = parse("muster drain prod/api api-0 --incarnation 2 --grace 30s").unwrap();
    assert!(matches!(cli.command, Command::Drain(args) if args.grace == Some(std::time::Duration::from_secs(30))));
    assert!(parse("muster drain prod/api api-0 --incarnation 2 --grace soon").is_err());
}

/// The SPEC R surface: the static cluster flags of `serve`, and `muster cluster`.
#[test]
fn serve_takes_the_cluster_flags_and_cluster_commands_parse() {
    let cli = parse(
        "muster serve --node-id 2 --cluster-addr 127.0.0.1:7102 --peers 1=127.0.0.1:7101,2=127.0.0.1:7102,3=127.0.0.1:7103 --cluster-secret 0123456789abcdef",
    )
    .unwrap();
    let Command::Serve(args) = cli.command else {
        panic!("not serve")
    };
    assert_eq!(args.node_id, Some(2));
    assert_eq!(args.peers.as_ref().map(|p| p.len()), Some(3));
    assert_eq!(args.peers.unwrap()[&3], "127.0.0.1:7103");
    for bad in [
        "1=127.0.0.1:7101,1=127.0.0.1:7102",
        "one=127.0.0.1:7101",
        "1=nowhere",
        "1=127.0.0.1:0",
    ] {
        assert!(parse(&format!("muster serve --peers {bad}")).is_err(), "{bad}");
    }
    assert!(matches!(
        parse("muster cluster add 4 127.0.0.1:7104").unwrap().command,
        Command::Cluster(muster_cli::cli::ClusterCommand::Add(args)) if args.id == 4
    ));
    assert!(parse("muster cluster remove 4").is_ok());
    assert!(parse("muster cluster status --json").is_ok());
    assert!(parse("muster cluster remove four").is_err());
}

#[test]
fn policy_shows_and_sets_from_a_file() {
    assert!(matches!(
        parse("muster policy show --json").unwrap().command,
        Command::Policy(muster_cli::cli::PolicyCommand::Show(_))
    ));
    assert!(matches!(
        parse("muster policy set --file p.toml").unwrap().command,
        Command::Policy(muster_cli::cli::PolicyCommand::Set(args)) if args.file.to_str() == Some("p.toml")
    ));
    assert!(parse("muster policy set").is_err(), "--file is required");
}
