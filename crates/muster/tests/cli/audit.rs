//! `muster audit` (SPEC S4): its flags become the API's query, its table on fixed records, and
//! the real binary against `muster serve`.

use clap::Parser;
use muster_cli::audit::{audit_text, query, utc};
use muster_cli::cli::{Cli, Command};
use muster_core::api::{AuditKind, AuditQuery, AuditRecord, AuditReply};
use muster_core::{Incarnation, InstanceId, Label, Revision};

use crate::support::Server;

/// A fixed "now" for relative times: 2025-12-01T22:07:59.123Z.
const NOW: u64 = 1_764_626_879_123;

fn audit_args(line: &str) -> Result<muster_cli::audit::AuditArgs, clap::Error> {
    match Cli::try_parse_from(line.split_whitespace())?.command {
        Command::Audit(args) => Ok(args),
        other => panic!("not audit: {other:?}"),
    }
}

#[test]
fn the_flags_become_the_query_with_relative_times_taken_from_now() {
    let args = audit_args(
        "muster audit --tenant acme --key prod/api --principal ci --outcome refused --since 1h --until 10m --limit 5 --cursor 7.40",
    )
    .unwrap();
    assert_eq!(
        query(&args, NOW).unwrap(),
        AuditQuery {
            tenant: Some("acme".into()),
            principal: Some("ci".into()),
            key: Some("acme/prod/api".into()),
            outcome: Some("refused".into()),
            since_ms: Some(NOW - 3_600_000),
            until_ms: Some(NOW - 600_000),
            limit: Some(5),
            cursor: Some("7.40".into()),
        }
    );
    let namespace = audit_args("muster audit --key prod --since-ms 5 --until-ms 9").unwrap();
    let namespace = query(&namespace, NOW).unwrap();
    assert_eq!(
        namespace.key.as_deref(),
        Some("default/prod"),
        "a namespace of --tenant"
    );
    assert_eq!((namespace.since_ms, namespace.until_ms), (Some(5), Some(9)));
    let everything = query(&audit_args("muster audit --all-tenants").unwrap(), NOW).unwrap();
    assert_eq!(everything, AuditQuery::default());
}

#[test]
fn contradicting_or_invalid_flags_are_refused_before_any_request() {
    for line in [
        "muster audit --all-tenants --key prod/api",
        "muster audit --since 1h --since-ms 5",
        "muster audit --since 10",
    ] {
        assert!(audit_args(line).is_err(), "{line}");
    }
    let err = query(&audit_args("muster audit --key Prod/api").unwrap(), NOW).unwrap_err();
    assert_eq!(err.code(), "invalid_name");
    assert_eq!(err.exit_code(), 2);
    let help = Cli::try_parse_from(["muster", "audit", "--help"]).unwrap_err();
    assert_eq!(help.kind(), clap::error::ErrorKind::DisplayHelp);
}

fn record(seq: u64, kind: AuditKind, outcome: &str) -> AuditRecord {
    AuditRecord {
        seq,
        at_ms: NOW,
        kind,
        principal: None,
        actor: None,
        verb: "deregister".into(),
        tenant: Some(Label::new("tenant", "acme").unwrap()),
        key: Some("acme/prod/api".into()),
        instance: None,
        incarnation: None,
        lease: None,
        accessor: None,
        revision: None,
        outcome: outcome.into(),
        reason: None,
        resource: None,
        source: None,
        log_index: None,
        origin: None,
        count: None,
        last_at_ms: None,
    }
}

