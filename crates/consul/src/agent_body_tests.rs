use std::time::Duration;

use super::*;

/// What Go's `api.AgentServiceRegistration` sends for a service with a TTL check (PascalCase,
/// `Check` and `Checks` always present, nil ones as `null`).
const GO_BODY: &str = r#"{
    "ID": "web-1", "Name": "web", "Tags": ["v1", "primary"], "Port": 8080,
    "Address": "10.0.0.5", "Meta": {"version": "1.2"}, "Weights": {"Passing": 5, "Warning": 1},
    "EnableTagOverride": false, "TaggedAddresses": {"lan": {"Address": "10.0.0.5", "Port": 8080}},
    "Check": {"CheckID": "web-ttl", "Name": "web alive", "TTL": "15s",
              "DeregisterCriticalServiceAfter": "1m30s", "Notes": "app reports"},
    "Checks": null
}"#;

/// The same registration as py-consul 1.8.0 builds it: lower case keys, `checks` a list, and
/// `DeregisterCriticalServiceAfter` as `Check.ttl` callers add it by hand.
const PY_BODY: &str = r#"{
    "name": "web", "id": "web-1", "tags": ["v1", "primary"], "port": 8080,
    "address": "10.0.0.5", "meta": {"version": "1.2"}, "weights": {"passing": 5, "warning": 1},
    "checks": [{"check_id": "web-ttl", "name": "web alive", "ttl": "15s",
                "deregister_critical_service_after": "1m30s", "notes": "app reports"}]
}"#;

#[test]
fn pascal_case_and_snake_case_bodies_decode_alike() {
    let go = registration(GO_BODY.as_bytes()).unwrap();
    let py = registration(PY_BODY.as_bytes()).unwrap();
    assert_eq!(go, py);
    assert_eq!(go.name, "web");
    assert_eq!(go.id.as_deref(), Some("web-1"));
    assert_eq!(go.tags, ["v1", "primary"]);
    assert_eq!(go.port, Some(8080));
    assert_eq!(go.address.as_deref(), Some("10.0.0.5"));
    assert_eq!(go.meta.get("version").map(String::as_str), Some("1.2"));
    assert_eq!(go.weight, Some(5));
    assert_eq!(
        go.checks,
        [CheckDefinition {
            check_id: Some("web-ttl".into()),
            name: Some("web alive".into()),
            notes: Some("app reports".into()),
            status: None,
            target: CheckTarget::Ttl(Duration::from_secs(15)),
            interval: None,
            timeout: None,
            deregister_after: Some(Duration::from_secs(90)),
            success_before_passing: 0,
            failures_before_critical: 0,
        }]
    );
}

#[test]
fn defaults_are_consul_s_a_bare_name_registers() {
    let bare = registration(br#"{"Name": "db"}"#).unwrap();
    assert_eq!(
        bare,
        Registration {
            name: "db".into(),
            ..Registration::default()
        }
    );
    // Empty strings and zero ports are Go's zero values, sent without omitempty by some
    // clients: they mean absent.
    let zeros = registration(br#"{"Name": "db", "ID": "", "Address": "", "Port": 0, "Tags": []}"#).unwrap();
    assert_eq!(zeros, bare);
}

#[test]
fn http_tcp_and_grpc_checks_with_intervals_and_thresholds_decode() {
    let body = br#"{"name": "api", "checks": [
        {"http": "http://10.0.0.1:80/health", "interval": "10s", "timeout": "500ms",
         "SuccessBeforePassing": 2, "failures_before_critical": 3, "method": "get"},
        {"TCP": "10.0.0.1:5432", "Interval": "1m"},
        {"grpc": "10.0.0.1:9090/my.Health", "interval": "5s", "grpc_use_tls": false, "status": "passing"}
    ]}"#;
    let checks = registration(body).unwrap().checks;
    assert_eq!(checks.len(), 3);
    assert_eq!(checks[0].target, CheckTarget::Http("http://10.0.0.1:80/health".into()));
    assert_eq!(
        (checks[0].interval, checks[0].timeout),
        (Some(Duration::from_secs(10)), Some(Duration::from_millis(500)))
    );
    assert_eq!(
        (checks[0].success_before_passing, checks[0].failures_before_critical),
        (2, 3)
    );
    assert_eq!(checks[1].target, CheckTarget::Tcp("10.0.0.1:5432".into()));
    assert_eq!(checks[1].interval, Some(Duration::from_secs(60)));
    assert_eq!(checks[2].target, CheckTarget::Grpc("10.0.0.1:9090/my.Health".into()));
    assert_eq!(checks[2].status, Some(InitialStatus::Passing));
}

#[test]
fn unknown_fields_are_ignored_and_nulls_are_absent() {
    let body = br#"{"Name": "web", "EnableTagOverride": true, "SomethingNew": {"a": 1},
        "Check": null, "Checks": [null], "Meta": null}"#;
    let decoded = registration(body).unwrap();
    assert_eq!(decoded.name, "web");
    assert!(decoded.checks.is_empty() && decoded.meta.is_empty());
}

#[test]
fn bad_bodies_are_refused_with_a_message_naming_the_field() {
    let cases: [(&[u8], &str); 14] = [
        (b"not json", "Request decode failed"),
        (b"[]", "must be a JSON object"),
        (br#"{"ID": "x"}"#, "Missing service name"),
        (br#"{"Name": 7}"#, "Name must be a string"),
        (br#"{"Name": "a", "name": "b"}"#, "given twice"),
        (br#"{"Name": "a", "Port": 70000}"#, "Invalid service port 70000"),
        (br#"{"Name": "a", "Port": -1}"#, "Port must be a non-negative integer"),
        (br#"{"Name": "a", "Tags": "v1"}"#, "Tags must be a list of strings"),
        (
            br#"{"Name": "a", "Weights": {"Passing": 0}}"#,
            "Passing must be greater than 0",
        ),
        (
            br#"{"Name": "a", "Check": {"TTL": "ten"}}"#,
            "Check.TTL: invalid duration",
        ),
        (
            br#"{"Name": "a", "Check": {"Interval": "10s"}}"#,
            "needs one of TTL, HTTP, TCP or GRPC",
        ),
        (
            br#"{"Name": "a", "Checks": [{"TTL": "1s"}, {"args": ["/bin/true"], "interval": "1s"}]}"#,
            "Checks[1]: script checks are not supported",
        ),
        (
            br#"{"Name": "a", "Check": {"HTTP": "http://1.2.3.4:1/", "Method": "POST"}}"#,
            "GET, not POST",
        ),
        (br#"{"Name": "a", "Kind": "connect-proxy"}"#, "Invalid service kind"),
    ];
    for (body, want) in cases {
        let error = registration(body).unwrap_err().0;
        assert!(error.contains(want), "{}: {error}", String::from_utf8_lossy(body));
    }
}

#[test]
fn check_updates_need_a_consul_status() {
    let update = check_update(br#"{"Status": "warning", "Output": "slow"}"#).unwrap();
    assert_eq!(
        update,
        CheckUpdate {
            status: InitialStatus::Warning,
            output: "slow".into(),
        }
    );
    let lower = check_update(br#"{"status": "passing"}"#).unwrap();
    assert_eq!(lower.status, InitialStatus::Passing);
    for body in [&b"{}"[..], br#"{"Status": "pass"}"#, b""] {
        assert!(check_update(body).is_err(), "{}", String::from_utf8_lossy(body));
    }
}
