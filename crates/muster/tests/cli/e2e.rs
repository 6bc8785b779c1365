//! End to end: the real binary, `muster serve` on a free loopback port with a temporary
//! data dir, and the client commands a newcomer types in the README's quickstart.

use std::time::Duration;

use muster_core::api::{Frame, SnapshotReply, WriteReply};
use muster_core::{Event, ServingState};

use crate::support::{Server, free_tcp_port, muster, read_lines, run, wait_bounded};

/// How long to wait for one watch line: a few progress intervals.
const LINE_WAIT: Duration = Duration::from_secs(20);

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn register(server: &Server, instance: &str, addr: &str) -> WriteReply {
    let out = server.ok(&[
        "register",
        "prod/api",
        instance,
        "--addr",
        addr,
        "--incarnation",
        "1",
        "--ttl",
        "5m",
        "--zone",
        "a",
        "--label",
        "team=core",
        "--json",
    ]);
    serde_json::from_str(&out).unwrap()
}

fn resolve(server: &Server, all: bool) -> SnapshotReply {
    let mut args = vec!["resolve", "prod/api", "--json"];
    if all {
        args.push("--all");
    }
    serde_json::from_str(&server.ok(&args)).unwrap()
}

#[test]
fn invalid_names_are_refused_before_any_request() {
    // Nothing listens on the port: had a request been sent, the exit would be 3.
    let url = format!("http://127.0.0.1:{}", free_tcp_port());
    for args in [
        vec!["resolve", "Prod/api"],
        vec!["resolve", "prod"],
        vec!["deregister", "prod/api", "API-0", "--incarnation", "1"],
        vec!["services", "prod", "--tenant", "Acme"],
    ] {
        let output = run(&[args.as_slice(), &["--server", &url]].concat());
        assert_eq!(output.status.code(), Some(2), "{args:?}: {}", stderr(&output));
        assert!(
            stderr(&output).starts_with("error: invalid_name: "),
            "{args:?}: {}",
            stderr(&output)
        );
    }
}

#[test]
fn an_unreachable_server_is_exit_3_with_cannot_connect() {
    let url = format!("http://127.0.0.1:{}", free_tcp_port());
    let output = run(&["resolve", "prod/api", "--server", &url, "--json"]);
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    assert!(
        stderr(&output).starts_with("error: cannot_connect: "),
        "{}",
        stderr(&output)
    );
    let body: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        body["error"]["code"], "cannot_connect",
        "--json puts the error on stdout too"
    );
}

