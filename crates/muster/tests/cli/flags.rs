//! Flags and errors as a user expects them (U1): `--dns off` like `--consul off`, a held data
//! directory named as such, `--peers` sizes with their reason, incarnations from 1, usage
//! lines that show exactly the required flags, and one prefix per error. Every refusal
//! changes nothing: it comes before anything is sent, bound or written.

use std::process::{Output, Stdio};
use std::time::Duration;

use clap::Parser;
use muster_cli::args::Listen;
use muster_cli::cli::{Cli, Command};

use crate::support::{Server, free_tcp_port, muster, read_lines, run};

/// A cluster secret long enough for the server (16 bytes).
const SECRET: &str = "0123456789abcdef";

/// How long a `muster serve` child may take to print its first line: a cold debug build on
/// a busy 2-core machine has taken tens of seconds.
const FIRST_LINE: Duration = Duration::from_secs(60);

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Trace: `muster serve --dns off` was refused ("'off' is not a socket address") while
/// `--consul off` and `--xds off` worked.
#[test]
fn dns_off_is_accepted_like_consul_off_and_the_server_runs_without_dns() {
    let Command::Serve(args) = Cli::try_parse_from(["muster", "serve", "--dns", "off"])
        .unwrap()
        .command
    else {
        panic!("not serve")
    };
    assert_eq!(args.dns, Some(Listen::Off));
    let config = muster_cli::serve::load_config(&args).unwrap();
    assert!(!config.dns_enabled);
    let Command::Serve(args) = Cli::try_parse_from(["muster", "serve", "--dns", "127.0.0.1:7153"])
        .unwrap()
        .command
    else {
        panic!("not serve")
    };
    let config = muster_cli::serve::load_config(&args).unwrap();
    assert!(config.dns_enabled);
    assert_eq!(config.dns.to_string(), "127.0.0.1:7153");

    // The real binary: it starts, and its ready line says DNS is off.
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut child = muster()
        .args(["serve", "--json", "--data-dir", data.to_str().unwrap()])
        .args(["--http", "127.0.0.1:0", "--dns", "off", "--consul", "off"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn muster serve");
    let first = read_lines(&mut child).recv_timeout(FIRST_LINE);
    let _ = child.kill();
    let _ = child.wait();
    let line: serde_json::Value = serde_json::from_str(&first.expect("a ready line")).unwrap();
    assert_eq!(
        (&line["dns"], &line["consul"]),
        (&serde_json::Value::Null, &serde_json::Value::Null)
    );
    assert!(line["http"].is_string(), "{line}");
}

/// Trace: a second server on a data directory already held said "Database already open.
/// Cannot acquire lock." without naming the directory or the likely cause.
#[test]
fn a_second_server_on_a_held_data_directory_names_it_and_the_likely_cause() {
    let first = Server::start();
    let data = first.scratch().join("data");
    let output = run(&[
        "serve",
        "--data-dir",
        data.to_str().unwrap(),
        "--http",
        "127.0.0.1:0",
        "--dns",
        "off",
        "--consul",
        "off",
    ]);
    let text = stderr(&output);
    assert_eq!(output.status.code(), Some(1), "{text}");
    assert_eq!(
        text.trim_end(),
        format!(
            "error: data_dir_in_use: the data directory {} is in use by another process: another `muster serve` is likely running on it (stop it, or give this one its own --data-dir)",
            data.display()
        )
    );
    // The first one is untouched.
    first.ok(&["status"]);
}

/// `muster serve` as a cluster member of `peers` (node 1, listening on the first port).
fn serve_member(data: &std::path::Path, ports: &[u16], secret: &str) -> Output {
    let peers: Vec<String> = ports
        .iter()
        .enumerate()
        .map(|(i, port)| format!("{}=127.0.0.1:{port}", i + 1))
        .collect();
    run(&[
        "serve",
        "--data-dir",
        data.to_str().unwrap(),
        "--http",
        "127.0.0.1:0",
        "--dns",
        "off",
        "--consul",
        "off",
        "--node-id",
        "1",
        "--cluster-addr",
        &format!("127.0.0.1:{}", ports[0]),
        "--peers",
        &peers.join(","),
        "--cluster-secret",
        secret,
    ])
}

/// Trace: `--peers` with 2 members was accepted, a cluster that cannot survive any failure.
/// 3 and 5 form; 2, 4 and 7 are refused with the reason and nothing is written; 1 alone
/// forms a cluster to grow with `muster cluster add` (below).
#[test]
fn peers_of_a_size_that_survives_no_more_failures_are_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let cases = [
        (2, "peers: 2 voters cannot survive any failure: every write needs both."),
        (
            4,
            "peers: 4 voters survive 1 failure, no more than 3 do, while every write waits for 3 of them.",
        ),
        (
            7,
            "peers: 7 voters make every write wait for 4 of them; 5 already survive 2 failures.",
        ),
    ];
    for (count, why) in cases {
        let ports: Vec<u16> = (0..count).map(|_| free_tcp_port()).collect();
        let output = serve_member(&data, &ports, SECRET);
        let text = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{count}: {text}");
        assert!(text.starts_with(&format!("error: config: {why}")), "{count}: {text}");
        assert!(
            text.contains("List 3 voters (they survive 1 failure) or 5 (2 failures)"),
            "{count}: {text}"
        );
        assert!(!data.exists(), "{count}: refused before the data directory is made");
    }
}

/// One member alone is a cluster to grow with `muster cluster add` (as `muster bench
/// --workloads scale` grows one): it starts.
#[test]
fn peers_of_one_member_form_a_cluster_to_grow() {
    let port = free_tcp_port().to_string();
    let addr = format!("127.0.0.1:{port}");
    let server = Server::start_with(
        tempfile::tempdir().unwrap(),
        &[
            "--node-id".into(),
            "1".into(),
            "--cluster-addr".into(),
            addr.clone(),
            "--peers".into(),
            format!("1={addr}"),
            "--cluster-secret".into(),
            SECRET.into(),
        ],
    );
    server.ok(&["status"]);
}

/// Trace: "error: config: config: cluster_secret: ..." doubled its prefix.
#[test]
fn a_refused_configuration_has_one_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let ports: Vec<u16> = (0..3).map(|_| free_tcp_port()).collect();
    let output = serve_member(&dir.path().join("data"), &ports, "short");
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        stderr(&output).trim_end(),
        "error: config: cluster_secret: must be at least 16 bytes"
    );
    let err = muster_cli::CliError::from(muster_server::ServerError::Config("peers: why".into()));
    assert_eq!((err.code(), err.to_string().as_str()), ("config", "peers: why"));
}