#[test]
fn the_table_shows_who_what_when_and_why_and_how_to_continue() {
    let applied = AuditRecord {
        principal: Some("deployer".into()),
        instance: Some(InstanceId::new("api-0").unwrap()),
        incarnation: Some(Incarnation(2)),
        revision: Some(Revision(9)),
        ..record(12, AuditKind::Mutation, "applied")
    };
    let denied = AuditRecord {
        verb: "cluster".into(),
        tenant: None,
        key: None,
        source: Some("10.0.0.9:4000".into()),
        resource: Some("POST /raft/vote".into()),
        reason: Some("a wrong cluster secret".into()),
        ..record(11, AuditKind::Denial, "denied:unauthenticated")
    };
    let reply = AuditReply {
        records: vec![applied, denied],
        next_cursor: Some("5.11".into()),
        retention: 10_000,
        evicted: 0,
        denial_retention: 10_000,
        denials_evicted: 0,
    };
    let text = audit_text(&reply, None);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("SEQ  TIME (UTC)"), "{text}");
    let cells = |line: &str| line.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(
        cells(lines[1]),
        [
            "12",
            "2025-12-01T22:07:59.123Z",
            "deployer",
            "deregister",
            "acme/prod/api",
            "api-0",
            "2",
            "9",
            "applied",
            "-"
        ]
    );
    assert!(
        lines[2].ends_with("denied:unauthenticated  from 10.0.0.9:4000; POST /raft/vote; a wrong cluster secret"),
        "{text}"
    );
    assert_eq!(lines[3], "more: repeat with --cursor 5.11");
    let empty = AuditReply {
        records: Vec::new(),
        next_cursor: None,
        retention: 10_000,
        evicted: 0,
        denial_retention: 10_000,
        denials_evicted: 0,
    };
    assert_eq!(audit_text(&empty, None), "no audit records match\n");
    // The newcomer's trace: an acme token denied on tenant default showed KEY `acme` beside
    // a detail naming `default prod/api`; the record is filed under the token's tenant.
    let reach = AuditRecord {
        key: None,
        resource: Some("default prod/api".into()),
        ..record(13, AuditKind::Denial, "denied:permission_denied")
    };
    let text = audit_text(
        &AuditReply {
            records: vec![reach],
            ..empty.clone()
        },
        None,
    );
    assert!(text.lines().nth(1).unwrap().contains(" tenant acme "), "{text}");
    // The newcomer's trace: an operator on an auth-on server of tenant acme ran `muster audit`
    // and saw only "no audit records match" (filtered to tenant default, unsaid).
    assert_eq!(
        audit_text(&empty, Some("default")),
        "no audit records of tenant default match (--tenant NAME for another, --all-tenants for every \
         tenant's and the cluster's own)\n"
    );
}

#[test]
fn times_print_as_utc_dates() {
    assert_eq!(utc(0), "1970-01-01T00:00:00.000Z");
    assert_eq!(utc(951_782_400_000), "2000-02-29T00:00:00.000Z");
    assert_eq!(utc(NOW), "2025-12-01T22:07:59.123Z");
}

#[test]
fn muster_audit_lists_the_writes_of_a_running_server() {
    let server = Server::start();
    server.ok(&[
        "register",
        "prod/api",
        "api-0",
        "--addr",
        "10.0.0.1:80",
        "--incarnation",
        "2",
        "--ttl",
        "5m",
    ]);
    let stale = server.run(&["deregister", "prod/api", "api-0", "--incarnation", "1"]);
    assert_eq!(stale.status.code(), Some(1));
    let reply: AuditReply = serde_json::from_str(&server.ok(&["audit", "--key", "prod/api", "--json"])).unwrap();
    let outcomes: Vec<(&str, &str)> = reply
        .records
        .iter()
        .map(|r| (r.verb.as_str(), r.outcome.as_str()))
        .collect();
    assert_eq!(
        outcomes,
        [("deregister", "refused:stale_incarnation"), ("register", "applied")]
    );
    let table = server.ok(&["audit", "--outcome", "refused"]);
    assert!(table.contains("refused:stale_incarnation"), "{table}");
    assert!(!table.contains("  applied"), "{table}");
    // Another tenant's view holds none of it.
    assert!(
        server
            .ok(&["audit", "--tenant", "other"])
            .starts_with("no audit records of tenant other match")
    );
}
