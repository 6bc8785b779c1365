//! The parsers: durations, NAMESPACE/SERVICE, labels, addresses. Strict, so that nothing
//! malformed is ever sent.

use std::time::Duration;

use muster_cli::args::{parse_addr, parse_label, parse_namespace_key, parse_service_key};
use muster_cli::duration::{format_millis, parse_duration};

#[test]
fn durations_take_ms_s_m_h_and_sums() {
    for (text, ms) in [
        ("500ms", 500),
        ("10s", 10_000),
        ("2m", 120_000),
        ("1h", 3_600_000),
        ("1m30s", 90_000),
        ("1h2m3s4ms", 3_723_004),
        (" 10s ", 10_000),
        ("0s", 0),
    ] {
        assert_eq!(parse_duration(text), Ok(Duration::from_millis(ms)), "{text}");
    }
}

#[test]
fn a_duration_without_a_unit_is_refused_rather_than_guessed() {
    // `--ttl 10` could mean 10 ms or 10 s; a TTL a thousand times too short expires a fleet.
    let err = parse_duration("10").unwrap_err();
    assert!(err.contains("needs a unit"), "{err}");
    for bad in [
        "",
        "s",
        "10x",
        "-1s",
        "1.5s",
        "10s5",
        "ms10",
        "99999999999999999999s",
        "18446744073709551615h",
    ] {
        assert!(parse_duration(bad).is_err(), "{bad:?} should be refused");
    }
}

#[test]
fn durations_print_the_way_they_are_read() {
    for (ms, text) in [
        (0, "0s"),
        (1_500, "1500ms"),
        (10_000, "10s"),
        (90_000, "1m30s"),
        (3_600_000, "1h"),
    ] {
        assert_eq!(format_millis(ms), text);
        assert_eq!(parse_duration(text), Ok(Duration::from_millis(ms)));
    }
}

#[test]
fn namespace_slash_service_becomes_a_typed_key_within_the_tenant() {
    let key = parse_service_key("acme", "prod/api").unwrap();
    assert_eq!(key.to_string(), "acme/prod/api");
    assert_eq!(parse_namespace_key("acme", "prod").unwrap().to_string(), "acme/prod");
}

#[test]
fn malformed_service_keys_are_refused_with_invalid_name_and_the_field() {
    for (tenant, text, field) in [
        ("default", "prod", "NAMESPACE/SERVICE"),
        ("default", "prod/api/v2", "NAMESPACE/SERVICE"),
        ("default", "/api", "namespace"),
        ("default", "prod/", "service"),
        ("default", "Prod/api", "namespace"),
        ("default", "prod/api_v2", "service"),
        ("Default", "prod/api", "tenant"),
    ] {
        let err = parse_service_key(tenant, text).unwrap_err();
        assert_eq!(err.code(), "invalid_name", "{text}");
        assert!(err.to_string().starts_with(&format!("{field}: ")), "{text}: {err}");
    }
}

#[test]
fn labels_are_key_equals_value_split_at_the_first_equals() {
    assert_eq!(parse_label("team=core"), Ok(("team".into(), "core".into())));
    assert_eq!(parse_label("expr=a=b"), Ok(("expr".into(), "a=b".into())));
    assert_eq!(parse_label("empty="), Ok(("empty".into(), String::new())));
    assert!(parse_label("=v").is_err());
    assert!(parse_label("novalue").is_err());
}

#[test]
fn addresses_are_ip_colon_port_with_ipv6_in_brackets() {
    assert_eq!(parse_addr("10.0.0.1:8080").unwrap().to_string(), "10.0.0.1:8080");
    assert_eq!(parse_addr("[::1]:8080").unwrap().to_string(), "[::1]:8080");
    assert_eq!(parse_addr("[2001:db8::1]:443").unwrap().port(), 443);
    for bad in ["10.0.0.1", "::1:8080", "host:80", "10.0.0.1:", "10.0.0.1:65536"] {
        assert!(parse_addr(bad).is_err(), "{bad:?} should be refused");
    }
    let err = parse_addr("10.0.0.1:0").unwrap_err();
    assert!(err.contains("1 to 65535"), "{err}");
}