/// Trace: `--incarnation 0` was accepted. It is refused by every command that takes one, as
/// a usage error before anything is sent (no server listens at `--server` here).
#[test]
fn incarnation_zero_is_refused_wherever_the_cli_takes_one() {
    let lines = [
        "register prod/api api-0 --addr 10.0.0.1:8080 --ttl 10s --incarnation",
        "set-state prod/api api-0 --state ready --incarnation",
        "drain prod/api api-0 --incarnation",
        "deregister prod/api api-0 --incarnation",
        "check pass prod/api api-0 --incarnation",
    ];
    let unreachable = format!("http://127.0.0.1:{}", free_tcp_port());
    for line in lines {
        let mut args: Vec<&str> = line.split_whitespace().collect();
        args.push("0");
        let parsed = Cli::try_parse_from(std::iter::once("muster").chain(args.iter().copied()));
        let err = parsed.expect_err(line);
        assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation, "{line}");
        assert!(
            err.to_string()
                .contains("invalid value '0' for '--incarnation <N>': incarnations start at 1"),
            "{line}: {err}"
        );
        args.extend(["--server", &unreachable]);
        let output = run(&args);
        assert_eq!(output.status.code(), Some(2), "{line}: {}", stderr(&output));
        *args.iter_mut().rev().nth(2).unwrap() = "1";
        assert!(
            Cli::try_parse_from(std::iter::once("muster").chain(args.iter().copied())).is_ok(),
            "{line} 1"
        );
    }
}

/// Every usage line, recursively: the flags it names are exactly the required ones.
fn usages(command: &mut clap::Command, path: &str, out: &mut Vec<(String, String, clap::Command)>) {
    let usage = command.render_usage().to_string();
    out.push((path.to_owned(), usage, command.clone()));
    for sub in command.get_subcommands_mut() {
        let path = format!("{path} {}", sub.get_name());
        usages(sub, &path, out);
    }
}

/// Trace: `muster register`'s usage line left out `--ttl` although one of `--ttl` and
/// `--lease` is required, and usage lines showed `--server` and `--port-name` (which have
/// defaults) as required.
#[test]
fn usage_lines_show_exactly_the_required_flags() {
    let mut cli = Cli::command_exact();
    let mut all = Vec::new();
    usages(&mut cli, "muster", &mut all);
    for (path, usage, command) in &all {
        for arg in command.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            let shown = usage.contains(&format!("--{long} ")) || usage.contains(&format!("--{long}>"));
            let in_required_group = command
                .get_groups()
                .any(|group| group.is_required_set() && group.get_args().any(|id| id == arg.get_id()));
            let required = arg.is_required_set() || in_required_group;
            assert_eq!(shown, required, "{path}: --{long} in {usage}");
        }
    }
    let register = all.iter().find(|(path, ..)| path == "muster register").unwrap();
    assert_eq!(
        register.1,
        "Usage: muster register [OPTIONS] --addr <IP:PORT> --incarnation <N> <--ttl <DURATION>|--lease <ID>> <NAMESPACE/SERVICE> <INSTANCE>"
    );

    // The usage line of an error, too: what the user typed (or set in the environment) is
    // not shown as if it were required.
    let output = muster()
        .args(["register", "prod/api", "api-0", "--addr", "10.0.0.1:8080"])
        .args(["--server", "http://127.0.0.1:1", "--port-name", "grpc"])
        .env("MUSTER_TENANT", "acme")
        .output()
        .expect("run muster");
    let text = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{text}");
    let usage = text.lines().find(|l| l.starts_with("Usage:")).unwrap();
    assert_eq!(usage, register.1, "{text}");
    let err = Cli::try_parse_exact_from(["muster", "lease", "grant", "--server", "http://127.0.0.1:1"]).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("Usage: muster lease grant [OPTIONS] --ttl <"), "{text}");
    assert!(!text.contains("--server <"), "{text}");
}
