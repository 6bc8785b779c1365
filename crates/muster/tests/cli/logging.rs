//! Logs (SPEC O2): quiet by default, `--log-level` / `--log-format` global, openraft held
//! below its healthy chatter.

use clap::Parser;
use muster_cli::cli::Cli;
use muster_cli::logging::{FilterSource, LogFormat, directive};

use crate::support::{Server, muster};

fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
    move |name| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| (*v).to_owned())
}

/// The flag wins over MUSTER_LOG, which wins over RUST_LOG, which wins over the command's
/// default; openraft is held (its healthy chatter) unless the directive names it.
#[test]
fn the_log_level_comes_from_the_flag_then_muster_log_then_rust_log_then_the_default() {
    let both = [("MUSTER_LOG", "debug"), ("RUST_LOG", "trace")];
    assert_eq!(
        directive(Some("error"), env(&both), true),
        (
            "error,openraft=error,openraft::core::raft_core=off,openraft::replication=off".to_owned(),
            FilterSource::Flag
        )
    );
    assert_eq!(
        directive(None, env(&both), true),
        (
            "debug,openraft=error,openraft::core::raft_core=off,openraft::replication=off".to_owned(),
            FilterSource::MusterLog
        )
    );
    assert_eq!(
        directive(None, env(&[("RUST_LOG", "trace")]), true),
        (
            "trace,openraft=error,openraft::core::raft_core=off,openraft::replication=off".to_owned(),
            FilterSource::RustLog
        )
    );
    assert_eq!(
        directive(None, env(&[]), true),
        (
            "info,openraft=error,openraft::core::raft_core=off,openraft::replication=off".to_owned(),
            FilterSource::Default
        )
    );
    assert_eq!(
        directive(None, env(&[]), false),
        (
            "warn,openraft=error,openraft::core::raft_core=off,openraft::replication=off".to_owned(),
            FilterSource::Default
        )
    );
    assert_eq!(
        directive(Some("debug,openraft=info"), env(&[]), true).0,
        "debug,openraft=info",
        "a directive that names openraft is taken as it is"
    );
}

/// Global flags: before or after the subcommand, on client commands too.
#[test]
fn log_flags_are_global() {
    let cli = Cli::try_parse_from(["muster", "--log-level", "debug", "status"]).unwrap();
    assert_eq!(cli.log.log_level.as_deref(), Some("debug"));
    let cli = Cli::try_parse_from(["muster", "status", "--log-format", "json"]).unwrap();
    assert_eq!(cli.log.log_format, LogFormat::Json);
    assert_eq!(
        Cli::try_parse_from(["muster", "serve"]).unwrap().log.log_format,
        LogFormat::Text
    );
    assert!(Cli::try_parse_from(["muster", "status", "--log-format", "yaml"]).is_err());
}

/// An unusable directive is a usage error (exit 2) that names the flag, before anything runs.
#[test]
fn a_bad_log_level_is_a_usage_error_naming_the_flag() {
    let output = muster().args(["--log-level", "a=b=c", "status"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--log-level"), "{stderr}");
}

/// SPEC O2 "quiet by default": a fresh server's start prints its one line on stdout and
/// nothing on stderr at the default level — no openraft state dumps (`RaftState`, votes).
#[test]
fn a_fresh_server_starts_quietly() {
    let server = Server::start();
    server.ok(&["status"]);
    let log = server.log();
    assert!(log.trim().is_empty(), "a healthy start logs nothing at info:\n{log}");
}
