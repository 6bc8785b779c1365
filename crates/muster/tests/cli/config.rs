//! `muster serve --print-config` (SPEC U3): the effective configuration, defaults then the
//! file then the flags, printed as TOML that reads back into the same settings.

use muster_server::ServerConfig;

use crate::support::muster;

/// Runs `muster serve --print-config` with `args`; its stdout (it must exit 0).
fn print_config(args: &[&str]) -> String {
    let output = muster()
        .args(["serve", "--print-config"])
        .args(args)
        .output()
        .expect("run muster");
    assert!(
        output.status.success(),
        "exit {}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// A flag overrides the file, the file overrides the defaults, what neither sets keeps its
/// default, and the printout parses back into exactly that configuration.
#[test]
fn print_config_merges_defaults_file_and_flags_and_reads_back_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("muster.toml");
    std::fs::write(
        &file,
        "http = \"127.0.0.1:7171\"\nsnapshot_every = 500\n\n[health]\nfloor = 2\n",
    )
    .unwrap();
    let printed = print_config(&[
        "--config",
        file.to_str().unwrap(),
        "--http",
        "127.0.0.1:7272",
        "--data-dir",
        "/var/lib/muster",
        "--peers",
        "1=127.0.0.1:7001,2=127.0.0.1:7002,3=127.0.0.1:7003",
    ]);
    let parsed: ServerConfig = toml::from_str(&printed).unwrap_or_else(|err| panic!("{err}:\n{printed}"));
    let mut expected = ServerConfig {
        data_dir: "/var/lib/muster".into(),
        http: "127.0.0.1:7272".parse().unwrap(),
        snapshot_every: 500,
        ..ServerConfig::default()
    };
    expected.health.floor = 2;
    expected.peers = [(1, "127.0.0.1:7001"), (2, "127.0.0.1:7002"), (3, "127.0.0.1:7003")]
        .into_iter()
        .map(|(id, addr)| (id, addr.to_owned()))
        .collect();
    assert_eq!(parsed, expected, "printed:\n{printed}");
    assert!(printed.contains("http = \"127.0.0.1:7272\""), "{printed}");
}

/// The cluster secret is never printed: the output goes into tickets and chats.
#[test]
fn print_config_redacts_the_cluster_secret() {
    let printed = print_config(&["--cluster-secret", "a-cluster-secret-of-32-bytes-xxxx"]);
    assert!(!printed.contains("a-cluster-secret-of-32-bytes-xxxx"), "{printed}");
    assert!(printed.contains("cluster_secret = \"<redacted>\""), "{printed}");
}

/// No secret is printed, wherever it is set: every secret-bearing setting (the cluster
/// secret, a federation peer's token) shows `<redacted>` (SPEC S4).
#[test]
fn print_config_redacts_every_secret() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("muster.toml");
    std::fs::write(
        &file,
        "cluster_secret = \"file-cluster-secret-0123456789\"\n\n[federation]\nregion = \"east\"\n\n\
         [[federation.peer]]\nname = \"west\"\nurl = \"http://127.0.0.1:9\"\nimport = [\"prod/*\"]\n\
         token = \"peer-token-secret-abcdef\"\n",
    )
    .unwrap();
    let printed = print_config(&["--config", file.to_str().unwrap()]);
    for secret in ["file-cluster-secret-0123456789", "peer-token-secret-abcdef"] {
        assert!(!printed.contains(secret), "{secret} printed:\n{printed}");
    }
    assert!(printed.contains("cluster_secret = \"<redacted>\""), "{printed}");
    assert!(printed.contains("token = \"<redacted>\""), "{printed}");
}

/// Without a file or flags it prints the defaults, every section included, and starts
/// nothing (it exits at once, with no data dir made).
#[test]
fn print_config_alone_prints_the_defaults_and_starts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let printed = print_config(&["--data-dir", data.to_str().unwrap()]);
    let parsed: ServerConfig = toml::from_str(&printed).unwrap();
    assert_eq!(
        parsed,
        ServerConfig {
            data_dir: data.clone(),
            ..ServerConfig::default()
        }
    );
    for section in ["[registry]", "[health]", "[auth]", "[dns_zone]", "[limits.http]"] {
        assert!(printed.contains(section), "{section} missing:\n{printed}");
    }
    assert!(!data.exists(), "--print-config must not start the server");
}

/// The startup line: the HTTP API first, then every listener that is on; `--json` keeps the
/// keys scripts read (`http`, `dns`, `data_dir`) with `null` for a listener that is off.
#[test]
fn the_ready_line_names_every_listener_that_is_on() {
    use muster_cli::serve::ready_line;
    let listeners = [
        ("http", Some("127.0.0.1:7070".to_owned())),
        ("dns", None),
        ("cluster", Some("10.0.0.1:7946".to_owned())),
    ];
    assert_eq!(
        ready_line(&listeners, "https", "d", false),
        "muster serving https://127.0.0.1:7070, cluster 10.0.0.1:7946, DNS off (data in d); Ctrl-C or SIGTERM stops it"
    );
    let json: serde_json::Value = serde_json::from_str(&ready_line(&listeners, "https", "d", true)).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"http": "127.0.0.1:7070", "dns": null, "cluster": "10.0.0.1:7946", "data_dir": "d"})
    );
}

/// `--xds ADDR` turns the xDS control plane on (SPEC D5), `--xds off` turns a file's
/// `[xds] addr` off, and the ready line names the gRPC listener.
#[test]
fn xds_is_off_by_default_and_the_flag_sets_or_clears_its_address() {
    let parsed = |args: &[&str]| toml::from_str::<ServerConfig>(&print_config(args)).unwrap().xds.addr;
    assert_eq!(parsed(&[]), None);
    assert_eq!(
        parsed(&["--xds", "127.0.0.1:18000"]),
        Some("127.0.0.1:18000".parse().unwrap())
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("muster.toml");
    std::fs::write(&file, "[xds]\naddr = \"127.0.0.1:18001\"\n").unwrap();
    let file = file.to_str().unwrap();
    assert_eq!(parsed(&["--config", file]), Some("127.0.0.1:18001".parse().unwrap()));
    assert_eq!(parsed(&["--config", file, "--xds", "off"]), None);

    let listeners = [
        ("http", Some("127.0.0.1:7070".to_owned())),
        ("xds", Some("127.0.0.1:18000".to_owned())),
    ];
    let line = muster_cli::serve::ready_line(&listeners, "http", "d", false);
    assert!(line.contains("xds 127.0.0.1:18000 (grpc)"), "{line}");
}