#[test]
fn a_config_file_with_an_unknown_key_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("muster.toml");
    std::fs::write(&config, "htp = \"127.0.0.1:7070\"\n").unwrap();
    let output = run(&["serve", "--config", config.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(stderr(&output).contains("error: config: "), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("htp"),
        "names the unknown key: {}",
        stderr(&output)
    );
}

#[test]
fn serve_refuses_a_non_loopback_address_without_auth() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut child = muster()
        .args(["serve", "--http", "0.0.0.0:7070", "--data-dir", data.to_str().unwrap()])
        .args(["--dns", &format!("127.0.0.1:{}", crate::support::free_udp_port())])
        .args(["--consul", "127.0.0.1:0"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let status = wait_bounded(&mut child, "serve on 0.0.0.0 (it should refuse)");
    let mut message = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut message).unwrap();
    assert!(!status.success(), "serve must refuse 0.0.0.0 without auth:\n{message}");
    assert!(message.contains("error: "), "{message}");
    assert!(message.to_lowercase().contains("auth"), "says why: {message}");
}

#[test]
fn register_resolve_drain_deregister_round_trip() {
    let server = Server::start();
    let first = register(&server, "api-0", "10.0.0.1:8080");
    let second = register(&server, "api-1", "10.0.0.2:8080");
    assert!(second.revision > first.revision);
    assert!(first.lease.is_some(), "--ttl grants a lease in the same request");

    let table = server.ok(&["resolve", "prod/api"]);
    assert!(table.starts_with("INSTANCE "), "{table}");
    assert!(
        table.contains("api-0") && table.contains("10.0.0.1") && table.contains("http:8080"),
        "{table}"
    );
    assert!(table.contains("api-1") && table.contains("10.0.0.2"), "{table}");
    assert!(table.contains("2 eligible of 2 endpoints"), "{table}");
    let set = resolve(&server, false);
    assert_eq!(set.endpoints.len(), 2);
    assert_eq!(set.endpoints[0].labels.get("team"), Some("core"));

    let drained: WriteReply = serde_json::from_str(&server.ok(&[
        "drain",
        "prod/api",
        "api-1",
        "--incarnation",
        "1",
        "--reason",
        "deploy 42",
        "--json",
    ]))
    .unwrap();
    assert!(drained.revision > second.revision);
    let eligible = resolve(&server, false);
    assert_eq!(eligible.endpoints.len(), 1, "a draining endpoint gets no new work");
    assert_eq!(eligible.endpoints[0].instance.as_str(), "api-0");
    let everything = resolve(&server, true);
    assert_eq!(everything.endpoints.len(), 2);
    assert_eq!(everything.endpoints[1].serving, ServingState::Draining);
    let table = server.ok(&["resolve", "prod/api", "--all"]);
    let line = table.lines().find(|line| line.starts_with("api-1")).unwrap();
    assert!(line.contains("draining") && line.contains("deploy 42"), "{table}");

    let services = server.ok(&["services", "prod"]);
    assert!(
        services
            .lines()
            .any(|line| line.starts_with("api ") && line.contains(" 2 ")),
        "{services}"
    );

    server.ok(&["deregister", "prod/api", "api-1", "--incarnation", "1"]);
    let left = resolve(&server, true);
    assert_eq!(left.endpoints.len(), 1);
    assert_eq!(left.endpoints[0].instance.as_str(), "api-0");
}

#[test]
fn a_refusal_prints_its_code_and_exits_1() {
    let server = Server::start();
    register(&server, "api-0", "10.0.0.1:8080");
    server.ok(&[
        "register",
        "prod/api",
        "api-0",
        "--addr",
        "10.0.0.1:8080",
        "--incarnation",
        "2",
        "--ttl",
        "5m",
    ]);
    // The old incarnation's shutdown hook cannot delete its replacement (SPEC L2).
    let output = server.run(&["deregister", "prod/api", "api-0", "--incarnation", "1"]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(
        stderr(&output).starts_with("error: stale_incarnation: "),
        "{}",
        stderr(&output)
    );
    let output = server.run(&["drain", "prod/api", "nobody", "--incarnation", "1", "--json"]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(stderr(&output).starts_with("error: not_found: "), "{}", stderr(&output));
    let body: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(body["error"]["code"], "not_found");
}

/// SPEC W5, the newcomer's typo: `resolve prod/aip` is `not_found` (exit 1), not a silent
/// "0 eligible of 0"; `--allow-empty` reads it as empty (exit 0); `watch` of a service nothing
/// is held of starts with an empty snapshot line that says so, then shows its first
/// registration.
#[test]
fn an_unknown_service_is_named_as_such_by_resolve_and_watch() {
    let server = Server::start();
    let output = server.run(&["resolve", "prod/aip"]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(
        stderr(&output).starts_with("error: not_found: service default/prod/aip is not registered"),
        "{}",
        stderr(&output)
    );
    let empty: SnapshotReply =
        serde_json::from_str(&server.ok(&["resolve", "prod/aip", "--allow-empty", "--json"])).unwrap();
    assert_eq!((empty.total, empty.endpoints.len()), (0, 0));
    let text = server.ok(&["resolve", "prod/aip", "--allow-empty"]);
    assert!(text.contains("default/prod/aip: not registered"), "{text}");

    let mut watch = server.spawn(&["watch", "prod/api"]);
    let lines = read_lines(&mut watch);
    let first = lines.recv_timeout(LINE_WAIT).unwrap();
    assert!(
        first.starts_with("rev ") && first.contains("snapshot default/prod/api: 0 endpoints (not registered"),
        "{first}"
    );
    register(&server, "api-0", "10.0.0.1:8080");
    let shown = (0..10)
        .filter_map(|_| lines.recv_timeout(LINE_WAIT).ok())
        .find(|line| line.contains(" update default/prod/api "));
    assert!(
        shown.is_some_and(|line| line.contains("put api-0#1")),
        "the first registration shows on the watch"
    );
    let _ = watch.kill();
    let _ = watch.wait();
}

#[test]
fn watch_streams_a_drain_as_it_happens() {
    let server = Server::start();
    register(&server, "api-0", "10.0.0.1:8080");
    register(&server, "api-1", "10.0.0.2:8080");
    let mut watch = server.spawn(&["watch", "prod/api", "--json"]);
    let lines = read_lines(&mut watch);
    // The snapshot comes first, then a progress frame at the revision it was read at.
    let first: Frame = serde_json::from_str(&lines.recv_timeout(LINE_WAIT).unwrap()).unwrap();
    assert!(
        matches!(&first, Frame::Snapshot { snapshot, .. } if snapshot.len() == 2),
        "{first:?}"
    );

    server.ok(&["drain", "prod/api", "api-1", "--incarnation", "1", "--reason", "deploy"]);
    let drained = loop {
        let line = lines
            .recv_timeout(LINE_WAIT)
            .expect("the drain should arrive on the watch");
        if let Frame::Update(update) = serde_json::from_str(&line).unwrap() {
            break update;
        }
    };
    assert!(matches!(
        &drained.events[..],
        [Event::Put { endpoint }] if endpoint.instance.as_str() == "api-1" && endpoint.serving == ServingState::Draining
    ));
    let _ = watch.kill();
    let _ = watch.wait();
}

#[test]
fn serve_stops_gracefully_on_sigterm_and_exits_0() {
    let mut server = Server::start();
    register(&server, "api-0", "10.0.0.1:8080");
    let status = server.terminate();
    assert!(status.success(), "exit {status}:\n{}", server.log());
    assert!(server.scratch().join("data").exists(), "the data dir was written");
}

#[test]
fn a_watch_is_told_when_the_server_stops_and_exits_3() {
    let mut server = Server::start();
    register(&server, "api-0", "10.0.0.1:8080");
    let mut watch = server.spawn(&["watch", "prod/api"]);
    let lines = read_lines(&mut watch);
    let first = lines.recv_timeout(LINE_WAIT).unwrap();
    assert!(
        first.starts_with("rev 1 snapshot default/prod/api: 1 endpoint "),
        "{first}"
    );
    assert!(server.terminate().success());
    let status = wait_bounded(&mut watch, "watch after the server stopped");
    let mut message = String::new();
    std::io::Read::read_to_string(&mut watch.stderr.take().unwrap(), &mut message).unwrap();
    assert_eq!(status.code(), Some(3), "{message}");
    assert!(message.starts_with("error: closing: "), "{message}");
    assert!(message.contains("--from-revision"), "says how to resume: {message}");
}

#[test]
fn a_revoked_lease_takes_its_endpoints_with_it() {
    let server = Server::start();
    let granted: WriteReply = serde_json::from_str(&server.ok(&["lease", "grant", "--ttl", "5m", "--json"])).unwrap();
    let lease = granted.lease.expect("a granted lease").id.to_string();
    for (instance, addr) in [("api-0", "10.0.0.1:8080"), ("api-1", "10.0.0.2:8080")] {
        server.ok(&[
            "register",
            "prod/api",
            instance,
            "--addr",
            addr,
            "--incarnation",
            "1",
            "--lease",
            &lease,
        ]);
    }
    assert_eq!(resolve(&server, false).endpoints.len(), 2);
    let renewed = server.ok(&["lease", "renew", &lease]);
    assert!(
        renewed.starts_with(&format!("renewed lease {lease} (ttl 5m, expires ")),
        "{renewed}"
    );
    server.ok(&["lease", "revoke", &lease]);
    assert!(
        resolve(&server, true).endpoints.is_empty(),
        "revoking removes every attached endpoint"
    );
    let output = server.run(&["lease", "renew", &lease]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).starts_with("error: lease_not_found: "),
        "{}",
        stderr(&output)
    );
}

/// The SPEC H surface, typed exactly: a TCP check on a real port, a TTL check fed by
/// `muster check`, `resolve --all` with the checker's state and reason, `drain --grace`.
#[test]
fn checks_reports_and_a_drain_with_a_grace_from_the_command_line() {
    let server = Server::start();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let check = format!("tcp://127.0.0.1:{port}");
    // A check probes its own endpoint (SPEC S6): the endpoint is the listener's address.
    let addr = format!("127.0.0.1:{port}");
    server.ok(&[
        "register",
        "prod/db",
        "db-0",
        "--addr",
        &addr,
        "--incarnation",
        "1",
        "--ttl",
        "5m",
        "--check",
        &check,
        "--check-interval",
        "200ms",
        "--check-timeout",
        "100ms",
        "--check-rise",
        "1",
        "--check-fall",
        "2",
    ]);
    let state = |service: &str, instance: &str| -> Option<ServingState> {
        let reply: SnapshotReply = serde_json::from_str(&server.ok(&["resolve", service, "--all", "--json"])).unwrap();
        reply
            .endpoints
            .iter()
            .find(|e| e.instance.as_str() == instance)
            .map(|e| e.serving)
    };
    // Bounded by a count of polls (LINE_WAIT in all), never by reading a clock.
    let until = |service: &str, instance: &str, want: Option<ServingState>| {
        const POLL: Duration = Duration::from_millis(50);
        let polls = LINE_WAIT.as_millis() / POLL.as_millis();
        for _ in 0..polls {
            if state(service, instance) == want {
                return;
            }
            std::thread::sleep(POLL);
        }
        panic!("{instance}: still {:?}, not {want:?}", state(service, instance));
    };
    until("prod/db", "db-0", Some(ServingState::Ready));
    drop(listener);
    until("prod/db", "db-0", Some(ServingState::NotServing));
    let table = server.ok(&["resolve", "prod/db", "--all"]);
    let line = table.lines().find(|line| line.starts_with("db-0")).unwrap();
    assert!(
        line.contains("not_serving") && line.contains(&format!("{check}: 2 consecutive failures")),
        "{table}"
    );

    server.ok(&[
        "register",
        "prod/batch",
        "b-0",
        "--addr",
        "10.0.0.8:80",
        "--incarnation",
        "1",
        "--ttl",
        "5m",
        "--check-ttl",
        "30s",
    ]);
    assert_eq!(state("prod/batch", "b-0"), Some(ServingState::Starting));
    let out = server.ok(&["check", "pass", "prod/batch", "b-0", "--incarnation", "1"]);
    assert!(
        out.starts_with("reported pass for default/prod/batch b-0: ready (changed at revision"),
        "{out}"
    );
    assert_eq!(state("prod/batch", "b-0"), Some(ServingState::Ready));
    let stale = server.run(&["check", "fail", "prod/batch", "b-0", "--incarnation", "7"]);
    assert_eq!(stale.status.code(), Some(1));
    assert!(
        stderr(&stale).starts_with("error: stale_incarnation: "),
        "{}",
        stderr(&stale)
    );

    let out = server.ok(&["drain", "prod/batch", "b-0", "--incarnation", "1", "--grace", "300ms"]);
    assert!(out.contains("deregistered in 300 ms"), "{out}");
    until("prod/batch", "b-0", None);
}
