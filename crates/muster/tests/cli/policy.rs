//! `muster policy show` and `muster policy set --file`: the replicated registry policy from
//! the command line, against the real binary.

use muster_cli::commands::read_policy;
use muster_registry::RegistryConfig;
use serde_json::Value;

use crate::support::Server;

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn show(server: &Server) -> Value {
    serde_json::from_str(&server.ok(&["policy", "show", "--json"])).unwrap()
}

fn register(server: &Server, service: &str) -> std::process::Output {
    server.run(&[
        "register",
        service,
        "api-0",
        "--addr",
        "10.0.0.1:8080",
        "--incarnation",
        "1",
        "--ttl",
        "1m",
    ])
}

#[test]
fn policy_set_from_a_toml_file_judges_later_writes_and_show_reads_it_back() {
    let server = Server::start();
    let initial = show(&server);
    assert_eq!(initial["revision"], 0);
    assert_eq!(initial["policy"]["quotas"]["services_per_tenant"], 10_000);

    let file = server.scratch().join("policy.toml");
    std::fs::write(&file, "history_revisions = 50\n\n[quotas]\nservices_per_tenant = 1\n").unwrap();
    let out = server.ok(&["policy", "set", "--file", file.to_str().unwrap()]);
    assert!(out.starts_with("policy set at revision "), "{out}");
    let shown = show(&server);
    assert_eq!(shown["policy"]["quotas"]["services_per_tenant"], 1);
    assert_eq!(shown["policy"]["history_revisions"], 50);

    assert!(register(&server, "prod/api").status.success());
    let refused = register(&server, "prod/web");
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    assert!(
        stderr(&refused).starts_with("error: quota_exceeded: "),
        "{}",
        stderr(&refused)
    );

    // The human output is TOML that `policy set` takes back unchanged.
    let text = server.ok(&["policy", "show"]);
    assert!(text.starts_with("# The registry policy of "), "{text}");
    let saved = server.scratch().join("saved.toml");
    std::fs::write(&saved, &text).unwrap();
    let again: Value =
        serde_json::from_str(&server.ok(&["policy", "set", "--file", saved.to_str().unwrap(), "--json"])).unwrap();
    assert_eq!(
        again["revision"], shown["revision"],
        "the same policy again changes nothing"
    );

    let status = server.ok(&["status"]);
    assert!(
        status.contains("differs from this node's config file in: history_revisions, quotas.services_per_tenant"),
        "{status}"
    );
}

#[test]
fn a_bad_policy_file_is_refused_before_anything_is_sent() {
    let server = Server::start();
    let before = show(&server);
    let typo = server.scratch().join("typo.toml");
    std::fs::write(&typo, "[quotas]\nservices_per_tenat = 1\n").unwrap();
    let upside_down = server.scratch().join("ttl.json");
    std::fs::write(&upside_down, r#"{"min_lease_ttl_ms": 60000, "max_lease_ttl_ms": 1000}"#).unwrap();
    let missing = server.scratch().join("missing.toml");
    for (file, code) in [
        (&typo, "invalid_policy"),
        (&upside_down, "invalid_field"),
        (&missing, "cannot_read"),
    ] {
        let output = server.run(&["policy", "set", "--file", file.to_str().unwrap()]);
        assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
        assert!(
            stderr(&output).starts_with(&format!("error: {code}: ")),
            "{}",
            stderr(&output)
        );
    }
    assert_eq!(show(&server), before);
}

#[test]
fn a_policy_file_may_be_a_registry_section_or_json() {
    let dir = tempfile::tempdir().unwrap();
    let section = dir.path().join("muster.toml");
    std::fs::write(&section, "[registry]\nfence_retention_ms = 60000\n").unwrap();
    let json = dir.path().join("policy.json");
    std::fs::write(&json, r#"{"fence_retention_ms": 60000}"#).unwrap();
    let expected = RegistryConfig {
        fence_retention_ms: 60_000,
        ..RegistryConfig::default()
    };
    assert_eq!(read_policy(&section).unwrap(), expected);
    assert_eq!(read_policy(&json).unwrap(), expected);
}
